#!/usr/bin/env python3
"""Write the raw-encoding goldens of the Hugging Face tokenizer reader.

For each family in scripts/tokenizers.lock this encodes a fixed list of tricky strings and a few
thousand seeded random ones with the reference stack (transformers' AutoTokenizer over HF
tokenizers, pinned in requirements.txt, as vLLM loads a tokenizer; the config.json that
scripts/fetch-tokenizers.sh writes beside each family names its model type, as the model's own does) and writes
internal/tokenize/hf/testdata/<family>.jsonl.gz, one JSON object per line:

    {"text": ..., "ids": [...], "ids_special": [...]}

It also writes testdata/unicode.json.gz (how tokenizers classifies and normalizes every code
point; see write_unicode) and testdata/synthetic.json.gz: small BPE tokenizers trained here with components
and options the five families do not use, each with its tokenizer.json and the ids (and decoded
text) the bare tokenizers library gives for a few hundred strings.

ids is tokenizer(text, add_special_tokens=False), ids_special the same with add_special_tokens=True
(what /v1/completions uses by default). It also encodes every string with the bare tokenizers
library and reports where that differs from transformers (it does where the class transformers
picks rebuilds what tokenizer.json says: Llama 2's pre-tokenizer, GPT-4o's split under GPT2Tokenizer).

Usage: python3 scripts/goldens/tokenizer_goldens.py [--count N] [family...]
       python3 scripts/goldens/tokenizer_goldens.py --synthetic   (only synthetic.json.gz)
The script makes its own venv (.venv/goldens) and fetches the pinned tokenizer files itself.
"""

import argparse
import gzip
import io
import json
import os
import random
import subprocess
import sys
import zlib

sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _venv  # noqa: E402

_venv.ensure()

import tokenizers  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

ROOT = _venv.ROOT
CACHE = os.path.join(ROOT, ".cache", "tokenizers")
OUT = os.path.join(ROOT, "internal", "tokenize", "hf", "testdata")
LOCK = os.path.join(ROOT, "scripts", "tokenizers.lock")

# Strings every family gets, before the random ones: cases that broke earlier implementations.
FIXED = [
    "",
    " ",
    "  ",
    "\n",
    "\t",
    "Hello world",
    "Hello, world!",
    " hello  world\n\n\tfoo",
    "  leading",
    "trailing  ",
    "multiple   spaces    here",
    "line1\nline2\r\nline3\rline4",
    "tabs\t\tand\t spaces \t mixed",
    "\n\n\n\n",
    "   \n   \n",
    "I'm, you're, he's, we've, they'll, I'd, don't",
    "I'M YOU'RE HE'S WE'VE THEY'LL I'D DON'T",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE",
    "'ſ 'ſt 'K ſ",
    "123 1234 12345 123456789 3.14159 1,000,000",
    "٣٤٥ १२३ ๑๒๓ ①②③ ½ ¼",
    "café naïve résumé Ångström",
    "cafe\u0301 nai\u0308ve re\u0301sume\u0301 A\u030angstro\u0308m",
    "\u212b \u2126 \u1e9b\u0323 q\u0307\u0323 q\u0323\u0307",
    "\u1100\u1161\u11a8 \u1100\u1161 \u110b\u1175",
    "ﬁ ﬂ ﬀ ﬃ ① ㎏ ｶﾞ Ⅻ ™ ㍿ 𝐇𝐞𝐥𝐥𝐨",
    "日本語のテキストです。中文文本。한국어 텍스트.",
    "こんにちは世界 カタカナ ｶﾀｶﾅ",
    "Привет мир Γειά σου κόσμε שלום עולם مرحبا بالعالم",
    "नमस्ते दुनिया สวัสดีชาวโลก გამარჯობა",
    "😀 👨‍👩‍👧‍👦 🏳️‍🌈 👩🏽‍💻 🇺🇸🇯🇵 1️⃣ ❤️",
    "a\u200db\u200cc\u200bd\ufeffe",
    "<0x41> <0x0A><0xE3><0x81><0x82> <0x> <0xZZ> <0x0a>",
    "<unk> <s> </s> <pad> <mask> <bos> <eos>",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<think>\nreasoning\n</think>\n\nanswer",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
    "<|im_start <|im_end| |im_end|> <s <\\s> <|endoftext|",
    " <|endoftext|> <|endoftext|><|endoftext|>x<|endoftext|> ",
    "▁ ▁▁ ▁hello ▁▁world",
    "func main() {\n\tfmt.Println(\"hello\")\n}\n",
    "def f(x):\n    return x ** 2  # square\n",
    "<div class=\"a\"><p>Hi &amp; bye</p></div>",
    "SELECT * FROM users WHERE id = 42 AND name <> 'x';",
    "https://example.com/path?q=1&r=two#frag",
    "user@example.com +1 (555) 010-9999",
    "a" * 300,
    "ab" * 200,
    "x" + " " * 100 + "y",
    "\t" * 40,
    "\n" * 40,
    "=" * 120,
    "9" * 100,
    "\x00\x01\x02\x7f\x80\x9f",
    "\u00a0\u1680\u2000\u2009\u200a\u2028\u2029\u202f\u205f\u3000",
    "\x0b\x0c\x1c\x1d\x1e\x1f\x85",
    "\ue000\uf8ff\U000f0000 \ufffd \ufffe\uffff",
    "\U0001f600\U0001f9d1\u200d\U0001f91d\u200d\U0001f9d1",
    "a" + "\u0301\u0316" * 20,
    "Z" + "\u0300\u0301\u0302\u0303\u0316\u0317\u0318\u0334" * 6 + "a\u0301",
]

