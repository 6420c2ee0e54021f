package events

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"

	"github.com/tinylib/msgp/msgp"
)

// DecodeBatch decodes one payload (the third frame of an engine's ZeroMQ
// message) into b. It reads every shape engines send: current vLLM's map
// events, older vLLM's array events (of any length its versions had),
// SGLang's arrays, and a mix of them in one batch. It is lenient where
// engines may grow and strict where a consumer would be misled:
//
//   - map keys it does not know, and array elements past the fields it
//     knows, are skipped (a newer vLLM's fields);
//   - an event whose tag names a kind it does not know is skipped and
//     counted in b.Skipped rather than refusing the batch, whose known
//     events a consumer still needs;
//   - block hashes may be any msgpack int (unsigned, or negative as SGLang
//     sends) or bin; token ids any int form whose value fits uint32, or
//     SGLang's [token, next token] pairs (EAGLE), read as their first;
//   - a map where an array BlockStored has lora_name is SGLang's metadata
//     (0.5.18 and later append it to a salted request's stores), whose
//     cache_salt is read into CacheSalt, as is a map event's cache_salt;
//   - anything else malformed (a wrong type, an integer out of range, a
//     missing tag, block_hashes, token_ids or block_size, bytes after the
//     batch) is refused with a *DecodeError wrapping one sentinel error.
//
// DecodeBatch never panics, and it allocates no more than a small multiple
// of len(payload) (32 bytes a byte at most: a hash sent in one byte takes
// 32), and at most MaxBatchEvents events and MaxBatchHashes hashes and
// extra keys: a header claiming more elements than bytes remain fails with
// ErrTooLong, and one past a bound with ErrTooMany, before anything is
// reserved for them. It overwrites b,
// reusing the memory of b.Events and of each event's Hashes, Tokens and
// ExtraKeys, so decoding stream after stream into one Batch allocates
// nothing in the steady state (digest hashes excepted: one string per
// event holds them all). Whatever a caller keeps from an earlier decode into
// b must be copied first. Nothing in b aliases payload. On error, b holds
// a partial decode.
func DecodeBatch(payload []byte, b *Batch) error {
	d := decoder{all: payload, rest: payload, event: -1}
	return d.batch(b)
}

// decoder walks a payload; rest is what is left to read, and event and
// field say where it is for errors.
type decoder struct {
	all, rest []byte
	event     int
	field     string
	hashCount int // block hashes read so far, against MaxBatchHashes
	keyCount  int // extra keys read so far, against MaxBatchHashes too
}

func (d *decoder) fail(err error) error {
	return &DecodeError{Offset: len(d.all) - len(d.rest), Event: d.event, Field: d.field, Err: err}
}

// failMsgp reports an error of one of msgp's readers.
func (d *decoder) failMsgp(err error) error { return d.fail(sentinel(err)) }

func (d *decoder) batch(b *Batch) error {
	n, err := d.arrayLen()
	if err != nil {
		return err
	}
	if n < 2 {
		d.field = "events"
		return d.fail(ErrMissingField)
	}
	d.field = "ts"
	if b.TS, err = d.float(); err != nil {
		return err
	}
	d.field = "events"
	m, err := d.arrayLen()
	if err != nil {
		return err
	}
	if m > MaxBatchEvents {
		return d.fail(ErrTooMany)
	}
	events, skipped := b.Events[:0], 0
	if want := min(m, len(d.rest)/minEventBytes); cap(events) < want {
		// Room for every event the payload can hold, in one allocation
		// that keeps the old slots' buffers: grown by append, an Event of
		// 272 bytes per 15 on the wire cost five times as much in copies.
		events = slices.Grow(b.Events[:cap(b.Events)], want-cap(b.Events))[:0]
	}
	for i := 0; i < m; i++ {
		d.event, d.field = i, ""
		events = growOne(events)
		known, err := d.eventInto(&events[len(events)-1])
		if err != nil {
			b.Events = events
			return err
		}
		if !known {
			events = events[:len(events)-1]
			skipped++
		}
	}
	b.Events, b.Skipped = events, skipped
	d.event, d.field = -1, "data_parallel_rank"
	b.DPRank, b.HasDPRank = 0, false
	if n >= 3 {
		if b.DPRank, b.HasDPRank, err = d.optInt(); err != nil {
			return err
		}
	}
	d.field = ""
	if err := d.skipN(uint64(n) - min(uint64(n), 3)); err != nil {
		return err
	}
	if len(d.rest) != 0 {
		return d.fail(ErrTrailing)
	}
	return nil
}

