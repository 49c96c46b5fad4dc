#!/usr/bin/env python3
"""Mixed-load check of `deepinfer serve` over loopback: every valid request answered correctly, nothing lost.

At each concurrency level it fires a shuffled mix through the official clients (`openai`, `anthropic`, and the
httpx they ship for raw bytes):
  valid      greedy (temperature 0) requests on every route: /v1/chat/completions, /v1/completions,
             /v1/responses (streamed and not) and /v1/messages (Anthropic client, streamed and not), a third of the
             chat-shaped ones over one long shared system prompt (prefix-cache hits); each answer (text, output
             tokens, finish reason) must equal the answer the same request got alone, at concurrency 1, before
             the load (one reference per distinct request, computed sequentially);
  malformed  bad JSON, invalid UTF-8, wrong types, unknown fields, negative / absurd parameters, oversized bodies,
             a bad key, an unknown route: each must get its 4xx in the API's own error shape;
  cancelled  streams the client closes after the first delta, and non-streamed requests whose connection the
             client drops (after 0-300 ms).
Each request gets exactly one outcome. Afterwards /health must be OK, /metrics must show no request running,
waiting or in flight (submitted == finished), no 5xx, and a fresh request must still get its reference answer.
Prints a table per level; exits 1 on any wrong, lost, 5xx, mis-rejected request or failed end check.
The end checks read the server's own counters, so run it on a server nothing else uses; its --max-concurrent must
be at least the highest level (a 429 counts as lost) and --max-body-bytes must be this script's (1 MiB by default;
the script passes both when it starts the server).

  python3 scripts/mixed_load.py --url http://127.0.0.1:8000 --api-key KEY [--requests 300] [--concurrency 1,8,32]
  python3 scripts/mixed_load.py --binary build/deepinfer --model build/models/deepinfer-v4-tiny [--threads 2]

tests/e2e/test_server_mixed_load.py runs `run_mixed_load` against the e2e server fixture with a CI-sized load.
"""
import argparse
import concurrent.futures
import dataclasses
import json
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

import anthropic
import openai

try:  # the openai package ships httpx under this name in recent versions
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx

MODEL = "deepinfer-v4-tiny"  # the server accepts any model name; this is only sent along
WORDS = ("river stone cloud lantern quiet method harbor signal garden copper window theory meadow engine planet "
         "orchard pencil silver letter bridge island market winter forest candle mirror compass ladder violet "
         "thunder marble saddle ribbon falcon canyon anchor velvet summit glacier tunnel beacon prairie").split()
SHARED_SYSTEM = ("You are a careful assistant for a small library. Answer briefly, cite the shelf when you can, "
                 "and never invent a book that is not in the catalogue. ") * 8  # ~250 tokens, over the 128 window
CANCEL_MAX_TOKENS = 512  # cancelled requests ask for far more than they get, so a missed cancel shows as running


@dataclasses.dataclass(frozen=True)
class ValidSpec:
    """One distinct valid greedy request. kind: chat | chat_stream | completion | completion_stream | responses |
    responses_stream | messages | messages_stream."""
    kind: str
    user: str
    system: str = ""
    max_tokens: int = 8
    thinking: bool = False  # chat / messages: thinking mode on (the reasoning is part of the compared answer)
    ignore_eos: bool = False  # OpenAI routes only


@dataclasses.dataclass(frozen=True)
class Answer:
    text: str  # reasoning + "\x1e" + content (or completion text)
    n_tokens: int
    finish: str


@dataclasses.dataclass(frozen=True)
class Malformed:
    name: str
    path: str
    body: bytes
    status: int
    flavor: str = "openai"  # error shape to expect: openai | anthropic
    key: str = "ok"  # ok | none | wrong


@dataclasses.dataclass
class Outcome:
    """What one request ended as. result: correct | wrong | lost | rejected | misrejected | cancelled."""
    job: int
    kind: str
    result: str
    latency_s: float = 0.0
    n_tokens: int = 0
    status: int = 0  # HTTP status seen (0: none / not applicable)
    detail: str = ""


# ------------------------------------------------------------------------------------------------------------------
# Requests


