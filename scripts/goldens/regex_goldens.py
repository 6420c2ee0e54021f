#!/usr/bin/env python3
"""Write the regex goldens of the Hugging Face tokenizer reader: what tokenizers' Oniguruma matches.

tokenizers compiles the patterns of Split and Replace with Oniguruma (Ruby syntax, Unicode 16);
internal/tokenize/hf runs the ones without a hand-written scanner on regexp2, as translateRegex
(onig.go) rewrites them, or refuses them. This writes internal/tokenize/hf/testdata/regex.json.gz:

  classes  for each general category \\p{..} translateRegex may accept, for \\s and \\d, and for (?i)
           with each ASCII letter: the code points the pattern matches on its own, as ranges
           (TestOnigTables checks onigIs and the letters' folds against them);
  cases    a list of {"pattern", "compiles", "texts", "matches", "ids"}: whether tokenizers compiles
           the pattern and, for each text, every match (byte offsets, empty ones included, as
           tokenizers' find_iter gives them) and the ids of a tokenizer whose normalizer is
           Replace(pattern, "▁") over a model of the 256 byte tokens, so that the ids are the
           bytes of the text with each match replaced (TestOnigRegex).

The patterns are those of the review that found regexp2 matching otherwise (with its texts), the
published split patterns, and constructs translateRegex accepts, rewrites or refuses.

Usage: python3 scripts/goldens/regex_goldens.py
The script makes its own venv (.venv/goldens) from the pinned, hashed wheels.
"""

import gzip
import io
import json
import os
import random
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _venv  # noqa: E402

_venv.ensure()

import onigsets  # noqa: E402
import tokenizers  # noqa: E402
from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers  # noqa: E402

ROOT = _venv.ROOT
OUT = os.path.join(ROOT, "internal", "tokenize", "hf", "testdata", "regex.json.gz")

CATEGORIES = ("L Lu Ll Lt Lm Lo M Mn Mc Me N Nd Nl No P Pc Pd Ps Pe Pi Pf Po S Sm Sc Sk So "
              "Z Zs Zl Zp").split()

# Characters new in Unicode 17 (in Go's classes, in none of Oniguruma's), ʕ (Ll in 16, Lo in 17),
# case folds (ſ, the Kelvin sign, ß, ﬅ, ﬁ, İ) and line ends.
TRICKY = ["\u1acf", "\U00010940", "\u088f", "\u0c5c", "\ua7ce", "\u20c1", "\U00010ec5", "\u0295",
          "ſ", "\u212a", "ß", "ẞ", "ﬅ", "ﬁ", "İ", "ı", "\n", "\r\n", "\u2028", "\x85"]

# What the class cases match against: ASCII, BLOOM's punctuation and the characters next to each
# (‥‧ by …, 〃 by 。, ＋－ by ，, ॣ॥ by ।, ۓە by ۔, ؋؍ by ،; 、 is between U+3000 and 。), whitespace of
# several kinds and characters that are not \s (U+180E, U+200B), letters and digits of other scripts.
CLASS_TEXT = ("".join(chr(c) for c in range(0x20, 0x7F)) + "‥…‧。〃，＋－、।ॣ॥۔ۓە،؋؍"
              + "\t\n\r\x0b\x0c\x85\xa0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000\u180e\u200b"
              + "éЖ日あ١٢٣①½ǅʕ")

# BLOOM's pattern on prose: runs of what is not its punctuation or whitespace, with a space before.
BLOOM_TEXTS = ["Hello, world! (x|y) [z] a…b。c，d、e।f۔g،h", "¿Qué? 你好。 नमस्ते। مرحبا، سلام۔ ok",
               "  two  spaces\tand\ttabs\nnew line\u3000wide\u00a0nbsp", "a.b,c!d?e", "…。，、।۔،", ""]

