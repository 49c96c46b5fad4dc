"""Deterministic text corpus for tokenizer differential tests and throughput comparisons.

Every generated code point is assigned in Unicode 14.0.0 (the version of Python 3.11's unicodedata and of
PCRE2 10.42's tables; HF tokenizers' Oniguruma knows a later version, a superset). Documents are str, except
the "invalid_utf8" class, whose documents are bytes with ill-formed UTF-8 in them.
"""

import random
import unicodedata

UNICODE_VERSION = "14.0.0"

WHITESPACE = [" ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x85", "\xa0", "\u1680", "\u2000", "\u2001",
              "\u2002", "\u2003", "\u2004", "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200a",
              "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"]
# Look like space but are not Unicode White_Space (engines disagree on some of these).
NOT_WHITESPACE = ["\u180e", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\x1c", "\x1d", "\x1e", "\x1f",
                  "\x00", "\x7f", "\u00ad"]

WORDS = ("the of and to in is was that for it with as his on be at by had are but from or have an they which "
         "one you were all her she there would their we him been has when who will no more if out so said what "
         "up its about into than them can only other new some could time these two may then do first any my now "
         "such like our over man me even most made after also did many before must through back years where much "
         "your way well down should because each just those people Mr how too little state good very make world "
         "still own see men work long get here between both life being under never day same another know while "
         "last might us great old year off come since against go came right used take three tokenizer engine "
         "DeepSeek model inference GPU attention kernel cache Hello World HTTP JSON API URL naïve café résumé "
         "coöperate Zürich façade piñata smörgåsbord Ångström").split()
CONTRACTIONS = ["don't", "I'm", "it's", "we've", "they'll", "she'd", "you're", "can't", "won't", "O'Neil",
                "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "Don'T", "IT'S"]
PUNCT = list(".,;:!?-()[]{}\"'`~@#$%^&*_+=|\\/<>") + ["...", "--", "—", "–", "“", "”", "‘", "’", "«", "»", "…",
                                                     "、", "。", "「", "」", "，", "！", "？", "：", "；", "（", "）",
                                                     "·", "•", "§", "¶", "†", "©", "®", "™", "°", "±", "€", "£",
                                                     "¥", "₹", "∑", "√", "∞", "≠", "≤", "→", "⇒", "♥", "★"]

# (first, last) ranges sampled per script; filtered to assigned code points at pool construction.
SCRIPTS = {
    "latin_ext": [(0x00C0, 0x024F), (0x1E00, 0x1EFF)],
    "greek": [(0x0370, 0x03FF), (0x1F00, 0x1FFF)],
    "cyrillic": [(0x0400, 0x052F)],
    "armenian": [(0x0531, 0x058A)],
    "hebrew": [(0x0591, 0x05F4)],
    "arabic": [(0x0600, 0x06FF), (0x0750, 0x077F), (0x08A0, 0x08FF), (0xFB50, 0xFDFF), (0xFE70, 0xFEFC)],
    "devanagari": [(0x0900, 0x097F), (0xA8E0, 0xA8FF)],
    "bengali": [(0x0980, 0x09FE)],
    "tamil": [(0x0B82, 0x0BFA)],
    "thai": [(0x0E01, 0x0E5B)],
    "tibetan": [(0x0F00, 0x0FDA)],
    "georgian": [(0x10A0, 0x10FF)],
    "ethiopic": [(0x1200, 0x137C)],
    "khmer": [(0x1780, 0x17F9)],
    "mongolian": [(0x1800, 0x18AA)],
    "hangul_syllables": [(0xAC00, 0xD7A3)],
    "hangul_jamo": [(0x1100, 0x11FF), (0x3131, 0x318E), (0xA960, 0xA97C), (0xD7B0, 0xD7FB)],
    "hiragana": [(0x3041, 0x309F)],
    "katakana": [(0x30A0, 0x30FF), (0x31F0, 0x31FF), (0xFF65, 0xFF9F)],
    "han_core": [(0x4E00, 0x9FA5)],
    "han_outside_range": [(0x9FA6, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0xF900, 0xFAFF), (0x2F00, 0x2FD5)],
    "cjk_symbols": [(0x3000, 0x303F), (0xFF01, 0xFF60), (0x3200, 0x32FF), (0x3300, 0x33FF)],
    "math_alnum": [(0x1D400, 0x1D7FF)],
    "cuneiform_etc": [(0x12000, 0x12399), (0x13000, 0x1342E), (0x1F000, 0x1F0F5)],
}
COMBINING = [(0x0300, 0x036F), (0x0483, 0x0489), (0x1AB0, 0x1ACE), (0x1DC0, 0x1DFF), (0x20D0, 0x20F0),
             (0xFE20, 0xFE2F), (0x064B, 0x065F), (0x093A, 0x094F), (0x0E31, 0x0E3A), (0x302A, 0x302F),
             (0x3099, 0x309A)]
DIGIT_SETS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "০১২৩৪৫৬৭৮৯", "๐๑๒๓๔๕๖๗๘๙",
              "０１２３４５６７８９", "𝟎𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖𝟗", "၀၁၂၃၄၅၆၇၈၉"]