class Clients:
    def __init__(self, url, api_key, timeout_s):
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.openai = openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, timeout=timeout_s)
        self.anthropic = anthropic.Anthropic(base_url=self.url, api_key=api_key, max_retries=0, timeout=timeout_s)
        self.http = httpx.Client(base_url=self.url, timeout=timeout_s)

    def close(self):
        self.openai.close()
        self.anthropic.close()
        self.http.close()


def _chat_messages(spec):
    return ([{"role": "system", "content": spec.system}] if spec.system else []) + [{"role": "user", "content": spec.user}]


def _openai_extra(spec):
    extra = {"thinking": {"type": "enabled" if spec.thinking else "disabled"}}
    if spec.ignore_eos:
        extra["ignore_eos"] = True
    return extra


def _responses_output(response):
    reasoning, content = "", ""
    for item in response.output:
        if item.type == "reasoning":
            reasoning += "".join(part.text for part in (item.content or []))
        elif item.type == "message":
            content += "".join(part.text for part in item.content if part.type == "output_text")
    return reasoning, content


def run_valid(clients, spec, stop_after_first=False):
    """Runs one valid request; returns its Answer (None when stop_after_first closed it after the first delta)."""
    oa, an = clients.openai, clients.anthropic
    max_tokens = CANCEL_MAX_TOKENS if stop_after_first else spec.max_tokens
    kind = spec.kind
    if kind == "chat":
        r = oa.chat.completions.create(model=MODEL, messages=_chat_messages(spec), max_tokens=max_tokens, temperature=0,
                                       extra_body=_openai_extra(spec))
        m = r.choices[0].message
        return Answer(((m.model_extra or {}).get("reasoning_content") or "") + "\x1e" + (m.content or ""),
                      r.usage.completion_tokens, r.choices[0].finish_reason)
    if kind == "chat_stream":
        reasoning = content = ""
        finish = usage = None
        with oa.chat.completions.create(model=MODEL, messages=_chat_messages(spec), max_tokens=max_tokens, temperature=0,
                                        stream=True, stream_options={"include_usage": True},
                                        extra_body=_openai_extra(spec)) as stream:
            for chunk in stream:
                usage = chunk.usage or usage
                for choice in chunk.choices:
                    piece_r = (choice.delta.model_extra or {}).get("reasoning_content") or ""
                    piece_c = choice.delta.content or ""
                    reasoning += piece_r
                    content += piece_c
                    finish = choice.finish_reason or finish
                    if stop_after_first and (piece_r or piece_c):
                        return None
        if finish is None or usage is None:
            raise RuntimeError(f"chat stream ended without finish_reason or usage (finish={finish}, usage={usage})")
        return Answer(reasoning + "\x1e" + content, usage.completion_tokens, finish)
    if kind == "completion":
        r = oa.completions.create(model=MODEL, prompt=spec.system + spec.user, max_tokens=max_tokens, temperature=0,
                                  extra_body={"ignore_eos": True} if spec.ignore_eos else None)
        return Answer(r.choices[0].text, r.usage.completion_tokens, r.choices[0].finish_reason)
    if kind == "completion_stream":
        text, finish, usage = "", None, None
        with oa.completions.create(model=MODEL, prompt=spec.system + spec.user, max_tokens=max_tokens, temperature=0,
                                   stream=True, stream_options={"include_usage": True},
                                   extra_body={"ignore_eos": True} if spec.ignore_eos else None) as stream:
            for chunk in stream:
                usage = chunk.usage or usage
                for choice in chunk.choices:
                    text += choice.text
                    finish = choice.finish_reason or finish
                    if stop_after_first and choice.text:
                        return None
        if finish is None or usage is None:
            raise RuntimeError(f"completion stream ended without finish_reason or usage (finish={finish})")
        return Answer(text, usage.completion_tokens, finish)
    if kind in ("responses", "responses_stream"):
        args = dict(model=MODEL, input=spec.user, max_output_tokens=max_tokens, temperature=0, store=False,
                    reasoning={"effort": "high"} if spec.thinking else None)
        if spec.system:
            args["instructions"] = spec.system
        args = {k: v for k, v in args.items() if v is not None}
        if kind == "responses":
            r = oa.responses.create(**args)
            reasoning, content = _responses_output(r)
            return Answer(reasoning + "\x1e" + content, r.usage.output_tokens, r.status)
        final, deltas = None, {"reasoning": "", "content": ""}
        with oa.responses.create(stream=True, **args) as stream:
            for event in stream:
                if event.type == "response.reasoning_text.delta":
                    deltas["reasoning"] += event.delta
                elif event.type == "response.output_text.delta":
                    deltas["content"] += event.delta
                elif event.type in ("response.completed", "response.incomplete"):
                    final = event.response
                elif event.type in ("error", "response.failed"):
                    raise RuntimeError(f"responses stream failed: {event}")
                if stop_after_first and (deltas["reasoning"] or deltas["content"]):
                    return None
        if final is None:
            raise RuntimeError("responses stream ended without response.completed / response.incomplete")
        reasoning, content = _responses_output(final)
        if (reasoning, content) != (deltas["reasoning"], deltas["content"]):
            raise RuntimeError("responses stream: the deltas differ from the final response")
        return Answer(reasoning + "\x1e" + content, final.usage.output_tokens, final.status)
    if kind in ("messages", "messages_stream"):
        args = dict(model=MODEL, max_tokens=max_tokens, extra_body={"temperature": 0},  # the SDK has no sampling arguments
                    messages=[{"role": "user", "content": spec.user}],
                    thinking={"type": "enabled", "budget_tokens": 1024} if spec.thinking else {"type": "disabled"})
        if spec.system:
            args["system"] = spec.system
        if kind == "messages":
            r = an.messages.create(**args)
            reasoning = "".join(b.thinking for b in r.content if b.type == "thinking")
            content = "".join(b.text for b in r.content if b.type == "text")
            return Answer(reasoning + "\x1e" + content, r.usage.output_tokens, r.stop_reason)
        reasoning = content = ""
        stop_reason = n_tokens = None
        stopped = False
        with an.messages.create(stream=True, **args) as stream:
            for event in stream:
                if event.type == "content_block_delta":
                    if event.delta.type == "thinking_delta":
                        reasoning += event.delta.thinking
                    elif event.delta.type == "text_delta":
                        content += event.delta.text
                    if stop_after_first:
                        return None
                elif event.type == "message_delta":
                    stop_reason, n_tokens = event.delta.stop_reason, event.usage.output_tokens
                elif event.type == "message_stop":
                    stopped = True
        if not stopped or stop_reason is None:
            raise RuntimeError("messages stream ended without message_delta / message_stop")
        return Answer(reasoning + "\x1e" + content, n_tokens, stop_reason)
    raise ValueError(kind)


