package events

import (
	"github.com/tinylib/msgp/msgp"
)

// Encoding is one of the msgpack shapes engines give their events. The
// batch is the same array [ts, events, data_parallel_rank] in all of them;
// they differ in how each event is laid out.
type Encoding uint8

const (
	// EncodingMap is current vLLM's (since PR #42892): each event a map
	// {"type": kind, fields in declaration order}, where the defaulted
	// fields (extra_keys, group_idx, kv_cache_spec_kind,
	// kv_cache_spec_sliding_window, locality) are left out when None and
	// the required ones are always there, nil when None.
	EncodingMap Encoding = iota
	// EncodingArray is older vLLM's: each event an array [kind, every
	// field in declaration order], None as nil. msgspec ignores
	// omit_defaults for array_like structs (msgspec issue #720; the
	// goldens show it), so no trailing default is dropped. The fields are
	// those vLLM had when it last sent arrays, just before #42892: no
	// locality (#48281 came later), which this encoding drops.
	EncodingArray
	// EncodingSGLang is SGLang's arrays: BlockStored [kind, block_hashes,
	// parent_block_hash, token_ids, block_size, lora_id, medium],
	// BlockRemoved [kind, block_hashes, medium], again with every field.
	// The fields SGLang lacks (lora_name, extra_keys, group_idx, the spec
	// and locality) are not written.
	EncodingSGLang
)

func (e Encoding) String() string {
	switch e {
	case EncodingMap:
		return "map"
	case EncodingArray:
		return "array"
	case EncodingSGLang:
		return "sglang"
	}
	return "unknown"
}

// field names one wire field of an event. The decoder and the encoder share
// the layouts below, so the two cannot disagree about order or names.
type field uint8

const (
	fHashes field = iota
	fParent
	fTokens
	fBlockSize
	fLoRAID
	fMedium
	fLoRAName
	fExtraKeys
	fGroupIdx
	fSpecKind
	fSlidingWindow
	fLocality
	numFields
)

// fieldNames are the wire names, as vLLM's structs declare them.
var fieldNames = [numFields]string{
	fHashes:        "block_hashes",
	fParent:        "parent_block_hash",
	fTokens:        "token_ids",
	fBlockSize:     "block_size",
	fLoRAID:        "lora_id",
	fMedium:        "medium",
	fLoRAName:      "lora_name",
	fExtraKeys:     "extra_keys",
	fGroupIdx:      "group_idx",
	fSpecKind:      "kv_cache_spec_kind",
	fSlidingWindow: "kv_cache_spec_sliding_window",
	fLocality:      "locality",
}

// layout is a struct's fields in declaration order; the first required of
// them have no default, the rest default to None, which the map encoding
// leaves out (omit_defaults) and the array encodings write as nil.
type layout struct {
	fields   []field
	required int
	// mandatory are the fields the decoder refuses an event without: what
	// every engine version sends and no consumer can do without.
	mandatory uint16
}

var (
	vllmStored = layout{
		fields: []field{fHashes, fParent, fTokens, fBlockSize, fLoRAID, fMedium, fLoRAName,
			fExtraKeys, fGroupIdx, fSpecKind, fSlidingWindow, fLocality},
		required:  7,
		mandatory: 1<<fHashes | 1<<fTokens | 1<<fBlockSize,
	}
	vllmRemoved = layout{
		fields:    []field{fHashes, fMedium, fGroupIdx, fLocality},
		required:  2,
		mandatory: 1 << fHashes,
	}
	// vLLM's array-like events, before #42892, had every field but
	// locality, the last one.
	arrayStored  = layout{fields: vllmStored.fields[:len(vllmStored.fields)-1]}
	arrayRemoved = layout{fields: vllmRemoved.fields[:len(vllmRemoved.fields)-1]}
	// SGLang's structs are prefixes of vLLM's (same order), with medium
	// defaulted, so one positional decoder reads both.
	sglangStored  = layout{fields: vllmStored.fields[:6]}
	sglangRemoved = layout{fields: []field{fHashes, fMedium}}
	noFields      = layout{}
)

// has reports whether e carries f (false: the engine sent None).
func (e *Event) has(f field) bool {
	switch f {
	case fParent:
		return e.HasParent
	case fLoRAID:
		return e.HasLoRAID
	case fMedium:
		return e.HasMedium
	case fLoRAName:
		return e.HasLoRAName
	case fExtraKeys:
		return e.ExtraKeys != nil
	case fGroupIdx:
		return e.HasGroupIdx
	case fSpecKind:
		return e.HasSpecKind
	case fSlidingWindow:
		return e.HasSlidingWindow
	case fLocality:
		return e.HasLocality
	}
	return true // block_hashes, token_ids, block_size
}

func eventLayout(k Kind, enc Encoding) layout {
	switch {
	case k == BlockStored && enc == EncodingSGLang:
		return sglangStored
	case k == BlockStored && enc == EncodingArray:
		return arrayStored
	case k == BlockStored:
		return vllmStored
	case k == BlockRemoved && enc == EncodingSGLang:
		return sglangRemoved
	case k == BlockRemoved && enc == EncodingArray:
		return arrayRemoved
	case k == BlockRemoved:
		return vllmRemoved
	}
	return noFields
}

