"""`deepinfer serve` with the official `openai` Python client: chat completions (stream and not, logprobs,
reasoning_content, tools and multi-turn tool results, response_format, usage with cached_tokens), completions,
models; concurrent streams give the greedy outputs of one-at-a-time runs; prefix-cache hits give the cold run's
logprobs; malformed requests get OpenAI-shaped errors and the server keeps serving; a request refused for its key
leaves its keep-alive connection usable; a client that goes away (mid-stream, or while a non-streamed request
generates) cancels its request."""
import concurrent.futures
import json
import socket
import time
from http.client import HTTPConnection

import pytest

from serve_fixture import API_KEY, http, metric, wait_for

openai = pytest.importorskip("openai", reason="the openai package is not installed (pip install -r scripts/requirements-test.txt)")


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def chat(client, content, **kw):
    kw.setdefault("max_tokens", 6)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model="deepinfer-v4-tiny", messages=[{"role": "user", "content": content}], **kw)


def stream_text(client, content, **kw):
    """Runs a streamed chat request; returns (reasoning, content, finish_reason, usage)."""
    reasoning, text, finish, usage = "", "", None, None
    kw.setdefault("max_tokens", 6)
    kw.setdefault("temperature", 0)
    for chunk in client.chat.completions.create(model="m", messages=[{"role": "user", "content": content}],
                                                stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            extra = choice.delta.model_extra or {}
            reasoning += extra.get("reasoning_content") or ""
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    return reasoning, text, finish, usage


def test_models_and_health(server, client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["deepinfer-v4-tiny"]
    status, _, body = http(server, "GET", "/health", key=None)
    assert status == 200 and json.loads(body)["status"] == "ok"


def test_chat_non_stream_reports_reasoning_and_usage(client):
    r = chat(client, "Hello there", max_tokens=5)
    choice = r.choices[0]
    assert r.object == "chat.completion"
    assert choice.finish_reason == "length"
    assert choice.message.role == "assistant"
    assert (choice.message.model_extra or {}).get("reasoning_content")  # thinking mode by default
    assert r.usage.completion_tokens == 5
    assert r.usage.prompt_tokens > 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + 5
    assert r.usage.prompt_tokens_details.cached_tokens >= 0


def test_chat_stream_equals_non_stream_and_counts_usage(client):
    whole = chat(client, "Stream me", max_tokens=7, extra_body={"thinking": {"type": "disabled"}})
    reasoning, text, finish, usage = stream_text(client, "Stream me", max_tokens=7, extra_body={"thinking": {"type": "disabled"}})
    assert reasoning == ""
    assert text == whole.choices[0].message.content
    assert finish == "length"
    assert usage.completion_tokens == 7
    assert usage.prompt_tokens == whole.usage.prompt_tokens
    assert usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens - 1  # the same prompt again


def test_chat_logprobs_with_top_alternatives(client):
    r = chat(client, "Logprobs please", max_tokens=4, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == 4
    for entry in content:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob >= entry.top_logprobs[2].logprob
        assert entry.top_logprobs[0].logprob >= entry.logprob - 1e-6  # greedy: the chosen token is the best one
        assert bytes(entry.bytes).decode("utf-8", "replace") is not None


def test_prefix_cache_hit_gives_cold_logprobs(client):
    system = "You are a careful assistant. " * 40  # well over the 128-token window: reusable prefix
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "First question?"}]
    cold = client.chat.completions.create(model="m", messages=messages, max_tokens=5, temperature=0, logprobs=True)
    messages2 = [{"role": "system", "content": system}, {"role": "user", "content": "A different question entirely?"}]
    other = client.chat.completions.create(model="m", messages=messages2, max_tokens=3, temperature=0)
    assert other.usage.prompt_tokens_details.cached_tokens >= 64  # the shared system prompt
    warm = client.chat.completions.create(model="m", messages=messages, max_tokens=5, temperature=0, logprobs=True)
    assert warm.usage.prompt_tokens_details.cached_tokens == warm.usage.prompt_tokens - 1
    assert [e.logprob for e in warm.choices[0].logprobs.content] == [e.logprob for e in cold.choices[0].logprobs.content]
    assert warm.choices[0].message.model_extra.get("reasoning_content") == cold.choices[0].message.model_extra.get("reasoning_content")


def test_tools_and_multi_turn_tool_results(client):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                              "required": ["city"]}}}]
    r = client.chat.completions.create(model="m", max_tokens=4, temperature=0, tools=tools, tool_choice="auto",
                                       messages=[{"role": "user", "content": "Weather in Paris?"}])
    assert r.choices[0].finish_reason in ("length", "stop", "tool_calls")
    history = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": "I should call the tool.",
         "tool_calls": [{"id": "call_00", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_00", "content": "{\"temp_c\": 21}"},
    ]
    r2 = client.chat.completions.create(model="m", max_tokens=4, temperature=0, tools=tools, messages=history)
    assert r2.usage.prompt_tokens > r.usage.prompt_tokens
    assert r2.choices[0].finish_reason in ("length", "stop", "tool_calls")


def test_response_format_json_object_and_sampling_params(client):
    r = chat(client, "Give JSON", max_tokens=4, response_format={"type": "json_object"}, temperature=0.7, top_p=0.9,
             seed=11, presence_penalty=0.5, frequency_penalty=0.5, extra_body={"top_k": 20, "min_p": 0.01, "repetition_penalty": 1.1})
    again = chat(client, "Give JSON", max_tokens=4, response_format={"type": "json_object"}, temperature=0.7, top_p=0.9,
                 seed=11, presence_penalty=0.5, frequency_penalty=0.5, extra_body={"top_k": 20, "min_p": 0.01, "repetition_penalty": 1.1})
    assert r.choices[0].message.model_extra.get("reasoning_content") == again.choices[0].message.model_extra.get("reasoning_content")


def test_stop_string_ends_the_content(client):
    body = {"thinking": {"type": "disabled"}}
    full = chat(client, "Say something", max_tokens=12, extra_body=body).choices[0].message.content
    assert len(full) >= 4
    stop = full[len(full) // 2]
    r = chat(client, "Say something", max_tokens=12, stop=[stop], extra_body=body)
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == full[: full.index(stop)]


def test_completions_stream_and_non_stream(client):
    whole = client.completions.create(model="m", prompt="Once upon a time", max_tokens=6, temperature=0, logprobs=2)
    assert whole.object == "text_completion"
    assert whole.choices[0].finish_reason == "length"
    assert len(whole.choices[0].logprobs.tokens) == 6
    assert whole.usage.completion_tokens == 6
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="m", prompt="Once upon a time", max_tokens=6, temperature=0, stream=True) if c.choices)
    assert streamed == whole.choices[0].text
    ids = client.completions.create(model="m", prompt=[0, 128803, 30594], max_tokens=3, temperature=0)
    assert ids.usage.prompt_tokens == 3