def check_error_shape(flavor, status, raw):
    """'' when raw is the API's own error shape for status, else what is wrong."""
    try:
        body = json.loads(raw)
    except ValueError:
        return f"error body is not JSON: {raw[:120]!r}"
    if flavor == "anthropic":
        err = body.get("error") if isinstance(body, dict) else None
        want = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error", 413: "request_too_large"}
        if body.get("type") != "error" or not isinstance(err, dict) or not isinstance(err.get("message"), str):
            return f"not an Anthropic error: {raw[:200]!r}"
        if status in want and err.get("type") != want[status]:
            return f"Anthropic error type {err.get('type')!r}, expected {want[status]!r}"
        return ""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict) or not isinstance(err.get("message"), str) or not isinstance(err.get("type"), str) \
            or "param" not in err or "code" not in err:
        return f"not an OpenAI error: {raw[:200]!r}"
    return ""


def run_malformed(clients, m):
    headers = {"Content-Type": "application/json"}
    if m.key == "ok":
        headers["Authorization"] = f"Bearer {clients.api_key}"
    elif m.key == "wrong":
        headers["Authorization"] = "Bearer not-the-key"
    r = clients.http.post(m.path, content=m.body, headers=headers)
    if r.status_code != m.status:
        return r.status_code, f"{m.name}: HTTP {r.status_code}, expected {m.status}: {r.content[:200]!r}"
    problem = check_error_shape(m.flavor, r.status_code, r.content)
    return r.status_code, f"{m.name}: {problem}" if problem else ""


