"""Serving benchmark and mixed-load check for `deepinfer serve` (loopback only).

Starts `deepinfer serve` on 127.0.0.1 (a free port) over MODEL, then:
  1. throughput, TTFT and TPOT percentiles versus concurrency (streamed chat requests, greedy);
  2. prefix-cache hit rate on a multi-turn workload (conversations that grow turn by turn over a shared system prompt);
  3. a mixed load: valid requests at several concurrency levels, malformed ones, and ones the client abandons
     mid-stream; every valid greedy answer must equal the answer the same request gets alone.
Prints tables; exits non-zero if any valid request was lost or answered differently.

  python3 bench/serve_bench.py --binary build/deepinfer --model build/models/deepinfer-v4-tiny [--threads 2]
                               [--levels 1,4,16,32] [--requests 32] [--mixed 64] [--serve-args '--cache-budget-mb 8']
"""
import argparse
import concurrent.futures
import json
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

KEY = "bench-key"


def start(binary, model, threads, extra):
    proc = subprocess.Popen([binary, "serve", "--model", model, "--host", "127.0.0.1", "--port", "0", "--api-key", KEY,
                             "--threads", str(threads), "--max-concurrent", "128", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    m = re.match(r"listening on 127\.0\.0\.1:(\d+)", proc.stdout.readline())
    if not m:
        proc.kill()
        sys.exit("deepinfer serve did not start")
    return proc, int(m.group(1))


def post(port, path, body, timeout=600):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body if isinstance(body, bytes) else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}, method="POST")
    try:
        r = urllib.request.urlopen(req, timeout=timeout)  # the caller reads (and so closes) it
        return r.status, r
    except urllib.error.HTTPError as e:
        return e.code, e


def stream_chat(port, messages, max_tokens):
    """One streamed greedy chat request: (text, ttft_s, total_s, completion_tokens, prompt_tokens, cached_tokens)."""
    t0 = time.perf_counter()
    status, r = post(port, "/v1/chat/completions", {"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                                                    "stream": True, "stream_options": {"include_usage": True},
                                                    "thinking": {"type": "disabled"}, "ignore_eos": True})
    assert status == 200, r.read()
    text, ttft, usage = "", None, None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices", []):
            piece = choice["delta"].get("content") or ""
            if piece and ttft is None:
                ttft = time.perf_counter() - t0
            text += piece
    total = time.perf_counter() - t0
    return text, ttft or total, total, usage["completion_tokens"], usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def concurrency_table(port, levels, n_requests, max_tokens):
    print(f"\n{'conc':>5} {'requests':>9} {'tok/s':>8} {'TTFT p50':>9} {'TTFT p90':>9} {'TPOT p50':>9} {'TPOT p90':>9} (ms)")
    for c in levels:
        prompts = [[{"role": "user", "content": f"Benchmark request {c}-{i}: " + "lorem ipsum " * (i % 13)}] for i in range(n_requests)]
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(max_workers=c) as pool:
            results = list(pool.map(lambda m: stream_chat(port, m, max_tokens), prompts))
        wall = time.perf_counter() - t0
        tokens = sum(r[3] for r in results)
        ttft = [r[1] * 1e3 for r in results]
        tpot = [(r[2] - r[1]) / max(1, r[3] - 1) * 1e3 for r in results]
        print(f"{c:>5} {n_requests:>9} {tokens / wall:>8.1f} {pct(ttft, 50):>9.1f} {pct(ttft, 90):>9.1f} {pct(tpot, 50):>9.1f} {pct(tpot, 90):>9.1f}")