// minEventBytes is the smallest event DecodeBatch keeps, on the wire: an
// array BlockRemoved with no hashes, [fixstr "BlockRemoved", []].
const minEventBytes = 15

// growOne extends events by one, reusing the slot (and its slices'
// memory) left by an earlier decode when there is one.
func growOne(events []Event) []Event {
	if len(events) < cap(events) {
		return events[:len(events)+1]
	}
	return append(events, Event{})
}

// eventInto decodes one event into ev, which holds whatever an earlier
// decode left there; known is false for an event of a kind this package
// does not know, which is skipped whole.
func (d *decoder) eventInto(ev *Event) (known bool, err error) {
	old := *ev
	*ev = Event{Hashes: old.Hashes[:0], Tokens: old.Tokens[:0]}
	if len(d.rest) == 0 {
		return false, d.fail(ErrTruncated)
	}
	var seen uint16
	switch t := msgp.NextType(d.rest); t {
	case msgp.ArrayType:
		seen, err = d.arrayEvent(ev, &old)
	case msgp.MapType:
		seen, err = d.mapEvent(ev, &old)
	default:
		return false, d.fail(ErrType)
	}
	if err != nil || ev.Kind == 0 {
		return false, err
	}
	l := eventLayout(ev.Kind, EncodingMap)
	if missing := l.mandatory &^ seen; missing != 0 {
		for f := field(0); f < numFields; f++ {
			if missing&(1<<f) != 0 {
				d.field = fieldNames[f]
				break
			}
		}
		return false, d.fail(ErrMissingField)
	}
	return true, nil
}

// arrayEvent reads [tag, fields...]: the fields are positional, in vLLM's
// declaration order (SGLang's are a prefix of it); fewer of them is an
// older engine, more a newer one whose extra fields are skipped.
func (d *decoder) arrayEvent(ev, old *Event) (seen uint16, err error) {
	n, err := d.arrayLen()
	if err != nil {
		return 0, err
	}
	d.field = "type"
	if n == 0 {
		return 0, d.fail(ErrMissingField)
	}
	if ev.Kind, err = d.kind(); err != nil || ev.Kind == 0 {
		if err == nil {
			err = d.skipN(uint64(n - 1))
		}
		return 0, err
	}
	fields := eventLayout(ev.Kind, EncodingMap).fields
	for i := 1; i < n; i++ {
		if i-1 >= len(fields) {
			d.field = ""
			if err := d.skipN(uint64(n - i)); err != nil {
				return 0, err
			}
			break
		}
		f := fields[i-1]
		if f == fLoRAName && ev.Kind == BlockStored && msgp.NextType(d.rest) == msgp.MapType {
			if err := d.sglangMetadata(ev, old); err != nil {
				return 0, err
			}
			continue
		}
		if err := d.fieldInto(ev, old, f); err != nil {
			return 0, err
		}
		seen |= 1 << f
	}
	return seen, nil
}

// sglangMetadata reads the map SGLang 0.5.18 and later append to the
// arrays of a salted request's BlockStored, after medium, where vLLM's
// arrays have lora_name (BlockStoredMetadata: cache_salt, session_id):
// its cache_salt, if any, into ev; its other keys are skipped. Read as
// lora_name, it refused the whole batch, and a salted request broke the
// stream at every store.
func (d *decoder) sglangMetadata(ev, old *Event) error {
	d.field = "metadata"
	n, err := d.mapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		d.field = "metadata"
		key, err := d.str()
		if err != nil {
			return err
		}
		if string(key) != "cache_salt" {
			if err := d.skipN(1); err != nil {
				return err
			}
			continue
		}
		if err := d.cacheSalt(ev, old); err != nil {
			return err
		}
	}
	return nil
}