def disconnect(clients, spec, delay_s):
    """Sends a non-streamed chat request over a raw socket and drops the connection after delay_s, unanswered."""
    u = urllib.parse.urlsplit(clients.url)
    body = json.dumps({"model": MODEL, "messages": _chat_messages(spec), "max_tokens": CANCEL_MAX_TOKENS, "temperature": 0,
                       "ignore_eos": True, "thinking": {"type": "disabled"}}).encode()
    with socket.create_connection((u.hostname, u.port or 80), timeout=30) as s:
        s.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: {u.netloc}\r\nAuthorization: Bearer {clients.api_key}\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
        time.sleep(delay_s)


def malformed_requests(max_body_bytes):
    """Every malformed request, each with the status it must get."""
    chat, cmpl, resp, msgs = "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"
    user = [{"role": "user", "content": "x"}]

    def j(**kw):
        return json.dumps(kw).encode()
    huge = "x" * (max_body_bytes + (64 << 10))
    return [
        Malformed("chat bad JSON", chat, b'{"model": "m", "messages": [', 400),
        Malformed("chat invalid UTF-8", chat, b'{"model": "m", "messages": [{"role": "user", "content": "\xff\xfe\xc3\x28"}]}', 400),
        Malformed("chat body is an array", chat, b"[1, 2, 3]", 400),
        Malformed("chat messages wrong type", chat, j(model="m", messages="hello"), 400),
        Malformed("chat temperature wrong type", chat, j(model="m", messages=user, temperature="hot"), 400),
        Malformed("chat stream wrong type", chat, j(model="m", messages=user, stream="yes"), 400),
        Malformed("chat unknown field", chat, j(model="m", messages=user, bogus_field=1), 400),
        Malformed("chat negative max_tokens", chat, j(model="m", messages=user, max_tokens=-5), 400),
        Malformed("chat absurd max_tokens", chat, j(model="m", messages=user, max_tokens=10 ** 12), 400),
        Malformed("chat absurd temperature", chat, j(model="m", messages=user, temperature=1e308), 400),
        Malformed("chat negative top_p", chat, j(model="m", messages=user, top_p=-0.5), 400),
        Malformed("chat seed out of range", chat, j(model="m", messages=user, seed=2 ** 70), 400),
        Malformed("chat absurd top_logprobs", chat, j(model="m", messages=user, logprobs=True, top_logprobs=99), 400),
        Malformed("chat n=3", chat, j(model="m", messages=user, n=3), 400),
        Malformed("chat 17 stop strings", chat, j(model="m", messages=user, stop=[str(i) for i in range(17)]), 400),
        Malformed("chat unknown role", chat, j(model="m", messages=[{"role": "wizard", "content": "x"}]), 400),
        Malformed("chat empty messages", chat, j(model="m", messages=[]), 400),
        Malformed("chat oversized body", chat, j(model="m", messages=[{"role": "user", "content": huge}]), 413),
        Malformed("chat no API key", chat, j(model="m", messages=user), 401, key="none"),
        Malformed("completion prompt wrong type", cmpl, j(model="m", prompt={"text": "x"}), 400),
        Malformed("completion empty prompt", cmpl, j(model="m", prompt=""), 400),
        Malformed("completion negative token id", cmpl, j(model="m", prompt=[5, -1, 7]), 400),
        Malformed("completion absurd logprobs", cmpl, j(model="m", prompt="x", logprobs=9), 400),
        Malformed("completion invalid UTF-8", cmpl, b'{"model": "m", "prompt": "ab\xc0\xafcd"}', 400),
        Malformed("responses bad JSON", resp, b'{"model": "m", "input": "x",}', 400),
        Malformed("responses zero max_output_tokens", resp, j(model="m", input="x", max_output_tokens=0), 400),
        Malformed("responses temperature wrong type", resp, j(model="m", input="x", temperature="x"), 400),
        Malformed("responses unknown field", resp, j(model="m", input="x", frobnicate=True), 400),
        Malformed("responses unknown previous_response_id", resp, j(model="m", input="x", previous_response_id="resp_nope"), 400),
        Malformed("messages bad JSON", msgs, b'{"model": "m", "max_tokens": 4, "messages": [}', 400, "anthropic"),
        Malformed("messages invalid UTF-8", msgs,
                  b'{"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "\xed\xa0\x80"}]}', 400, "anthropic"),
        Malformed("messages missing max_tokens", msgs, j(model="m", messages=user), 400, "anthropic"),
        Malformed("messages temperature over 1", msgs, j(model="m", max_tokens=4, messages=user, temperature=1.5), 400, "anthropic"),
        Malformed("messages system role in messages", msgs,
                  j(model="m", max_tokens=4, messages=[{"role": "system", "content": "x"}]), 400, "anthropic"),
        Malformed("messages unknown field", msgs, j(model="m", max_tokens=4, messages=user, wibble=2), 400, "anthropic"),
        Malformed("messages negative max_tokens", msgs, j(model="m", max_tokens=-1, messages=user), 400, "anthropic"),
        Malformed("messages oversized body", msgs,
                  j(model="m", max_tokens=4, messages=[{"role": "user", "content": huge}]), 413, "anthropic"),
        Malformed("messages wrong API key", msgs, j(model="m", max_tokens=4, messages=user), 401, "anthropic", key="wrong"),
        Malformed("unknown route", "/v1/nothing-here", j(model="m"), 404),
    ]


