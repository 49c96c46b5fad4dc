"""End-to-end tests of the deepinfer CLI on the golden checkpoints: the README commands work, and bad
input (truncated or corrupt safetensors, a config that disagrees with the tensors, bad token ids)
gives one clear error and a non-zero exit, never a crash."""
import json
import os
import shutil
import sys
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

BINARY = os.environ.get("DEEPINFER_BINARY", "build/deepinfer")
GOLDEN = Path(os.environ.get("DEEPINFER_GOLDEN_DIR", "../shared/golden"))
FLASH = GOLDEN / "v4-flash" / "flash-tiny"
V41 = GOLDEN / "v41-flash" / "tiny-a"

pytestmark = pytest.mark.skipif(not FLASH.exists(), reason=f"golden data not found at {FLASH}")
sys.path.insert(0, str(Path(__file__).resolve().parent))


def run(*args, timeout=300):
    return subprocess.run([BINARY, *map(str, args)], capture_output=True, text=True, errors="replace", timeout=timeout)


def read_safetensors(path):
    data = Path(path).read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    dtypes = {"F32": np.float32, "I32": np.int32}
    out = {}
    for name, info in header.items():
        if name != "__metadata__":
            b, e = info["data_offsets"]
            out[name] = np.frombuffer(data[8 + n + b:8 + n + e], dtype=dtypes[info["dtype"]]).reshape(info["shape"])
    return out


def copy_model(src, tmp_path):
    dst = tmp_path / "model"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("case-*"))
    return dst


def assert_clean_error(result, *fragments):
    assert result.returncode != 0
    assert result.returncode < 128, f"crashed with signal: {result.stderr}"
    assert "error:" in result.stderr
    assert result.stderr.isascii(), "error messages stay printable"
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def test_logits_exact_matches_golden_bit_for_bit(tmp_path):
    out = tmp_path / "out.safetensors"
    r = run("logits", "--model", FLASH, "--case", FLASH / "case-2.safetensors", "--out", out, "--exact", "--mtp", "--chunk", "16")
    assert r.returncode == 0, r.stderr
    got, ref = read_safetensors(out), read_safetensors(FLASH / "case-2.safetensors")
    assert np.array_equal(got["logits"], ref["logits"])
    assert np.array_equal(got["mtp_logits"], ref["mtp_logits"])


@pytest.mark.skipif(not V41.exists(), reason=f"golden data not found at {V41}")
def test_v41_logits_and_dspark_match_golden(tmp_path):
    out = tmp_path / "out.safetensors"
    r = run("logits", "--model", V41, "--case", V41 / "case-3.safetensors", "--out", out, "--exact", "--dspark")
    assert r.returncode == 0, r.stderr
    got, ref = read_safetensors(out), read_safetensors(V41 / "case-3.safetensors")
    for name in ["logits", "dspark_anchor", "dspark_tokens", "dspark_logits", "dspark_confidence"]:
        assert np.array_equal(got[name], ref[name]), name


def test_v41_logits_follow_the_case_index_k_label(tmp_path):
    # case-4 is labelled index_k=owner: without --index-owner-keys the command still reproduces it, and says why.
    out = tmp_path / "case4.safetensors"
    r = run("logits", "--model", V41, "--case", V41 / "case-4.safetensors", "--out", out, "--exact")
    assert r.returncode == 0, r.stderr
    assert "index_k=owner" in r.stderr
    assert np.array_equal(read_safetensors(out)["logits"], read_safetensors(V41 / "case-4.safetensors")["logits"])


def test_generate_greedy_is_deterministic_and_reports_speed():
    a = run("generate", "--model", FLASH, "--prompt-ids", "0,5,9", "--max-tokens", "8", "--ignore-eos")
    b = run("generate", "--model", FLASH, "--prompt-ids", "0,5,9", "--max-tokens", "8", "--ignore-eos")
    assert a.returncode == 0, a.stderr
    assert a.stdout == b.stdout
    assert len(a.stdout.strip().split(",")) == 8
    assert "tok/s" in a.stderr


