#!/usr/bin/env python3
"""Write the KV cache event goldens of the Go msgpack codec (internal/events).

The payloads are encoded by msgspec itself (pinned in requirements.txt), from msgspec Structs
declared the way the engines declare theirs (kvstructs.py):

  map      current vLLM (since PR #42892): events are tagged structs encoded as maps,
           {"type": <class name>, fields...}, omit_defaults drops defaulted fields equal to None;
  array    older vLLM: the same fields, but events are array_like: [tag, fields...], every
           field written (msgspec ignores omit_defaults for array_like structs, its issue #720);
  array-v0 vLLM before lora_name (2025): [tag, hashes, parent, tokens, block_size, lora_id, medium];
  sglang   SGLang's array_like events: BlockStored[block_hashes, parent_block_hash, token_ids,
           block_size, lora_id, medium=None], BlockRemoved[block_hashes, medium=None].

The batch is always array_like [ts, events, data_parallel_rank=None] (attn_dp_rank in SGLang), so
the rank is written even when None; vLLM before #18925 had no rank (a two-element batch).
The struct fields are those of the project's vLLM reference notes (section 3.3).

Output: internal/events/testdata/goldens.json, a list of cases
    {"name", "family", "encode": bool, "hex": payload, "batch": expectation}
or  {"name", "family", "hex", "error": "<sentinel name>"} for payloads the decoder must refuse.
"encode" is false where the Go encoder cannot produce the bytes (an older struct shape, events in
mixed forms, fields from the future). In the expectation each hash is {"u": n}, {"i": n} (negative)
or {"b": hex}; each extra_keys entry is the hex of its msgpack encoding; a field the struct does
not have, or has as None, is null or missing.

Usage: python3 scripts/goldens/kvevents_goldens.py
The script makes its own venv (.venv/goldens) from the pinned, hashed wheels.
"""

import json
import os
import sys
from typing import Any, Optional

sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _venv  # noqa: E402

_venv.ensure()

import msgspec  # noqa: E402

import kvstructs  # noqa: E402

ROOT = _venv.ROOT
OUT = os.path.join(ROOT, "internal", "events", "testdata", "goldens.json")

FAMILIES = {fam: kvstructs.structs(fam) for fam in kvstructs.FAMILIES}

ENC = msgspec.msgpack.Encoder()

# The fields of the expectation, by the wire name they have in every family.
EVENT_FIELDS = [
    "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
    "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window",
    "locality",
]


def hash_json(h):
    if isinstance(h, bytes):
        return {"b": h.hex()}
    return {"u": h} if h >= 0 else {"i": h}


def expect_event(ev, future=False):
    """The decoder's expectation of ev; with future, fields it does not know are left out."""
    out = {"type": type(ev).__name__}
    for f in ev.__struct_fields__:
        v = getattr(ev, f)
        if f not in EVENT_FIELDS:
            if future:
                continue
            raise ValueError(f"unknown field {f}")
        if v is None:
            continue
        if f == "block_hashes":
            v = [hash_json(h) for h in v]
        elif f == "parent_block_hash":
            v = hash_json(v)
        elif f == "extra_keys":
            v = [ENC.encode(k).hex() for k in v]
        out[f] = v
    return out


def expect_batch(batch, future=False):
    rank = getattr(batch, "data_parallel_rank", getattr(batch, "attn_dp_rank", None))
    return {"ts": batch.ts, "dp_rank": rank,
            "events": [expect_event(e, future) for e in batch.events]}


def tokens(start, n):
    return list(range(start, start + n))


# The block hashes of the spec's example (sha256_cbor of its section 4.3 test vectors, low 64 bits).
H1, H2 = 0x2CEABCFAE6D332EA, 0x26470BBEC927F5BF


def spec_example(fam):
    Batch, Stored, Removed, Cleared = FAMILIES[fam]
    return Batch(ts=1755000000.5, data_parallel_rank=0, events=[
        Stored(block_hashes=[H1, H2], parent_block_hash=None, token_ids=tokens(1, 32),
               block_size=16, lora_id=None, medium="GPU", lora_name=None,
               extra_keys=[None, None], group_idx=0, kv_cache_spec_kind="full_attention"),
        Removed(block_hashes=[H2], medium="GPU", group_idx=0),
        Cleared(),
    ])


# The spec's hex of the example (section 3.3), with its elided token run written out.
SPEC_HEX = (
    "93cb41da26cb30200000938ba474797065ab426c6f636b53746f726564ac626c6f636b5f686173686573"
    "92cf2ceabcfae6d332eacf26470bbec927f5bfb1706172656e745f626c6f636b5f68617368c0"
    "a9746f6b656e5f696473dc0020" + bytes(range(1, 33)).hex()
    + "aa626c6f636b5f73697a6510a76c6f72615f6964c0a66d656469756da3475055"
    "a96c6f72615f6e616d65c0aa65787472615f6b65797392c0c0a967726f75705f69647800"
    "b26b765f63616368655f737065635f6b696e64ae66756c6c5f617474656e74696f6e"
    "84a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391cf26470bbec927f5bf"
    "a66d656469756da3475055a967726f75705f69647800"
    "81a474797065b0416c6c426c6f636b73436c656172656400"
)