# ------------------------------------------------------------------------------------------------------------------
# Load plan

VALID_KINDS = ("chat", "chat_stream", "completion", "completion_stream", "responses", "responses_stream", "messages",
               "messages_stream")
CANCEL_KINDS = ("chat_stream", "completion_stream", "responses_stream", "messages_stream", "disconnect")


def valid_pool(n, rng):
    """n distinct valid specs over every kind; a third of the chat-shaped ones share SHARED_SYSTEM."""
    pool, seen = [], set()
    while len(pool) < n:
        kind = VALID_KINDS[len(pool) % len(VALID_KINDS)]
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40)))
        user = f"Request {len(pool)}: {words}?"
        system = SHARED_SYSTEM if not kind.startswith("completion") and rng.random() < 1 / 3 else ""
        spec = ValidSpec(kind, user, system, max_tokens=rng.randint(4, 12), thinking=rng.random() < 0.3,
                         ignore_eos=not kind.startswith(("messages", "responses")) and rng.random() < 0.5)
        if spec not in seen:
            seen.add(spec)
            pool.append(spec)
    return pool


def plan_level(n, pool, malformed, first_malformed, rng):
    """A shuffled list of n jobs: ~60% valid, ~25% malformed (the list in turn from first_malformed, so that the
    levels together cover it), ~15% cancelled."""
    n_malformed, n_cancel = max(1, round(n * 0.25)), max(1, round(n * 0.15))
    n_valid = max(1, n - n_malformed - n_cancel)
    jobs = [("valid", rng.choice(pool)) for _ in range(n_valid)]
    jobs += [("malformed", malformed[(first_malformed + i) % len(malformed)]) for i in range(n_malformed)]
    jobs += [("cancel", (CANCEL_KINDS[i % len(CANCEL_KINDS)], rng.choice(pool), rng.choice((0.0, 0.05, 0.3))))
             for i in range(n_cancel)]
    rng.shuffle(jobs)
    return jobs


