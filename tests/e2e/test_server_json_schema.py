"""`response_format: {"type": "json_schema", ...}` is constrained decoding against the schema (format/json_schema.h,
engine/json_schema_mask.h), checked with the official `openai` client on the embedded random-weight model: every
`stop` answer parses and validates against the schema with the `jsonschema` package (independent of the C++
validator), every `length` answer is a valid JSON prefix (tests/e2e/json_prefix_oracle.py); chat completions
streamed and not, the Responses API's text.format shape, and an unsupported keyword refused with a 400 that
names the keyword and its path. How often each ending happened is printed (pytest -s)."""
import json

import pytest

from json_prefix_oracle import is_json_object_prefix
from serve_fixture import API_KEY

openai = pytest.importorskip("openai", reason="the openai package is not installed (pip install -r scripts/requirements-test.txt)")
jsonschema = pytest.importorskip("jsonschema", reason="the jsonschema package is not installed (pip install -r scripts/requirements-test.txt)")

NO_THINKING = {"thinking": {"type": "disabled"}}

# Tight schemas (few free choices) so that a random model finishes some answers; the loose one exercises
# strings, numbers and other keys.
SCHEMAS = {
    "flags": {"type": "object", "properties": {"ok": {"type": "boolean"}, "mode": {"enum": ["fast", "slow", None]}},
              "required": ["ok", "mode"], "additionalProperties": False},
    "list": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
    "person": {"type": "object", "title": "Person",
               "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                              "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "maxItems": 2},
                              "score": {"anyOf": [{"type": "number"}, {"type": "null"}]}},
               "required": ["name", "age"], "additionalProperties": False,
               "$defs": {"tag": {"enum": ["a", "b"]}}},
}


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=API_KEY, max_retries=0, timeout=300)


def response_format(name, strict=True):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name], "strict": strict}}


def check_answer(name, content, finish, completion_tokens, max_tokens, counts):
    assert finish in ("stop", "length"), finish
    counts[finish] += 1
    if finish == "stop":
        jsonschema.validate(json.loads(content), SCHEMAS[name])
    else:
        assert completion_tokens == max_tokens
        if SCHEMAS[name]["type"] == "object":
            assert is_json_object_prefix(content), repr(content)


def test_json_schema_answers_validate(client):
    counts = {"stop": 0, "length": 0}
    settings = [dict(temperature=0)] + [dict(temperature=t, seed=s) for t, s in ((0.7, 1), (1.0, 2), (1.5, 3))]
    for name in SCHEMAS:
        for i, kw in enumerate(settings):
            r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"Reply with a {name} in JSON"}],
                                               max_tokens=64, response_format=response_format(name, strict=i % 2 == 0),
                                               extra_body=NO_THINKING, **kw)
            check_answer(name, r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens, 64, counts)
    print("json_schema (non-streamed): finish_reason counts", counts)
    assert counts["stop"] > 0  # the tight schemas leave a random model little but whitespace to choose


@pytest.fixture(scope="module")
def host_client(server_drawing_on_host):
    return openai.OpenAI(base_url=server_drawing_on_host.base + "/v1", api_key=API_KEY, max_retries=0, timeout=300)


def test_json_schema_drawn_in_the_forward_equals_the_hosts_draws(client, host_client):
    # As for json_object (test_server_json_mode.py): the default server draws each token in the forward with the mask
    # made as the step was planned; the `--draws-on-host` server's engine draws from the logits. Every schema's requests
    # run together, so that a thread's mask scratch serves one schema after another.
    import concurrent.futures
    def pair(name, kw):
        args = dict(model="m", messages=[{"role": "user", "content": f"Reply with a {name} in JSON"}], max_tokens=32,
                    response_format=response_format(name), extra_body=NO_THINKING, logprobs=True, top_logprobs=2, **kw)
        return client.chat.completions.create(**args).choices[0], host_client.chat.completions.create(**args).choices[0]
    def entries(choice):
        return [(e.token, e.logprob, [(t.token, t.logprob) for t in e.top_logprobs]) for e in choice.logprobs.content]
    jobs = [(name, kw) for name in SCHEMAS for kw in (dict(temperature=0), dict(temperature=1.0, seed=11),
                                                       dict(temperature=0.9, top_p=0.8, seed=12, frequency_penalty=0.4))]
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for (name, kw), (in_forward, on_host) in zip(jobs, pool.map(lambda job: pair(*job), jobs)):
            assert in_forward.message.content == on_host.message.content, (name, kw)
            assert in_forward.finish_reason == on_host.finish_reason, (name, kw)
            assert entries(in_forward) == entries(on_host), (name, kw)


def test_json_schema_streamed_equals_non_streamed(client):
    counts = {"stop": 0, "length": 0}
    for name, seed in (("flags", 5), ("person", 6), ("list", 7)):
        kw = dict(model="m", messages=[{"role": "user", "content": "JSON please"}], max_tokens=64, temperature=1.0, seed=seed,
                  response_format=response_format(name), extra_body=NO_THINKING)
        whole = client.chat.completions.create(**kw)
        text, finish, usage = "", None, None
        for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
            usage = chunk.usage or usage
            for choice in chunk.choices:
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
        assert text == whole.choices[0].message.content
        assert finish == whole.choices[0].finish_reason
        check_answer(name, text, finish, usage.completion_tokens, 64, counts)
    print("json_schema (streamed): finish_reason counts", counts)


def test_json_schema_in_thinking_mode_constrains_only_the_answer(client):
    # The reasoning is free text and may not end the sequence (end-of-sequence is masked until </think>); the
    # answer after it is the constrained part, so a `stop` answer is a valid document even here.
    counts = {"stop": 0, "length": 0}
    for seed in (1, 2, 3):
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Think, then answer in JSON"}],
                                           max_tokens=24, temperature=1.0, seed=seed, response_format=response_format("flags"),
                                           extra_body={"thinking": {"type": "enabled"}})
        content = r.choices[0].message.content or ""
        if r.choices[0].finish_reason == "length":
            assert content == "" or is_json_object_prefix(content), repr(content)
            counts["length"] += 1
        else:
            check_answer("flags", content, r.choices[0].finish_reason, r.usage.completion_tokens, 24, counts)
    print("json_schema (thinking): finish_reason counts", counts)


def test_responses_api_text_format_json_schema(client):
    r = client.responses.create(model="m", input="flags as JSON", max_output_tokens=64, temperature=0,
                                text={"format": {"type": "json_schema", "name": "flags", "schema": SCHEMAS["flags"], "strict": True}},
                                reasoning={"effort": "none"})
    assert r.status in ("completed", "incomplete")
    if r.status == "completed":
        jsonschema.validate(json.loads(r.output_text), SCHEMAS["flags"])
    else:
        assert is_json_object_prefix(r.output_text)


def test_unsupported_keyword_is_a_400_naming_it(client):
    schema = {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], max_tokens=4,
                                       response_format={"type": "json_schema", "json_schema": {"name": "z", "schema": schema}},
                                       extra_body=NO_THINKING)
    assert e.value.status_code == 400
    message = e.value.body["message"] if isinstance(e.value.body, dict) else str(e.value)
    assert "'pattern'" in message and "#/properties/zip" in message, message
