package events

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/tinylib/msgp/msgp"
)

// batchOf wraps already-encoded events in a batch [1.0, [events...], 0].
func batchOf(events ...[]byte) []byte {
	p := msgp.AppendArrayHeader(nil, 3)
	p = msgp.AppendFloat64(p, 1)
	p = msgp.AppendArrayHeader(p, uint32(len(events)))
	for _, e := range events {
		p = append(p, e...)
	}
	return msgp.AppendUint64(p, 0)
}

// TestTagNotFirst: msgspec writes the tag first, but a map whose tag comes
// later is still read, its fields by the kind the tag names.
func TestTagNotFirst(t *testing.T) {
	e := msgp.AppendMapHeader(nil, 3)
	e = msgp.AppendString(e, "block_hashes")
	e = msgp.AppendArrayHeader(e, 1)
	e = msgp.AppendUint64(e, 7)
	e = msgp.AppendString(e, "type")
	e = msgp.AppendString(e, "BlockRemoved")
	e = msgp.AppendString(e, "token_ids") // not a BlockRemoved field: skipped
	e = msgp.AppendArrayHeader(e, 1)
	e = msgp.AppendUint64(e, 1)
	var b Batch
	if err := DecodeBatch(batchOf(e), &b); err != nil {
		t.Fatal(err)
	}
	want := &Batch{TS: 1, HasDPRank: true, Events: []Event{{Kind: BlockRemoved, Hashes: []Hash{UintHash(7)}}}}
	if d := batchDiff(want, &b); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}

// TestUnknownKindSkipped: an event of a kind this package does not know,
// in either form, is skipped and counted; the others decode.
func TestUnknownKindSkipped(t *testing.T) {
	arr := msgp.AppendArrayHeader(nil, 3)
	arr = msgp.AppendString(arr, "BlockMoved")
	arr = msgp.AppendArrayHeader(arr, 1)
	arr = msgp.AppendUint64(arr, 1)
	arr = msgp.AppendString(arr, "CPU")
	m := msgp.AppendMapHeader(nil, 2)
	m = msgp.AppendString(m, "to")
	m = msgp.AppendMapHeader(m, 1)
	m = msgp.AppendString(m, "x")
	m = msgp.AppendNil(m)
	m = msgp.AppendString(m, "type")
	m = msgp.AppendString(m, "Future")
	cleared := msgp.AppendArrayHeader(nil, 1)
	cleared = msgp.AppendString(cleared, "AllBlocksCleared")
	var b Batch
	if err := DecodeBatch(batchOf(arr, cleared, m), &b); err != nil {
		t.Fatal(err)
	}
	if b.Skipped != 2 || len(b.Events) != 1 || b.Events[0].Kind != AllBlocksCleared {
		t.Fatalf("got %+v", b)
	}
}

// TestDeepNestingDoesNotRecurse: extra keys nested a million deep are
// skipped with a count, not a call per level.
func TestDeepNestingDoesNotRecurse(t *testing.T) {
	const depth = 1 << 20
	raw := append(bytes.Repeat([]byte{0x91}, depth), 0xc0)
	e := msgp.AppendMapHeader(nil, 5)
	e = msgp.AppendString(e, "type")
	e = msgp.AppendString(e, "BlockStored")
	e = msgp.AppendString(e, "block_hashes")
	e = msgp.AppendArrayHeader(e, 1)
	e = msgp.AppendUint64(e, 1)
	e = msgp.AppendString(e, "token_ids")
	e = msgp.AppendArrayHeader(e, 0)
	e = msgp.AppendString(e, "block_size")
	e = msgp.AppendUint64(e, 16)
	e = msgp.AppendString(e, "extra_keys")
	e = msgp.AppendArrayHeader(e, 1)
	e = append(e, raw...)
	var b Batch
	if err := DecodeBatch(batchOf(e), &b); err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 1 || !bytes.Equal(b.Events[0].ExtraKeys[0], raw) {
		t.Fatalf("extra key not kept whole")
	}
}