OTHER_NUMBERS = list("²³¹¼½¾⁰⁴⁵⁶⁷⁸⁹₀₁₂①②③④⑤⑩⑳ⅠⅡⅢⅣⅫⅰⅱ〇〡〢〣㈠㈡十百千万億")
EMOJI_RANGES = [(0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F680, 0x1F6FF), (0x1F900, 0x1F9FF),
                (0x1FA70, 0x1FAFF), (0x2600, 0x27BF)]
SKIN_TONES = [chr(c) for c in range(0x1F3FB, 0x1F400)]
ZWJ = "\u200d"
VS16 = "\ufe0f"
ZWJ_SEQUENCES = ["👨‍👩‍👧‍👦", "👩‍❤️‍💋‍👨", "🏳️‍🌈", "🏴‍☠️", "👨🏽‍💻", "🧑‍🤝‍🧑", "👁️‍🗨️", "🐻‍❄️", "❤️‍🔥", "🧔🏻‍♂️",
                 "🏴\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F", "1️⃣", "#️⃣", "*️⃣", "🇨🇳", "🇺🇸",
                 "🇯🇵", "🇪🇺", "🇦", "🇦🇦🇦"]

CODE_SNIPPETS = [
    "def {n}(x, y=None):\n    \"\"\"Return {n} of x.\"\"\"\n    if y is None:\n        return x ** 2\n    return x + y  # {w}\n",
    "for (int i = 0; i < {d}; ++i) {{\n\tsum += a[i] * b[i];\n}}\n",
    "const {n} = async (req, res) => {{ res.json({{ ok: true, id: {d} }}); }};\n",
    "fn {n}<'a>(s: &'a str) -> Option<&'a str> {{ s.split_whitespace().next() }}\n",
    "{{\"{n}\": [{d}, {d}.5e-3, true, null, \"\\u4f60\\u597d\\n\"], \"k\": {{\"v\": \"{w}\"}}}}\n",
    "<div class=\"{n}\" id='x{d}'><p>{w} &amp; {w}</p><br/></div>\n",
    "SELECT {n}, COUNT(*) FROM t_{w} WHERE id >= {d} GROUP BY 1 ORDER BY 2 DESC;\n",
    "if [ -f \"$HOME/.{n}\" ]; then echo \"${{PATH}}:/usr/local/bin\" | grep -E '^[a-z]+$' >/dev/null 2>&1; fi\n",
    "#include <vector>\ntemplate <typename T> T {n}(const std::vector<T>& v) {{ return v.at({d}); }} // 注释\n",
    "    x_{d} = np.array([[1, 2], [3, 4]]) @ W.T  # shape [{d}, {d}]\n",
    "https://example.com/{w}/{n}?q={d}&lang=zh-CN#frag /usr/lib/x86_64-linux-gnu/lib{n}.so.{d}\n",
    "re.compile(r'(?P<{n}>\\d{{3}})-\\s*[A-Za-z_]\\w+|\\p{{L}}+$', re.M)\n",
    "```python\nprint(f\"{{{n}!r:>{d}}}\")\n```\n",
    "a+=b;c-=d*e/f%g;h<<=2;i>>=3;j&&k||!l;m==n!=o<=p>=q->r::s...t?.u??v\n",
]