// cacheSalt reads SGLang's cache_salt, a string or nil, into ev.
func (d *decoder) cacheSalt(ev, old *Event) (err error) {
	d.field = "cache_salt"
	ev.CacheSalt, ev.HasCacheSalt, err = d.optStr(old.CacheSalt)
	return err
}

// mapEvent reads {"type": tag, name: value, ...}. msgspec writes the tag
// first; should it come later, the map is scanned for it first, since the
// kind says which names are fields.
func (d *decoder) mapEvent(ev, old *Event) (seen uint16, err error) {
	start := d.rest
	n, err := d.mapLen()
	if err != nil {
		return 0, err
	}
	body := d.rest
	d.field = "type"
	if ev.Kind, err = d.findKind(n); err != nil {
		return 0, err
	}
	if ev.Kind == 0 {
		d.rest = start
		return 0, d.skipN(1)
	}
	d.rest = body
	l := eventLayout(ev.Kind, EncodingMap)
	var fieldSet uint16
	for _, f := range l.fields {
		fieldSet |= 1 << f
	}
	for i := 0; i < n; i++ {
		d.field = ""
		key, err := d.str()
		if err != nil {
			return 0, err
		}
		if ev.Kind == BlockStored && string(key) == "cache_salt" { // SGLang's map events
			if err := d.cacheSalt(ev, old); err != nil {
				return 0, err
			}
			continue
		}
		f, ok := fieldByName(key)
		if !ok || fieldSet&(1<<f) == 0 {
			if err := d.skipN(1); err != nil { // "type", or a field we do not know
				return 0, err
			}
			continue
		}
		if err := d.fieldInto(ev, old, f); err != nil {
			return 0, err
		}
		seen |= 1 << f
	}
	return seen, nil
}

// findKind reads the kind from a map of n pairs at d.rest, leaving d.rest
// wherever it stopped; kind 0 is a tag this package does not know.
func (d *decoder) findKind(n int) (Kind, error) {
	for i := 0; i < n; i++ {
		key, err := d.str()
		if err != nil {
			return 0, err
		}
		if string(key) == "type" {
			return d.kind()
		}
		if err := d.skipN(1); err != nil {
			return 0, err
		}
	}
	return 0, d.fail(ErrMissingField)
}

func (d *decoder) kind() (Kind, error) {
	tag, err := d.str()
	if err != nil {
		return 0, err
	}
	switch string(tag) {
	case "BlockStored":
		return BlockStored, nil
	case "BlockRemoved":
		return BlockRemoved, nil
	case "AllBlocksCleared":
		return AllBlocksCleared, nil
	}
	return 0, nil
}

func fieldByName(name []byte) (field, bool) {
	switch string(name) {
	case "block_hashes":
		return fHashes, true
	case "parent_block_hash":
		return fParent, true
	case "token_ids":
		return fTokens, true
	case "block_size":
		return fBlockSize, true
	case "lora_id":
		return fLoRAID, true
	case "medium":
		return fMedium, true
	case "lora_name":
		return fLoRAName, true
	case "extra_keys":
		return fExtraKeys, true
	case "group_idx":
		return fGroupIdx, true
	case "kv_cache_spec_kind":
		return fSpecKind, true
	case "kv_cache_spec_sliding_window":
		return fSlidingWindow, true
	case "locality":
		return fLocality, true
	}
	return 0, false
}

