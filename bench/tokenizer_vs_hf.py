#!/usr/bin/env python3
"""Encode throughput of deepinfer's tokenizer next to HF `tokenizers` (Rust) on the same documents.

usage: bench/tokenizer_vs_hf.py [--tokenizer PATH] [--tool PATH] [--per-class N] [--classes a,b] [--corpus-out FILE]

The documents are tests/e2e/tokenizer_corpus.py's (valid UTF-8 ones only, so both sides see identical
bytes). HF is timed single-threaded twice, as a Python loop over encode() and as encode_batch() with
TOKENIZERS_PARALLELISM=false (in a subprocess), then encode_batch() on all cores; deepinfer is timed
single-threaded by tokenize_tool --time. Both word caches are warm (one untimed pass first). Wall and CPU
seconds are both shown: on a shared machine CPU seconds are the steadier single-thread figure.
--corpus-out writes the documents as hex lines for DEEPINFER_TOKENIZER_CORPUS (bench/tokenizer_bench.cpp).
"""

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))


def time_hf(tokenizer, texts, batch, repeats):
    from tokenizers import Tokenizer
    t0 = time.perf_counter()
    tok = Tokenizer.from_file(tokenizer)
    load_s = time.perf_counter() - t0
    run = (lambda: tok.encode_batch(texts, add_special_tokens=False)) if batch else \
        (lambda: [tok.encode(t, add_special_tokens=False) for t in texts])
    run()
    times = [_timed(run) for _ in range(repeats)]
    return load_s, min(t[0] for t in times), min(t[1] for t in times)


def _timed(fn):
    """(wall seconds, CPU seconds of this process)."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=str(ROOT / "build" / "tokenizers" / "v4" / "tokenizer.json"))
    ap.add_argument("--tool", default=str(ROOT / "build" / "tokenize_tool"))
    ap.add_argument("--per-class", type=int, default=1500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--classes", help="comma-separated corpus classes to keep (default: all)")
    ap.add_argument("--corpus-out")
    ap.add_argument("--hf-only", choices=["loop", "batch"], help=argparse.SUPPRESS)
    args = ap.parse_args()

    import json
    from tokenizer_corpus import Corpus
    config = json.loads(Path(args.tokenizer).read_text(encoding="utf-8"))
    docs = Corpus(added_tokens=[t["content"] for t in config["added_tokens"]]).documents(args.per_class)
    keep = set(args.classes.split(",")) if args.classes else None
    texts = [d for label, d in docs if isinstance(d, str) and (keep is None or label in keep)]
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)

    if args.hf_only:  # child process: one HF measurement, printed as "load_s wall_s cpu_s"
        print(*time_hf(args.tokenizer, texts, args.hf_only == "batch", args.repeats))
        return

    payload = "".join(t.encode("utf-8").hex() + "\n" for t in texts)
    if args.corpus_out:
        Path(args.corpus_out).write_text(payload)

    rows = []
    rows.append(("HF tokenizers, encode() loop, 1 thread",
                 *time_hf(args.tokenizer, texts, batch=False, repeats=args.repeats)))
    child = subprocess.run([sys.executable, __file__, "--tokenizer", args.tokenizer, "--per-class",
                            str(args.per_class), "--repeats", str(args.repeats), "--hf-only", "batch"]
                           + (["--classes", args.classes] if args.classes else []),
                           env=dict(os.environ, TOKENIZERS_PARALLELISM="false"), capture_output=True, text=True,
                           check=True)
    rows.append(("HF tokenizers, encode_batch(), 1 thread", *map(float, child.stdout.split())))
    load_s, wall_s, _ = time_hf(args.tokenizer, texts, batch=True, repeats=args.repeats)
    rows.append((f"HF tokenizers, encode_batch(), {os.cpu_count()} threads", load_s, wall_s, None))

    t0 = time.perf_counter()
    subprocess.run([args.tool, args.tokenizer, "--hex-lines"], input=b"", capture_output=True, check=True)
    load_s = time.perf_counter() - t0
    res = subprocess.run([args.tool, args.tokenizer, "--hex-lines", "--time", str(args.repeats)],
                         input=payload.encode(), capture_output=True, check=True)
    m = re.search(r"in ([0-9.]+) s \(cpu ([0-9.]+) s\)", res.stderr.decode())
    rows.append(("deepinfer Tokenizer (tokenize_tool), 1 thread", load_s, float(m.group(1)) / args.repeats,
                 float(m.group(2)) / args.repeats))

    print(f"corpus: {len(texts)} documents, {n_bytes / 1e6:.2f} MB (tests/e2e/tokenizer_corpus.py, "
          f"{args.per_class} per class, classes {args.classes or 'all'}, valid UTF-8 only); "
          f"tokenizer {args.tokenizer}")
    print(f"{'implementation':50s} {'load s':>7s} {'wall s':>7s} {'MB/s':>7s} {'cpu s':>7s} {'MB/cpu-s':>9s}")
    for name, load_s, wall_s, cpu_s in rows:
        cpu = f"{cpu_s:7.3f} {n_bytes / cpu_s / 1e6:9.2f}" if cpu_s else f"{'-':>7s} {'-':>9s}"
        print(f"{name:50s} {load_s:7.2f} {wall_s:7.3f} {n_bytes / wall_s / 1e6:7.2f} {cpu}")


if __name__ == "__main__":
    main()