# The published split patterns, each also run through the translation in the Go test.
PUBLISHED = [
    # GPT-2 (ByteLevel's use_regex)
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    # Llama 3, cl100k
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    # Qwen 2 and 3
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    # a Qwen 3.5-style variant: marks in words
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    # DeepSeek V3's three
    r"\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    # GPT-4o's o200k (gpt-oss)
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    # Mistral's Tekken
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    # the committed synthetic tokenizers'
    r" {2,}", r"[0-9]", r"[aeiou]", r"\s+", r"'s|'t| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
]

# Pieces of the random texts the published patterns get.
POOL = ["a", "Z", "s", "t", "re", "ll", "'", "'S", "'LL", "'ſ", "é", "e\u0301", "Ж", "日", "あ", "ア",
        "1", "42", "٣", "①", "½", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028",
        ".", ",", "-", "_", "(", "/", "\\", "]", "“", "、", "€", "😀", "\u0301", "\u200d", "\x00",
        "ǅ", "Ǆ", "ʰ", "Σ", "ς", "Ab", "aB"] + TRICKY

# Review cases: its patterns and texts (case_regex.py), then patterns exercising what is rewritten
# or refused. The Go test says which it refuses.
CASES = [
    (r"\s+$", ["x \ny", "a  \n  b", "ab  "]),
    (r"^\s+", ["x\n  y", "  a"]),
    (r"(?i)[a-z]+", ["İ", "K", "ſ", "abc"]),
    (r"[[:alpha:]]+", ["abc def", "a:b"]),
    (r"\w+", ["Ⅻ x", "कि", "a\u0301b", "x\u200dy"]),
    (r"a{,3}", ["aaaa", "a{,3}"]),
    (r"(?i)ss", ["ß", "ẞ", "SS"]),
    (r"\p{Greek}+", ["αβγ abc"]),
    (r"\d+", ["١٢٣ 123 ¹²"]),
    (r"[^\s]+", ["a\u00a0b", "a\u2028b", "a\x1cb"]),
    (r"\S+", ["a\x85b", "a\u180eb", "a\u200bb"]),
    (r".", ["a\nb", "a\rb", "a\u2028b"]),
    (r"\b\w", ["hello world"]),
    (r"\w+|[^\w\s]+", ["a\u200db"]),
    (r"\p{L}+", TRICKY),
    (r"\p{M}+", TRICKY),
    (r"[\p{L}\p{M}]+", TRICKY),
    (r"\p{N}+", TRICKY),
    (r"\p{S}+", TRICKY),
    # Anchors: ^ not at the very end, $ before every \n.
    (r"^", ["", "a", "a\n", "a\nb", "\n\n", "a\r\nb"]),
    (r"$", ["", "a", "a\n", "a\nb", "\n\n", "a\r\nb"]),
    (r"^a|b$", ["a\nab\nb", "b\n", "a\r\na"]),
    (r"\A|\z", ["", "ab", "a\n"]),
    (r"\Z", ["ab", "a\n", "a\n\n", "\n"]),
    # Folds: ſ is s, the Kelvin sign k; ß, ﬅ are not one letter.
    (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)", ["'ſ 'ſt 'K 'S 'İ 'ß 'LL"]),
    (r"(?i)k|x", ["K k \u212a X"]),
    (r"(?i:s)t", ["ﬅ st ſt"]),
    (r"(?i)st", ["ﬅ ﬆ st"]),
    (r"(?i:fi)", ["ﬁ fi"]),
    # Classes where Oniguruma's tables differ, negated properties, escapes.
    (r"\P{L}+", TRICKY),
    (r"[^\p{L}\p{N}]+", TRICKY),
    (r"[^\S\n]+", ["a \t\n b\u3000\n"]),
    (r"[\P{L}\P{N}]", ["a1-"]),
    (r"[^\P{L}a]+", ["abc1ʕ\u088f"]),
    (r"[\p{Lu}\p{Lt}]+|[\p{Ll}]+|\p{Lo}+", ["Aʕb", "ʕ", "ǅx"]),
    (r"\u00e9|\t|\.|\-|\\", ["é\t.-\\"]),
    (r"[a-c\-]+", ["a-b-d"]),
    # Quantifiers: lazy, intervals; {n}? is (a{n})? in Oniguruma.
    (r"a{2,3}?", ["aaaaa"]),
    (r"a{2}", ["aaaaa"]),
    (r"x??", ["xax"]),
    (r"a{2}?", ["aaaaa", "a"]),
    (r"a*+", ["aaa"]),
    (r"(a*)*", ["aab"]),
    # Other syntax regexp2 would read otherwise or not at all.
    (r"(?<=a)b", ["ab cb"]),
    (r"\x41", ["A"]),
    (r"[a&&b]", ["ab&"]),
    (r"\p{l}", ["a"]),
    (r"\h+", ["0afg"]),
    (r"\R", ["a\r\nb"]),
    (r"\X", ["e\u0301"]),
    (r"[]a]", ["]a"]),
] + [(p, [CLASS_TEXT] + t) for p, t in [
    # BLOOM's split pattern, bare and as published: a class nested in a negated one.
    ("[^(\\s|[.,!?…。，、।۔،])]", BLOOM_TEXTS),
    (" ?[^(\\s|[.,!?…。，、।۔،])]+", BLOOM_TEXTS),
    # Nested classes: united with their class's members, in a negated class, with ranges and
    # escapes, two, nested twice, ] and [ escaped or first, and what looks like POSIX brackets.
    (r"[a[bc]]+", []),
    (r"[^a[bc]]+", []),
    (r"[a-c[x-z]]+", []),
    (r"[\d[\s]]+", TRICKY),
    (r"[x[\p{L}]]+", TRICKY),
    (r"[^x[\p{L}\d]]+", TRICKY),
    (r"[^\P{L}[a]]+", TRICKY),
    (r"[a[b][c-d]]+", []),
    (r"[a[b[c]]]+", []),
    (r"[^a[b[c\s]]]+", []),
    (r"[a[\]\[]]+", []),
    (r"[]]", []),
    (r"[]]]", []),
    (r"[^]a]+", []),
    (r"[a[]]]+", []),
    (r"[a[]-]]+", []),
    (r"[]-a]+", []),
    (r"[[a]-]+", []),
    (r"[-[a]]+", []),
    (r"[[=a=]]+", []),
    (r"[[.a.]]+", []),
    # Negated classes nested, intersections, and negated classes with two negated properties:
    # computed as sets.
    (r"[a[^b]]+", []),
    (r"[^a[^b]]+", []),
    (r"[^[^a]]+", []),
    (r"[\P{L}[^\d]]+", TRICKY),
    (r"[^\s[^\p{L}]]+", TRICKY),
    (r"[a-z&&[^aeiou]]+", []),
    (r"[^a-z&&[^aeiou]]+", []),
    (r"[\p{L}&&[^a-z]]+", TRICKY),
    (r"[\p{L}&&\p{Lu}]+", TRICKY),
    (r"[^\p{L}&&\P{N}]+", TRICKY),
    (r"[\S&&[^\p{L}]]+", TRICKY),
    (r"[a-c&&b-d&&c]+", []),
    (r"[abc&&b-d[x]]+", []),
    (r"[a[b-d&&c-e]]+", []),
    (r"[a-c[^b]&&b-z]+", []),
    (r"[a-z&&-a]+", []),
    (r"[a-z&&^b]+", []),
    (r"[&a&&&b]+", []),
    (r"[\s&&\S]", []),
    (r"[^\S\P{L}]+", TRICKY),
    (r"[^\S[\D]]+", TRICKY),
    (r"[^\D\P{Lu}a]+", TRICKY),
    (r"x[\s&&\S]?y", ["xy", "x y"]),
    # Refused: POSIX brackets, && with nothing on a side, - next to a nested class or &&.
    (r"[a[:digit:]]+", []),
    (r"[[:alpha]]+", []),
    (r"[&&a]", []),
    (r"[a&&]", []),
    (r"[a-c&&]b]", []),
    (r"[a-[bc]]", []),
    (r"[[a]-c]", []),
    (r"[!-&&b]", []),
]]