def test_truncated_shard_is_a_clear_error(tmp_path):
    model = copy_model(FLASH, tmp_path)
    shard = model / "model-00002-of-00003.safetensors"
    data = shard.read_bytes()
    for cut in [4, 100, len(data) // 2, len(data) - 1]:
        shard.write_bytes(data[:cut])
        assert_clean_error(run("generate", "--model", model, "--prompt-ids", "0"), "model-00002-of-00003.safetensors")


def test_corrupt_header_is_a_clear_error(tmp_path):
    model = copy_model(FLASH, tmp_path)
    shard = model / "model-00001-of-00003.safetensors"
    data = bytearray(shard.read_bytes())
    data[8:12] = b"\xff\xfe{["  # invalid UTF-8 / JSON at the start of the header
    shard.write_bytes(bytes(data))
    assert_clean_error(run("generate", "--model", model, "--prompt-ids", "0"), "model-00001-of-00003.safetensors")


def test_header_that_lies_about_offsets_is_a_clear_error(tmp_path):
    model = copy_model(FLASH, tmp_path)
    shard = model / "model-00003-of-00003.safetensors"
    data = shard.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    name = next(k for k in header if k != "__metadata__")
    header[name]["data_offsets"][1] += 10 ** 9
    text = json.dumps(header).encode()
    shard.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + n:])
    assert_clean_error(run("generate", "--model", model, "--prompt-ids", "0"), name)


def test_config_that_disagrees_with_the_tensors_is_a_clear_error(tmp_path):
    model = copy_model(FLASH, tmp_path)
    config = json.loads((model / "config.json").read_text())
    config["n_routed_experts"] = 16
    (model / "config.json").write_text(json.dumps(config))
    assert_clean_error(run("generate", "--model", model, "--prompt-ids", "0"), "layers.0.ffn.gate.weight", "config.json")


def test_missing_config_field_is_a_clear_error(tmp_path):
    model = copy_model(FLASH, tmp_path)
    config = json.loads((model / "config.json").read_text())
    del config["hidden_size"]
    (model / "config.json").write_text(json.dumps(config))
    assert_clean_error(run("generate", "--model", model, "--prompt-ids", "0"), "hidden_size")


def test_bad_prompt_ids_are_clear_errors():
    assert_clean_error(run("generate", "--model", FLASH, "--prompt-ids", "0,1x"), "1x")
    assert_clean_error(run("generate", "--model", FLASH, "--prompt-ids", "0,99999"), "99999")


def test_make_model_then_generate(tmp_path):
    out = tmp_path / "made"
    r = run("make-model", "--config", FLASH / "config.json", "--seed", "3", "--out", out)
    assert r.returncode == 0, r.stderr
    g = run("generate", "--model", out, "--prompt-ids", "0,1,2", "--max-tokens", "4", "--ignore-eos")
    assert g.returncode == 0, g.stderr
    assert len(g.stdout.strip().split(",")) == 4


def test_text_commands_on_the_embedded_model():
    """tokenize, generate --prompt (chat and --raw) and chat --prompt on the embedded default model with the
    real V4 tokenizer (made by the server fixture's ensure_model; skips only if the tokenizer can't be fetched)."""
    from serve_fixture import ensure_model
    model = ensure_model()
    spec = "<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>"
    t = run("tokenize", "--model", model, "--text", spec, "--ids")
    assert t.returncode == 0, t.stderr
    assert t.stdout.strip() == "128803,30594,128804,128821,36101,128822,7624,1"
    g = run("generate", "--model", model, "--prompt", "Hello", "--max-tokens", "6", "--ignore-eos", "--no-thinking")
    assert g.returncode == 0, g.stderr
    assert "6 generated tokens" in g.stderr
    raw = run("generate", "--model", model, "--prompt", "Hello", "--raw", "--max-tokens", "4", "--ignore-eos")
    assert raw.returncode == 0, raw.stderr
    c = run("chat", "--model", model, "--prompt", "Hi", "--max-tokens", "5")
    assert c.returncode == 0, c.stderr
    assert "prompt +" in c.stderr


