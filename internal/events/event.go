package events

import (
	"encoding/binary"
	"unsafe"
)

// Kind says what an Event reports.
type Kind uint8

const (
	// BlockStored: blocks became full and entered the prefix cache.
	BlockStored Kind = iota + 1
	// BlockRemoved: blocks left the prefix cache (evicted or dropped).
	BlockRemoved
	// AllBlocksCleared: the engine reset its whole prefix cache.
	AllBlocksCleared
)

func (k Kind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "unknown"
}

// Hash is an engine's block hash as the engine sent it. vLLM sends, by
// default, the low 64 bits of its digest as an unsigned integer, or with
// VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 the whole digest as bytes; SGLang
// may send negative integers. These values are the engine's own: nothing
// may assume they equal the gateway's block hashes. The zero Hash is the
// unsigned integer 0. Hash is comparable and usable as a map key.
type Hash struct {
	form  hashForm
	n     uint64 // the integer, two's complement when negative
	bytes string // the digest, when form is hashBytes
}

type hashForm uint8

const (
	hashUint hashForm = iota
	hashNegInt
	hashBytes
)

// UintHash is the hash an engine sends as the unsigned integer n.
func UintHash(n uint64) Hash { return Hash{form: hashUint, n: n} }

// IntHash is the hash an engine sends as the signed integer n.
func IntHash(n int64) Hash {
	if n >= 0 {
		return UintHash(uint64(n))
	}
	return Hash{form: hashNegInt, n: uint64(n)}
}

// BytesHash is the hash an engine sends as the raw digest b.
func BytesHash(b []byte) Hash { return Hash{form: hashBytes, bytes: string(b)} }

// IsBytes reports whether the engine sent the hash as bytes.
func (h Hash) IsBytes() bool { return h.form == hashBytes }

// Uint returns the hash's integer bits (two's complement for a negative
// integer); false when the hash was sent as bytes.
func (h Hash) Uint() (uint64, bool) { return h.n, h.form != hashBytes }

// Low64 is the hash as 64 bits: the integer, or a digest's last eight
// bytes read big-endian (how vLLM turns its digests into integers), so that
// both forms of one engine's hash agree.
func (h Hash) Low64() uint64 {
	if h.form != hashBytes {
		return h.n
	}
	var k uint64
	for i := max(0, len(h.bytes)-8); i < len(h.bytes); i++ {
		k = k<<8 | uint64(h.bytes[i])
	}
	return k
}

// Bytes returns the digest of a hash sent as bytes, or the integer's eight
// big-endian bytes.
func (h Hash) Bytes() []byte {
	if h.form == hashBytes {
		return []byte(h.bytes)
	}
	return binary.BigEndian.AppendUint64(nil, h.n)
}

// Batch is one numbered message of an engine's event stream: every event of
// one scheduler step, in the order they happened.
type Batch struct {
	TS     float64 // the engine's wall clock when it built the batch, Unix seconds
	Events []Event
	// DPRank is the data-parallel rank of the engine core that sent it;
	// meaningful only when HasDPRank (vLLM always sends it, very old
	// versions did not).
	DPRank    int64
	HasDPRank bool
	// Skipped counts the events DecodeBatch left out because their kind
	// is one this package does not know (a newer engine's): the known
	// events of the batch still apply, and a consumer can count these.
	Skipped int
}

// Footprint is the memory b's slices hold to their capacity, the slots
// past its events included: what a Batch reused for the next decode keeps
// (digest hashes' strings aside, which the next decode lets go).
func (b *Batch) Footprint() int {
	n := cap(b.Events) * int(unsafe.Sizeof(Event{}))
	for _, ev := range b.Events[:cap(b.Events)] {
		n += cap(ev.Hashes)*int(unsafe.Sizeof(Hash{})) + cap(ev.Tokens)*4 +
			cap(ev.ExtraKeys)*int(unsafe.Sizeof(RawValue(nil)))
		for _, k := range ev.ExtraKeys[:cap(ev.ExtraKeys)] {
			n += cap(k)
		}
	}
	return n
}

// Event is one BlockStored, BlockRemoved or AllBlocksCleared. Fields a kind
// does not carry stay zero. A field vLLM sends as None is the zero value
// with its Has flag false.
type Event struct {
	Kind Kind

	// Hashes are the blocks stored or removed, in chain order for
	// BlockStored (its first block's parent is Parent).
	Hashes []Hash
	// Parent is the hash of the block before Hashes[0]; HasParent is false
	// when the stored blocks start the sequence (block 0).
	Parent    Hash
	HasParent bool
	// Tokens are the token ids of every stored block, len(Hashes)*BlockSize
	// of them for full blocks, prompt and generated tokens alike.
	Tokens    []uint32
	BlockSize int

	LoRAID      int64 // deprecated integer adapter id
	HasLoRAID   bool
	LoRAName    string
	HasLoRAName bool
	Medium      string // "GPU", "CPU", "STORAGE" (vLLM); SGLang has its own names
	HasMedium   bool

	// ExtraKeys holds, per stored block, the msgpack encoding of the extra
	// keys vLLM hashed into it (nil or a tuple: adapter name, multimodal
	// identifiers, cache_salt on block 0); nil as a whole when absent.
	ExtraKeys []RawValue

	// CacheSalt is the cache_salt SGLang (0.5.18 and later) names in a
	// BlockStored of a salted request: in the metadata map its arrays
	// carry where vLLM's have lora_name, or as a field of its map events.
	// HasCacheSalt is false when the event names none.
	CacheSalt    string
	HasCacheSalt bool

	GroupIdx         int64 // KV cache group
	HasGroupIdx      bool
	SpecKind         string // kv_cache_spec_kind, e.g. "full_attention"
	HasSpecKind      bool
	SlidingWindow    int64 // kv_cache_spec_sliding_window
	HasSlidingWindow bool
	Locality         string // "LOCAL" or "REMOTE"
	HasLocality      bool
}

// RawValue is one msgpack value exactly as encoded.
type RawValue []byte
