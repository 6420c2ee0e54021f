package tokenize

import (
	"encoding/binary"
	"encoding/hex"

	"github.com/zeebo/xxh3"
)

// BlockHash names a full block of tokens and, through the chain, every token
// before it.
type BlockHash struct{ Hi, Lo uint64 }

// String returns the hash as 32 hex digits.
func (h BlockHash) String() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], h.Hi)
	binary.BigEndian.PutUint64(b[8:], h.Lo)
	return hex.EncodeToString(b[:])
}

// ChainSeed is the parent of a prompt's first block. It salts the chain with
// everything that must keep two prompts of equal tokens apart: the model, the
// LoRA adapter and the request's cache_salt.
func ChainSeed(model, adapter, cacheSalt string) BlockHash {
	buf := make([]byte, 0, len(model)+len(adapter)+len(cacheSalt)+16)
	buf = append(buf, "inferrail-chain\x00"...)
	buf = append(buf, model...)
	buf = append(buf, 0)
	buf = append(buf, adapter...)
	buf = append(buf, 0)
	buf = append(buf, cacheSalt...)
	h := xxh3.Hash128(buf)
	return BlockHash{h.Hi, h.Lo}
}

// ExtendBlockHashes appends to hashes the chained XXH3-128 hashes of the full
// blocks of tokens that hashes does not cover yet, and returns the extended
// slice. hashes must hold the hashes of the first len(hashes) blocks of the
// same tokens, chained from seed. A trailing partial block is never hashed.
func ExtendBlockHashes(hashes []BlockHash, seed BlockHash, tokens []int, blockSize int) []BlockHash {
	parent := seed
	if len(hashes) > 0 {
		parent = hashes[len(hashes)-1]
	}
	var stack [16 + 4*64]byte
	buf := stack[:0]
	if need := 16 + 4*blockSize; need > len(stack) {
		buf = make([]byte, 0, need)
	}
	for start := len(hashes) * blockSize; start+blockSize <= len(tokens); start += blockSize {
		buf = buf[:0]
		buf = binary.LittleEndian.AppendUint64(buf, parent.Hi)
		buf = binary.LittleEndian.AppendUint64(buf, parent.Lo)
		for _, t := range tokens[start : start+blockSize] {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
		}
		h := xxh3.Hash128(buf)
		parent = BlockHash{h.Hi, h.Lo}
		hashes = append(hashes, parent)
	}
	return hashes
}