@pytest.mark.skipif(not V41.exists(), reason=f"golden data not found at {V41}")
def test_swa_replay_flag(tmp_path):
    """--swa-replay (SWA bounded replay, spec 7.10): a prompt no longer than the tail (case 2: 37 tokens) stays
    bit-identical to the golden; generate and bench accept it on V4.1, serve lists it, and V4 refuses it."""
    out = tmp_path / "out.safetensors"
    r = run("logits", "--model", V41, "--case", V41 / "case-2.safetensors", "--out", out, "--exact", "--swa-replay")
    assert r.returncode == 0, r.stderr
    assert np.array_equal(read_safetensors(out)["logits"], read_safetensors(V41 / "case-2.safetensors")["logits"])
    ids = ",".join(str((7 * i) % 500) for i in range(200))  # longer than the 133-token tail: replayed
    g = run("generate", "--model", V41, "--prompt-ids", ids, "--max-tokens", "4", "--ignore-eos", "--swa-replay",
            "--speculative", "--threads", "2")
    assert g.returncode == 0, g.stderr
    assert len(g.stdout.strip().split(",")) == 4
    b = run("bench", "--model", V41, "--prefill", "200", "--batch", "1", "--decode-steps", "1", "--skip-ceiling",
            "--speculative-tokens", "0", "--threads", "2", "--swa-replay")
    assert b.returncode == 0, b.stderr
    assert "SWA bounded replay on: a prefill runs the decoder layers only on its last 133 tokens" in b.stdout
    assert "--swa-replay" in run("serve", "--help").stdout
    assert_clean_error(run("generate", "--model", FLASH, "--prompt-ids", "0,5", "--swa-replay"), "V4.1")


def test_bench_percent_of_bandwidth_uses_the_largest_read_figure():
    """bench brackets each decode phase with two read loops (a fresh buffer, the mapped head weights) and the
    % BW column divides by the largest read figure of the run, never a smaller one; --paired-reads reports
    each step against a read loop run right after it."""
    import re
    b = run("bench", "--model", FLASH, "--prefill", "16", "--batch", "1", "--decode-steps", "3", "--threads", "2",
            "--paired-reads")
    assert b.returncode == 0, b.stderr
    line = next(l for l in b.stdout.splitlines() if l.startswith("read bandwidth around the decode phases"))
    pairs = re.findall(r"(?:before decode batch 1|after) ([0-9.]+) / ([0-9.]+)", line)
    figures = [float(v) for pair in pairs for v in pair]
    assert len(figures) == 4 and all(f > 0 for f in figures), line
    used = float(re.search(r"largest read figure, ([0-9.]+) GB/s", line).group(1))
    ceilings = re.search(r"read bandwidth ([0-9.]+) / ([0-9.]+) GB/s", b.stdout)
    assert used >= max(figures + [float(ceilings.group(1)), float(ceilings.group(2))]) - 0.05, b.stdout
    row = next(l for l in b.stdout.splitlines() if l.startswith("decode batch 1 "))
    gbs, pct = float(row.split()[6]), float(row.split()[7].rstrip("%"))
    assert abs(pct - 100.0 * gbs / used) < 0.2, (row, used)
    paired = re.search(r"decode batch 1, each step against a read loop over the head weights right after it "
                       r"\(3 pairs\): median ([0-9.]+)%, quartiles ([0-9.]+)% / ([0-9.]+)%", b.stdout)
    assert paired, b.stdout
    median, q1, q3 = (float(paired.group(i)) for i in (1, 2, 3))
    assert 0 < q1 <= median <= q3, paired.group(0)


