// Package blockhash names KV cache blocks the way the router and the
// simulator agree on: a chain of XXH3-128 hashes, one per full block of
// tokens, each covering its parent's hash, so that one hash stands for the
// whole prefix up to its block. Tokenizers produce the tokens; the index,
// the policies, the gateway and the simulator take the hashes as they are.
//
// These are the router's own names for blocks. An engine's KV events carry
// its own hash values (vLLM's sha256 chain by default), which are never
// assumed equal to these.
package blockhash

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"
	"slices"

	"github.com/zeebo/xxh3"
)

// Hash names a full block of tokens and, through the chain, every token
// before it.
type Hash struct{ Hi, Lo uint64 }

// String returns the hash as 32 hex digits.
func (h Hash) String() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], h.Hi)
	binary.BigEndian.PutUint64(b[8:], h.Lo)
	return hex.EncodeToString(b[:])
}

// Parse reads a hash written by String: exactly 32 hex digits.
func Parse(s string) (Hash, error) {
	var b [16]byte
	if len(s) != 2*len(b) {
		return Hash{}, fmt.Errorf("block hash %q: want 32 hex digits", s)
	}
	if _, err := hex.Decode(b[:], []byte(s)); err != nil {
		return Hash{}, fmt.Errorf("block hash %q: %w", s, err)
	}
	return Hash{Hi: binary.BigEndian.Uint64(b[:8]), Lo: binary.BigEndian.Uint64(b[8:])}, nil
}

// Seed is the parent of a prompt's first block. It salts the chain with
// everything that must keep two prompts of equal tokens apart: the model, the
// LoRA adapter and the request's cache_salt.
func Seed(model, adapter, cacheSalt string) Hash {
	buf := make([]byte, 0, len(model)+len(adapter)+len(cacheSalt)+16)
	buf = append(buf, "inferrail-chain\x00"...)
	buf = append(buf, model...)
	buf = append(buf, 0)
	buf = append(buf, adapter...)
	buf = append(buf, 0)
	buf = append(buf, cacheSalt...)
	h := xxh3.Hash128(buf)
	return Hash{h.Hi, h.Lo}
}

// Next is the hash of one block of tokens after parent: what Extend
// computes for that block. It is for readers of KV events, whose token ids
// come as uint32; it allocates nothing for blocks of up to 256 tokens.
func Next(parent Hash, tokens []uint32) Hash {
	var stack [16 + 4*256]byte
	buf := stack[:]
	if need := 16 + 4*len(tokens); need > len(stack) {
		buf = make([]byte, need)
	}
	buf = buf[:16+4*len(tokens)]
	binary.LittleEndian.PutUint64(buf[0:], parent.Hi)
	binary.LittleEndian.PutUint64(buf[8:], parent.Lo)
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(buf[16+4*i:], t)
	}
	h := xxh3.Hash128(buf)
	return Hash{h.Hi, h.Lo}
}

// Extend appends to hashes the chained XXH3-128 hashes of the full
// blocks of tokens that hashes does not cover yet, and returns the extended
// slice. hashes must hold the hashes of the first len(hashes) blocks of the
// same tokens, chained from seed. A trailing partial block is never hashed.
//
// A block's hash is XXH3-128 (default secret, seed 0) of its parent's hash,
// Hi then Lo as little-endian uint64, followed by its tokens as
// little-endian uint32.
func Extend(hashes []Hash, seed Hash, tokens []int, blockSize int) []Hash {
	parent := seed
	if len(hashes) > 0 {
		parent = hashes[len(hashes)-1]
	}
	start := len(hashes) * blockSize
	if start+blockSize > len(tokens) {
		return hashes
	}
	hashes = slices.Grow(hashes, (len(tokens)-start)/blockSize)
	if blockSize == 16 {
		return appendHashes16(hashes, parent, tokens[start:])
	}
	var stack [16 + 4*64]byte
	buf := stack[:]
	if need := 16 + 4*blockSize; need > len(stack) {
		buf = make([]byte, need)
	}
	buf = buf[:16+4*blockSize]
	for ; start+blockSize <= len(tokens); start += blockSize {
		binary.LittleEndian.PutUint64(buf[0:], parent.Hi)
		binary.LittleEndian.PutUint64(buf[8:], parent.Lo)
		b := buf[16:]
		for i, t := range tokens[start : start+blockSize] {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(t))
		}
		h := xxh3.Hash128(buf)
		parent = Hash{h.Hi, h.Lo}
		hashes = append(hashes, parent)
	}
	return hashes
}