// AppendBatch appends b to dst exactly as msgspec encodes the engine's
// structs in the encoding enc, and returns the extended slice; the golden
// tests hold it to msgspec's bytes. Integers take msgspec's smallest form
// (non-negative ones always unsigned), ts is a float64, and
// data_parallel_rank is nil when b has none: the batch struct is
// array_like, so msgspec writes its default too. (Engines too old to have
// the field send two elements; DecodeBatch reads those.) Fields an encoding cannot carry are dropped (CacheSalt is
// SGLang's: a field of the map form, a metadata map after the sglang form's fields); each ExtraKeys entry is
// written as the raw msgpack it holds, an empty one as nil. AppendBatch
// panics on an event whose Kind is not one of the three, or an enc that is
// not one of the Encoding constants: both are the caller's bugs.
func AppendBatch(dst []byte, b *Batch, enc Encoding) []byte {
	if enc > EncodingSGLang {
		panic("events: AppendBatch: unknown encoding " + enc.String())
	}
	dst = msgp.AppendArrayHeader(dst, 3)
	dst = msgp.AppendFloat64(dst, b.TS)
	dst = msgp.AppendArrayHeader(dst, uint32(len(b.Events)))
	for i := range b.Events {
		dst = appendEvent(dst, &b.Events[i], enc)
	}
	if !b.HasDPRank {
		return msgp.AppendNil(dst)
	}
	return appendInt(dst, b.DPRank)
}

func appendEvent(dst []byte, e *Event, enc Encoding) []byte {
	if e.Kind < BlockStored || e.Kind > AllBlocksCleared {
		panic("events: AppendBatch: event of unknown kind")
	}
	l := eventLayout(e.Kind, enc)
	// SGLang's cache_salt: a field of its map events, a metadata map after
	// its arrays' fields; vLLM's arrays have no place for it.
	salt := e.Kind == BlockStored && e.HasCacheSalt
	if enc == EncodingMap {
		n := uint32(1)
		for i, f := range l.fields {
			if i < l.required || e.has(f) {
				n++
			}
		}
		if salt {
			n++
		}
		dst = msgp.AppendMapHeader(dst, n)
		dst = msgp.AppendString(dst, "type")
		dst = msgp.AppendString(dst, e.Kind.String())
		for i, f := range l.fields {
			if i < l.required || e.has(f) {
				dst = msgp.AppendString(dst, fieldNames[f])
				dst = appendField(dst, e, f)
			}
		}
		if salt {
			dst = msgp.AppendString(dst, "cache_salt")
			dst = msgp.AppendString(dst, e.CacheSalt)
		}
		return dst
	}
	salt = salt && enc == EncodingSGLang
	n := uint32(len(l.fields) + 1)
	if salt {
		n++
	}
	dst = msgp.AppendArrayHeader(dst, n)
	dst = msgp.AppendString(dst, e.Kind.String())
	for _, f := range l.fields {
		dst = appendField(dst, e, f)
	}
	if salt {
		dst = msgp.AppendMapHeader(dst, 1)
		dst = msgp.AppendString(dst, "cache_salt")
		dst = msgp.AppendString(dst, e.CacheSalt)
	}
	return dst
}

func appendField(dst []byte, e *Event, f field) []byte {
	if !e.has(f) {
		return msgp.AppendNil(dst)
	}
	switch f {
	case fHashes:
		dst = msgp.AppendArrayHeader(dst, uint32(len(e.Hashes)))
		for _, h := range e.Hashes {
			dst = appendHash(dst, h)
		}
		return dst
	case fParent:
		return appendHash(dst, e.Parent)
	case fTokens:
		dst = msgp.AppendArrayHeader(dst, uint32(len(e.Tokens)))
		for _, t := range e.Tokens {
			dst = msgp.AppendUint32(dst, t)
		}
		return dst
	case fBlockSize:
		return appendInt(dst, int64(e.BlockSize))
	case fLoRAID:
		return appendInt(dst, e.LoRAID)
	case fMedium:
		return msgp.AppendString(dst, e.Medium)
	case fLoRAName:
		return msgp.AppendString(dst, e.LoRAName)
	case fExtraKeys:
		dst = msgp.AppendArrayHeader(dst, uint32(len(e.ExtraKeys)))
		for _, k := range e.ExtraKeys {
			if len(k) == 0 {
				dst = msgp.AppendNil(dst)
			}
			dst = append(dst, k...)
		}
		return dst
	case fGroupIdx:
		return appendInt(dst, e.GroupIdx)
	case fSpecKind:
		return msgp.AppendString(dst, e.SpecKind)
	case fSlidingWindow:
		return appendInt(dst, e.SlidingWindow)
	}
	return msgp.AppendString(dst, e.Locality) // fLocality
}

// appendInt writes v as msgspec does: a non-negative int in the smallest
// unsigned form, a negative one in the smallest signed form. msgp's
// AppendInt64 differs for positive values (it uses the signed forms
// 0xd1..0xd3), so only its negative branch is used.
func appendInt(dst []byte, v int64) []byte {
	if v >= 0 {
		return msgp.AppendUint64(dst, uint64(v))
	}
	return msgp.AppendInt64(dst, v)
}

// appendHash writes h in the form the engine sent it: uint, negative int,
// or bin (bin8 for both of vLLM's digest sizes).
func appendHash(dst []byte, h Hash) []byte {
	switch h.form {
	case hashBytes:
		dst = msgp.AppendBytesHeader(dst, uint32(len(h.bytes)))
		return append(dst, h.bytes...)
	case hashNegInt:
		return msgp.AppendInt64(dst, int64(h.n))
	}
	return msgp.AppendUint64(dst, h.n)
}