class Corpus:
    """Generates the corpus; `documents()` returns a list of (class_name, str | bytes)."""

    def __init__(self, seed=20260401, added_tokens=()):
        if unicodedata.unidata_version != UNICODE_VERSION:
            raise RuntimeError(f"corpus is defined over Unicode {UNICODE_VERSION}; this Python has "
                               f"{unicodedata.unidata_version}")
        self.rng = random.Random(seed)
        self.added_tokens = list(added_tokens)
        self.assigned = [cp for cp in range(0x110000) if unicodedata.category(chr(cp)) not in ("Cn", "Cs", "Co")]
        self.script_pools = {name: self._pool(ranges) for name, ranges in SCRIPTS.items()}
        self.combining = self._pool(COMBINING)
        self.emoji = self._pool(EMOJI_RANGES)

    @staticmethod
    def _pool(ranges):
        return [chr(cp) for first, last in ranges for cp in range(first, last + 1)
                if unicodedata.category(chr(cp)) not in ("Cn", "Cs", "Co")]

    # --- pieces -----------------------------------------------------------------------------------------
    def ws(self, max_len=4):
        r = self.rng
        return "".join(r.choice(WHITESPACE if r.random() < 0.9 else NOT_WHITESPACE)
                       for _ in range(r.randint(1, max_len)))

    def word(self):
        r = self.rng
        w = r.choice(WORDS)
        x = r.random()
        if x < 0.1:
            w = w.capitalize()
        elif x < 0.13:
            w = w.upper()
        elif x < 0.2:
            w = r.choice(CONTRACTIONS)
        return w

    def number(self):
        r = self.rng
        x = r.random()
        if x < 0.5:
            return "".join(r.choice("0123456789") for _ in range(r.randint(1, 24)))
        if x < 0.7:
            return r.choice(["3.14159", "1,000,000", "2026-04-01", "+86 138-0013-8000", "0x7fff_ffff", "1e-9",
                             "v4.1.0", "12:30:59", "99%", "$1,234.56", "-0.5", "10^9"])
        if x < 0.9:
            ds = r.choice(DIGIT_SETS)
            return "".join(r.choice(ds) for _ in range(r.randint(1, 12)))
        return "".join(r.choice(OTHER_NUMBERS) for _ in range(r.randint(1, 5)))

    def script_word(self, name, lo=1, hi=8):
        pool = self.script_pools[name]
        return "".join(self.rng.choice(pool) for _ in range(self.rng.randint(lo, hi)))

    def marks(self, n=None):
        return "".join(self.rng.choice(self.combining) for _ in range(n or self.rng.randint(1, 4)))

    def emoji_unit(self):
        r = self.rng
        x = r.random()
        if x < 0.4:
            return r.choice(self.emoji)
        if x < 0.55:
            return r.choice(self.emoji) + r.choice(SKIN_TONES)
        if x < 0.65:
            return r.choice(self.emoji) + VS16
        if x < 0.8:
            return ZWJ.join(r.choice(self.emoji) for _ in range(r.randint(2, 4)))
        return r.choice(ZWJ_SEQUENCES)

    def special(self):
        r = self.rng
        t = r.choice(self.added_tokens) if self.added_tokens else "<｜User｜>"
        x = r.random()
        if x < 0.7:
            return t
        if x < 0.8:
            return t[: r.randint(1, max(1, len(t) - 1))]  # a prefix: must not match
        if x < 0.9:
            return t[r.randint(1, max(1, len(t) - 1)):]   # a suffix
        return t + t

    # --- document classes -------------------------------------------------------------------------------
    def doc_english(self):
        r = self.rng
        parts = []
        for _ in range(r.randint(5, 60)):
            x = r.random()
            if x < 0.75:
                parts.append(self.word())
            elif x < 0.85:
                parts.append(self.number())
            else:
                parts.append(r.choice(PUNCT))
            parts.append(" " if r.random() < 0.85 else r.choice(["", "\n", "  ", "\n\n", ", ", ". "]))
        return "".join(parts)

    def doc_cjk(self):
        r = self.rng
        parts = []
        for _ in range(r.randint(3, 40)):
            x = r.random()
            if x < 0.45:
                parts.append(self.script_word("han_core", 1, 12))
            elif x < 0.55:
                parts.append(self.script_word("han_outside_range", 1, 4))
            elif x < 0.65:
                parts.append(self.script_word("hiragana", 1, 6))
            elif x < 0.72:
                parts.append(self.script_word("katakana", 1, 6))
            elif x < 0.8:
                parts.append(self.script_word("cjk_symbols", 1, 2))
            elif x < 0.87:
                parts.append(self.number())
            elif x < 0.93:
                parts.append(self.word())
            else:
                parts.append(r.choice(["，", "。", "、", "！", "？", " ", "\u3000", "\n", "（", "）", "「", "」"]))
        return "".join(parts)

    def doc_hangul(self):
        r = self.rng
        return " ".join(self.script_word("hangul_syllables", 1, 5) if r.random() < 0.85 else
                        self.script_word("hangul_jamo", 1, 3) for _ in range(r.randint(2, 30))) + r.choice(["", ".", "?\n"])

    def doc_scripts(self):
        r = self.rng
        names = [n for n in SCRIPTS if not n.startswith(("han", "hangul"))]
        name = r.choice(names)
        parts = []
        for _ in range(r.randint(2, 30)):
            w = self.script_word(name, 1, 9)
            if r.random() < 0.2:
                w += self.marks()
            parts.append(w)
            parts.append(r.choice([" ", " ", " ", ", ", "، ", "। ", "\n", "\u200c", "\u200d", ""]))
        return "".join(parts)

    def doc_emoji(self):
        r = self.rng
        parts = []
        for _ in range(r.randint(1, 25)):
            x = r.random()
            if x < 0.5:
                parts.append(self.emoji_unit())
            elif x < 0.75:
                parts.append(self.word())
            elif x < 0.85:
                parts.append(self.script_word("han_core", 1, 3))
            else:
                parts.append(r.choice(PUNCT))
            parts.append(r.choice(["", "", " ", "\n"]))
        return "".join(parts)

    def doc_combining(self):
        r = self.rng
        parts = []
        for _ in range(r.randint(2, 25)):
            x = r.random()
            base = (self.word() if x < 0.4 else self.number() if x < 0.55 else r.choice(PUNCT) if x < 0.7
                    else self.script_word(r.choice(["greek", "cyrillic", "devanagari", "arabic", "thai"]), 1, 3)
                    if x < 0.9 else "")
            parts.append(base + self.marks())
            parts.append(r.choice([" ", "", "\n", "  ", self.marks()]))
        return "".join(parts)

    def doc_digits(self):
        r = self.rng
        parts = []
        for _ in range(r.randint(2, 30)):
            parts.append(self.number())
            parts.append(r.choice(["", " ", ".", ",", "-", "a", "号", "年", "\n", "x", "_"]))
        return "".join(parts)

    def doc_whitespace(self):
        r = self.rng
        parts = []
        for _ in range(r.randint(2, 30)):
            x = r.random()
            parts.append(self.ws(12) if x < 0.5 else self.word() if x < 0.7 else r.choice(PUNCT) if x < 0.8
                         else self.script_word("han_core", 1, 4) if x < 0.9 else self.number())
        if r.random() < 0.3:
            parts.insert(0, self.ws(6))
        return "".join(parts)

    def doc_code(self):
        r = self.rng
        out = []
        for _ in range(r.randint(1, 6)):
            s = r.choice(CODE_SNIPPETS).format(n="_".join(r.choice(WORDS).lower() for _ in range(r.randint(1, 3))),
                                               w=r.choice(WORDS), d=r.randint(0, 10 ** r.randint(1, 8)))
            indent = r.choice(["", "    ", "\t", "  ", "        ", "\t\t"])
            out.append("".join(indent + line + "\n" for line in s.split("\n")))
        text = "".join(out)
        return text.replace("\n", "\r\n") if r.random() < 0.15 else text

    def doc_special(self):
        r = self.rng
        parts = []
        for _ in range(r.randint(1, 20)):
            x = r.random()
            if x < 0.4:
                parts.append(self.special())
            elif x < 0.6:
                parts.append(self.word())
            elif x < 0.7:
                parts.append(self.script_word("han_core", 1, 4))
            elif x < 0.8:
                parts.append(self.ws(3))
            else:
                parts.append(r.choice(PUNCT + ["<", ">", "｜", "<｜", "｜>", "▁", "</", "<<", ">>"]))
        return "".join(parts)

    def doc_random_unicode(self):
        r = self.rng
        return "".join(chr(r.choice(self.assigned)) for _ in range(r.randint(1, 80)))

    def doc_ascii(self):
        r = self.rng
        alphabet = [chr(c) for c in range(0x20, 0x7F)] + ["\n", "\t", "\r\n"]
        return "".join(r.choice(alphabet) for _ in range(r.randint(1, 120)))

    def doc_mixed(self):
        r = self.rng
        gens = [self.doc_english, self.doc_cjk, self.doc_emoji, self.doc_combining, self.doc_digits,
                self.doc_whitespace, self.doc_code, self.doc_special, self.doc_scripts, self.doc_hangul]
        return "".join(r.choice(gens)() for _ in range(r.randint(2, 5)))

    def doc_invalid_utf8(self):
        r = self.rng
        raw = bytearray(r.choice([self.doc_english, self.doc_cjk, self.doc_emoji, self.doc_special])().encode())
        bad = [b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xc2", b"\xe0\x80\x80", b"\xe0\xa0", b"\xe4\xbd",
               b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf0\x80\x80\x80", b"\xf0\x9f\x98", b"\xf4\x90\x80\x80",
               b"\xf5", b"\xf8\x88\x80\x80\x80", b"\xfe", b"\xff", b"\xf0\x9f", b"\xe2\x82", b"\xc3\x28"]
        for _ in range(r.randint(1, 6)):
            pos = r.randint(0, len(raw))
            chunk = r.choice(bad) if r.random() < 0.8 else bytes(r.randint(0x80, 0xFF) for _ in range(r.randint(1, 4)))
            raw[pos:pos] = chunk
        if r.random() < 0.2 and len(raw) > 2:  # cut inside a multi-byte sequence
            raw = raw[: r.randint(1, len(raw) - 1)]
        return bytes(raw)

    def long_documents(self):
        r = self.rng
        return [
            ("long", " " * 20000 + "x"),
            ("long", " " * 5000 + "\n" * 3 + "\t" * 2000),
            ("long", "\u3000" * 3000 + "中" + "\xa0" * 3000),
            ("long", "".join(r.choice("0123456789") for _ in range(10000))),
            ("long", "".join(self.script_word("han_core", 50, 50) for _ in range(200))),
            ("long", "a" * 10000),
            ("long", "".join(self.doc_mixed() for _ in range(60))),
            ("long", "".join(self.doc_code() for _ in range(40))),
            ("long", "é" * 3000 + "\u0301" * 2000),
            ("long", "😀" * 2000 + "👨‍👩‍👧‍👦" * 300),
        ]

    CLASSES = ["english", "cjk", "hangul", "scripts", "emoji", "combining", "digits", "whitespace", "code",
               "special", "random_unicode", "ascii", "mixed", "invalid_utf8"]

    def documents(self, n_per_class=1500, include_long=True):
        docs = []
        for name in self.CLASSES:
            gen = getattr(self, "doc_" + name)
            docs.extend((name, gen()) for _ in range(n_per_class))
        docs.append(("edge", ""))
        docs.extend(("edge", t) for t in self.added_tokens[:2000])  # each added token alone
        if include_long:
            docs.extend(self.long_documents())
        return docs
