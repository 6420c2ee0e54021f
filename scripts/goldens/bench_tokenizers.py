#!/usr/bin/env python3
"""Compare raw encoding throughput: internal/tokenize/hf against Hugging Face tokenizers.

Both encode the corpus of BenchmarkHFEncode (tokenizetest.Corpus): the go command's
documentation and net/http's server.go from the pinned Go toolchain, cut at line ends into chunks
of at most 4 KiB, without special tokens, on one thread, with warm caches. HF tokenizers is the
PyPI binding pinned in requirements.txt (Rust core), as transformers builds it for the directory
(AutoTokenizer's backend_tokenizer: for Llama 2 and GPT-4o not tokenizer.json's own pipeline);
Tokenizer.encode on one string is single-threaded, and RAYON_NUM_THREADS=1 keeps it so.

Usage: python3 scripts/goldens/bench_tokenizers.py [--seconds S] [family...]
Prints MB/s per family for both and the ratio Go / HF (goal: at least 1.0).
"""

import argparse
import os
import re
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _venv  # noqa: E402

_venv.ensure()

import tokenizers  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

ROOT = _venv.ROOT
CACHE = os.path.join(ROOT, ".cache", "tokenizers")
FAMILIES = ["qwen3", "llama3_1", "llama2", "gemma3", "deepseek_v3", "llama3_2", "mistral_nemo", "gpt4o", "command_r_plus"]
GO_ENV = dict(os.environ, GOTOOLCHAIN="go1.27.3")


def chunk_lines(s, limit):
    """The chunking of chunkLines in internal/tokenize/tokenizetest/corpus.go."""
    chunks, start, end = [], 0, 0
    while end < len(s):
        nxt = s.find(b"\n", end)
        nxt = len(s) if nxt < 0 else nxt + 1
        if nxt - start > limit and end > start:
            chunks.append(s[start:end])
            start = end
        end = nxt
    if end > start:
        chunks.append(s[start:end])
    return chunks


def corpus():
    goroot = subprocess.run(["go", "env", "GOROOT"], capture_output=True, text=True, check=True,
                            env=GO_ENV).stdout.strip()
    chunks = []
    for name in ["src/cmd/go/alldocs.go", "src/net/http/server.go"]:
        with open(os.path.join(goroot, name), "rb") as f:
            chunks += chunk_lines(f.read(), 4096)
    return [c.decode("utf-8") for c in chunks], sum(len(c) for c in chunks)


def hf_mbps(family, chunks, size, seconds):
    tok = AutoTokenizer.from_pretrained(os.path.join(CACHE, family)).backend_tokenizer
    for c in chunks:  # warm the BPE cache, as the Go benchmark's first iteration does
        tok.encode(c, add_special_tokens=False)
    best = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        for c in chunks:
            tok.encode(c, add_special_tokens=False)
        best = max(best, size / (time.perf_counter() - t0) / 1e6)
    return best


def go_mbps(families, seconds):
    pattern = "^BenchmarkHFEncode$/^(" + "|".join(families) + ")$"
    out = subprocess.run(
        ["go", "test", "./internal/tokenize/hf", "-run", "^$", "-bench", pattern,
         "-benchtime", f"{seconds}s", "-count", "3", "-cpu", "1"],
        cwd=ROOT, capture_output=True, text=True, env=GO_ENV)
    if out.returncode != 0:
        sys.exit(out.stdout + out.stderr)
    best = {}
    for m in re.finditer(r"BenchmarkHFEncode/(\w+)\s+\d+\s+\d+ ns/op\s+([\d.]+) MB/s", out.stdout):
        best[m.group(1)] = max(best.get(m.group(1), 0.0), float(m.group(2)))
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3, help="time per measurement (default 3)")
    ap.add_argument("family", nargs="*", help="families (default: all)")
    args = ap.parse_args()
    fams = args.family or FAMILIES
    chunks, size = corpus()
    print(f"corpus: {len(chunks)} chunks, {size} bytes; tokenizers {tokenizers.__version__}, "
          f"transformers {transformers.__version__}")
    hf = {f: hf_mbps(f, chunks, size, args.seconds) for f in fams}
    go = go_mbps(fams, args.seconds)
    print(f"{'family':<12} {'Go MB/s':>9} {'HF MB/s':>9} {'Go/HF':>7}")
    for f in fams:
        g = go.get(f, 0.0)
        print(f"{f:<12} {g:>9.2f} {hf[f]:>9.2f} {g / hf[f]:>7.2f}")


if __name__ == "__main__":
    main()