EDGE_UINTS = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
              2**63 - 1, 2**63, 2**64 - 1]
EDGE_NEG = [-1, -31, -32, -33, -127, -128, -129, -32767, -32768, -32769, -(2**31) + 1,
            -(2**31), -(2**31) - 1, -(2**63)]


def vllm_cases(fam):
    Batch, Stored, Removed, Cleared = FAMILIES[fam]

    def no_locality(cls, kw):
        if "locality" not in cls.__struct_fields__:  # the array family has none
            kw.pop("locality", None)
        return kw

    def removed(**kw):
        return Removed(**no_locality(Removed, kw))

    def stored(hashes, toks, bs=16, parent=None, **kw):
        base = dict(lora_id=None, medium="GPU", lora_name=None)
        base.update(no_locality(Stored, kw))
        return Stored(block_hashes=hashes, parent_block_hash=parent, token_ids=toks,
                      block_size=bs, **base)

    yield "spec-example", spec_example(fam)
    yield "empty-events", Batch(ts=0.0, events=[], data_parallel_rank=0)
    yield "rank-absent", Batch(ts=1.25, events=[Cleared()])
    yield "rank-3", Batch(ts=1755000123.125, data_parallel_rank=3, events=[
        stored([7], tokens(100, 4), bs=4, parent=6, extra_keys=[None], group_idx=0)])
    yield "rank-big", Batch(ts=-2.5, data_parallel_rank=70000, events=[Cleared()])
    yield "bytes32-hashes", Batch(ts=2.0, data_parallel_rank=0, events=[
        stored([bytes(range(32)), bytes(range(32, 64))], tokens(0, 8), bs=4,
               parent=bytes([0xFF] * 32), extra_keys=[None, None], group_idx=0),
        Removed(block_hashes=[bytes(range(32))], medium="GPU", group_idx=0)])
    yield "bytes16-hashes", Batch(ts=3.0, data_parallel_rank=1, events=[
        stored([bytes(range(16))], tokens(5, 16), parent=bytes(16), extra_keys=[None],
               group_idx=1, kv_cache_spec_kind="sliding_window",
               kv_cache_spec_sliding_window=4096)])
    yield "big-token-ids", Batch(ts=4.0, data_parallel_rank=0, events=[
        stored([1, 2], [0, 127, 128, 255, 256, 65535, 65536, 151935, 2**31 - 1, 2**31,
                        2**32 - 1, 3], bs=6, parent=None, extra_keys=[None, None], group_idx=0)])
    yield "edge-uint-hashes", Batch(ts=5.0, data_parallel_rank=0, events=[
        Removed(block_hashes=EDGE_UINTS, medium="CPU"),
        stored([2**64 - 1], tokens(0, 2), bs=2, parent=0)])
    yield "lora", Batch(ts=6.0, data_parallel_rank=0, events=[
        stored([11, 12], tokens(1000, 8), bs=4, parent=10, lora_id=3, lora_name="sql-adapter",
               extra_keys=[("sql-adapter",), ("sql-adapter",)], group_idx=0,
               kv_cache_spec_kind="full_attention")])
    yield "extra-keys", Batch(ts=7.0, data_parallel_rank=0, events=[
        stored([21, 22, 23], tokens(50, 12), bs=4, lora_id=1, lora_name="a" * 40,
               extra_keys=[("a" * 40, ("mm-hash-0123456789abcdef", 0), "salt-xyz"),
                           None, ("a" * 40, ("mm-hash-0123456789abcdef", -4), b"\x00\x01emb")],
               group_idx=0, kv_cache_spec_kind="full_attention")])
    yield "all-optional-fields", Batch(ts=8.0, data_parallel_rank=2, events=[
        stored([31], tokens(0, 16), parent=30, lora_id=2**40, medium="CPU", lora_name="n",
               extra_keys=[None], group_idx=5, kv_cache_spec_kind="sliding_window_mla",
               kv_cache_spec_sliding_window=128, locality="REMOTE"),
        removed(block_hashes=[31], medium="STORAGE", group_idx=5, locality="LOCAL"),
        removed(block_hashes=[32], medium=None, locality="LOCAL")])
    yield "defaults-between", Batch(ts=9.0, data_parallel_rank=0, events=[
        stored([41], tokens(0, 4), bs=4, medium=None, locality="LOCAL"),
        stored([42], tokens(4, 4), bs=4, parent=41, kv_cache_spec_sliding_window=0)])
    yield "many-blocks", Batch(ts=10.0, data_parallel_rank=0, events=[
        stored([(i * 0x9E3779B97F4A7C15) % 2**64 for i in range(1, 21)],
               [(i * 7919) % 151936 for i in range(320)], parent=99,
               extra_keys=[None] * 20, group_idx=0, kv_cache_spec_kind="full_attention"),
        *[Removed(block_hashes=[i], medium="GPU", group_idx=0) for i in range(17)]])
    yield "long-strings", Batch(ts=11.0, data_parallel_rank=0, events=[
        stored([1], tokens(0, 1), bs=1, lora_id=0, lora_name="x" * 300, medium="M" * 31,
               kv_cache_spec_kind="k" * 32)])
    if fam == "map":  # one family shows msgspec's array32 (the fixture is large)
        yield "array32-tokens", Batch(ts=12.0, data_parallel_rank=0, events=[
            stored([5], [1] * 65536, bs=65536)])