def replace_tokenizer(pattern):
    """A tokenizer whose ids show where the pattern matches: the bytes of the text (byte fallback
    over a vocabulary of the 256 byte tokens, id = byte), each match replaced by ▁ (E2 96 81)."""
    t = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
         "normalizer": {"type": "Replace", "pattern": {"Regex": pattern}, "content": "▁"},
         "pre_tokenizer": None, "post_processor": None, "decoder": None,
         "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                   "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": True,
                   "ignore_merges": False, "vocab": {"<0x%02X>" % b: b for b in range(256)},
                   "merges": []}}
    return Tokenizer.from_str(json.dumps(t))


def find_all(pattern, text):
    """Every match of pattern in text as tokenizers finds them, empty ones included, as byte
    offsets. Split gives the non-empty matches (its isolated pieces that removal does not keep);
    Replace marks every match, which places the empty ones."""
    assert "\ufdd0" not in text
    r = Regex(pattern)
    pieces = pre_tokenizers.Split(r, "isolated").pre_tokenize_str(text)
    kept = {o for _, o in pre_tokenizers.Split(r, "removed").pre_tokenize_str(text)}
    full = sorted(o for _, o in pieces if o not in kept)
    marked = normalizers.Replace(r, "\ufdd0").normalize_str(text) if text else ""
    out, k, pos, j = [], 0, 0, 0  # k: next non-empty match, pos: in text, j: in marked
    while True:
        if k < len(full) and full[k][0] == pos:
            assert marked[j] == "\ufdd0"
            out.append(full[k])
            j, pos, k = j + 1, full[k][1], k + 1
            continue
        if j < len(marked) and marked[j] == "\ufdd0":
            out.append((pos, pos))
            j += 1
        if pos == len(text):
            break
        assert marked[j] == text[pos]
        j, pos = j + 1, pos + 1
    assert j == len(marked) and k == len(full)
    offsets = [0]
    for ch in text:
        offsets.append(offsets[-1] + len(ch.encode("utf-8")))
    return [[offsets[s], offsets[e]] for s, e in out]