// Constants of XXH3 (xxhash.h): the first 96 bytes of its default secret,
// kSecret, read as little-endian uint64, and two of its 64-bit primes.
const (
	xxhSecret00 = 0xbe4ba423396cfeb8
	xxhSecret08 = 0x1cad21f72c81017c
	xxhSecret16 = 0xdb979083e96dd4de
	xxhSecret24 = 0x1f67b3b7a4a44072
	xxhSecret32 = 0x78e5c0cc4ee679cb
	xxhSecret40 = 0x2172ffcc7dd05a82
	xxhSecret48 = 0x8e2443f7744608b8
	xxhSecret56 = 0x4c263a81e69035e0
	xxhSecret64 = 0xcb00c391bb52283c
	xxhSecret72 = 0xa32e531b8b65d088
	xxhSecret80 = 0x4ef90da297486471
	xxhSecret88 = 0xd8acdea946ef1938

	xxhPrime64x1 = 0x9E3779B185EBCA87
	xxhPrime64x2 = 0xC2B2AE3D27D4EB4F
	xxhPrime64x4 = 0x85EBCA77C2B2AE63
)

// appendHashes16 appends the chained hashes of the full blocks of 16
// tokens of tokens, the first one's parent being parent. Each is XXH3-128
// of the 80 bytes Extend hashes for other sizes, computed
// without writing them out: it follows XXH3_len_17to128_128b of xxhash.h
// for 80 bytes of input, whose eight-byte words are the parent's Hi and Lo
// (bytes 0..15) and then tw(k), tokens 2k and 2k+1 (bytes 16+8k..23+8k).
// Only the last of its three rounds reads the parent, so along the chain a
// block waits on little more than that round and the final mix. The loop
// body is written out here rather than called: the call costs a fifth.
func appendHashes16(hashes []Hash, parent Hash, tokens []int) []Hash {
	for ; len(tokens) >= 16; tokens = tokens[16:] {
		t := (*[16]int)(tokens)
		tw := func(k int) uint64 { return uint64(uint32(t[2*k])) | uint64(uint32(t[2*k+1]))<<32 }
		const n = 80
		lo := uint64(n * xxhPrime64x1 & (1<<64 - 1))
		var hi uint64
		// Bytes 32..47, which are also bytes n-48..n-33.
		a, b := tw(2), tw(3)
		hi += mulFold64(a^xxhSecret80, b^xxhSecret88)
		hi ^= a + b
		lo += mulFold64(a^xxhSecret64, b^xxhSecret72)
		lo ^= a + b
		// Bytes 16..31 and n-32..n-17.
		a, b = tw(0), tw(1)
		c, d := tw(4), tw(5)
		hi += mulFold64(c^xxhSecret48, d^xxhSecret56)
		hi ^= a + b
		lo += mulFold64(a^xxhSecret32, b^xxhSecret40)
		lo ^= c + d
		// Bytes 0..15, the parent, and n-16..n-1.
		c, d = tw(6), tw(7)
		hi += mulFold64(c^xxhSecret16, d^xxhSecret24)
		hi ^= parent.Hi + parent.Lo
		lo += mulFold64(parent.Hi^xxhSecret00, parent.Lo^xxhSecret08)
		lo ^= c + d
		hi, lo = lo*xxhPrime64x1+hi*xxhPrime64x4+n*xxhPrime64x2&(1<<64-1), hi+lo
		parent = Hash{Hi: -xxh3Avalanche(hi), Lo: xxh3Avalanche(lo)}
		hashes = append(hashes, parent)
	}
	return hashes
}

func mulFold64(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

func xxh3Avalanche(h uint64) uint64 {
	h ^= h >> 37
	h *= 0x165667919E3779F9
	return h ^ h>>32
}
