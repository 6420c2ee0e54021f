package enginehash

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/zeebo/xxh3"
)

// Seed is what vLLM derives NONE_HASH from: the PYTHONHASHSEED environment
// variable's string value when it is set, 32 random bytes when it is not.
// The zero Seed is the unset (random) one.
type Seed struct {
	value string
	set   bool
	none  []byte
}

// PythonHashSeed is the seed of an engine started with PYTHONHASHSEED=value.
// vLLM hashes the string as written ("007" and "7" differ). CPython itself
// accepts only "random" or a decimal integer below 2^32 there, and "random"
// still gives a fixed NONE_HASH, the hash of the word.
func PythonHashSeed(value string) Seed { return Seed{value: value, set: true} }

// RandomSeed is the seed of an engine started without PYTHONHASHSEED: every
// Hasher made from it draws its own 32 random bytes, as every vLLM process
// does, so no two share a chain.
func RandomSeed() Seed { return Seed{} }

// SeedFromEnv takes the result of os.LookupEnv("PYTHONHASHSEED").
func SeedFromEnv(value string, ok bool) Seed {
	if ok {
		return PythonHashSeed(value)
	}
	return RandomSeed()
}

// NoneHashSeed fixes NONE_HASH itself, for instance to the 32 bytes a
// simulated unseeded engine drew from a deterministic source. It is copied.
func NoneHashSeed(noneHash []byte) Seed {
	return Seed{none: append([]byte(nil), noneHash...)}
}

// String describes the seed.
func (s Seed) String() string {
	switch {
	case s.set:
		return fmt.Sprintf("PYTHONHASHSEED=%q", s.value)
	case s.none != nil:
		return fmt.Sprintf("NONE_HASH=%x", s.none)
	default:
		return "random"
	}
}

// ExtraKeys is a block's extra_keys: None when empty, else a tuple of str
// in this order. For text requests that is the LoRA name (every block) and
// then the cache salt (block 0 only); see Request.ExtraKeys.
type ExtraKeys []string

// Request holds what, besides its tokens, enters a request's block hashes.
// The zero Request is a plain request: no LoRA, no cache salt.
type Request struct {
	LoRA      string // the LoRA adapter's name (lora_name); "" for the base model
	CacheSalt string // the request's cache_salt; "" for none
}

// ExtraKeys returns block i's extra_keys, as vLLM reports them in the
// BlockStored event, or nil for None.
func (r Request) ExtraKeys(i int) ExtraKeys {
	var keys [2]string
	return append(ExtraKeys(nil), r.extra(&keys, i)...)
}

// extra fills keys with block i's extra keys without allocating.
func (r Request) extra(keys *[2]string, i int) ExtraKeys {
	n := 0
	if r.LoRA != "" {
		keys[n] = r.LoRA
		n++
	}
	if i == 0 && r.CacheSalt != "" {
		keys[n] = r.CacheSalt
		n++
	}
	return keys[:n]
}

// Hasher computes one engine's block hashes: an algorithm and the NONE_HASH
// it drew. It is immutable after New and safe for concurrent use; scratch
// buffers come from a pool, so hashing does not allocate once dst has room.
type Hasher struct {
	algo Algo
	none []byte
}

// New returns the Hasher of an engine running algo with seed. It panics if
// algo is not one of the four algorithms.
func New(algo Algo, seed Seed) *Hasher {
	if !algo.valid() {
		panic(fmt.Sprintf("enginehash: invalid %v", algo))
	}
	h := &Hasher{algo: algo}
	switch {
	case seed.set:
		h.none = h.digestString(nil, seed.value)
	case seed.none != nil:
		h.none = append([]byte(nil), seed.none...)
	default:
		h.none = make([]byte, 32)
		_, _ = rand.Read(h.none) // never fails (crypto/rand's contract since Go 1.24)
	}
	return h
}

// Algo returns the hasher's algorithm.
func (h *Hasher) Algo() Algo { return h.algo }

// NoneHash returns NONE_HASH, the parent of every chain's first block. The
// slice is the Hasher's own; do not modify it.
func (h *Hasher) NoneHash() []byte { return h.none }