ASCII_PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
UNICODE_PUNCT = "“”‘’«»—–…·•¿¡、。「」『』！？，：；（）【】《》〈〉・～￥€£¥§¶†‡‰′″‹›"
WORDS = (
    "the of and to in is you that it he was for on are as with his they at be this have from or "
    "one had by word but not what all were we when your can said there use an each which she do "
    "how their if will up other about out many then them these so some her would make like him "
    "into time has look two more write go see number no way could people my than first water been "
    "call who oil its now find long down day did get come made may part tokenizer token encode "
    "decode vocabulary merge rank byte fallback normalizer Unicode gateway router replica cache "
    "request response stream latency throughput JSON HTTP GPU vLLM Qwen Llama Gemma DeepSeek"
).split()
CODE = [
    "func (s *Server) Serve(l net.Listener) error {",
    "\treturn fmt.Errorf(\"serve %s: %w\", addr, err)",
    "if err != nil {\n\t\treturn nil, err\n\t}",
    "for i := 0; i < len(xs); i++ {",
    "x := map[string]int{\"a\": 1, \"b\": 2}",
    "def __init__(self, *args, **kwargs):",
    "    print(f\"{name!r:>10} = {value:.3f}\")",
    "import numpy as np; a = np.zeros((3, 4), dtype=np.float32)",
    "const f = async (x) => { await g(x?.y ?? 0); };",
    "#include <stdio.h>\nint main(void) { return 0; }",
    "SELECT count(*) FROM t GROUP BY 1 HAVING count(*) > 10;",
    "<a href=\"https://example.com\">link</a>",
    "$ curl -sS -X POST localhost:8000/v1/completions -d '{\"prompt\":\"hi\"}'",
    "fn main() { let v: Vec<u8> = vec![0xff; 16]; }",
    "    @property\n    def name(self) -> str:",
    "{\"role\": \"user\", \"content\": \"Hello!\"}",
    "a<=b && c!=d || e>=f",
    "x+=1; y-=2; z*=3; w/=4; v%=5;",
    "// TODO(alice): handle the error\n/* block */",
    "```python\nprint('hi')\n```",
]


def ranges(*pairs):
    out = []
    for lo, hi in pairs:
        out.extend(chr(c) for c in range(lo, hi + 1))
    return out