// fieldInto decodes the value of f into ev; old is what the slot held
// before, whose strings and extra-key buffers are reused when they fit.
func (d *decoder) fieldInto(ev, old *Event, f field) error {
	d.field = fieldNames[f]
	var err error
	switch f {
	case fHashes:
		ev.Hashes, err = d.hashes(ev.Hashes[:0])
	case fParent:
		if !d.nil() {
			ev.Parent, err = d.hash()
			ev.HasParent = err == nil
		}
	case fTokens:
		ev.Tokens, err = d.tokens(ev.Tokens[:0])
	case fBlockSize:
		var v int64
		if v, err = d.int(); err == nil && (v < 0 || v > math.MaxInt) {
			err = d.fail(ErrRange)
		}
		ev.BlockSize = int(v)
	case fLoRAID:
		ev.LoRAID, ev.HasLoRAID, err = d.optInt()
	case fMedium:
		ev.Medium, ev.HasMedium, err = d.optStr(old.Medium)
	case fLoRAName:
		ev.LoRAName, ev.HasLoRAName, err = d.optStr(old.LoRAName)
	case fExtraKeys:
		ev.ExtraKeys, err = d.extraKeys(old.ExtraKeys)
	case fGroupIdx:
		ev.GroupIdx, ev.HasGroupIdx, err = d.optInt()
	case fSpecKind:
		ev.SpecKind, ev.HasSpecKind, err = d.optStr(old.SpecKind)
	case fSlidingWindow:
		ev.SlidingWindow, ev.HasSlidingWindow, err = d.optInt()
	case fLocality:
		ev.Locality, ev.HasLocality, err = d.optStr(old.Locality)
	}
	return err
}

// tokens appends the token ids of a list to dst. The unsigned forms
// msgspec writes for token ids (fixint, uint8, uint16, uint32) are read
// inline: tokens are most of a batch's bytes, and a call per token into
// msgp's general reader halved the throughput. Other int forms go to msgp.
func (d *decoder) tokens(dst []uint32) ([]uint32, error) {
	n, err := d.arrayLen()
	if err != nil {
		return dst, err
	}
	if cap(dst) < n {
		dst = make([]uint32, 0, n) // n <= len(d.rest): proportional to the payload
	}
	p := d.rest
	for i := 0; i < n; i++ {
		if len(p) == 0 {
			d.rest = p
			return dst, d.fail(ErrTruncated)
		}
		switch c := p[0]; {
		case c < 0x80:
			dst = append(dst, uint32(c))
			p = p[1:]
			continue
		case c == 0xcd && len(p) >= 3:
			dst = append(dst, uint32(binary.BigEndian.Uint16(p[1:])))
			p = p[3:]
			continue
		case c == 0xce && len(p) >= 5:
			dst = append(dst, binary.BigEndian.Uint32(p[1:]))
			p = p[5:]
			continue
		case c == 0xcc && len(p) >= 2:
			dst = append(dst, uint32(p[1]))
			p = p[2:]
			continue
		}
		if p[0] == 0x92 { // SGLang's bigram pair
			d.rest = p
			v, err := d.bigram()
			if err != nil {
				return dst, err
			}
			dst = append(dst, v)
			p = d.rest
			continue
		}
		v, rest, err := msgp.ReadUint64Bytes(p)
		if err != nil {
			d.rest = p
			return dst, d.failMsgp(err)
		}
		if v > math.MaxUint32 {
			d.rest = p
			return dst, d.fail(ErrRange)
		}
		dst = append(dst, uint32(v))
		p = rest
	}
	d.rest = p
	return dst, nil
}

// bigram reads one of the [token, next token] pairs SGLang stores in place
// of token ids when its radix cache keys by pairs (EAGLE-family
// speculative decoding): a page's pairs begin with its own tokens, so the
// first of each is the block's token. Read as a token id, a pair refused
// every batch that stored blocks.
func (d *decoder) bigram() (uint32, error) {
	d.rest = d.rest[1:]
	var first uint64
	for i := range 2 {
		v, rest, err := msgp.ReadUint64Bytes(d.rest)
		if err != nil {
			return 0, d.failMsgp(err)
		}
		if v > math.MaxUint32 {
			return 0, d.fail(ErrRange)
		}
		if i == 0 {
			first = v
		}
		d.rest = rest
	}
	return uint32(first), nil
}

