"""`previous_response_id` on POST /v1/responses (server/response_store.h), with the official `openai` client: a
stored response's conversation (its input items, then its output items, reasoning included) is what the next
request continues from, so continuing by id equals sending the same items explicitly; the second turn reuses the
first turn's prompt from the prefix cache; streamed responses are stored too; store=false ones and unknown ids
are refused with a 400 naming the field."""
import pytest

from serve_fixture import API_KEY

openai = pytest.importorskip("openai", reason="the openai package is not installed (pip install -r scripts/requirements-test.txt)")


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=API_KEY, max_retries=0, timeout=300)


# Longer than the embedded model's 128-token window, so that the prompt layout lets later prompts reuse it.
INTRO = "My name is Ada. " + "I write programs for the analytical engine and keep notes on every one of them. " * 12


def test_previous_response_id_equals_sending_the_items(client):
    first = client.responses.create(model="m", input=INTRO, max_output_tokens=6, temperature=0)
    assert first.output[0].type == "reasoning"  # thinking by default: the reasoning item is part of the conversation
    second = client.responses.create(model="m", input="What is my name?", previous_response_id=first.id,
                                     max_output_tokens=6, temperature=0)
    assert second.previous_response_id == first.id
    assert second.usage.input_tokens > first.usage.input_tokens + 4
    assert second.usage.input_tokens_details.cached_tokens >= 64  # the first turn's prompt, from the prefix cache
    explicit = [{"role": "user", "content": INTRO}]
    explicit += [item.model_dump(exclude_none=True) for item in first.output]
    explicit += [{"role": "user", "content": "What is my name?"}]
    same = client.responses.create(model="m", input=explicit, max_output_tokens=6, temperature=0, store=False)
    assert same.usage.input_tokens == second.usage.input_tokens
    assert [o.model_dump(exclude={"id"}) for o in same.output] == [o.model_dump(exclude={"id"}) for o in second.output]

    # A chain: the third turn holds both earlier ones.
    third = client.responses.create(model="m", input="And again?", previous_response_id=second.id, max_output_tokens=4,
                                     temperature=0)
    assert third.usage.input_tokens > second.usage.input_tokens + 4


def test_instructions_are_not_carried_over(client):
    first = client.responses.create(model="m", input="Hi", instructions="Answer in French. " * 20, max_output_tokens=3,
                                    temperature=0, reasoning={"effort": "none"})
    plain = client.responses.create(model="m", input="Hi", max_output_tokens=3, temperature=0, reasoning={"effort": "none"})
    second = client.responses.create(model="m", input="Again", previous_response_id=first.id, max_output_tokens=3,
                                     temperature=0, reasoning={"effort": "none"})
    # first's prompt is the long instructions + Hi; second's is Hi + first's answer + Again, without them
    assert second.usage.input_tokens < first.usage.input_tokens
    assert second.usage.input_tokens > plain.usage.input_tokens


def test_streamed_responses_are_stored(client):
    done = None
    for event in client.responses.create(model="m", input="Count to three", max_output_tokens=4, temperature=0,
                                         reasoning={"effort": "none"}, stream=True):
        if event.type in ("response.completed", "response.incomplete"):
            done = event.response
    assert done is not None and done.store is True
    follow = client.responses.create(model="m", input="Go on", previous_response_id=done.id, max_output_tokens=3,
                                     temperature=0, reasoning={"effort": "none"})
    assert follow.usage.input_tokens > done.usage.input_tokens


def test_unknown_and_unstored_ids_are_refused(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="m", input="x", previous_response_id="resp_does_not_exist")
    assert e.value.status_code == 400
    assert e.value.body["param"] == "previous_response_id" and "resp_does_not_exist" in e.value.body["message"]
    unstored = client.responses.create(model="m", input="x", max_output_tokens=2, temperature=0, store=False,
                                       reasoning={"effort": "none"})
    assert unstored.store is False
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="m", input="y", previous_response_id=unstored.id)
    assert e.value.body["param"] == "previous_response_id"