// TestHugeHeadersFailFast: headers claiming 2^32-1 elements, where a list,
// a map or a skipped value is read, fail with ErrTooLong at once.
func TestHugeHeadersFailFast(t *testing.T) {
	huge32 := []byte{0xdd, 0xff, 0xff, 0xff, 0xff}
	hugeMap := []byte{0xdf, 0xff, 0xff, 0xff, 0xff}
	stored := func(key string, v []byte) []byte {
		e := msgp.AppendMapHeader(nil, 2)
		e = msgp.AppendString(e, "type")
		e = msgp.AppendString(e, "BlockStored")
		e = msgp.AppendString(e, key)
		return append(e, v...)
	}
	for name, p := range map[string][]byte{
		"events":     append(msgp.AppendFloat64([]byte{0x93}, 1), huge32...),
		"event map":  batchOf(hugeMap),
		"hashes":     batchOf(stored("block_hashes", huge32)),
		"extra keys": batchOf(stored("extra_keys", huge32)),
		"unknown":    batchOf(stored("future", hugeMap)),
	} {
		var b Batch
		if err := DecodeBatch(p, &b); !errors.Is(err, ErrTooLong) {
			t.Errorf("%s: %v, want ErrTooLong", name, err)
		}
	}
}

// TestDecodeErrorSaysWhere: the error names the event, the field and the
// offset of the bad value.
func TestDecodeErrorSaysWhere(t *testing.T) {
	good := msgp.AppendArrayHeader(nil, 1)
	good = msgp.AppendString(good, "AllBlocksCleared")
	bad := msgp.AppendArrayHeader(nil, 5)
	bad = msgp.AppendString(bad, "BlockStored")
	bad = msgp.AppendArrayHeader(bad, 0)
	bad = msgp.AppendNil(bad)
	bad = msgp.AppendArrayHeader(bad, 1)
	at := len(batchOf(good)) - 1 + len(bad) // the batch up to its rank (1 byte), then bad so far
	bad = msgp.AppendInt64(bad, -5)
	bad = msgp.AppendUint64(bad, 16)
	var b Batch
	err := DecodeBatch(batchOf(good, bad), &b)
	var de *DecodeError
	if !errors.As(err, &de) || de.Err != ErrRange || de.Event != 1 || de.Field != "token_ids" || de.Offset != at {
		t.Fatalf("got %#v (%v), want ErrRange in event 1's token_ids at byte %d", de, err, at)
	}
}

// TestHashBound: the batch's events together may list MaxBatchHashes block
// hashes and no more, however few bytes each takes on the wire.
func TestHashBound(t *testing.T) {
	removed := func(n int) Event {
		ev := Event{Kind: BlockRemoved, Medium: "GPU", HasMedium: true}
		for i := range n {
			ev.Hashes = append(ev.Hashes, UintHash(uint64(i%100)))
		}
		return ev
	}
	half := MaxBatchHashes / 2
	for _, tc := range []struct {
		extra int
		want  error
	}{{0, nil}, {1, ErrTooMany}} {
		b := Batch{TS: 1, Events: []Event{removed(half), removed(half + tc.extra)}}
		var got Batch
		err := DecodeBatch(AppendBatch(nil, &b, EncodingMap), &got)
		if !errors.Is(err, tc.want) {
			t.Errorf("%d hashes: %v, want %v", 2*half+tc.extra, err, tc.want)
		}
		var de *DecodeError
		if tc.want != nil && (!errors.As(err, &de) || de.Event != 1 || de.Field != "block_hashes") {
			t.Errorf("%d hashes: %#v, want the second event's block_hashes named", 2*half+tc.extra, de)
		}
	}
}

// TestSGLangStepOfPages: SGLang's batch of one BlockStored per page, for a
// step caching more than 2^17 tokens in pages of 1, decodes. (Found by a
// review: 131,073 such events were refused as malformed and the mirror
// purged.)
func TestSGLangStepOfPages(t *testing.T) {
	const pages = 1<<17 + 1
	b := Batch{TS: 1, DPRank: 0, HasDPRank: true, Events: make([]Event, pages)}
	for i := range b.Events {
		b.Events[i] = Event{Kind: BlockStored, Hashes: []Hash{IntHash(-int64(i) - 1)}, Tokens: []uint32{uint32(i % 50000)}, BlockSize: 1}
		if i > 0 {
			b.Events[i].Parent, b.Events[i].HasParent = IntHash(-int64(i)), true
		}
	}
	payload := AppendBatch(nil, &b, EncodingSGLang)
	var got Batch
	if err := DecodeBatch(payload, &got); err != nil {
		t.Fatalf("a step of %d pages (%d bytes): %v", pages, len(payload), err)
	}
	if len(got.Events) != pages || got.Events[pages-1].Hashes[0] != b.Events[pages-1].Hashes[0] {
		t.Errorf("decoded %d events, want %d", len(got.Events), pages)
	}
}