def test_bench_paired_peak_reports_each_prefill_against_the_peak_around_it():
    """--paired-peak measures the peak arithmetic rate right before and after each timed prefill and reports the
    prefill's FLOP rate as a % of their mean: one line per prefill, the % consistent with the figures it prints."""
    import re
    b = run("bench", "--model", FLASH, "--prefill", "16,8", "--batch", "1", "--decode-steps", "1", "--threads", "2",
            "--skip-ceiling", "--paired-peak")
    assert b.returncode == 0, b.stderr
    lines = re.findall(r"prefill ([0-9]+): ([0-9.]+) GFLOP/s against the peak (bf16 dot|fp32 FMA) rate right before / "
                       r"after it, ([0-9.]+) / ([0-9.]+) GFLOP/s: ([0-9.]+)% of their mean", b.stdout)
    assert [l[0] for l in lines] == ["16", "8"], b.stdout
    for _, step, _, before, after, pct in lines:
        step, before, after, pct = float(step), float(before), float(after), float(pct)
        assert step > 0 and before > 0 and after > 0, lines
        assert abs(pct - 100.0 * step / ((before + after) / 2)) < 0.1 + 0.001 * pct, lines


def test_bench_op_times_split_the_linear_time_by_weight_type():
    """--op-times prints, per phase, the step's time by backend op kind and then the linear time again by the
    weights' storage type with the rate their bytes stream at; the types' times add up to the linear column."""
    import re
    b = run("bench", "--model", FLASH, "--prefill", "16", "--batch", "1", "--decode-steps", "2", "--threads", "2",
            "--skip-ceiling", "--op-times")
    assert b.returncode == 0, b.stderr
    kinds = b.stdout.split("ms per step by backend op kind")[1].split("\n\n")[0].splitlines()
    by_type = b.stdout.split("linear ms per step by weight type")[1].split("\n\n")[0].splitlines()
    assert by_type[1].split()[1:] == ["bf16", "fp8", "fp4"], by_type  # flash-tiny stores all three
    for phase in ("prefill 16", "decode batch 1"):
        linear_ms = float(next(l for l in kinds if l.startswith(phase))[len(phase):].split()[0])
        cells = re.findall(r"([0-9.]+) \( *([0-9.]+) GB/s\)", next(l for l in by_type if l.startswith(phase)))
        assert len(cells) == 3, by_type
        assert all(float(ms) > 0 and float(gbs) > 0 for ms, gbs in cells), cells
        assert abs(sum(float(ms) for ms, _ in cells) - linear_ms) < 0.01 + 1e-3 * linear_ms, (cells, linear_ms)
        # The last column counts calls into the backend, a batch once: fewer than the device ops they carry
        # (the model batches independent linears), more than none.
        row = next(l for l in kinds if l.startswith(phase))[len(phase):]
        ops = [float(n) for n in re.findall(r"\( *([0-9.]+)\)", row)]
        backend_calls = float(row.split()[-1])
        # (linear, hc_mix, sparse_attention, index_scores, moe, then row_work, which runs on the host; a CPU
        # backend runs no MoE whole.)
        assert len(ops) == 6 and ops[4] == 0 and 0 < backend_calls < sum(ops[:5]), (row, ops, backend_calls)


def test_cuda_backend_choice_is_a_clear_error_without_a_usable_gpu():
    """--backend cuda on a build without the CUDA backend, or on a machine without a usable device, is an
    error naming the reason; an unknown backend name is refused by the option parser."""
    for command in (["bench", "--model", FLASH, "--prefill", "4", "--batch", "1", "--decode-steps", "1", "--skip-ceiling"],
                    ["logits", "--model", FLASH, "--case", FLASH / "case-1.safetensors", "--out", "/dev/null"],
                    ["generate", "--model", FLASH, "--prompt-ids", "0,5,9", "--max-tokens", "2"],
                    ["serve", "--model", FLASH, "--port", "0"],
                    ["chat", "--model", FLASH, "--prompt", "hi"]):
        r = run(*command, "--backend", "cuda")
        if r.returncode == 0:
            pytest.skip("this build has the CUDA backend and a usable GPU")
        assert_clean_error(r, "CUDA")
        bad = run(*command, "--backend", "tpu")
        assert bad.returncode != 0 and "tpu" in bad.stderr, bad.stderr