def sglang_cases():
    Batch, Stored, Removed, Cleared = FAMILIES["sglang"]
    yield "basic", Batch(ts=1755000000.5, attn_dp_rank=0, events=[
        Stored(block_hashes=[H1, H2], parent_block_hash=None, token_ids=tokens(1, 32),
               block_size=16, lora_id=None),
        Removed(block_hashes=[H2]), Cleared()])
    yield "negative-hashes", Batch(ts=1.0, attn_dp_rank=1, events=[
        Removed(block_hashes=EDGE_NEG),
        Stored(block_hashes=[-5, 9223372036854775807], parent_block_hash=-(2**63),
               token_ids=tokens(0, 2), block_size=1, lora_id=-1, medium="CPU_PINNED")])
    yield "medium-set", Batch(ts=2.0, attn_dp_rank=7, events=[
        Stored(block_hashes=[1], parent_block_hash=0, token_ids=tokens(10, 64), block_size=64,
               lora_id=5, medium="GPU"),
        Removed(block_hashes=[1], medium="DISK")])
    yield "rank-absent", Batch(ts=3.0, events=[Cleared()])


def v0_cases():
    Batch, Stored, Removed, Cleared = FAMILIES["array-v0"]
    yield "old-vllm", Batch(ts=1.0, data_parallel_rank=0, events=[
        Stored(block_hashes=[1, 2], parent_block_hash=None, token_ids=tokens(0, 32),
               block_size=16, lora_id=None, medium="GPU"),
        Removed(block_hashes=[1], medium="GPU"), Cleared()])
    yield "old-vllm-no-rank", Batch(ts=2.0, events=[
        Stored(block_hashes=[3], parent_block_hash=2, token_ids=tokens(0, 16), block_size=16,
               lora_id=None, medium=None)])

    class OldestBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
        # vLLM before data_parallel_rank (#18925): the batch has two elements.
        ts: float
        events: list[Any]

    yield "oldest-two-element-batch", OldestBatch(ts=3.0, events=[
        Stored(block_hashes=[4], parent_block_hash=None, token_ids=tokens(0, 16), block_size=16,
               lora_id=None, medium="GPU"), Cleared()])