// sglangArrayStored is SGLang's array BlockStored of one block of four tokens
// (tag, block_hashes, parent_block_hash, token_ids, block_size, lora_id,
// medium), with meta appended when not nil: SGLang 0.5.18 and later append
// a BlockStoredMetadata map to a salted request's stores (sglang#30827).
func sglangArrayStored(hash int64, meta []byte) []byte {
	n := uint32(7)
	if meta != nil {
		n = 8
	}
	e := msgp.AppendArrayHeader(nil, n)
	e = msgp.AppendString(e, "BlockStored")
	e = msgp.AppendArrayHeader(e, 1)
	e = msgp.AppendInt64(e, hash)
	e = msgp.AppendNil(e)
	e = msgp.AppendArrayHeader(e, 4)
	for tok := range 4 {
		e = msgp.AppendInt(e, tok+1)
	}
	e = msgp.AppendInt(e, 4)
	e = msgp.AppendNil(e)
	e = msgp.AppendString(e, "GPU")
	return append(e, meta...)
}

// strMap is a msgpack map of string keys, each value already encoded.
func strMap(kv ...any) []byte {
	m := msgp.AppendMapHeader(nil, uint32(len(kv)/2))
	for i := 0; i < len(kv); i += 2 {
		m = msgp.AppendString(m, kv[i].(string))
		m = append(m, kv[i+1].([]byte)...)
	}
	return m
}

func mpStr(s string) []byte { return msgp.AppendString(nil, s) }

// TestSGLangCacheSalt: a salted request's BlockStored from SGLang 0.5.18
// and later carries a metadata map where vLLM's arrays have lora_name;
// read as lora_name, it refused the whole batch (an unsalted store beside
// it lost too, and the mirror purged at every salted store: found by a
// review). The map's cache_salt is the event's, its other keys skipped;
// SGLang's map events carry cache_salt as a field.
func TestSGLangCacheSalt(t *testing.T) {
	mapEvent := strMap("type", mpStr("BlockStored"), "block_hashes", msgp.AppendInt64(msgp.AppendArrayHeader(nil, 1), -9),
		"parent_block_hash", msgp.AppendNil(nil), "token_ids", msgp.AppendInt(msgp.AppendArrayHeader(nil, 1), 5),
		"block_size", msgp.AppendInt(nil, 1), "medium", mpStr("GPU"), "cache_salt", mpStr("tenant-m"))
	for _, tc := range []struct {
		name    string
		event   []byte
		salt    string
		hasSalt bool
		err     error
	}{
		{"unsalted", sglangArrayStored(-1, nil), "", false, nil},
		{"salted", sglangArrayStored(-2, strMap("cache_salt", mpStr("tenant-a"))), "tenant-a", true, nil},
		{"session_only", sglangArrayStored(-3, strMap("session_id", mpStr("s1"))), "", false, nil},
		{"session_and_salt", sglangArrayStored(-4, strMap("session_id", mpStr("s1"), "cache_salt", mpStr("tenant-b"))), "tenant-b", true, nil},
		{"null_salt", sglangArrayStored(-5, strMap("cache_salt", msgp.AppendNil(nil))), "", false, nil},
		{"empty_metadata", sglangArrayStored(-6, strMap()), "", false, nil},
		{"map_event", mapEvent, "tenant-m", true, nil},
		{"salt_not_a_string", sglangArrayStored(-7, strMap("cache_salt", msgp.AppendInt(nil, 7))), "", false, ErrType},
		{"key_not_a_string", sglangArrayStored(-8, append(msgp.AppendMapHeader(nil, 1), 0x01, 0xc0)), "", false, ErrType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b Batch
			err := DecodeBatch(batchOf(sglangArrayStored(-100, nil), tc.event), &b)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Events) != 2 || b.Events[0].HasCacheSalt {
				t.Fatalf("decoded %+v, want the unsalted store and the event", b.Events)
			}
			ev := b.Events[1]
			if ev.Kind != BlockStored || ev.CacheSalt != tc.salt || ev.HasCacheSalt != tc.hasSalt || ev.HasLoRAName {
				t.Errorf("decoded %+v, want cache_salt %q (%v) and no lora_name", ev, tc.salt, tc.hasSalt)
			}
			// Re-encoded in SGLang's forms, the salt decodes the same.
			for _, enc := range []Encoding{EncodingMap, EncodingSGLang} {
				var again Batch
				if err := DecodeBatch(AppendBatch(nil, &b, enc), &again); err != nil {
					t.Fatalf("%s: %v", enc, err)
				}
				if d := batchDiff(&b, &again); d != "" {
					t.Errorf("%s: re-encoded batch decodes differently (-first +second):\n%s", enc, d)
				}
			}
		})
	}
}