def test_concurrent_streams_match_one_at_a_time(client):
    prompts = [f"Request number {i}: " + "word " * (i % 7) for i in range(32)]
    kw = {"max_tokens": 5, "extra_body": {"thinking": {"type": "disabled"}, "ignore_eos": True}}
    alone = [stream_text(client, p, **kw)[1] for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(max_workers=32) as pool:
        together = list(pool.map(lambda p: stream_text(client, p, **kw)[1], prompts))
    assert together == alone


def test_auth_is_required(server):
    bad = openai.OpenAI(base_url=server.base + "/v1", api_key="wrong-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.models.list()
    assert e.value.status_code == 401
    status, _, body = http(server, "POST", "/v1/chat/completions", "{}", key=None)
    assert status == 401 and "error" in json.loads(body)
    status, _, _ = http(server, "GET", "/v1/models", headers={"x-api-key": API_KEY}, key=None)
    assert status == 200


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_a_request_refused_for_its_key_leaves_the_connection_usable(server, path):
    # The refused request's body must be read: left on the keep-alive connection, it was parsed as the next request.
    body = json.dumps({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]})
    conn = HTTPConnection("127.0.0.1", server.port, timeout=60)
    for key, status in [("wrong", 401), (None, 401), (API_KEY, 200), ("wrong", 401), (API_KEY, 200)]:
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        conn.request("POST", path, body, headers)
        r = conn.getresponse()
        raw = r.read()
        assert r.status == status, raw
        assert ("type" in json.loads(raw)) == (path == "/v1/messages")  # each API's own shape
    conn.close()


@pytest.mark.parametrize("body, fragment", [
    (b"{not json", "not valid JSON"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "\xff\xfe"}]}', "not valid JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "bogus_field": 1}', "Unrecognized request argument"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}', "temperature"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": -5}', "max_tokens"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1000000000000}', "max_tokens"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 99, "logprobs": true}', "top_logprobs"),
    (b'{"model": "m", "messages": []}', "messages"),
    (b'{"model": "m", "messages": [{"role": "wizard", "content": "x"}]}', "role"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 3}', "'n'"),
])
def test_malformed_requests_get_400_and_the_server_keeps_serving(server, client, body, fragment):
    status, _, raw = http(server, "POST", "/v1/chat/completions", body)
    assert status == 400, raw
    err = json.loads(raw)["error"]
    assert fragment in err["message"]
    assert err["type"] == "invalid_request_error"
    assert chat(client, "still there?", max_tokens=1).choices[0].finish_reason == "length"


def test_oversized_body_gets_413(server, client):
    huge = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * (2 << 20)}]})
    status, _, raw = http(server, "POST", "/v1/chat/completions", huge)
    assert status == 413
    assert "error" in json.loads(raw)
    with pytest.raises(openai.BadRequestError):
        chat(client, "a", max_tokens=10 ** 9)
    assert chat(client, "still there?", max_tokens=1).usage.completion_tokens == 1