SCRIPTS = {
    "latin1": list("àáâãäåæçèéêëìíîïðñòóôõöøùúûüýþÿÀÉÎÕÜßœŒſĳŀ"),
    "greek": ranges((0x391, 0x3A1), (0x3A3, 0x3C9)),
    "cyrillic": ranges((0x410, 0x44F)),
    "armenian": ranges((0x531, 0x556), (0x561, 0x587)),
    "hebrew": ranges((0x5D0, 0x5EA)),
    "arabic": ranges((0x621, 0x64A), (0x660, 0x669)),
    "devanagari": ranges((0x905, 0x939), (0x93E, 0x94D), (0x966, 0x96F)),
    "bengali": ranges((0x985, 0x9B9), (0x9E6, 0x9EF)),
    "tamil": ranges((0xB85, 0xBB9), (0xBBE, 0xBCD)),
    "thai": ranges((0xE01, 0xE3A), (0xE50, 0xE59)),
    "georgian": ranges((0x10D0, 0x10FA)),
    "ethiopic": ranges((0x1200, 0x1248)),
    "hangul": ranges((0xAC00, 0xD7A3)),
    "jamo": ranges((0x1100, 0x1112), (0x1161, 0x1175), (0x11A8, 0x11C2)),
    "hiragana": ranges((0x3041, 0x3096)),
    "katakana": ranges((0x30A1, 0x30FC), (0xFF66, 0xFF9D)),
    "cjk": ranges((0x4E00, 0x9FFF)),
    "cjk_ext": ranges((0x3400, 0x4DBF), (0x20000, 0x2A6DF)),
    "math": ranges((0x1D400, 0x1D7FF)),
    "fullwidth": ranges((0xFF01, 0xFF5E)),
    "compat": list("ﬁﬂﬀﬃﬄ①②⑩㎏㎞ⅫⅨ™℃℉㍿½¼¾²³¹ⁿ₁₂ªº"),
}
EMOJI = list("😀😂🥲😍🤔🙈🎉🔥✨🚀💡📦🧪🐍🦀🐹🌍🍕⚡✅❌⭐☕") + [
    "👨‍👩‍👧‍👦", "🏳️‍🌈", "👩🏽‍💻", "🧑‍🤝‍🧑", "🇺🇸", "🇯🇵", "🇩🇪", "1️⃣", "#️⃣", "❤️", "👍🏿", "🏴‍☠️",
    "\u263a\ufe0f", "\u263a\ufe0e",
]
# Characters tokenizers' older Unicode data does not know (see write_unicode), with the marks and
# letters they meet: marks of Unicode 10-17, new canonical composites and their parts, Unicode 17
# letters and emoji, new compatibility characters.
NEWER_UNICODE = ranges((0x898, 0x89F), (0x8CA, 0x8D3), (0x1ACF, 0x1ADD), (0x1DF6, 0x1DFA), (0x10D24, 0x10D27),
                       (0x1E130, 0x1E136), (0x1FBF0, 0x1FBF9), (0x10781, 0x10785)) + [
    "\u07fd", "\u09fe", "\u0c3c", "\u0d3b", "\u0d3c", "\u1715", "\u1abf", "\u1ac0", "\ua82c", "\U00011070",
    "\U00016ff0", "\u088f", "\u0c5c", "\U0001faea", "\U0001faef", "\u20c1", "\U00011db0", "\U00016ea0",
    "\u32ff", "\ua7f1", "\uab69", "\U0001f16c", "\U00011de0", "\U00016ff4",
    "\U000105c9", "\U000105d2\u0307", "\U00011383", "\U00011382\U000113c9", "\U000113c5", "\U000113c2\U000113c2",
    "\U00011938", "\U00011935\U00011930", "\U00016121", "\U0001611e\U0001611e", "\U00016128",
    "\U00016d68", "\U00016d67\U00016d67", "\U00016d6a", "\U00016d63\U00016d67\U00016d67",
    "a", "A", "e", "\u0301", "\u0323", "\u0345", "\u0334", "\u0651", " ",
]
COMBINING = ranges((0x300, 0x36F)) + ["\u0323", "\u0307", "\u0338", "\u20dd", "\u093c", "\u0e48"]
SPACES = [" ", "  ", "   ", "    ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\t\t", "\u00a0",
          "\u3000", "\u2009", "\u200b", "\u2028", "\x0b", "\x0c", "\x85", " \t ", "\n \n"]
COMMON_SPECIAL = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "<unk>", "<bos>", "<eos>",
    "<pad>", "<mask>", "<start_of_turn>", "<end_of_turn>", "<|begin_of_text|>", "<|eot_id|>",
    "<|start_header_id|>", "<|end_header_id|>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
    "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<|fim_prefix|>", "<unused12>", "<start_of_image>", "[@BOS@]", "<|python_tag|>",
]


