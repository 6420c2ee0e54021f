#!/usr/bin/env python3
"""Write the goldens of internal/enginehash: vLLM's prefix-cache block hashes.

The hash functions below follow vLLM (vllm/utils/hashing.py and
vllm/v1/core/kv_cache_utils.py) with the reference stack pinned in
requirements.txt: pickle.dumps at pickle.HIGHEST_PROTOCOL (CPython's C
pickler), cbor2.dumps(canonical=True), hashlib.sha256 and
xxhash.xxh3_128_digest. Extra keys are built as vLLM builds them: the LoRA
name on every block, the cache salt on block 0 only, None when there are
none, else a tuple of str. Strings are made by json.loads, as a request's
strings are, so equal strings are distinct objects unless CPython shares
them (the empty and the one-character latin-1 strings).

It writes internal/enginehash/testdata/goldens.json:

    {"python": ..., "cbor2": ..., "xxhash": ...,
     "chains": [{"algo", "seed" (PYTHONHASHSEED, or null for a random
                 NONE_HASH), "none_hash", "block_size", "lora", "cache_salt",
                 "tokens", "digests", "event_ints"}, ...],
     "encodings": [{"name", "parent", "tokens" or "token_range" [start,
                    count], "extra" (null or list), "pickle_sha256",
                    "cbor_sha256", "pickle" (hex, short ones only)}, ...]}

Usage: python3 scripts/goldens/enginehash_goldens.py
The script makes its own venv (.venv/goldens). Output is deterministic
except the random NONE_HASH cases, which draw os.urandom(32) as vLLM does.
"""

import hashlib
import json
import os
import pickle
import platform
import random
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _venv  # noqa: E402

_venv.ensure()

import cbor2  # noqa: E402
import xxhash  # noqa: E402

OUT = os.path.join(_venv.ROOT, "internal", "enginehash", "testdata", "goldens.json")


def _pickle(obj):
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _cbor(obj):
    return cbor2.dumps(obj, canonical=True)


HASH_FNS = {
    "sha256": lambda obj: hashlib.sha256(_pickle(obj)).digest(),
    "sha256_cbor": lambda obj: hashlib.sha256(_cbor(obj)).digest(),
    "xxhash": lambda obj: xxhash.xxh3_128_digest(_pickle(obj)),
    "xxhash_cbor": lambda obj: xxhash.xxh3_128_digest(_cbor(obj)),
}


def none_hash(hash_fn, seed):
    """init_none_hash: seed is PYTHONHASHSEED's value, or None when unset."""
    if seed is None:
        return os.urandom(32)
    return hash_fn(seed)


def hash_block_tokens(hash_fn, none, parent, tokens, extra_keys):
    if not parent:
        parent = none
    return hash_fn((parent, tuple(tokens), extra_keys))


def block_extra_keys(lora_name, cache_salt, start_token_idx):
    """generate_block_hash_extra_keys for a text request."""
    lora_keys = [lora_name] if lora_name else []
    salt_keys = [cache_salt] if (start_token_idx == 0 and cache_salt) else []
    keys = lora_keys + salt_keys
    return tuple(keys) if keys else None


def event_int(digest):
    """maybe_convert_block_hash with int block hashes on."""
    return int.from_bytes(digest, byteorder="big") & ((1 << 64) - 1)


def as_request_str(s):
    # A fresh object, as a request's JSON decoder makes it.
    return json.loads(json.dumps(s))


def chain_case(algo, seed, block_size, lora, salt, tokens):
    hash_fn = HASH_FNS[algo]
    none = none_hash(hash_fn, seed)
    lora_obj, salt_obj = as_request_str(lora), as_request_str(salt)
    digests, parent = [], None
    for start in range(0, len(tokens) - block_size + 1, block_size):
        extra = block_extra_keys(lora_obj, salt_obj, start)
        parent = hash_block_tokens(hash_fn, none, parent, tokens[start:start + block_size], extra)
        digests.append(parent)
    return {
        "algo": algo, "seed": seed, "none_hash": none.hex(), "block_size": block_size,
        "lora": lora, "cache_salt": salt, "tokens": tokens,
        "digests": [d.hex() for d in digests], "event_ints": [event_int(d) for d in digests],
    }


def random_tokens(rng, n):
    kind = rng.choice(["small", "mixed", "vocab", "huge"])
    out = []
    for _ in range(n):
        r = rng.random()
        if kind == "small":
            out.append(rng.randrange(256))
        elif kind == "vocab" or (kind == "mixed" and r < 0.9):
            out.append(rng.choice([rng.randrange(256), rng.randrange(65536), rng.randrange(300_000)]))
        else:
            out.append(rng.choice([2**31 - 1, 2**31, 2**32 - 1, rng.randrange(2**31 - 1000, 2**32)]))
    return out


