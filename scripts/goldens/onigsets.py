"""The code points an Oniguruma pattern matches on its own, as tokenizers compiles it.

Shared by tokenizer_goldens.py (the classes unicode_table.go is derived from) and regex_goldens.py
(the classes and folds translateRegex must reproduce). Import it after _venv.ensure().
"""

from tokenizers import Regex, pre_tokenizers

# Every code point a Python str holds but the surrogates.
CODE_POINTS = [c for c in range(0x110000) if not (0xD800 <= c <= 0xDFFF)]


def matched_ranges(pattern, cps=CODE_POINTS):
    """The code points of cps that pattern matches alone, as sorted [first, last] ranges: a Split
    that removes its matches leaves the others, 4,096 characters at a time."""
    split = pre_tokenizers.Split(Regex(pattern), "removed")
    members = []
    for i in range(0, len(cps), 4096):
        chunk = cps[i:i + 4096]
        kept = set()
        for text, _ in split.pre_tokenize_str("".join(chr(c) for c in chunk)):
            kept.update(map(ord, text))
        members.extend(c for c in chunk if c not in kept)
    ranges = []
    for c in members:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ranges