class Gen:
    """Seeded random strings, one kind of fragment per method."""

    def __init__(self, seed, added):
        self.r = random.Random(seed)
        self.added = added

    def word(self):
        w = self.r.choice(WORDS)
        roll = self.r.random()
        if roll < 0.15:
            w = w.capitalize()
        elif roll < 0.2:
            w = w.upper()
        return w

    def ascii_text(self):
        out = []
        for _ in range(self.r.randint(1, 8)):
            out.append(self.word())
            if self.r.random() < 0.25:
                out.append(self.r.choice(ASCII_PUNCT))
            if self.r.random() < 0.1:
                out.append(self.r.choice(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL"]))
            out.append(" " if self.r.random() < 0.85 else self.r.choice(SPACES))
        return "".join(out)

    def digits(self):
        n = self.r.choice([1, 2, 3, 4, 5, 6, 7, 9, 12, 20])
        s = "".join(self.r.choice("0123456789") for _ in range(n))
        roll = self.r.random()
        if roll < 0.2:
            s += "." + str(self.r.randint(0, 99999))
        elif roll < 0.3:
            s = self.word() + s + self.word()
        elif roll < 0.4:
            s = "".join(self.r.choice(SCRIPTS["arabic"][-10:] + SCRIPTS["devanagari"][-10:]) for _ in range(n))
        return s

    def spaces(self):
        return "".join(self.r.choice(SPACES) for _ in range(self.r.randint(1, 6)))

    def script(self):
        alphabet = SCRIPTS[self.r.choice(sorted(SCRIPTS))]
        return "".join(self.r.choice(alphabet) for _ in range(self.r.randint(1, 14)))

    def emoji(self):
        return "".join(self.r.choice(EMOJI) for _ in range(self.r.randint(1, 5)))

    def combining(self):
        base = self.r.choice("aeiouAEOUnczsgkqy" + "αοиजक가")
        marks = "".join(self.r.choice(COMBINING) for _ in range(self.r.randint(1, 4)))
        return base + marks

    def cjk(self):
        pool = SCRIPTS["cjk"] + SCRIPTS["hiragana"] + SCRIPTS["katakana"] + list("、。「」！？，")
        return "".join(self.r.choice(pool) for _ in range(self.r.randint(1, 20)))

    def special(self):
        pool = COMMON_SPECIAL + self.added
        tok = self.r.choice(pool)
        roll = self.r.random()
        if roll < 0.2:  # a prefix of a special token
            tok = tok[: self.r.randint(1, max(1, len(tok) - 1))]
        elif roll < 0.4:
            tok = self.r.choice(["", " ", "  ", "\n", "x"]) + tok + self.r.choice(["", " ", "  ", "\n", "y"])
        return tok

    def byte_like(self):
        r = self.r.random()
        if r < 0.6:
            return "".join(f"<0x{self.r.randint(0, 255):02X}>" for _ in range(self.r.randint(1, 4)))
        if r < 0.8:
            return f"<0x{self.r.randint(0, 255):02x}>"
        return self.r.choice(["<0x>", "<0xG1>", "<0x123>", "<0X41>", "0x41", "<0x41"])

    def punct(self):
        return "".join(self.r.choice(ASCII_PUNCT + UNICODE_PUNCT) for _ in range(self.r.randint(1, 6)))

    def code(self):
        return self.r.choice(CODE)

    def long(self):
        kind = self.r.random()
        n = self.r.choice([64, 100, 200, 400])
        if kind < 0.4:
            return "".join(self.r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))
        if kind < 0.55:
            return self.r.choice("a=-_ .\t\n9") * n
        if kind < 0.7:
            return "".join(self.r.choice(SCRIPTS["cyrillic"] + SCRIPTS["greek"]) for _ in range(n // 2))
        if kind < 0.85:
            return "".join(self.r.choice("0123456789") for _ in range(n))
        return "".join(self.r.choice(SCRIPTS["cjk"]) for _ in range(n // 4))

    def zalgo(self):
        """A letter under a long pile of combining marks (more than the 30 x/text/unicode/norm
        allows before it inserts U+034F)."""
        base = self.r.choice("aeoAZ" + "αиक가")
        return base + "".join(self.r.choice(COMBINING) for _ in range(self.r.randint(20, 70)))

    def newer_unicode(self):
        return "".join(self.r.choice(NEWER_UNICODE) for _ in range(self.r.randint(1, 8)))

    def codepoints(self):
        out = []
        for _ in range(self.r.randint(1, 8)):
            roll = self.r.random()
            if roll < 0.1:
                c = self.r.randint(0, 0x1F)
            elif roll < 0.15:
                c = self.r.randint(0x7F, 0x9F)
            elif roll < 0.8:
                c = self.r.randint(0xA0, 0x2FFF)
            elif roll < 0.9:
                c = self.r.randint(0x3000, 0xFFFF)
            else:
                c = self.r.randint(0x10000, 0x10FFFF)
            if 0xD800 <= c <= 0xDFFF:
                c = 0xFFFD
            out.append(chr(c))
        return "".join(out)

    KINDS = [
        ("ascii_text", 10), ("digits", 3), ("spaces", 4), ("script", 5), ("emoji", 2),
        ("combining", 3), ("cjk", 3), ("special", 4), ("byte_like", 1), ("punct", 3),
        ("code", 3), ("long", 0.3), ("codepoints", 2), ("newer_unicode", 1), ("zalgo", 0.3),
    ]

    def text(self):
        names = [k for k, _ in self.KINDS]
        weights = [w for _, w in self.KINDS]
        if self.r.random() < 0.2:  # a single kind, to keep failures easy to read
            return getattr(self, self.r.choices(names, weights)[0])()
        parts = []
        for _ in range(self.r.randint(2, 5)):
            parts.append(getattr(self, self.r.choices(names, weights)[0])())
            roll = self.r.random()
            if roll < 0.4:
                parts.append(" ")
            elif roll < 0.55:
                parts.append(self.spaces())
        return "".join(parts)


# Synthetic tokenizers: small BPE models trained here, in combinations of components the five
# families do not use, so those code paths are checked against tokenizers too.
SYNTH_CORPUS = [t for t in FIXED if len(t) < 200] + [
    "the quick brown fox jumps over the lazy dog", "The Quick Brown Fox", "hello hello world",
    "tokenizer tokenizers tokenization", "12345 67890 3.14", "a-b-c well-known state-of-the-art",
    "naïve café résumé", "日本語 中文", "x = f(y) + g(z);", "foo_bar baz_qux", "<b>bold</b>",
]


def synth_tokenizers():
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                            pre_tokenizers, processors, trainers)

    def train(byte_level, vocab_size=420, **model_kw):
        tok = Tokenizer(models.BPE(**model_kw))
        if byte_level:
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
            alphabet = pre_tokenizers.ByteLevel.alphabet()
        else:
            tok.pre_tokenizer = pre_tokenizers.Metaspace()
            alphabet = sorted(set("".join(SYNTH_CORPUS)))[:200]
        special = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] if not byte_level else []
        tr = trainers.BpeTrainer(vocab_size=vocab_size + len(special), special_tokens=special,
                                 initial_alphabet=alphabet, show_progress=False)
        tok.train_from_iterator(SYNTH_CORPUS * 3, tr)
        return tok

    out = {}

    t = train(False, unk_token="<unk>", byte_fallback=True, fuse_unk=False)
    t.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Strip(left=True, right=False)])
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s+"), "removed"),
        pre_tokenizers.Split("-", "merged_with_next"),
        pre_tokenizers.Split(Regex(r"[0-9]"), "contiguous"),
        pre_tokenizers.Split(Regex(r"[aeiou]"), "merged_with_previous", invert=True),
    ])
    t.add_tokens([AddedToken("<b>", lstrip=True, rstrip=True, normalized=False),
                  AddedToken("</b>", single_word=True, normalized=True),
                  AddedToken("fox", single_word=True, normalized=True)])
    t.add_special_tokens([AddedToken("<|sep|>", normalized=False)])
    t.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> $B:1",
                                                     special_tokens=[("<s>", t.token_to_id("<s>")), ("</s>", t.token_to_id("</s>"))])
    t.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    out["split_behaviors"] = t

    t = train(False, unk_token="<unk>", byte_fallback=False, fuse_unk=True)
    t.normalizer = normalizers.Sequence([normalizers.Replace(Regex(" {2,}"), " "), normalizers.NFD()])
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    t.add_tokens([AddedToken("<mark>", lstrip=True, normalized=False), AddedToken("end", rstrip=True, normalized=True)])
    t.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    out["metaspace_first_fuse_unk"] = t

    t = train(False, unk_token="<unk>", byte_fallback=False, fuse_unk=False)
    t.normalizer = normalizers.NFKD()
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                               pre_tokenizers.Metaspace(prepend_scheme="never", split=False)])
    t.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.Strip(" ", 1, 0)])
    out["metaspace_never_digits"] = t

    t = train(False, byte_fallback=False)  # no unk: unknown characters vanish
    t.normalizer = normalizers.Prepend("▁")
    t.pre_tokenizer = pre_tokenizers.Digits(individual_digits=False)
    out["no_unk_digits"] = t

    t = train(True, ignore_merges=True)
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    t.add_special_tokens([AddedToken("<|end|>", normalized=False)])
    t.add_tokens([AddedToken(" hello", normalized=True), AddedToken("WORLD", normalized=False, lstrip=True)])
    t.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="$A <|end|>", special_tokens=[("<|end|>", t.token_to_id("<|end|>"))]),
    ])
    t.decoder = decoders.ByteLevel()
    out["bytelevel_prefix_space"] = t

    t = train(True)
    t.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace("\t", "    ")])
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"'s|'t| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    t.decoder = decoders.ByteLevel()
    out["bytelevel_custom_regex"] = t

    # BLOOM's pre-tokenizer, as its published tokenizer.json has it: runs of what is not its
    # punctuation or whitespace (a class nested in a negated class), then bytes without a regex.
    t = train(True)
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(" ?[^(\\s|[.,!?…。，、।۔،])]+"), "isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    t.decoder = decoders.ByteLevel()
    out["bloom_split"] = t
    return out