SEEDS = ["0", "42", "random", "4294967295", "not a number, ü 日本", None]
LORAS = ["", "", "my-lora", "a", "é", "sql-adapter-v2", "ローラ"]
SALTS = ["", "", "tenant-1", "a", "é", "salt ü 日本語 \U0001F600", "x" * 300, "é" * 200]
BLOCK_SIZES = [1, 2, 3, 4, 16, 32, 256, 1024]


def chains(rng):
    cases = []
    for algo in HASH_FNS:
        for block_size in BLOCK_SIZES:
            for seed in SEEDS:
                if block_size >= 256:
                    n = (2 if block_size == 256 else 1) * block_size + rng.randrange(16)
                else:
                    n = rng.randrange(1, 6) * block_size + rng.randrange(block_size)
                lora, salt = rng.choice(LORAS), rng.choice(SALTS)
                cases.append(chain_case(algo, seed, block_size, lora, salt, random_tokens(rng, n)))
        # Equal LoRA name and salt: shared (one-character) and distinct objects.
        for same in ["a", "é", "ab", "tenant"]:
            cases.append(chain_case(algo, "0", 16, same, same, random_tokens(rng, 40)))
        # Fewer tokens than a block: no digests.
        cases.append(chain_case(algo, "0", 16, "", "", random_tokens(rng, 15)))
    return cases


def encoding(name, parent, tokens, extra, token_range=None):
    obj = (parent, tuple(tokens), extra)
    p, c = _pickle(obj), _cbor(obj)
    case = {"name": name, "parent": parent.hex(), "extra": list(extra) if extra is not None else None,
            "pickle_sha256": hashlib.sha256(p).hexdigest(), "cbor_sha256": hashlib.sha256(c).hexdigest()}
    if token_range is not None:
        case["token_range"] = token_range
    else:
        case["tokens"] = list(tokens)
    if len(p) <= 4096:
        case["pickle"] = p.hex()
    return case


def encodings(rng):
    ones = b"\x01" * 32
    big = 100_000  # every token a 5-byte BININT
    cases = [
        encoding("spec ints", ones, [255, 256, 65535, 65536, 151643], None),
        encoding("long ints", ones, [2**31 - 1, 2**31, 2**32 - 1, 0], None),
        encoding("one token", ones, [7], None),
        encoding("three tokens", ones, [7, 8, 9], ("x",)),
        encoding("empty tokens", ones, [], None),
        encoding("16-byte parent", ones[:16], [1, 2, 3, 4], None),
        encoding("300-byte parent", bytes(range(256)) + ones + ones[:12], [1], None),
        encoding("shared chars", ones, [1], tuple(json.loads('["a", "a"]'))),
        encoding("shared latin-1", ones, [1], tuple(json.loads('["\\u00e9", "\\u00e9"]'))),
        encoding("distinct equal", ones, [1], tuple(json.loads('["ab", "ab"]'))),
        encoding("four keys", ones, [1, 2], tuple(json.loads('["a", "b", "a", "cd"]'))),
        encoding("salt 255 bytes", ones, [1], ("s" * 255,)),
        encoding("salt 256 bytes", ones, [1], ("s" * 256,)),
    ]
    # Frames split at 64 KiB: the token tuple alone crosses it.
    for count in [13093, 13094, 13099, 13100, 13101, 13102, 20000, 26200, 26201]:
        toks = list(range(big, big + count))
        cases.append(encoding(f"{count} tokens", ones, toks, ("lora",), token_range=[big, count]))
    # Payloads of 64 KiB and more are written unframed.
    for n in [65535 - 60, 65535, 65536, 70000]:
        cases.append(encoding(f"salt {n}", ones, [1, 2], ("lora", "x" * n)))
    cases.append(encoding("lora 65536, salt 1", ones, [1], ("y" * 65536, "z")))
    cases.append(encoding("long tuple then long salt", ones, list(range(big, big + 13200)),
                          ("x" * 65536,), token_range=[big, 13200]))
    return cases


def main():
    rng = random.Random(20261201)
    doc = {
        "python": platform.python_version(), "cbor2": _version("cbor2"), "xxhash": xxhash.VERSION,
        "chains": chains(rng), "encodings": encodings(rng),
    }
    with open(OUT, "w") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {os.path.relpath(OUT, _venv.ROOT)}: {len(doc['chains'])} chains, "
          f"{len(doc['encodings'])} encodings", file=sys.stderr)


def _version(dist):
    from importlib.metadata import version
    return version(dist)


if __name__ == "__main__":
    main()
