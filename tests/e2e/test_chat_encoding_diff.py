"""Differential tests: deepinfer's chat encoding and output parser against DeepSeek's own implementation.

The reference is the PyPI package deepseek-recipe (pinned in scripts/requirements-test.txt; installed by
scripts/setup.sh, never by this file): DeepseekV4Encoding / DeepseekV41Encoding render the prompt, and its
StreamProcessor parses completions. deepinfer's side is tools/chat_encode_tool (found in
$DEEPINFER_BUILD_DIR), which reads a JSON request and prints the prompt / the parsed message.

Checked: prompt strings and the byte ranges of explicit special tokens (which decide token ids), for
systematic and seeded-random conversations in both versions, built directly (messages exactly as written)
and through the Chat Completions conversion; and parsed completions (reasoning, content, tool calls with
OpenAI JSON arguments, finish reason) for generated well-formed outputs cut into random chunks.
deepseek-recipe 0.2.0 ships no encoding fixture files (neither the wheel nor the sdist has any), so there
are none to replay here.
"""

import itertools
import json
import os
import pathlib
import random
import subprocess

import pytest

dr = pytest.importorskip("deepseek_recipe", reason="deepseek-recipe is not installed (scripts/setup.sh installs it)")

REPO = pathlib.Path(__file__).resolve().parents[2]
DSML = "｜DSML｜"


def _tool_path():
    candidates = []
    if os.environ.get("DEEPINFER_BUILD_DIR"):
        candidates.append(pathlib.Path(os.environ["DEEPINFER_BUILD_DIR"]) / "chat_encode_tool")
    candidates += sorted(REPO.glob("build*/chat_encode_tool"))
    for path in candidates:
        if path.is_file():
            return path
    pytest.fail("chat_encode_tool not built: set DEEPINFER_BUILD_DIR to a build directory that has it "
                f"(looked in {[str(c) for c in candidates] or 'DEEPINFER_BUILD_DIR and build*/'})")


def run_tool(mode, requests):
    proc = subprocess.run([str(_tool_path()), mode], input=json.dumps(requests).encode(), capture_output=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    return json.loads(proc.stdout)


# ---------------------------------------------------------------------------------------------------------
# deepseek-recipe side

def _content(message):
    content = message.get("content")
    if isinstance(content, list):
        return "\n\n".join(part["text"] for part in content)
    return content or ""


def _tool_definition(tool):
    fn = tool.get("function", tool)
    return dr.ToolDefinition(fn["name"], fn.get("description"), fn.get("parameters"),
                             defer_loading=tool.get("defer_loading", False))


def recipe_conversation(request):
    """The request (messages exactly as written) as a deepseek-recipe Conversation."""
    messages = []
    for m in request["messages"]:
        role, content = m["role"], _content(m)
        if role == "system":
            tools = [_tool_definition(t) for t in m["tools"]] if "tools" in m else None
            messages.append(dr.SystemMessage(content, tools=tools))
        elif role == "user":
            messages.append(dr.UserMessage(content))
        elif role == "tool":
            messages.append(dr.ToolMessage(content, tool_call_id=m.get("tool_call_id")))
        elif role == "latest_reminder":
            messages.append(dr.LatestReminderMessage(content))
        else:
            calls = None
            if "tool_calls" in m:
                calls = [dr.ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
                         for c in m["tool_calls"]]
            messages.append(dr.AssistantMessage(content, reasoning_content=m.get("reasoning_content"),
                                                tool_calls=calls, prefix=m.get("prefix", False)))
    kwargs = {}
    fmt = request.get("response_format")
    if fmt and fmt["type"] == "json_object":
        kwargs["response_format"] = "json_object"
    elif fmt and fmt["type"] == "json_schema":
        kwargs["response_schema"] = fmt["json_schema"]["schema"]
    elif fmt and fmt["type"] == "regex":
        kwargs["response_regex"] = fmt["regex"]
    return dr.Conversation(messages, thinking_mode=request.get("thinking_mode", True),
                           tools=[_tool_definition(t) for t in request.get("tools", [])],
                           tool_choice=request.get("tool_choice", "auto"),
                           reasoning_effort=request.get("reasoning_effort"), **kwargs)


def encoder_for(version):
    return dr.DeepseekV4Encoding() if version == "v4" else dr.DeepseekV41Encoding()


def byte_ranges(prompt, ranges):
    """deepseek-recipe reports code-point offsets; deepinfer reports byte offsets."""
    return [[len(prompt[:start].encode()), len(prompt[:end].encode())] for start, end in ranges]


def compare_prompts(requests, rendered):
    mine = run_tool("--json", requests)
    failures = []
    for request, ref, got in zip(requests, rendered, mine):
        if "error" in got:
            failures.append((request, "deepinfer error: " + got["error"]))
            continue
        if got["prompt"] != ref.prompt:
            i = next((k for k, (a, b) in enumerate(zip(got["prompt"], ref.prompt)) if a != b),
                     min(len(got["prompt"]), len(ref.prompt)))
            failures.append((request, f"prompt differs at {i}: deepinfer {got['prompt'][i - 40:i + 60]!r} "
                                      f"deepseek-recipe {ref.prompt[i - 40:i + 60]!r}"))
        elif got["special_ranges"] != byte_ranges(ref.prompt, ref.special_ranges):
            failures.append((request, "special-token ranges differ"))
    assert not failures, f"{len(failures)}/{len(requests)} differ; first: {json.dumps(failures[0][0])[:1500]}\n" \
                         f"{failures[0][1]}"


# ---------------------------------------------------------------------------------------------------------
# conversations

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string"}, "days": {"type": "integer"},
                                                "unit": {"type": "string", "enum": ["C", "F"]}},
                                                "required": ["city"]}}}
