"""`deepinfer serve` with the official `anthropic` Python client: messages with a system prompt, streaming
events, thinking blocks, tools with tool_use / tool_result turns, stop sequences, auth, and errors in Anthropic's
own shape. (The current SDK has no sampling arguments; temperature goes in extra_body, as the API still takes it.)"""
import json

import pytest

from serve_fixture import API_KEY, http

anthropic = pytest.importorskip("anthropic", reason="the anthropic package is not installed (pip install -r scripts/requirements-test.txt)")


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.base, api_key=API_KEY, max_retries=0, timeout=120)


def test_message_with_system_prompt(client):
    m = client.messages.create(model="deepinfer-v4-tiny", max_tokens=5, system="You are terse.", extra_body={"temperature": 0},
                               messages=[{"role": "user", "content": "Hello"}])
    assert m.type == "message" and m.role == "assistant"
    assert m.stop_reason == "max_tokens"
    assert m.usage.output_tokens == 5
    assert m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) > 3
    assert [b.type for b in m.content] == ["text"]


def test_streaming_events_match_the_whole_message(client):
    whole = client.messages.create(model="m", max_tokens=6, extra_body={"temperature": 0}, messages=[{"role": "user", "content": "Stream"}])
    with client.messages.stream(model="m", max_tokens=6, extra_body={"temperature": 0}, messages=[{"role": "user", "content": "Stream"}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == whole.content[0].text
    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 6


def test_thinking_block_when_enabled(client):
    m = client.messages.create(model="m", max_tokens=6, extra_body={"temperature": 1}, thinking={"type": "enabled", "budget_tokens": 1024},
                               messages=[{"role": "user", "content": "Think first"}])
    assert m.content[0].type == "thinking"
    assert m.content[0].thinking
    with client.messages.stream(model="m", max_tokens=6, extra_body={"temperature": 1}, thinking={"type": "enabled", "budget_tokens": 1024},
                                messages=[{"role": "user", "content": "Think first"}]) as stream:
        final = stream.get_final_message()
    assert final.content[0].type == "thinking"


def test_tools_and_tool_results_round_trip(client):
    tools = [{"name": "get_weather", "description": "Weather of a city",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
    first = client.messages.create(model="m", max_tokens=4, extra_body={"temperature": 0}, tools=tools, tool_choice={"type": "auto"},
                                   messages=[{"role": "user", "content": "Weather in Oslo?"}])
    assert first.stop_reason in ("max_tokens", "end_turn", "tool_use")
    history = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Call the tool.", "signature": ""},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "3 degrees"},
                                     {"type": "text", "text": "And tomorrow?"}]},
    ]
    second = client.messages.create(model="m", max_tokens=4, extra_body={"temperature": 0}, tools=tools, messages=history,
                                    thinking={"type": "enabled", "budget_tokens": 1024})
    assert second.usage.input_tokens + (second.usage.cache_read_input_tokens or 0) > \
        first.usage.input_tokens + (first.usage.cache_read_input_tokens or 0)


def test_stop_sequence(client):
    whole = client.messages.create(model="m", max_tokens=12, extra_body={"temperature": 0}, messages=[{"role": "user", "content": "Go on"}])
    text = whole.content[0].text
    assert len(text) >= 4
    stop = text[len(text) // 2]
    m = client.messages.create(model="m", max_tokens=12, extra_body={"temperature": 0}, stop_sequences=[stop],
                               messages=[{"role": "user", "content": "Go on"}])
    assert m.stop_reason == "stop_sequence"
    assert m.stop_sequence == stop
    assert m.content[0].text == text[: text.index(stop)]


def test_auth_error_in_anthropic_shape(server):
    bad = anthropic.Anthropic(base_url=server.base, api_key="nope", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        bad.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": "x"}])
    status, _, raw = http(server, "POST", "/v1/messages", "{}", key=None, headers={"x-api-key": "nope"})
    assert status == 401
    body = json.loads(raw)
    assert body["type"] == "error" and body["error"]["type"] == "authentication_error"


@pytest.mark.parametrize("payload, fragment", [
    ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "robot", "content": "x"}]}, "role"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "image"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "surprise": True}, "Unrecognized"),
    ({"model": "m", "max_tokens": 5, "temperature": 7, "messages": [{"role": "user", "content": "x"}]}, "temperature"),
])
def test_bad_requests_get_anthropic_errors(server, client, payload, fragment):
    status, _, raw = http(server, "POST", "/v1/messages", json.dumps(payload))
    assert status == 400
    body = json.loads(raw)
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert fragment in body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="m", max_tokens=0, messages=[{"role": "user", "content": "x"}])
    assert client.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": "ok"}]).usage.output_tokens == 1
