// Package enginehash computes the prefix-cache block hashes vLLM itself
// computes, byte for byte, so that a simulated engine can publish KV events
// whose block hashes are the ones a real vLLM would send.
//
// vLLM hashes each full block of a request's tokens as
//
//	hash_i = hash_fn((parent, tuple(block_tokens), extra_keys))
//
// where parent is hash_{i-1}, or NONE_HASH for the first block, and
// extra_keys is None or a tuple of str: the LoRA adapter's name on every
// block, then the request's cache_salt on block 0 only. hash_fn is chosen by
// --prefix-caching-hash-algo:
//
//	sha256       sha256 of pickle.dumps(x, protocol=5)        32 bytes
//	sha256_cbor  sha256 of cbor2.dumps(x, canonical=True)      32 bytes
//	xxhash       xxh3_128 of pickle.dumps(x, protocol=5)       16 bytes
//	xxhash_cbor  xxh3_128 of cbor2.dumps(x, canonical=True)    16 bytes
//
// NONE_HASH is hash_fn applied to the PYTHONHASHSEED string when that
// variable is set, otherwise 32 random bytes (32 for every algorithm, so
// the first block of an xxhash chain has a 32-byte parent and later blocks
// a 16-byte one). KV events carry each digest's low 64 bits as an unsigned
// integer (EventInt), vLLM's default; with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES
// off they carry the digest bytes themselves.
//
// Use: New(algo, seed) makes an engine's Hasher (PythonHashSeed, RandomSeed,
// SeedFromEnv or NoneHashSeed); Hasher.AppendChain hashes a request's full
// blocks, or resumes a chain as the request grows; Hasher.Block hashes one
// block; Request.ExtraKeys gives the extra_keys a BlockStored event reports
// per block. A Hasher is immutable and safe for concurrent use; its scratch
// buffers come from a sync.Pool, so hashing into a dst with room allocates
// nothing.
//
// Go strings are serialised as their bytes. They match Python's str when
// they are valid UTF-8 (and, for pickle, which writes surrogates through,
// when a lone surrogate is spelled in WTF-8).
//
// The package reimplements the two serialisations for exactly these tuples:
// CPython's C pickler at protocol 5 (framing, memoisation and opcode choice
// as CPython 3.11 and 3.12 emit them; see pickle.go) and cbor2's canonical
// encoder. testdata/goldens.json, written by
// scripts/goldens/enginehash_goldens.py with the real stack, pins both.
//
// Multimodal and prompt-embedding extra keys are not modelled: the
// simulator serves text prompts only.
package enginehash