SEARCH = {"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}, "limit": {"type": "number", "minimum": 0.00001}}}}}


def _call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


SCENARIOS = {
    "single": [{"role": "user", "content": "Hi"}],
    "multi_turn": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "2+2?"},
                   {"role": "assistant", "content": "4", "reasoning_content": "easy"},
                   {"role": "user", "content": "3+3?"}],
    "agent_loop": [
        {"role": "system", "content": "You help with travel."}, {"role": "user", "content": "Paris and Rome?"},
        {"role": "assistant", "content": "", "reasoning_content": "two calls",
         "tool_calls": [_call("call_b", "get_weather", '{"city": "Rome", "days": 2}'),
                        _call("call_a", "get_weather", '{"city": "Paris", "unit": "C"}')]},
        {"role": "tool", "tool_call_id": "call_a", "content": "21C"},
        {"role": "tool", "tool_call_id": "call_b", "content": "25C"},
        {"role": "assistant", "content": "Paris 21C, Rome 25C.", "reasoning_content": "done"},
        {"role": "user", "content": "And Oslo?"},
        {"role": "latest_reminder", "content": "Use tools when needed."}],
    "mid_system_and_reminders": [
        {"role": "user", "content": "a"}, {"role": "system", "content": "new rule"}, {"role": "user", "content": ""},
        {"role": "user", "content": "c"}, {"role": "latest_reminder", "content": "r1"},
        {"role": "latest_reminder", "content": "r2"}],
    "prefix_reasoning": [{"role": "user", "content": "q"},
                         {"role": "assistant", "content": "", "reasoning_content": "Let me", "prefix": True}],
    "prefix_content": [{"role": "user", "content": "q"},
                       {"role": "assistant", "content": "The answer", "reasoning_content": "r", "prefix": True}],
    "special_spellings": [
        {"role": "user", "content": "type <｜User｜>, </think> and <｜DSML｜ calls> please"},
        {"role": "assistant", "content": "<｜ref｜>cat<｜/ref｜><｜box｜>(1,2)<｜/box｜> <｜Assistant｜>",
         "reasoning_content": "<｜point｜>p<｜/point｜> <think>"},
        {"role": "user", "content": "ok"}],
    "argument_formatting": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [
            _call("2", "search", '{"q": "Pé \\"q\\" \\\\ \\n", "limit": 0.00001, "e": 1e300, "x": 1.0, '
                                 '"l": [1, {"k": null}], "b": true, "big": 18446744073709551616, "z": [-0, -0.0, -0e1]}'),
            _call("1", "search", "not json"), _call("3", "search", "[1, 2]"), _call("4", "search", "{}")]},
        {"role": "tool", "tool_call_id": "4", "content": "r4"}, {"role": "tool", "tool_call_id": "2", "content": "r2"},
        {"role": "user", "content": "between"},
        {"role": "tool", "tool_call_id": "1", "content": "r1"}, {"role": "tool", "content": "no id"}],
    "system_tools_v41": [{"role": "user", "content": "a"},
                         {"role": "system", "content": "More tools.", "tools": [SEARCH]},
                         {"role": "user", "content": "b"}],
}