// hashes appends a list of block hashes to dst. Digest hashes (bin) share
// one string per list, filled in a second pass, instead of one allocation
// each; during the first pass their n holds the offset of their bin value.
func (d *decoder) hashes(dst []Hash) ([]Hash, error) {
	n, err := d.arrayLen()
	if err != nil {
		return dst, err
	}
	if d.hashCount += n; d.hashCount > MaxBatchHashes {
		return dst, d.fail(ErrTooMany)
	}
	if cap(dst) < n {
		dst = make([]Hash, 0, n)
	}
	digests, digestBytes := 0, 0
	for i := 0; i < n; i++ {
		if len(d.rest) > 0 && isBin(d.rest[0]) {
			off := len(d.all) - len(d.rest)
			v, rest, err := msgp.ReadBytesZC(d.rest)
			if err != nil {
				return dst, d.failMsgp(err)
			}
			d.rest = rest
			digests, digestBytes = digests+1, digestBytes+len(v)
			dst = append(dst, Hash{form: hashBytes, n: uint64(off)})
			continue
		}
		h, err := d.hash()
		if err != nil {
			return dst, err
		}
		dst = append(dst, h)
	}
	if digests > 0 { // counted, not summed: an empty digest needs filling too
		d.fillDigests(dst[len(dst)-n:], digestBytes)
	}
	return dst, nil
}

// fillDigests gives each digest hash of hs its bytes, as a slice of one
// string of size bytes. Their bin values were read once already.
func (d *decoder) fillDigests(hs []Hash, size int) {
	var sb strings.Builder
	sb.Grow(size)
	for _, h := range hs {
		if h.form == hashBytes {
			v, _, _ := msgp.ReadBytesZC(d.all[h.n:])
			sb.Write(v)
		}
	}
	all, at := sb.String(), 0
	for i := range hs {
		if hs[i].form == hashBytes {
			v, _, _ := msgp.ReadBytesZC(d.all[hs[i].n:])
			hs[i] = Hash{form: hashBytes, bytes: all[at : at+len(v)]}
			at += len(v)
		}
	}
}

// hash reads one block hash: an unsigned int, a negative int, or a digest.
func (d *decoder) hash() (Hash, error) {
	if len(d.rest) == 0 {
		return Hash{}, d.fail(ErrTruncated)
	}
	switch lead := d.rest[0]; {
	case isBin(lead):
		v, rest, err := msgp.ReadBytesZC(d.rest)
		if err != nil {
			return Hash{}, d.failMsgp(err)
		}
		d.rest = rest
		return BytesHash(v), nil
	case lead >= 0xe0 || (lead >= 0xd0 && lead <= 0xd3): // negative fixint, int8..int64
		v, rest, err := msgp.ReadInt64Bytes(d.rest)
		if err != nil {
			return Hash{}, d.failMsgp(err)
		}
		d.rest = rest
		return IntHash(v), nil
	}
	v, rest, err := msgp.ReadUint64Bytes(d.rest)
	if err != nil {
		return Hash{}, d.failMsgp(err)
	}
	d.rest = rest
	return UintHash(v), nil
}

// extraKeys reads extra_keys (nil, or a list with one msgpack value per
// block, so at most MaxBatchHashes in a batch) into the memory of old: each
// entry is copied into the buffer the same position held before, so none
// aliases the payload and steady-state decoding allocates nothing. Entries
// that do not fit there share one new buffer as large as the list's bytes:
// one each cost 8 bytes or more for values of one (a list of None).
func (d *decoder) extraKeys(old []RawValue) ([]RawValue, error) {
	if d.nil() {
		return nil, nil
	}
	n, err := d.arrayLen()
	if err != nil {
		return nil, err
	}
	if d.keyCount += n; d.keyCount > MaxBatchHashes {
		return nil, d.fail(ErrTooMany)
	}
	start := d.rest
	if err := d.skipN(uint64(n)); err != nil {
		return nil, err
	}
	listBytes := len(start) - len(d.rest)
	d.rest = start
	keys := old[:0]
	if cap(keys) < n || keys == nil {
		keys = slices.Grow(old[:cap(old)], max(n-cap(old), 0))[:0]
		if keys == nil {
			keys = []RawValue{}
		}
	}
	var fresh []byte
	for i := 0; i < n; i++ {
		v, err := d.raw()
		if err != nil {
			return keys, err
		}
		if buf := keys[:i+1][i]; cap(buf) >= len(v) {
			keys = append(keys[:i], append(buf[:0], v...))
			continue
		}
		if fresh == nil {
			fresh = make([]byte, 0, listBytes)
		}
		at := len(fresh)
		fresh = append(fresh, v...)
		keys = append(keys[:i], fresh[at:len(fresh):len(fresh)])
	}
	return keys, nil
}