def decode_only_cases():
    """Payloads the Go encoder need not reproduce: mixed forms, future fields and kinds."""
    mBatch, mStored, mRemoved, mCleared = FAMILIES["map"]
    aStored, aRemoved = FAMILIES["array"][1], FAMILIES["array"][2]
    sStored = FAMILIES["sglang"][1]

    class BlockMoved(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
        block_hashes: list[int]
        to: str

    class BlockStored(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
        # A future vLLM: a field this decoder does not know, and the known ones reordered.
        future: dict[str, Any]
        token_ids: list[int]
        block_size: int
        block_hashes: list[int]
        parent_block_hash: Optional[int]
        medium: Optional[str]
        extra_keys: Optional[list[Any]] = None

    mixed = mBatch(ts=1.0, data_parallel_rank=0, events=[
        mStored(block_hashes=[1], parent_block_hash=None, token_ids=tokens(0, 4), block_size=4,
                lora_id=None, medium="GPU", lora_name=None, extra_keys=[None], group_idx=0),
        aStored(block_hashes=[2], parent_block_hash=1, token_ids=tokens(4, 4), block_size=4,
                lora_id=None, medium="GPU", lora_name=None, group_idx=0),
        sStored(block_hashes=[3], parent_block_hash=2, token_ids=tokens(8, 4), block_size=4,
                lora_id=None),
        aRemoved(block_hashes=[1], medium="GPU"), mRemoved(block_hashes=[2], medium="GPU"),
        mCleared()])
    yield "mixed-forms", mixed, expect_batch(mixed)

    future = mBatch(ts=2.0, data_parallel_rank=0, events=[
        BlockStored(future={"a": [1, {"b": None}], "c": 1.5}, token_ids=tokens(0, 4),
                    block_size=4, block_hashes=[9], parent_block_hash=None, medium="GPU",
                    extra_keys=[None]),
        BlockMoved(block_hashes=[9], to="CPU"),
        mCleared()])
    want = expect_batch(future, future=True)
    want["events"] = [e for e in want["events"] if e["type"] != "BlockMoved"]
    want["skipped"] = 1
    yield "future-fields-and-kinds", future, want

    # Array-like events with locality, which no vLLM sent (inferrail-sim's array encoding did
    # until it was caught by tests/e2e/test_kv_events.py): still read.
    _, lStored, lRemoved, _ = kvstructs.structs("array", locality=True)
    located = mBatch(ts=3.0, data_parallel_rank=0, events=[
        lStored(block_hashes=[5], parent_block_hash=None, token_ids=tokens(0, 4), block_size=4,
                lora_id=None, medium="GPU", lora_name=None, extra_keys=[None], group_idx=0,
                kv_cache_spec_kind="full_attention", locality="LOCAL"),
        lRemoved(block_hashes=[5], medium="GPU", group_idx=0)])
    yield "array-with-locality", located, expect_batch(located)


def error_cases():
    """Payloads the decoder must refuse, with the sentinel error it returns."""
    Batch, Stored = FAMILIES["map"][0], FAMILIES["map"][1]

    def one(toks):
        return ENC.encode(Batch(ts=1.0, data_parallel_rank=0, events=[
            Stored(block_hashes=[1], parent_block_hash=None, token_ids=toks, block_size=1,
                   lora_id=None, medium=None, lora_name=None)]))

    yield "token-id-2^32", one([2**32]), "ErrRange"
    yield "token-id-negative", one([-1]), "ErrRange"
    good = ENC.encode(spec_example("map"))
    yield "truncated", good[:-1], "ErrTruncated"
    yield "trailing-byte", good + b"\xc0", "ErrTrailing"
    yield "not-an-array", ENC.encode({"ts": 1.0}), "ErrType"
    yield "huge-events-header", b"\x92" + ENC.encode(1.0) + b"\xdd\xff\xff\xff\xff", "ErrTooLong"
    small = one([1])
    at = small.index(b"\xa9token_ids\x91\x01") + len(b"\xa9token_ids")
    yield "huge-tokens-header", small[:at] + b"\xdd\xff\xff\xff\xff" + small[at + 1:], "ErrTooLong"
    yield "tokens-nil", ENC.encode([1.0, [{"type": "BlockStored", "block_hashes": [],
                                           "token_ids": None, "block_size": 1}]]), "ErrType"
    yield "no-tag", ENC.encode([1.0, [{"block_hashes": []}]]), "ErrMissingField"
    yield "stored-without-tokens", ENC.encode([1.0, [["BlockStored", [1], None]]]), \
        "ErrMissingField"


def main():
    cases = []
    for fam in ("map", "array"):
        for name, batch in vllm_cases(fam):
            cases.append((f"{fam}/{name}", fam, True, batch, expect_batch(batch)))
    for name, batch in sglang_cases():
        cases.append((f"sglang/{name}", "sglang", True, batch, expect_batch(batch)))
    for name, batch in v0_cases():
        cases.append((f"array-v0/{name}", "array-v0", False, batch, expect_batch(batch)))
    for name, batch, want in decode_only_cases():
        cases.append((f"decode/{name}", "mixed", False, batch, want))

    out = []
    for name, fam, encode, batch, want in cases:
        payload = ENC.encode(batch)
        # msgspec must read back what it wrote with the family's own structs, and write it again
        # byte for byte.
        if fam in FAMILIES:
            if ENC.encode(msgspec.msgpack.decode(payload, type=type(batch))) != payload:
                sys.exit(f"{name}: msgspec does not round-trip")
        out.append({"name": name, "family": fam, "encode": encode, "hex": payload.hex(),
                    "batch": want})
    for name, payload, err in error_cases():
        out.append({"name": f"error/{name}", "family": "error", "hex": payload.hex(),
                    "error": err})

    spec = bytes.fromhex(SPEC_HEX)
    got = ENC.encode(spec_example("map"))
    if len(got) != 315 or got != spec:
        sys.exit(f"spec example: msgspec wrote {len(got)} bytes {got.hex()}, spec says {SPEC_HEX}")

    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write("[\n")
        f.write(",\n".join(json.dumps(c, sort_keys=True) for c in out))
        f.write("\n]\n")
    print(f"wrote {len(out)} cases to {os.path.relpath(OUT, ROOT)} (msgspec {msgspec.__version__})")


if __name__ == "__main__":
    main()