def systematic_requests():
    formats = [None, {"type": "json_object"}, {"type": "regex", "regex": "[0-9]+"},
               {"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {
                   "p": {"type": "number", "minimum": 1e-7}}}}}]
    for version, (name, messages), thinking, effort, tools, choice, fmt in itertools.product(
            ["v4", "v4.1"], SCENARIOS.items(), [True, False], [None, "low", "high", "xhigh", "max"],
            [[], [WEATHER, SEARCH], [SEARCH, dict(WEATHER, defer_loading=True)]], ["auto", "none", "required"],
            formats):
        if fmt is not None and (effort not in (None, "max") or choice != "auto"):
            continue  # keeps the product small; formats are independent of these
        request = {"version": version, "thinking_mode": thinking, "tools": tools, "tool_choice": choice,
                   "messages": messages}
        if effort:
            request["reasoning_effort"] = effort
        if fmt:
            request["response_format"] = fmt
        yield request


TEXT_PIECES = ["hello", "世界", "é", "🙂", " ", "\n", "\n\n", "\t", "\"", "\\", "<", ">", "{", "}", "0.5",
               "<｜User｜>", "</think>", "<think>", "<｜end▁of▁sentence｜>", "<｜ref｜>", "<｜/box｜>",
               "<｜DSML｜", "｜", "json", "<tool_result>"]


def rand_text(rng, max_pieces=6):
    return "".join(rng.choice(TEXT_PIECES) for _ in range(rng.randint(0, max_pieces)))


