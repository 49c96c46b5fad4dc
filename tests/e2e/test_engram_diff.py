"""Differential tests of the Engram derivations (spec §7.6 steps 1-5), driven through tools/engram_tool:

- the hash multipliers' PCG64 draws against real numpy (default_rng(seed).integers(low, high, int64)) for many
  seeds and bounds, covering every branch of numpy's bounded generator;
- the normalizer against HF `tokenizers` normalizers (the library the reference uses) on every code point
  alone and on random mixes of the code points where ICU and HF's Unicode tables differ;
- the whole token map of the real DeepSeek-V4 tokenizer (build/tokenizers, scripts/fetch_tokenizers.sh)
  against a Python oracle written from the reference's build_compressed_token_map semantics: every entry.
"""

import os
import random
import subprocess
from pathlib import Path

import pytest

np = pytest.importorskip("numpy", reason="numpy is not installed (pip install -r scripts/requirements-test.txt)")
tokenizers = pytest.importorskip("tokenizers", reason="HF tokenizers is not installed "
                                                      "(pip install -r scripts/requirements-test.txt)")

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DEEPINFER_BUILD_DIR", ROOT / "build"))
SENTINEL = "\ue000"


@pytest.fixture(scope="module")
def tool():
    path = BUILD / "engram_tool"
    if not path.exists():
        pytest.fail(f"{path} is not built (ninja -C {BUILD} engram_tool)")
    return path