# Strings after the random ones, for the synthetic tokenizers only: every character of BLOOM's
# split class (ASCII punctuation, …, CJK, Devanagari and Arabic marks), beside letters, spaces,
# other whitespace and the characters next to them.
SYNTH_EXTRA = [
    "Hello, world! (x|y) [z] a…b。c，d、e।f۔g،h",
    "¿Qué? 你好。 世界，再见、 नमस्ते। दुनिया॥ مرحبا، سلام۔ ok",
    " a . b , c ! d ? e ( f | g ) h",
    "  two  spaces\tand\ttabs\nnew line\r\nCRLF\u3000wide\u00a0nbsp\u2028sep\x85nel",
    "a.b,c!d?e...f!!g??h",
    "…。，、।۔، ‥‧〃＋－ॣ॥ۓە؋؍",
    "x\u180ey\u200bz \u1680q\u202fr",
    "(((a))) |b| [c] {d} <e> \"f\" 'g'",
]


# tokenizer_config.json variants for the synthetic tokenizers (and a model config.json, for the
# entries with a third element), encoded through transformers' AutoTokenizer: the rules Load takes
# from transformers (the class it picks, what that class's constructor rebuilds, add_prefix_space,
# legacy, split_special_tokens, tokens added from the config).
SYNTH_CONFIGS = [
    ("bytelevel_prefix_space", {"tokenizer_class": "GPT2TokenizerFast", "add_prefix_space": False}),
    ("bytelevel_prefix_space", {"tokenizer_class": "PreTrainedTokenizerFast"}),
    ("bytelevel_prefix_space", {"tokenizer_class": "GPT2TokenizerFast", "add_prefix_space": True}),
    ("bytelevel_prefix_space", {"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<|end|>",
                                "eos_token": "<|end|>", "add_bos_token": True, "add_eos_token": True}),
    ("bytelevel_prefix_space", {"tokenizer_class": "GPTNeoXTokenizerFast", "bos_token": "<|end|>",
                                "eos_token": "<|end|>"}),
    ("split_behaviors", {"tokenizer_class": "PreTrainedTokenizerFast", "split_special_tokens": True}),
    ("split_behaviors", {"tokenizer_class": "GemmaTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                         "add_eos_token": True}),
    ("split_behaviors", {"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>", "add_bos_token": False}),
    ("split_behaviors", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": {
            "5000": {"content": "<new>", "lstrip": False, "rstrip": True, "normalized": False,
                     "single_word": False, "special": True},
            "5001": {"content": "fox", "lstrip": False, "rstrip": False, "normalized": True,
                     "single_word": False, "special": False},
        },
        "eos_token": "<|eot|>",
        "additional_special_tokens": ["<extra>", "<new>"],
    }),
    ("metaspace_first_fuse_unk", {"tokenizer_class": "LlamaTokenizerFast", "legacy": False}),
    ("metaspace_first_fuse_unk", {"tokenizer_class": "LlamaTokenizerFast", "legacy": True}),
    ("metaspace_first_fuse_unk", {"tokenizer_class": "LlamaTokenizerFast", "add_prefix_space": False}),
    ("metaspace_first_fuse_unk", {"tokenizer_class": "GemmaTokenizerFast"}),
    # A config without added_tokens_decoder adds added_tokens.json's tokens (special when named so).
    ("split_behaviors", {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<eos2>"}, None,
     {"added_tokens.json": {"<new1>": 5000, "fox": 5001, "<eos2>": 5002}}),
    ("metaspace_first_fuse_unk", {"tokenizer_class": "LlamaTokenizerFast", "legacy": False}, None,
     {"added_tokens.json": {"<x1>": 9000, "ab": 9001}}),
    # transformers 5 no longer converts a slow tokenizer: from_slow is ignored.
    ("metaspace_first_fuse_unk", {"tokenizer_class": "LlamaTokenizerFast", "from_slow": True, "legacy": False}),
    ("bytelevel_prefix_space", {"tokenizer_class": "Qwen2TokenizerFast", "add_prefix_space": True}),
    ("bytelevel_prefix_space", {"tokenizer_class": "CohereTokenizerFast", "add_prefix_space": True}),
    ("bytelevel_prefix_space", {"tokenizer_class": "GPTNeoXTokenizerFast", "add_prefix_space": True}),
    ("bytelevel_prefix_space", {"tokenizer_class": "LlamaTokenizerFast"}, {"model_type": "deepseek_v3"}),
    ("bytelevel_prefix_space", {"tokenizer_class": "LlamaTokenizerFast"}, {"model_type": "mistral"}),
    ("bytelevel_prefix_space", {"tokenizer_class": "LlamaTokenizerFast"}, {"model_type": "qwen2"}),
    ("bytelevel_prefix_space", {"tokenizer_class": "GPT2TokenizerFast"}, {"model_type": "granite"}),
    ("bytelevel_prefix_space", {"tokenizer_class": "GPT2TokenizerFast"}, {"model_type": "llama"}),
    ("bytelevel_prefix_space", {"eos_token": "<|end|>"}, {"model_type": "qwen3"}),
    ("bytelevel_prefix_space", {"tokenizer_class": "NoSuchTokenizerFast", "eos_token": "<|end|>"}),
    ("bytelevel_prefix_space", {"tokenizer_class": "BloomTokenizerFast"}),
    ("bloom_split", {"tokenizer_class": "BloomTokenizerFast"}),
    ("bytelevel_prefix_space", {"tokenizer_class": "LlamaTokenizerFast", "auto_map": {"AutoModel": "x.Y"}}),
    # Special tokens beyond the named ones: transformers 5 writes extra_special_tokens as a list,
    # reads additional_special_tokens as one, and names any other *_token string.
    ("split_behaviors", {"tokenizer_class": "PreTrainedTokenizerFast", "extra_special_tokens": ["<e1>", "fox"],
                         "additional_special_tokens": ["<a1>"]}),
    ("split_behaviors", {"tokenizer_class": "PreTrainedTokenizerFast", "additional_special_tokens": ["<a1>", "dog"],
                         "image_token": "<img>", "add_bos_token": True, "boi_token": {"content": "<boi>"}}),
    ("split_behaviors", {"tokenizer_class": "PreTrainedTokenizerFast", "extra_special_tokens": {"audio_token": "<aud>"},
                         "video_token": "<vid>", "audio_token": "<x>", "pad_token": ""}),
]


def write_synthetic(count, seed, out):
    """Writes {"texts": [...], "tokenizers": [{"name", "tokenizer", "ids", "ids_special", "decoded"}],
    "configs": [{"tokenizer", "config", "model", "files", "ids", "ids_special"}]}, the lists of ids parallel to
    texts (for configs, to its first len(FIXED) texts)."""
    import tempfile
    gen = Gen(seed, [])
    texts = FIXED + [gen.text() for _ in range(count)] + SYNTH_EXTRA
    entries = []
    for name, tok in synth_tokenizers().items():
        ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
        entries.append({
            "name": name,
            "tokenizer": json.loads(tok.to_str()),
            "ids": ids,
            "ids_special": [tok.encode(t, add_special_tokens=True).ids for t in texts],
            "decoded": [tok.decode(i, skip_special_tokens=False) for i in ids],
        })
    configs = []
    by_name = {e["name"]: e["tokenizer"] for e in entries}
    for name, cfg, *rest in SYNTH_CONFIGS:
        model = rest[0] if rest else None
        files = rest[1] if len(rest) > 1 else {}
        with tempfile.TemporaryDirectory() as d:
            for fname, content in files.items():
                with open(os.path.join(d, fname), "w", encoding="utf-8") as f:
                    json.dump(content, f, ensure_ascii=False)
            if model is not None:
                with open(os.path.join(d, "config.json"), "w", encoding="utf-8") as f:
                    json.dump(model, f)
            with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
                json.dump(by_name[name], f, ensure_ascii=False)
            with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
                json.dump(cfg, f, ensure_ascii=False)
            tok = AutoTokenizer.from_pretrained(d)
            configs.append({
                "tokenizer": name, "config": cfg, "model": model, "files": files, "class": type(tok).__name__,
                "special_tokens_map": tok.special_tokens_map,
                "ids": [tok(t, add_special_tokens=False)["input_ids"] for t in FIXED],
                "ids_special": [tok(t, add_special_tokens=True)["input_ids"] for t in FIXED],
            })
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(json.dumps({"texts": texts, "tokenizers": entries, "configs": configs}, ensure_ascii=False,
                            separators=(",", ":")).encode("utf-8"))
    path = os.path.join(out, "synthetic.json.gz")
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    print(f"goldens: {os.path.relpath(path, ROOT)}: {len(entries)} tokenizers x {len(texts)} strings, "
          f"{len(buf.getvalue())} bytes", file=sys.stderr)


# Probe strings of the normalization tables: a character between a ccc 240 mark before it and a
# ccc 1 mark after it is reordered exactly when the tables give it a combining class.
CCC_PROBE = ("\u0345", "\u0334")


def write_unicode():
    """Writes testdata/unicode.json.gz: how tokenizers (its Oniguruma regexes and its
    normalization tables, both older than Go's Unicode tables) sees every code point. The Go test
    TestHFUnicodeTables derives unicode_table.go from it (go test ./internal/tokenize/hf -run
    TestHFUnicodeTables -update)."""
    from tokenizers import normalizers

    import onigsets

    classes = {name: onigsets.matched_ranges(pat) for name, pat in
               {"L": r"\p{L}", "N": r"\p{N}", "P": r"\p{P}", "S": r"\p{S}", "M": r"\p{M}", "s": r"\s"}.items()}
    # Hangul syllables decompose by arithmetic in every Unicode version; leaving them out halves
    # the file (the Go test skips them too).
    cps = [c for c in onigsets.CODE_POINTS if not (0xAC00 <= c <= 0xD7A3)]
    norm = {}
    for form in ["NFC", "NFD", "NFKC", "NFKD"]:
        n = getattr(normalizers, form)()
        norm[form] = {str(c): n.normalize_str(chr(c)) for c in cps if n.normalize_str(chr(c)) != chr(c)}
    nfc = normalizers.NFC()
    norm["ccc_probe"] = {}
    for c in cps:
        probe = CCC_PROBE[0] + chr(c) + CCC_PROBE[1]
        if nfc.normalize_str(probe) != probe:
            norm["ccc_probe"][str(c)] = nfc.normalize_str(probe)
    data = {"tokenizers": tokenizers.__version__, "ccc_probe": list(CCC_PROBE), "classes": classes,
            "norm": norm}
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(json.dumps(data, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8"))
    path = os.path.join(OUT, "unicode.json.gz")
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    print(f"goldens: {os.path.relpath(path, ROOT)}: {len(buf.getvalue())} bytes", file=sys.stderr)


def families():
    out = []
    with open(LOCK) as f:
        for line in f:
            fields = line.split()
            if fields and not fields[0].startswith("#"):
                out.append(fields[0])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=3000, help="random strings per family (default 3000)")
    ap.add_argument("--seed", type=int, default=None,
                    help="seed of the random strings (default: fixed per family, as committed)")
    ap.add_argument("--out", default=OUT,
                    help="output directory (default internal/tokenize/hf/testdata); for extra, uncommitted "
                         "checks run the Go tests with HF_GOLDENS_DIR pointing there")
    ap.add_argument("--synthetic", action="store_true",
                    help="write only synthetic.json.gz, as a full run writes it (not the families or unicode.json.gz)")
    ap.add_argument("family", nargs="*", help="families to write (default: all in scripts/tokenizers.lock)")
    args = ap.parse_args()
    if args.synthetic:
        if args.family:
            ap.error("--synthetic writes no family")
        write_synthetic(300, 7, OUT)
        return
    fams = args.family or families()

    # The pinned families are fetched, or checked and given their config.json (a few hashes).
    pinned = [f for f in fams if f in families()]
    if pinned:
        subprocess.run([os.path.join(ROOT, "scripts", "fetch-tokenizers.sh")] + pinned, check=True,
                       stdout=subprocess.DEVNULL)

    print(f"goldens: transformers {transformers.__version__}, tokenizers {tokenizers.__version__}",
          file=sys.stderr)
    os.makedirs(args.out, exist_ok=True)
    for fam in fams:
        write_family(fam, args.count, args.seed, args.out)
    if not args.family:
        if args.out == OUT:
            write_synthetic(300, 7, OUT)
            write_unicode()
        else:
            write_synthetic(args.count, args.seed or 7, args.out)


def write_family(fam, count, seed, out):
    d = os.path.join(CACHE, fam)
    tok = AutoTokenizer.from_pretrained(d)
    raw = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
        added = [t["content"] for t in json.load(f)["added_tokens"]]
    gen = Gen(zlib.crc32(fam.encode()) if seed is None else seed, added)
    texts = FIXED + [gen.text() for _ in range(count)]

    buf = io.BytesIO()
    raw_diff = raw_special_diff = 0
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        for text in texts:
            ids = tok(text, add_special_tokens=False)["input_ids"]
            ids_special = tok(text, add_special_tokens=True)["input_ids"]
            if raw.encode(text, add_special_tokens=False).ids != ids:
                raw_diff += 1
            if raw.encode(text, add_special_tokens=True).ids != ids_special:
                raw_special_diff += 1
            line = json.dumps({"text": text, "ids": ids, "ids_special": ids_special},
                              ensure_ascii=False, separators=(",", ":"))
            gz.write(line.encode("utf-8") + b"\n")
    path = os.path.join(out, fam + ".jsonl.gz")
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    print(f"goldens: {os.path.relpath(path, ROOT)}: {len(texts)} strings, {len(buf.getvalue())} bytes "
          f"({type(tok).__name__}); bare tokenizers differs on {raw_diff} without and "
          f"{raw_special_diff} with special tokens", file=sys.stderr)


if __name__ == "__main__":
    main()
