"""`response_format: {"type": "json_object"}` is constrained decoding (engine/json_mask.h), checked with the official
`openai` client on the embedded random-weight model. Such a model may never close the object within max_tokens, so
the assertions are the ones that cannot fail by chance: every `stop` answer is one JSON object for Python's json,
every `length` answer is a valid prefix of one (tests/e2e/json_prefix_oracle.py, independent of the C++ validator),
greedy and sampled, streamed and not, and in thinking mode for the answer after the reasoning. How often each
ending happened is printed (pytest -s)."""
import pytest

from json_prefix_oracle import is_json_object, is_json_object_prefix
from serve_fixture import API_KEY

openai = pytest.importorskip("openai", reason="the openai package is not installed (pip install -r scripts/requirements-test.txt)")

NO_THINKING = {"thinking": {"type": "disabled"}}
JSON_MODE = {"type": "json_object"}


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=API_KEY, max_retries=0, timeout=300)


def check_answer(content, finish, completion_tokens, max_tokens, counts):
    assert finish in ("stop", "length"), finish
    counts[finish] += 1
    if finish == "stop":
        assert is_json_object(content), repr(content)
    else:
        assert completion_tokens == max_tokens
        assert is_json_object_prefix(content), repr(content)


def test_without_json_mode_the_greedy_answer_is_not_json(client):
    # The mask is what makes the answers below JSON: this model's free greedy answer is not a JSON-object prefix.
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Reply in JSON: a name and an age"}],
                                       max_tokens=8, temperature=0, extra_body=NO_THINKING)
    assert not is_json_object_prefix(r.choices[0].message.content or "")


def test_json_object_answers_greedy_and_sampled(client):
    counts = {"stop": 0, "length": 0}
    prompts = ["Reply in JSON: a name and an age", "Describe the weather as a JSON object", "List three colours in JSON"]
    settings = [dict(temperature=0)] + [dict(temperature=t, seed=s) for t, s in ((0.7, 1), (1.0, 2), (1.3, 3), (2.0, 4))]
    for prompt in prompts:
        for kw in settings:
            r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}], max_tokens=24,
                                               response_format=JSON_MODE, extra_body=NO_THINKING, **kw)
            check_answer(r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens, 24, counts)
    print("json_object (non-streamed): finish_reason counts", counts)
    assert counts["stop"] + counts["length"] == len(prompts) * len(settings)


def test_json_object_streamed_equals_non_streamed(client):
    counts = {"stop": 0, "length": 0}
    for seed in (5, 6, 7):
        kw = dict(model="m", messages=[{"role": "user", "content": "JSON please"}], max_tokens=20, temperature=1.0, seed=seed,
                  response_format=JSON_MODE, extra_body=NO_THINKING)
        whole = client.chat.completions.create(**kw)
        text, finish, usage = "", None, None
        for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
            usage = chunk.usage or usage
            for choice in chunk.choices:
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
        assert text == whole.choices[0].message.content
        assert finish == whole.choices[0].finish_reason
        check_answer(text, finish, usage.completion_tokens, 20, counts)
    print("json_object (streamed): finish_reason counts", counts)


@pytest.fixture(scope="module")
def host_client(server_drawing_on_host):
    return openai.OpenAI(base_url=server_drawing_on_host.base + "/v1", api_key=API_KEY, max_retries=0, timeout=300)


def logprob_entries(choice):
    content = choice.logprobs.content if choice.logprobs else []
    return [(e.token, e.logprob, [(t.token, t.logprob) for t in e.top_logprobs]) for e in content]


def test_json_object_drawn_in_the_forward_equals_the_hosts_draws(client, host_client):
    # The default server draws each token in the forward (its mask made as the step is planned, applied where the
    # logits are: on a GPU, on the device, with its log-probabilities); the `--draws-on-host` server's engine draws from
    # the logits it brought back. The same seed takes the same uniforms either way, so the answers are the same tokens
    # and log-probabilities, greedy and sampled, with penalties, in thinking mode too (whose mask only keeps the
    # reasoning from ending the text); log-probabilities change no token.
    for kw in (dict(temperature=0), dict(temperature=1.0, seed=8), dict(temperature=0.8, top_p=0.9, seed=9),
               dict(temperature=1.2, seed=10, presence_penalty=0.5, frequency_penalty=0.3)):
        for extra in (NO_THINKING, {"thinking": {"type": "enabled"}}):
            args = dict(model="m", messages=[{"role": "user", "content": "JSON please"}], max_tokens=16,
                        response_format=JSON_MODE, extra_body=extra, **kw)
            plain = client.chat.completions.create(**args).choices[0]
            for logprobs in (dict(), dict(logprobs=True, top_logprobs=3)):
                in_forward = client.chat.completions.create(**args, **logprobs).choices[0]
                on_host = host_client.chat.completions.create(**args, **logprobs).choices[0]
                for a in (in_forward, on_host):
                    assert a.message.content == plain.message.content, (kw, extra, logprobs)
                    assert getattr(a.message, "reasoning_content", None) == getattr(plain.message, "reasoning_content", None)
                    assert a.finish_reason == plain.finish_reason
                assert logprob_entries(in_forward) == logprob_entries(on_host), (kw, extra)
                assert bool(logprob_entries(in_forward)) == bool(logprobs)


def test_json_object_in_thinking_mode_constrains_only_the_answer(client):
    # The reasoning comes first (DeepSeek's chat encoding) and is free text; the answer after </think> is the
    # constrained part. A random model seldom ends its reasoning, so the answer is often empty (a valid prefix).
    counts = {"stop": 0, "length": 0}
    for seed in (1, 2):
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Think, then answer in JSON"}],
                                           max_tokens=16, temperature=1.0, seed=seed, response_format=JSON_MODE,
                                           extra_body={"thinking": {"type": "enabled"}})
        check_answer(r.choices[0].message.content or "", r.choices[0].finish_reason, r.usage.completion_tokens, 16, counts)
    print("json_object (thinking): finish_reason counts", counts)


def test_json_object_with_an_assistant_prefix_continues_it(client):
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "JSON"},
                                                            {"role": "assistant", "content": "{\"name\": \"", "prefix": True}],
                                       max_tokens=12, temperature=0.8, seed=3, response_format=JSON_MODE, extra_body=NO_THINKING)
    content = "{\"name\": \"" + (r.choices[0].message.content or "")
    counts = {"stop": 0, "length": 0}
    check_answer(content, r.choices[0].finish_reason, r.usage.completion_tokens, 12, counts)


def test_json_object_prefix_that_is_not_json_is_refused(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "JSON"},
                                                            {"role": "assistant", "content": "[1, 2", "prefix": True}],
                                       max_tokens=4, response_format=JSON_MODE, extra_body=NO_THINKING)
    assert "json_object" in str(e.value)