def run(tool, *args, stdin=None):
    res = subprocess.run([str(tool), *map(str, args)], input=stdin, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stdout


def reference_normalizer():
    from tokenizers import Regex, normalizers
    return normalizers.Sequence([
        normalizers.NFKC(), normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[ \t\r\n]+"), " "), normalizers.Replace(Regex(r"^ $"), SENTINEL),
        normalizers.Strip(), normalizers.Replace(SENTINEL, " "),
    ])


def test_integers_match_numpy(tool):
    rnd = random.Random(20261202)
    cases = [(0, 0, 2**62), (1, 0, 1), (2, 5, 6), (3, 0, 2**32), (4, 0, 2**32 + 1), (5, 0, 2**32 - 1),
             (6, -2**63, 2**63 - 1), (7, -1000, 1000), (2**32, 0, 10), (2**64 - 1, 0, 2**63 - 1)]
    for _ in range(120):
        seed = rnd.choice([rnd.randrange(2**16), rnd.randrange(2**32), rnd.randrange(2**64)])
        bits = rnd.randrange(1, 64)
        low = rnd.randrange(-2**40, 2**40)
        high = min(low + rnd.randrange(1, 2**bits), 2**63 - 1)
        if high > low:
            cases.append((seed, low, high))
    for seed, low, high in cases:
        want = np.random.default_rng(seed).integers(low, high, size=7, dtype=np.int64).tolist()
        got = [int(v) for v in run(tool, "integers", seed, low, high, 7).split()]
        assert got == want, f"default_rng({seed}).integers({low}, {high})"


def test_multipliers_match_numpy(tool):
    for layer in [0, 1, 4, 14, 15, 40, 1000]:
        for vocab in [1, 308, 99092, 129280, 2**31 - 1, 2**40]:
            bound = max(1, (2**63 - 1) // vocab // 2)
            want = (np.random.default_rng(10007 * layer).integers(0, bound, size=4, dtype=np.int64) * 2 + 1).tolist()
            got = [int(v) for v in run(tool, "multipliers", layer, vocab, 4).split()]
            assert got == want, f"layer {layer}, compressed vocab {vocab}"


def normalize_all(tool, texts):
    out = run(tool, "normalize", stdin="".join(t.encode().hex() + "\n" for t in texts)).split("\n")
    return [bytes.fromhex(h).decode() for h in out[:len(texts)]]


def compare(tool, texts):
    ref = reference_normalizer()
    ours = normalize_all(tool, texts)
    bad = [(t, ref.normalize_str(t), o) for t, o in zip(texts, ours) if ref.normalize_str(t) != o]
    assert not bad, f"{len(bad)} of {len(texts)} differ, e.g. " + "; ".join(
        f"{[hex(ord(c)) for c in t]}: HF {[hex(ord(c)) for c in h]} ours {[hex(ord(c)) for c in o]}" for t, h, o in bad[:8])


def test_normalizer_every_code_point(tool):
    compare(tool, [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000])


def test_normalizer_mixed_strings(tool):
    # Pools: the code points where ICU and HF disagree (engram_unicode_delta.h), ordinary marks, spaces,
    # compatibility characters, case pairs, Hangul, and the sentinel itself.
    delta = [0x07FD, 0x0898, 0x0CF3, 0x11930, 0x1CF2, 0x1CF3, 0x10781, 0x1FBF0, 0x32FF, 0x1F16C, 0xA7CB, 0x1C89,
             0x10D50, 0x11935, 0x11938, 0xA7F2]
    pool = (list("aAzZ é") + [chr(c) for c in delta] +
            ["\u0301", "\u0308", "\u0323", "\u0345", "\u20dd", "\u0e48", " ", "\t", "\n", "\r", "\xa0", "\u3000",
             "\u2028", "\ufb01", "\u2460", "\u0130", "\u03a3", "\u1e9e", "\uac00", "\u1100", "\u1161", "\u11a8",
             "\u2126", "\u212b", SENTINEL, "\u0345", "\u0f73", "\u0f77", "\U0001d400"])
    rnd = random.Random(7)
    texts = ["".join(rnd.choice(pool) for _ in range(rnd.randrange(1, 9))) for _ in range(20000)]
    compare(tool, texts)


def oracle_token_map(tokenizer):
    """The reference's build_compressed_token_map, over the raw Rust tokenizer."""
    ref = reference_normalizer()
    keys, out = {}, []
    for token_id in range(tokenizer.get_vocab_size(with_added_tokens=True)):
        text = tokenizer.decode([token_id], skip_special_tokens=False)
        if "\ufffd" in text:
            key = tokenizer.id_to_token(token_id)
        else:
            key = ref.normalize_str(text) or text
        out.append(keys.setdefault(key, len(keys)))
    return out, len(keys)


def test_token_map_real_v4_tokenizer(tool):
    root = Path(os.environ.get("DEEPINFER_TOKENIZER_DIR", BUILD / "tokenizers"))
    path = root / "v4" / "tokenizer.json"
    if not path.exists():
        pytest.skip(f"{path} is absent (bash scripts/fetch_tokenizers.sh {root})")
    want, n_want = oracle_token_map(tokenizers.Tokenizer.from_file(str(path)))
    lines = run(tool, "token-map", path).split("\n")
    n_got, got = int(lines[0]), [int(v) for v in lines[1].split(",")]
    assert len(got) == len(want) == 129280
    mismatches = [i for i in range(len(want)) if got[i] != want[i]]
    assert not mismatches, f"{len(mismatches)} ids differ, first {mismatches[:10]}"
    assert n_got == n_want == 99092  # DeepSeek-V4.1-Flash's engram_compressed_vocab_size


def read_safetensors(path):
    import json
    import struct
    data = Path(path).read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    dtypes = {"I32": np.int32, "I64": np.int64}
    return {name: np.frombuffer(data[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]],
                                dtype=dtypes[t["dtype"]]).reshape(t["shape"])
            for name, t in header.items() if name != "__metadata__"}


def test_engram_map_command(tmp_path):
    """`deepinfer engram-map` on a V4.1 config with the real model's Engram sizes and the V4 tokenizer."""
    import json
    binary = Path(os.environ.get("DEEPINFER_BINARY", BUILD / "deepinfer"))
    golden = Path(os.environ.get("DEEPINFER_GOLDEN_DIR", ROOT.parent / "shared" / "golden")) / "v41-flash" / "tiny-a"
    tok = Path(os.environ.get("DEEPINFER_TOKENIZER_DIR", BUILD / "tokenizers")) / "v4" / "tokenizer.json"
    if not (golden / "config.json").exists() or not tok.exists():
        pytest.skip(f"needs {golden / 'config.json'} and {tok}")
    config = json.loads((golden / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "tokenizer.json").symlink_to(tok)
    out = tmp_path / "engram_token_map.safetensors"
    # tiny-a's compressed vocabulary (308) is not the tokenizer's: a clear error naming both numbers.
    res = subprocess.run([str(binary), "engram-map", "--model", str(tmp_path), "--out", str(out)], capture_output=True, text=True)
    assert res.returncode != 0 and not out.exists()
    assert "tokenizer.json: the Engram normalizer gives a compressed vocabulary of 99092 ids" in res.stderr
    assert "engram_compressed_vocab_size is 308" in res.stderr
    text = config.get("text_config", config)
    text["engram_compressed_vocab_size"], text["vocab_size"] = 99092, 129280
    (tmp_path / "config.json").write_text(json.dumps(config))
    res = subprocess.run([str(binary), "engram-map", "--model", str(tmp_path), "--out", str(out)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    tensors = read_safetensors(out)
    assert tensors["engram.token_map"].shape == (129280,) and int(tensors["engram.token_map"].max()) == 99091
    bound = max(1, (2**63 - 1) // 99092 // 2)
    want = np.stack([np.random.default_rng(10007 * layer).integers(0, bound, size=4, dtype=np.int64) * 2 + 1
                     for layer in text["engram_layer_ids"]])
    assert (tensors["engram.multipliers"] == want).all()
    assert tensors["engram.primes"].sum(axis=1).tolist() == text["engram_num_embeddings"]
