#!/usr/bin/env python3
"""Write the %-formatting goldens of the chat templates' format filter: what Python's % gives.

Jinja's format filter is Python's `format % args`; internal/tokenize/chattemplate (pyformat.go)
reimplements it. This writes internal/tokenize/chattemplate/testdata/pypercent.jsonl.gz: one line
per case, {"format", "args" (a JSON list), "ok", "result"}: the formatted text when Python formats
it, else the Python exception's type and message (TestPyPercentGoldens checks the text, and that
Go refuses exactly what Python refuses; the messages differ).

The cases are drawn at random, seeded, over every conversion, flag set, width (a "*" too, whose
argument may be negative), precision (a ".*" too) and argument kind a template can pass: integers
within 64 bits, as the gateway declines a body with others before rendering. Python's % formatting
has not changed since 3.0; any CPython 3 writes the same file.

Usage: python3 scripts/goldens/pypercent_goldens.py  (no packages needed)
"""

import gzip
import json
import os
import random

CONVERSIONS = "sdifFeEgGxXocra%"
FLAGS = ["", "-", "+", " ", "#", "0", "-0", "+#", "#0", " 0", "-+ "]
WIDTHS = ["", "", "5", "12", "0", "*"]
PRECISIONS = ["", "", ".2", ".0", ".10", ".", ".*"]
ARGS = [0, 1, -1, 7, 42, 255, -255, 65, 0x10FFFF, 0x110000, 123456789012, -(2**62),
        3.14159, -2.5, 0.5, 1.5, 2.5, 1e20, -1e20, 1e-7, 0.0, -0.0, 1e300,
        "x", "hello", "", "it's", "日本", "a\u2028b", True, False, None, [1, "a"], {"k": 1}]


def case(rng):
    fmt, args = "", []
    for _ in range(rng.randint(1, 3)):
        fmt += rng.choice(["", "a", " ", "|"]) + "%" + rng.choice(FLAGS)
        width = rng.choice(WIDTHS)
        if width == "*":
            args.append(rng.choice([-6, -1, 0, 3, 8]))
        precision = rng.choice(PRECISIONS)
        if precision == ".*":
            args.append(rng.choice([-2, 0, 1, 3]))
        conversion = rng.choice(CONVERSIONS)
        fmt += width + precision + conversion
        if conversion != "%" or rng.random() < 0.5:
            args.append(rng.choice(ARGS))
    try:
        return {"format": fmt, "args": args, "ok": True, "result": fmt % tuple(args)}
    except Exception as e:  # the case is what Python refuses
        return {"format": fmt, "args": args, "ok": False, "result": f"{type(e).__name__}: {e}"}


def main():
    rng = random.Random(58)
    out = os.path.join(os.path.dirname(__file__), "..", "..", "internal", "tokenize", "chattemplate",
                       "testdata", "pypercent.jsonl.gz")
    with gzip.GzipFile(out, "wb", mtime=0) as f:
        for _ in range(6000):
            f.write((json.dumps(case(rng), ensure_ascii=False) + "\n").encode())


if __name__ == "__main__":
    main()
