"""The engines' KV cache event structs, declared for msgspec as the engines declare theirs.

vLLM's follow vllm/distributed/kv_events.py field for field, SGLang's
python/sglang/srt/disaggregation/kv_events.py. The goldens of the Go codec
(kvevents_goldens.py) encode with them and the end-to-end tests
(tests/e2e/test_kv_events.py) decode the simulator's events with them.

The tag of each event is its class name, so every family is declared by a call of its own:

  map       current vLLM (since PR #42892): events are tagged structs encoded as maps;
  array     vLLM just before that PR: the same fields but locality (#48281 came later),
            events encoded as arrays;
  array-v0  vLLM before lora_name (#27577): arrays, without lora_name and what came after it;
  sglang    SGLang: arrays with the fields of array-v0, medium optional, the batch's rank
            named attn_dp_rank.

The batch is array-like in every family, its rank written even when None.
"""

from collections import namedtuple
from typing import Any, Optional, Union

import msgspec

Hash = Union[bytes, int]  # vLLM's ExternalBlockHash

FAMILIES = ("map", "array", "array-v0", "sglang")

Structs = namedtuple("Structs", "Batch Stored Removed Cleared")


def structs(family, locality=None):
    """The structs of family, one of FAMILIES. locality=True declares locality in a family
    without it: array events with locality, which no vLLM sent (inferrail-sim's array encoding
    did, until tests/e2e/test_kv_events.py caught it)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}")
    sglang = family == "sglang"
    after_lora_name = family in ("map", "array")  # lora_name and the fields vLLM added since
    # A name of its own: the class bodies declare locality.
    with_locality = family == "map" if locality is None else locality
    HashT = Hash if after_lora_name else int

    class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
        ts: float
        events: list[Any]
        if sglang:
            attn_dp_rank: Optional[int] = None
        else:
            data_parallel_rank: Optional[int] = None

    class KVCacheEvent(msgspec.Struct, array_like=family != "map", omit_defaults=True, gc=False,
                       tag=True):
        pass

    class BlockStored(KVCacheEvent):
        block_hashes: list[HashT]
        parent_block_hash: Optional[HashT]
        token_ids: list[int]
        block_size: int
        lora_id: Optional[int]
        if sglang:
            medium: Optional[str] = None
        else:
            medium: Optional[str]
        if after_lora_name:
            lora_name: Optional[str]
            extra_keys: Optional[list[Optional[tuple[Any, ...]]]] = None
            group_idx: Optional[int] = None
            kv_cache_spec_kind: Optional[str] = None
            kv_cache_spec_sliding_window: Optional[int] = None
        if with_locality:
            locality: Optional[str] = None

    class BlockRemoved(KVCacheEvent):
        block_hashes: list[HashT]
        if sglang:
            medium: Optional[str] = None
        else:
            medium: Optional[str]
        if after_lora_name:
            group_idx: Optional[int] = None
        if with_locality:
            locality: Optional[str] = None

    class AllBlocksCleared(KVCacheEvent):
        pass

    class KVEventBatch(EventBatch):
        events: list[Union[BlockStored, BlockRemoved, AllBlocksCleared]]

    return Structs(KVEventBatch, BlockStored, BlockRemoved, AllBlocksCleared)