def test_unknown_route_is_404_in_openai_shape(server):
    status, _, raw = http(server, "GET", "/v1/nothing")
    assert status == 404 and json.loads(raw)["error"]["message"]


def test_client_disconnect_mid_stream_cancels_the_request(server, client):
    cancelled_before = metric(server, "deepinfer_requests_cancelled_total")
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Talk for a long time"}],
                       "max_tokens": 20000, "stream": True, "ignore_eos": True})
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
    got = b""
    while b"data:" not in got:
        got += sock.recv(4096)
    sock.close()
    assert wait_for(lambda: metric(server, "deepinfer_requests_cancelled_total") >= cancelled_before + 1)
    assert wait_for(lambda: metric(server, "deepinfer_requests_running") == 0)
    assert chat(client, "after the disconnect", max_tokens=2).usage.completion_tokens == 2


@pytest.mark.parametrize("delay_s", [0.0, 0.3])
def test_client_disconnect_while_generating_cancels_a_non_streamed_request(server, client, delay_s):
    # Tokens keep coming while it generates, so the client must be checked between them, not only in idle gaps.
    cancelled_before = metric(server, "deepinfer_requests_cancelled_total")
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Talk for a long time"}],
                       "max_tokens": 20000, "ignore_eos": True})
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
                      f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
        if delay_s:
            assert wait_for(lambda: metric(server, "deepinfer_requests_running") == 1)
        time.sleep(delay_s)
    assert wait_for(lambda: metric(server, "deepinfer_requests_cancelled_total") >= cancelled_before + 1, timeout=10)
    assert wait_for(lambda: metric(server, "deepinfer_requests_running") == 0)
    assert chat(client, "after the disconnect", max_tokens=2).usage.completion_tokens == 2


def test_metrics_expose_the_engine(server):
    status, headers, body = http(server, "GET", "/metrics")
    text = body.decode()
    for name in ["deepinfer_time_to_first_token_seconds_bucket", "deepinfer_time_per_output_token_seconds_count",
                 "deepinfer_requests_waiting", "deepinfer_kv_cache_usage_ratio", "deepinfer_prefix_cache_hit_rate",
                 "deepinfer_generation_tokens_total", "deepinfer_http_responses_total", "deepinfer_kv_pages_used",
                 "deepinfer_kv_pages_shared", "deepinfer_prefix_cache_evictions_total"]:
        assert name in text
    assert metric(server, "deepinfer_prefix_cache_hits_total") >= 1
    # The paged KV pool: sized from the cache budget, never over it; prefix-cache hits mean shared pages.
    assert metric(server, "deepinfer_kv_pages_total") * metric(server, "deepinfer_kv_page_bytes") <= \
        metric(server, "deepinfer_cache_budget_bytes")
    assert 0 < metric(server, "deepinfer_kv_pages_used") <= metric(server, "deepinfer_kv_pages_total")


def test_responses_non_stream_and_stream(client):
    whole = client.responses.create(model="m", input="Tell me something", max_output_tokens=6, temperature=0,
                                    reasoning={"effort": "none"})
    assert whole.object == "response"
    assert whole.status == "incomplete" and whole.incomplete_details.reason == "max_output_tokens"
    assert whole.usage.output_tokens == 6
    assert whole.output[-1].type == "message"
    text = whole.output_text
    assert text
    types, deltas = [], ""
    for event in client.responses.create(model="m", input="Tell me something", max_output_tokens=6, temperature=0,
                                         reasoning={"effort": "none"}, stream=True):
        types.append(event.type)
        if event.type == "response.output_text.delta":
            deltas += event.delta
    assert deltas == text
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.incomplete"
    assert "response.output_item.added" in types and "response.output_item.done" in types


def test_responses_reasoning_items_and_function_calls_round_trip(client):
    tools = [{"type": "function", "name": "lookup", "description": "Look a word up",
              "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}}]
    first = client.responses.create(model="m", input="Define 'serendipity'", instructions="Use tools.", tools=tools,
                                    max_output_tokens=5, temperature=0)
    assert first.output[0].type == "reasoning"  # thinking by default
    follow_up = [
        {"role": "user", "content": "Define 'serendipity'"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "I will look it up."}]},
        {"type": "function_call", "call_id": "call_00", "name": "lookup", "arguments": "{\"word\": \"serendipity\"}"},
        {"type": "function_call_output", "call_id": "call_00", "output": "a happy accident"},
    ]
    second = client.responses.create(model="m", input=follow_up, instructions="Use tools.", tools=tools,
                                     max_output_tokens=5, temperature=0)
    assert second.usage.input_tokens > first.usage.input_tokens
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="m", input="x", previous_response_id="resp_123")