def multi_turn(port, n_conversations, n_turns):
    system = "You are a meticulous assistant who answers in full sentences. " * 12
    prompt_tokens = cached = 0
    for c in range(n_conversations):
        messages = [{"role": "system", "content": system}]
        for t in range(n_turns):
            messages.append({"role": "user", "content": f"Conversation {c}, question {t}: what comes next?"})
            text, _, _, _, p, k = stream_chat(port, messages, 8)
            prompt_tokens += p
            cached += k
            messages.append({"role": "assistant", "content": text})
    print(f"\nmulti-turn: {n_conversations} conversations x {n_turns} turns over a shared system prompt: "
          f"{cached} of {prompt_tokens} prompt tokens from the prefix cache ({100 * cached / prompt_tokens:.1f} %)")


def abandon(port, messages):
    body = json.dumps({"model": "m", "messages": messages, "max_tokens": 2000, "stream": True, "ignore_eos": True,
                       "thinking": {"type": "disabled"}})
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
    got = b""
    while b"data:" not in got:
        got += s.recv(4096)
    s.close()
    return "abandoned"


MALFORMED = [b"{oops", b'{"model": "m", "messages": "no"}', b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": -3}',
             b'{"model": "m", "messages": [{"role": "user", "content": "\xc3\x28"}]}', b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "nope": 1}']


def mixed_load(port, levels, n_valid):
    valid = [[{"role": "user", "content": f"Mixed load {i}: " + "tell me more " * (i % 9)}] for i in range(n_valid)]
    expected = [stream_chat(port, m, 12)[0] for m in valid]  # each alone
    lost = wrong = malformed_ok = abandoned = 0
    for c in levels:
        jobs = [("valid", i) for i in range(n_valid)] + [("malformed", i % len(MALFORMED)) for i in range(n_valid // 4)] + \
               [("abandon", i) for i in range(n_valid // 8)]
        jobs = jobs[::2] + jobs[1::2]  # interleave kinds
        def run(job):
            kind, i = job
            if kind == "valid":
                return kind, i, stream_chat(port, valid[i], 12)[0]
            if kind == "malformed":
                status, r = post(port, "/v1/chat/completions", MALFORMED[i])
                return kind, i, status == 400 and "error" in json.loads(r.read())
            return kind, i, abandon(port, valid[i % n_valid])
        with concurrent.futures.ThreadPoolExecutor(max_workers=c) as pool:
            for kind, i, result in pool.map(run, jobs):
                if kind == "valid":
                    if result is None:
                        lost += 1
                    elif result != expected[i]:
                        wrong += 1
                elif kind == "malformed":
                    malformed_ok += bool(result)
                else:
                    abandoned += 1
    total_valid = n_valid * len(levels)
    print(f"\nmixed load at concurrency {levels}: {total_valid} valid requests ({lost} lost, {wrong} answered differently "
          f"from alone), {malformed_ok} malformed requests answered 400, {abandoned} abandoned mid-stream")
    return lost == 0 and wrong == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="build/deepinfer")
    ap.add_argument("--model", default="build/models/deepinfer-v4-tiny")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--levels", default="1,4,16,32")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--mixed", type=int, default=64, help="valid requests per concurrency level in the mixed load")
    ap.add_argument("--serve-args", default="", help="extra `deepinfer serve` flags, e.g. '--cache-budget-mb 8'")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    proc, port = start(args.binary, args.model, args.threads, args.serve_args.split())
    try:
        concurrency_table(port, levels, args.requests, args.max_tokens)
        multi_turn(port, 4, 4)
        ok = mixed_load(port, levels, args.mixed)
        time.sleep(1.0)  # abandoned streams are noticed at their next write
        with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {KEY}"})) as r:
            metrics = {l.split()[0]: l.split()[1] for l in r.read().decode().splitlines() if l and not l.startswith("#")}
        print(f"\nengine: {metrics['deepinfer_requests_finished_total']} requests finished, "
              f"{metrics['deepinfer_requests_cancelled_total']} cancelled, {metrics['deepinfer_preemptions_total']} preemptions, "
              f"{metrics['deepinfer_engine_steps_total']} steps, prefix-cache hit rate {float(metrics['deepinfer_prefix_cache_hit_rate']):.3f}")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