def case(pattern, texts):
    try:
        Regex(pattern)
    except Exception:
        return {"pattern": pattern, "compiles": False}
    tok = replace_tokenizer(pattern)
    return {"pattern": pattern, "compiles": True, "texts": texts,
            "matches": [find_all(pattern, t) for t in texts],
            "ids": [tok.encode(t, add_special_tokens=False).ids for t in texts]}


def classes():
    pats = {f"\\p{{{c}}}": f"\\p{{{c}}}" for c in CATEGORIES}
    pats.update({r"\s": r"\s", r"\d": r"\d"})
    pats.update({f"(?i){c}": f"(?i){c}" for c in "abcdefghijklmnopqrstuvwxyz"})
    return {name: onigsets.matched_ranges(pat) for name, pat in pats.items()}


def main():
    rnd = random.Random(11)
    cases = [case(p, t) for p, t in CASES]
    for p in PUBLISHED:
        texts = ["".join(rnd.choice(POOL) for _ in range(rnd.randint(1, 16))) for _ in range(60)]
        cases.append(case(p, TRICKY + texts))
    data = {"tokenizers": tokenizers.__version__, "classes": classes(), "cases": cases}
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(json.dumps(data, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8"))
    with open(OUT, "wb") as f:
        f.write(buf.getvalue())
    print(f"goldens: {os.path.relpath(OUT, ROOT)}: {len(cases)} patterns, {len(buf.getvalue())} bytes",
          file=sys.stderr)


if __name__ == "__main__":
    main()