// sglangPairs is SGLang's array BlockStored of one block whose token_ids
// are the pairs given, already encoded: its radix cache keys by
// [token, next token] pairs under EAGLE-family speculative decoding.
func sglangPairs(pairs ...[]byte) []byte {
	e := msgp.AppendArrayHeader(nil, 7)
	e = msgp.AppendString(e, "BlockStored")
	e = msgp.AppendArrayHeader(e, 1)
	e = msgp.AppendInt64(e, -1)
	e = msgp.AppendNil(e)
	e = msgp.AppendArrayHeader(e, uint32(len(pairs)))
	for _, p := range pairs {
		e = append(e, p...)
	}
	e = msgp.AppendInt(e, len(pairs))
	e = msgp.AppendNil(e)
	return msgp.AppendString(e, "GPU")
}

func mpPair(a, b int64) []byte {
	return msgp.AppendInt64(msgp.AppendInt64(msgp.AppendArrayHeader(nil, 2), a), b)
}

// TestSGLangBigramTokens: SGLang with EAGLE speculative decoding stores a
// page's token ids as [token, next token] pairs; each pair is its first
// token (a page's pairs begin with its own tokens), where a pair refused
// the batch and purged the mirror at every store (found by a review).
// Anything else in a list of token ids is still malformed.
func TestSGLangBigramTokens(t *testing.T) {
	big := int64(1) << 40
	for _, tc := range []struct {
		name   string
		event  []byte
		tokens []uint32
		err    error
	}{
		{"pairs", sglangPairs(mpPair(5, 70000), mpPair(70000, 9), mpPair(9, 1)), []uint32{5, 70000, 9}, nil},
		{"pairs_and_ids", sglangPairs(mpPair(5, 6), msgp.AppendInt(nil, 6)), []uint32{5, 6}, nil},
		{"three", sglangPairs(msgp.AppendInt(msgp.AppendInt(msgp.AppendInt(msgp.AppendArrayHeader(nil, 3), 1), 2), 3)), nil, ErrType},
		{"first_out_of_range", sglangPairs(mpPair(big, 1)), nil, ErrRange},
		{"next_out_of_range", sglangPairs(mpPair(1, big)), nil, ErrRange},
		{"negative", sglangPairs(mpPair(-1, 1)), nil, ErrRange},
		{"string", sglangPairs(append(msgp.AppendArrayHeader(nil, 2), mpStr("a")...)), nil, ErrType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b Batch
			err := DecodeBatch(batchOf(tc.event), &b)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Events) != 1 || !slices.Equal(b.Events[0].Tokens, tc.tokens) {
				t.Errorf("decoded %+v, want tokens %v", b.Events, tc.tokens)
			}
		})
	}
	// Truncated inside a pair: the payload ends after its first token.
	p := batchOf(sglangPairs(mpPair(5, 6)))
	cut := bytes.Index(p, mpPair(5, 6)) + 2
	var b Batch
	if err := DecodeBatch(p[:cut], &b); !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrTooLong) {
		t.Errorf("a pair cut short: err %v, want truncated", err)
	}
}