def do_job(clients, i, job, references):
    kind, what = job
    t0 = time.perf_counter()
    try:
        if kind == "valid":
            try:
                answer = run_valid(clients, what)
            except (openai.APIStatusError, anthropic.APIStatusError) as e:
                return Outcome(i, what.kind, "lost", time.perf_counter() - t0, status=e.status_code,
                               detail=f"{what.kind}: HTTP {e.status_code}: {e}"[:300])
            latency = time.perf_counter() - t0
            ref = references[what]
            if answer != ref:
                return Outcome(i, what.kind, "wrong", latency, answer.n_tokens, 200,
                               f"{what.kind} {what.user[:40]!r}: got {answer}, alone {ref}"[:400])
            return Outcome(i, what.kind, "correct", latency, answer.n_tokens, 200)
        if kind == "malformed":
            status, problem = run_malformed(clients, what)
            return Outcome(i, "malformed", "misrejected" if problem else "rejected", time.perf_counter() - t0, status=status,
                           detail=problem)
        cancel_kind, spec, delay_s = what
        if cancel_kind == "disconnect":
            disconnect(clients, spec, delay_s)
        else:
            try:
                openai_only = not cancel_kind.startswith(("messages", "responses"))  # ignore_eos is an OpenAI-route extension
                answer = run_valid(clients, dataclasses.replace(spec, kind=cancel_kind, ignore_eos=openai_only), stop_after_first=True)
            except (openai.APIStatusError, anthropic.APIStatusError) as e:
                return Outcome(i, "cancel_" + cancel_kind, "lost", time.perf_counter() - t0, status=e.status_code,
                               detail=f"cancel {cancel_kind}: HTTP {e.status_code}: {e}"[:300])
            if answer is not None:  # CANCEL_MAX_TOKENS ran out before the first delta: not a cancellation
                return Outcome(i, "cancel_" + cancel_kind, "lost", time.perf_counter() - t0, detail="stream finished before any delta")
        return Outcome(i, "cancel_" + cancel_kind, "cancelled", time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001  (any other failure is a lost request, reported with its cause)
        return Outcome(i, kind if kind != "valid" else what.kind, "lost", time.perf_counter() - t0,
                       detail=f"{type(e).__name__}: {e}"[:300])


# ------------------------------------------------------------------------------------------------------------------
# Server state


def read_metrics(clients):
    r = clients.http.get("/metrics", headers={"Authorization": f"Bearer {clients.api_key}"})
    r.raise_for_status()
    out = {}
    for line in r.text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def n_server_errors(metrics):
    return sum(v for k, v in metrics.items() if k.startswith("deepinfer_http_responses_total{") and re.search(r'code="5\d\d"', k))


def wait_idle(clients, timeout_s):
    """Waits until nothing is running, waiting or in flight; returns (idle, seconds waited, last metrics)."""
    t0 = time.perf_counter()
    while True:
        m = read_metrics(clients)
        idle = (m["deepinfer_requests_running"] == 0 and m["deepinfer_requests_waiting"] == 0 and
                m["deepinfer_http_requests_in_flight"] == 0 and
                m["deepinfer_requests_submitted_total"] == m["deepinfer_requests_finished_total"])
        if idle or time.perf_counter() - t0 > timeout_s:
            return idle, time.perf_counter() - t0, m
        time.sleep(0.1)


# ------------------------------------------------------------------------------------------------------------------
# The run


@dataclasses.dataclass
class LevelRow:
    concurrency: int
    sent: int = 0
    valid: int = 0
    correct: int = 0
    wrong: int = 0
    lost: int = 0
    malformed: int = 0
    rejected: int = 0
    misrejected: int = 0
    cancelled: int = 0
    engine_cancelled: int = 0
    wall_s: float = 0.0
    output_tokens: int = 0
    latency_p50_s: float = 0.0
    latency_p99_s: float = 0.0
    server_errors: int = 0
    idle_after_s: float = 0.0


@dataclasses.dataclass
class Report:
    rows: list
    n_references: int
    reference_s: float
    checks: dict  # end check name -> (ok, detail)
    failures: list  # details of every wrong / lost / misrejected request
    notes: list  # figures from /metrics over the whole run (informative)

    @property
    def ok(self):
        return (all(ok for ok, _ in self.checks.values()) and
                not any(r.wrong or r.lost or r.misrejected or r.server_errors for r in self.rows))


def pct(values, p):
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def run_mixed_load(url, api_key, n_requests, levels, seed=1, max_body_bytes=1 << 20, timeout_s=600, idle_timeout_s=120,
                   log=print):
    """Runs the whole check against a running server; returns a Report (nothing asserted here)."""
    rng = random.Random(seed)
    clients = Clients(url, api_key, timeout_s)
    try:
        per_level = [n_requests // len(levels) + (i < n_requests % len(levels)) for i in range(len(levels))]
        pool = valid_pool(max(len(VALID_KINDS), min(64, round(0.6 * n_requests / 3))), rng)
        malformed = malformed_requests(max_body_bytes)
        m_start = read_metrics(clients)
        errors_before = n_server_errors(m_start)

        t0 = time.perf_counter()
        references = {spec: run_valid(clients, spec) for spec in pool}  # alone, one at a time
        reference_s = time.perf_counter() - t0
        log(f"{len(pool)} reference answers computed alone in {reference_s:.1f} s")

        rows, failures, n_malformed_sent = [], [], 0
        for concurrency, n in zip(levels, per_level):
            jobs = plan_level(n, pool, malformed, n_malformed_sent, rng)
            n_malformed_sent += sum(kind == "malformed" for kind, _ in jobs)
            m0 = read_metrics(clients)
            t0 = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as executor:
                outcomes = list(executor.map(lambda ij: do_job(clients, ij[0], ij[1], references), enumerate(jobs)))
            wall = time.perf_counter() - t0
            idle, waited, m1 = wait_idle(clients, idle_timeout_s)
            assert sorted(o.job for o in outcomes) == list(range(len(jobs)))  # exactly one outcome each
            valid = [o for o in outcomes if jobs[o.job][0] == "valid"]
            row = LevelRow(concurrency, sent=len(jobs), valid=len(valid),
                           correct=sum(o.result == "correct" for o in valid), wrong=sum(o.result == "wrong" for o in valid),
                           lost=sum(o.result == "lost" for o in outcomes),
                           malformed=sum(j[0] == "malformed" for j in jobs),
                           rejected=sum(o.result == "rejected" for o in outcomes),
                           misrejected=sum(o.result == "misrejected" for o in outcomes),
                           cancelled=sum(o.result == "cancelled" for o in outcomes),
                           engine_cancelled=int(m1["deepinfer_requests_cancelled_total"] - m0["deepinfer_requests_cancelled_total"]),
                           wall_s=wall, output_tokens=sum(o.n_tokens for o in valid if o.result == "correct"),
                           latency_p50_s=pct([o.latency_s for o in valid if o.result == "correct"], 50),
                           latency_p99_s=pct([o.latency_s for o in valid if o.result == "correct"], 99),
                           server_errors=max(int(n_server_errors(m1) - n_server_errors(m0)),  # the client's view too,
                                             sum(o.status >= 500 for o in outcomes)),  # should /metrics miss one
                           idle_after_s=waited)
            rows.append(row)
            failures += [f"c={concurrency} #{o.job} {o.kind} {o.result}: {o.detail}" for o in outcomes
                         if o.result in ("wrong", "lost", "misrejected")]
            if not idle:
                failures.append(f"c={concurrency}: not idle {idle_timeout_s} s after the level: {_state(m1)}")
            log(f"concurrency {concurrency}: {len(jobs)} requests in {wall:.1f} s "
                f"({row.correct}/{row.valid} valid correct, {row.rejected}/{row.malformed} malformed rejected, "
                f"{row.cancelled} cancelled, {row.lost} lost); idle {waited:.1f} s later")

        checks = {}
        idle, _, m = wait_idle(clients, idle_timeout_s)
        checks["no request running, waiting or in flight (submitted == finished)"] = (idle, _state(m))
        errors = int(n_server_errors(m) - errors_before)
        checks["no 5xx in deepinfer_http_responses_total"] = (errors == 0, f"{errors} 5xx responses")
        r = clients.http.get("/health")
        checks["/health is 200 ok"] = (r.status_code == 200 and r.json().get("status") == "ok", f"HTTP {r.status_code} {r.text[:80]}")
        fresh = next(s for s in pool if s.kind == "chat")
        try:
            answer = run_valid(clients, fresh)
            checks["a fresh request gets its reference answer"] = (answer == references[fresh], f"{answer}")
        except Exception as e:  # noqa: BLE001
            checks["a fresh request gets its reference answer"] = (False, f"{type(e).__name__}: {e}")
        stream_cancels = sum(r.cancelled for r in rows)  # upper bound on what the engine may count
        engine_cancelled = sum(r.engine_cancelled for r in rows)
        checks["engine cancellations <= client cancellations"] = (engine_cancelled <= stream_cancels,
                                                                  f"engine {engine_cancelled}, client {stream_cancels}")
        delta = {k: int(m[k] - m_start[k]) for k in m if k.endswith("_total") and k in m_start}
        notes = [f"engine: {delta['deepinfer_requests_submitted_total']} requests submitted, "
                 f"{delta['deepinfer_requests_cancelled_total']} cancelled, {delta['deepinfer_requests_rejected_total']} "
                 f"rejected at submit, {delta['deepinfer_generation_tokens_total']} tokens generated, "
                 f"{delta['deepinfer_preemptions_total']} preemptions",
                 f"prefix cache: {delta['deepinfer_prefix_cache_hits_total']} of {delta['deepinfer_prefix_cache_queries_total']} "
                 f"prompts hit, {delta['deepinfer_prefix_cache_hit_tokens_total']} of {delta['deepinfer_prompt_tokens_total']} "
                 f"prompt tokens reused"]
        return Report(rows, len(pool), reference_s, checks, failures, notes)
    finally:
        clients.close()


def _state(m):
    return ", ".join(f"{k.removeprefix('deepinfer_')}={int(m[k])}" for k in (
        "deepinfer_requests_running", "deepinfer_requests_waiting", "deepinfer_http_requests_in_flight",
        "deepinfer_requests_submitted_total", "deepinfer_requests_finished_total", "deepinfer_requests_cancelled_total"))


def format_table(report):
    head = ("| concurrency | sent | valid | correct | wrong | lost | malformed | rejected (right 4xx + shape) | cancelled "
            "(engine saw) | req/s | output tok/s | p50 latency (s) | p99 latency (s) | 5xx | idle after (s) |")
    lines = [head, "|" + "---:|" * (head.count("|") - 1)]
    total = LevelRow(0)
    for r in report.rows:
        lines.append(f"| {r.concurrency} | {r.sent} | {r.valid} | {r.correct} | {r.wrong} | {r.lost} | {r.malformed} | "
                     f"{r.rejected} | {r.cancelled} ({r.engine_cancelled}) | {r.sent / r.wall_s:.2f} | "
                     f"{r.output_tokens / r.wall_s:.1f} | {r.latency_p50_s:.2f} | {r.latency_p99_s:.2f} | {r.server_errors} | "
                     f"{r.idle_after_s:.1f} |")
        for f in ("sent", "valid", "correct", "wrong", "lost", "malformed", "rejected", "cancelled", "engine_cancelled",
                  "server_errors"):
            setattr(total, f, getattr(total, f) + getattr(r, f))
    lines.append(f"| **all** | {total.sent} | {total.valid} | {total.correct} | {total.wrong} | {total.lost} | {total.malformed} | "
                 f"{total.rejected} | {total.cancelled} ({total.engine_cancelled}) | | | | | {total.server_errors} | |")
    lines.append("")
    lines.append(f"{report.n_references} distinct valid requests, each answered alone first ({report.reference_s:.1f} s).")
    for name, (ok, detail) in report.checks.items():
        lines.append(f"- {'PASS' if ok else 'FAIL'}: {name} ({detail})")
    lines += [f"- {note}" for note in report.notes]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------------
# CLI


def start_server(binary, model, api_key, threads, max_concurrent, max_body_bytes, extra):
    proc = subprocess.Popen([binary, "serve", "--model", model, "--host", "127.0.0.1", "--port", "0", "--api-key", api_key,
                             "--threads", str(threads), "--max-concurrent", str(max_concurrent),
                             "--max-body-bytes", str(max_body_bytes), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.match(r"listening on 127\.0\.0\.1:(\d+)", line)
    if not m:
        proc.kill()
        sys.exit("deepinfer serve did not start: " + line + proc.stderr.read())
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # keep stderr drained
    return proc, f"http://127.0.0.1:{m.group(1)}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server (else --binary/--model start one on a free loopback port)")
    ap.add_argument("--api-key", default="sk-mixed-load")
    ap.add_argument("--binary", default="build/deepinfer")
    ap.add_argument("--model", default="build/models/deepinfer-v4-tiny")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--serve-args", default="", help="extra `deepinfer serve` flags when this script starts it")
    ap.add_argument("--requests", type=int, default=300, help="requests in all, split evenly over the levels")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-body-bytes", type=int, default=1 << 20, help="the server's --max-body-bytes (oversized bodies exceed it)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per request")
    ap.add_argument("--markdown", help="also write the table to this file")
    args = ap.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    proc = None
    url = args.url
    if not url:
        proc, url = start_server(args.binary, args.model, args.api_key, args.threads, max(levels) + 16, args.max_body_bytes,
                                 args.serve_args.split())
    try:
        report = run_mixed_load(url, args.api_key, args.requests, levels, args.seed, args.max_body_bytes, args.timeout)
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=120)
            if code != 0:
                print(f"deepinfer serve exited with {code}")
    table = format_table(report)
    print("\n" + table)
    for f in report.failures:
        print("FAILURE:", f)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")
    sys.exit(0 if report.ok and (proc is None or proc.returncode == 0) else 1)


if __name__ == "__main__":
    main()