type scratch struct {
	p   pickler
	buf []byte
}

var scratchPool = sync.Pool{New: func() any { return &scratch{buf: make([]byte, 0, 512)} }}

// Block appends to dst the hash of one block of tokens whose parent block
// hashed to parent (nil or empty: the first block, whose parent is
// NONE_HASH) and returns the extended slice. vLLM only hashes full blocks;
// Block hashes whatever tokens it is given.
func (h *Hasher) Block(dst, parent []byte, tokens []uint32, extra ExtraKeys) []byte {
	if len(parent) == 0 {
		parent = h.none
	}
	s := scratchPool.Get().(*scratch)
	var enc []byte
	if h.algo.cbor() {
		enc = appendCBORBlock(s.buf[:0], parent, tokens, extra)
	} else {
		s.p.reset(s.buf[:0])
		s.p.block(parent, tokens, extra)
		enc = s.p.buf
		s.p.buf = nil
	}
	dst = h.sum(dst, enc)
	s.buf = enc
	scratchPool.Put(s)
	return dst
}

// digestString appends hash_fn(s) for a str s, as init_none_hash does.
func (h *Hasher) digestString(dst []byte, s string) []byte {
	var enc []byte
	if h.algo.cbor() {
		enc = appendCBORString(nil, s)
	} else {
		var p pickler
		p.reset(nil)
		p.string(s)
		enc = p.buf
	}
	return h.sum(dst, enc)
}

func (h *Hasher) sum(dst, enc []byte) []byte {
	if h.algo == XXHash || h.algo == XXHashCBOR {
		d := xxh3.Hash128(enc).Bytes()
		return append(dst, d[:]...)
	}
	d := sha256.Sum256(enc)
	return append(dst, d[:]...)
}

// AppendChain hashes the full blocks of a request's tokens as a chain and
// appends their digests, Algo().Size() bytes each, to dst. dst may already
// hold the digests of the request's first k blocks (from an earlier call
// with a prefix of these tokens): hashing resumes at block k, as vLLM's
// request block hasher does when a request grows. Tokens past the last full
// block are not hashed. It panics if blockSize < 1 or len(dst) is not a
// multiple of the digest size.
func (h *Hasher) AppendChain(dst []byte, tokens []uint32, blockSize int, r Request) []byte {
	size := h.algo.Size()
	if blockSize < 1 || len(dst)%size != 0 {
		panic(fmt.Sprintf("enginehash: AppendChain with block size %d over %d digest bytes", blockSize, len(dst)))
	}
	var keys [2]string
	for i := len(dst) / size; (i+1)*blockSize <= len(tokens); i++ {
		var parent []byte
		if i > 0 {
			parent = dst[(i-1)*size : i*size]
		}
		dst = h.Block(dst, parent, tokens[i*blockSize:(i+1)*blockSize], r.extra(&keys, i))
	}
	return dst
}

// Digests splits AppendChain's output into one digest per block. The
// digests share chain's memory.
func (a Algo) Digests(chain []byte) [][]byte {
	size := a.Size()
	out := make([][]byte, 0, len(chain)/size)
	for len(chain) >= size {
		out = append(out, chain[:size:size])
		chain = chain[size:]
	}
	return out
}

// EventInt is the block hash a KV event carries for digest when vLLM sends
// int block hashes (its default): the digest's low 64 bits, that is its
// last 8 bytes read big-endian (maybe_convert_block_hash). A digest shorter
// than 8 bytes is read as a whole.
func EventInt(digest []byte) uint64 {
	if len(digest) >= 8 {
		return binary.BigEndian.Uint64(digest[len(digest)-8:])
	}
	var v uint64
	for _, b := range digest {
		v = v<<8 | uint64(b)
	}
	return v
}

// AppendEventInts appends the EventInt of every digest in chain, a
// concatenation of digests of algo's size, as AppendChain builds it.
func (a Algo) AppendEventInts(dst []uint64, chain []byte) []uint64 {
	size := a.Size()
	for ; len(chain) >= size; chain = chain[size:] {
		dst = append(dst, EventInt(chain[:size]))
	}
	return dst
}
