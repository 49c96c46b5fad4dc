"""`deepinfer bench serve --model` on the embedded model: a very small run of the real HTTP load test (the server
in-process on a loopback port, streamed chat completions from concurrent client threads, then the multi-turn
workload). Every request must succeed, the table must have a row per concurrency level, the JSON must hold the raw
figures, and the multi-turn prefix-cache hit rate must be above zero. No timing is asserted."""
import json
import re
import subprocess

from serve_fixture import BINARY, ensure_model


def test_bench_serve_small_run(tmp_path):
    model = ensure_model()
    out = tmp_path / "bench.json"
    res = subprocess.run([str(BINARY), "bench", "serve", "--model", str(model), "--threads", "2", "--concurrency", "1,3",
                          "--requests", "3", "--prompt-tokens", "12", "--max-tokens", "4", "--turns", "2",
                          "--conversations", "2", "--system-tokens", "160", "--turn-tokens", "6", "--seed", "5",
                          "--json", str(out)], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = {int(m.group(1)): (int(m.group(2)), int(m.group(3)))
            for m in re.finditer(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+\s+[\d.]+(?:\s+[\d.]+){8}\s*$", res.stdout, re.M)}
    assert rows == {1: (3, 0), 3: (3, 0)}, res.stdout
    assert "prefix-cache hit rate:" in res.stdout and "TTFT p50 / p90: first turns" in res.stdout, res.stdout
    figures = json.loads(out.read_text())
    assert figures["n_failed"] == 0
    for level in figures["levels"]:
        assert level["ok"] == level["requests"] == 3 and level["failed"] == 0
        assert level["output_tokens"] == 3 * 4
        assert len(level["ttft_s"]) == len(level["e2e_s"]) == len(level["tpot_s"]) == 3
        assert all(t <= e for t, e in zip(level["ttft_s"], level["e2e_s"]))
    turns = figures["multi_turn"]
    assert turns["ok"] == turns["planned"] == 4
    assert turns["hit_rate"] > 0, turns
    assert turns["cached_tokens"] <= turns["prompt_tokens"]


def test_bench_serve_needs_model_or_url():
    res = subprocess.run([str(BINARY), "bench", "serve", "--requests", "1"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "--model" in res.stderr and "--url" in res.stderr
    res = subprocess.run([str(BINARY), "bench", "serve", "--url", "https://example.com"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "http://host:port" in res.stderr


def test_bench_serve_reports_an_unreachable_server():
    res = subprocess.run([str(BINARY), "bench", "serve", "--url", "http://127.0.0.1:1"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "/v1/models" in res.stderr