def rand_json_value(rng, depth=0):
    kind = rng.randrange(9 if depth < 2 else 6)
    if kind == 0:
        return rng.randint(-10**6, 10**6)
    if kind == 1:
        return rng.choice([0.1, 1.0, -2.5, 1e-7, 2.5e-05, 0.0001, 1e16, 1e300, 123456.789, -0.0, 3.14159])
    if kind == 2:
        return rng.choice([True, False, None])
    if kind in (3, 4, 5):
        return rand_text(rng)
    if kind in (6, 7):
        return [rand_json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rand_text(rng, 2) or "k": rand_json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def rand_arguments(rng):
    r = rng.random()
    if r < 0.08:
        return rng.choice(["not json", "", "[1, 2]", "5", '"s"'])
    keys = ["city", "q", "n", "x y", "ключ", "a\"b"]
    obj = {rng.choice(keys): rand_json_value(rng) for _ in range(rng.randint(0, 4))}
    return json.dumps(obj, ensure_ascii=rng.random() < 0.3, separators=rng.choice([(",", ":"), (", ", ": ")]))


def rand_messages(rng, version):
    messages = []
    ids = []
    for _ in range(rng.randint(1, 9)):
        role = rng.choice(["system", "user", "user", "assistant", "assistant", "tool", "latest_reminder"])
        if role == "assistant":
            m = {"role": "assistant", "content": rand_text(rng)}
            if rng.random() < 0.7:
                m["reasoning_content"] = rand_text(rng)
            if rng.random() < 0.5:
                ids = [rng.choice(["a", "b", "c", "call_1", "call_2", "é", ""]) + str(k)
                       for k in range(rng.randint(0, 3))]
                m["tool_calls"] = [_call(i, rng.choice(["get_weather", "search", "f"]), rand_arguments(rng))
                                   for i in ids]
            messages.append(m)
        elif role == "tool":
            m = {"role": "tool", "content": rand_text(rng)}
            if ids and rng.random() < 0.9:
                m["tool_call_id"] = rng.choice(ids + ["unknown"])
            messages.append(m)
        elif role == "system":
            m = {"role": "system", "content": rand_text(rng)}
            if version == "v4.1" and rng.random() < 0.2:
                m["tools"] = [SEARCH]
            messages.append(m)
        else:
            messages.append({"role": role, "content": rand_text(rng)})
    if rng.random() < 0.15:
        messages.append({"role": "assistant", "content": rng.choice(["", "so"]),
                         "reasoning_content": rng.choice(["", "hmm"]), "prefix": True})
    return messages


def random_requests(seed, count):
    rng = random.Random(seed)
    for _ in range(count):
        version = rng.choice(["v4", "v4.1"])
        request = {"version": version, "thinking_mode": rng.random() < 0.6,
                   "tools": rng.choice([[], [WEATHER], [SEARCH, WEATHER], [dict(SEARCH, defer_loading=True)]]),
                   "tool_choice": rng.choice(["auto", "auto", "none", "required"]),
                   "messages": rand_messages(rng, version)}
        effort = rng.choice([None, "low", "high", "xhigh", "max"])
        if effort:
            request["reasoning_effort"] = effort
        if rng.random() < 0.15:
            request["response_format"] = rng.choice([{"type": "json_object"},
                                                     {"type": "json_schema", "json_schema": {"schema": {"a": [1e-5]}}}])
        yield request


def test_encoding_systematic():
    requests = list(systematic_requests())
    compare_prompts(requests, [encoder_for(r["version"]).render_conversation(recipe_conversation(r)) for r in requests])


def test_encoding_random_conversations():
    requests = list(random_requests(seed=4, count=3000))
    compare_prompts(requests, [encoder_for(r["version"]).render_conversation(recipe_conversation(r)) for r in requests])


# ---------------------------------------------------------------------------------------------------------
# Chat Completions bodies through deepseek-recipe's API conversion vs deepinfer's loader (api_normalization)

MODEL_NAMES = {"v4": "DeepSeek-V4-Pro", "v4.1": "DeepSeek-V4.1-Flash"}


def rand_api_body(rng):
    version = rng.choice(["v4", "v4.1"])
    messages = []
    if rng.random() < 0.6:
        system = rng.choice(["", "You are helpful. Reply in json.", rand_text(rng)])
        messages.append({"role": "system", "content": system})
    for turn in range(rng.randint(1, 4)):
        content = rand_text(rng) or "q"
        if rng.random() < 0.3:
            content = [{"type": "text", "text": content}, {"type": "text", "text": rand_text(rng)}]
        messages.append({"role": "user", "content": content})
        if rng.random() < 0.2:
            messages.append({"role": "latest_reminder", "content": rand_text(rng)})
        if turn == 0 or rng.random() < 0.7:
            assistant = {"role": "assistant", "content": rand_text(rng)}
            if rng.random() < 0.5:
                assistant["reasoning_content"] = rand_text(rng)
            calls = []
            if rng.random() < 0.4:
                calls = [_call(f"call_{turn}_{k}", rng.choice(["get_weather", "search"]), rand_arguments(rng))
                         for k in range(rng.randint(1, 3))]
                assistant["tool_calls"] = calls
            messages.append(assistant)
            order = list(calls)
            rng.shuffle(order)
            messages += [{"role": "tool", "tool_call_id": c["id"], "content": rand_text(rng)} for c in order]
    has_calls = any("tool_calls" in m for m in messages)
    if messages[-1]["role"] == "assistant" and not has_calls and rng.random() < 0.3:
        messages[-1]["prefix"] = True
    else:
        messages.append({"role": "user", "content": "go on json"})
    body = {"model": MODEL_NAMES[version], "messages": messages}
    if rng.random() < 0.6:
        body["tools"] = rng.choice([[WEATHER], [WEATHER, SEARCH]])
        body["tool_choice"] = rng.choice(["auto", "none", "required",
                                          {"type": "function", "function": {"name": "get_weather"}}])
    pick = rng.random()
    if pick < 0.3:
        body["thinking"] = {"type": rng.choice(["enabled", "disabled", "adaptive"])}
    elif pick < 0.6:
        body["reasoning_effort"] = rng.choice(["none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max"])
    if rng.random() < 0.1:
        body["response_format"] = {"type": "json_object"}
    return version, body


def test_encoding_through_api_conversion():
    rng = random.Random(7)
    requests, rendered = [], []
    attempts = 0
    while len(requests) < 400 and attempts < 4000:
        attempts += 1
        version, body = rand_api_body(rng)
        try:
            converted = dr.ChatCompletionRequest(dict(body)).convert(dr.ConversionOptions())
        except dr.ConversionError:
            continue  # deepseek-recipe rejects it as an API request (e.g. required tool choice in thinking mode)
        rendered.append(encoder_for(version).render_conversation(converted.conversation))
        requests.append(dict(body, version=version, api_normalization=True))
    assert len(requests) >= 200, f"only {len(requests)} of {attempts} generated bodies were valid API requests"
    compare_prompts(requests, rendered)


# ---------------------------------------------------------------------------------------------------------
# output parsing vs deepseek-recipe's StreamProcessor (Chat Completions)

SAFE_PIECES = ["hello", "世界", "é", "🙂", " ", "\n", "\t", "\"", "\\", "<", ">", "{", "}", "0.5", "<b>", "json",
               "｜"]


def safe_text(rng, max_pieces=8):
    return "".join(rng.choice(SAFE_PIECES) for _ in range(rng.randint(0, max_pieces)))


def dsml_block(rng, calls):
    sp = rng.choice(["", " "])
    block = "calls" if sp else "tool_calls"
    out = f"<{DSML}{sp}{block}>\n"
    for name, params in calls:
        out += f'<{DSML}{sp}invoke name="{name}">\n'
        for key, value in params:
            if isinstance(value, str):
                out += f'<{DSML}{sp}parameter name="{key}" string="true">{value}</{DSML}{sp}parameter>\n'
            else:
                out += f'<{DSML}{sp}parameter name="{key}" string="false">{json.dumps(value, ensure_ascii=False)}' \
                       f'</{DSML}{sp}parameter>\n'
        out += f"</{DSML}{sp}invoke>\n"
    return out + f"</{DSML}{sp}{block}>"


def rand_completion(rng, thinking, tools, stop):
    text = ""
    if thinking:
        text += "\n" * rng.randint(0, 2) + safe_text(rng) + "\n" * rng.randint(0, 2) + "</think>"
    text += "\n" * rng.randint(0, 2) + safe_text(rng)
    if stop and rng.random() < 0.5:
        text += stop[0] + safe_text(rng)
    elif tools and rng.random() < 0.6:
        calls = [(rng.choice(["get_weather", "search"]),
                  [(f"k{j}", safe_text(rng) if rng.random() < 0.5 else rand_json_value(rng))
                   for j in range(rng.randint(0, 3))])
                 for _ in range(rng.randint(1, 3))]
        text += "\n" * rng.randint(0, 2) + dsml_block(rng, calls)
    return text


def random_chunks(rng, text):
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 12)))) if len(text) > 1 else []
    bounds = [0] + cuts + [len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def recipe_parse(body, chunks, end):
    converted = dr.ChatCompletionRequest(dict(body, stream=True)).convert(dr.ConversionOptions())
    generator = dr.ChatCompletionRequest.chunk_generator(converted, "id", "m")
    processor = dr.StreamProcessor(generator, converted.parsing_options)
    response = dr.ChatCompletionResponse("id", "m", 0, 0, 0)
    out = []
    for chunk in chunks:
        if not processor.finished:
            out += processor.push(dr.InferenceChunk.text(chunk, 1))
    if not processor.finished:
        finish = dr.InferenceFinishReason.Stop if end == "eos" else dr.InferenceFinishReason.Length
        out += processor.push(dr.InferenceChunk.finish(finish))
    if not processor.finished:
        out += processor.finish()
    for chunk in out:
        response.accumulate(chunk)
    choice = json.loads(response.to_json())["choices"][0]
    message = choice["message"]
    return {"reasoning": message.get("reasoning_content") or "", "content": message.get("content") or "",
            "tool_calls": [[c["function"]["name"], c["function"]["arguments"]]
                           for c in message.get("tool_calls") or []],
            "finish_reason": choice["finish_reason"]}


def test_output_parser_matches_stream_processor():
    rng = random.Random(11)
    cases = []
    for _ in range(2000):
        version = rng.choice(["v4", "v4.1"])
        thinking = rng.random() < 0.6
        tools = rng.random() < 0.7
        stop = [rng.choice(["STOP", "\n\n\n", "世"])] if rng.random() < 0.3 else []
        body = {"model": MODEL_NAMES[version], "messages": [{"role": "user", "content": "hi"}],
                "thinking": {"type": "enabled" if thinking else "disabled"}}
        if tools:
            body["tools"] = [WEATHER, SEARCH]
            if not thinking and rng.random() < 0.2:
                body["tool_choice"] = "required"
        if stop:
            body["stop"] = stop
        text = rand_completion(rng, thinking, tools, stop)
        if body.get("tool_choice") == "required":
            text = dsml_block(rng, [("search", [("q", safe_text(rng))])]).split(">", 1)[1]  # the prompt opened it
        end = rng.choice(["eos", "eos", "length"])
        cases.append((version, body, random_chunks(rng, text), end))
    mine = run_tool("--parse", [dict(body, version=version, api_normalization=True, output_chunks=chunks,
                                     stream_end=end) for version, body, chunks, end in cases])
    failures = []
    for (version, body, chunks, end), got in zip(cases, mine):
        ref = recipe_parse(body, chunks, end)
        reason = {"stop_sequence": "stop"}.get(got["finish_reason"], got["finish_reason"])
        ours = {"reasoning": got["reasoning"], "content": got["content"],
                "tool_calls": [[c["name"], c["arguments"]] for c in got["tool_calls"]], "finish_reason": reason}
        if ours != ref or got["warnings"]:
            failures.append((body, chunks, end, ours, ref, got["warnings"]))
    assert not failures, f"{len(failures)}/{len(cases)} differ; first: {failures[0]!r}"[:3000]
