#!/usr/bin/env python3
"""Compares a `deepinfer logits` output with a golden case: max |diff| per tensor, top-1 agreement and the
golden README's fast-path statistics. Usage: compare_logits.py CASE.safetensors OUT.safetensors"""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "I32": np.int32, "I64": np.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def stats(ref, got):
    ref = ref.astype(np.float64)
    got = got.astype(np.float64)
    diff = np.abs(ref - got)
    cos = (ref * got).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
    top1 = (ref.argmax(1) == got.argmax(1)).mean()
    return {"max_abs": float(diff.max()), "mean_abs": float(diff.mean()), "top1": float(top1),
            "median_cos": float(np.median(cos)), "min_cos": float(cos.min()), "row0_cos": float(cos[0]),
            "bad_frac": float((cos < 0.99).mean()), "bit_identical_rows": int((diff.max(1) == 0).sum()), "rows": len(ref)}


def main():
    ref = read_safetensors(sys.argv[1])
    got = read_safetensors(sys.argv[2])
    for name in ["logits", "mtp_logits"]:
        if name in ref and name in got:
            print(name, json.dumps(stats(ref[name], got[name])))
    for name in sorted(k for k in ref if k.startswith("hidden.")):
        if name in got:
            print(name, "max_abs", float(np.abs(ref[name].astype(np.float64) - got[name]).max()))


if __name__ == "__main__":
    main()
