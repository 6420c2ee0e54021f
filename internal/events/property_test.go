package events

import (
	"math"
	"testing"

	"github.com/tinylib/msgp/msgp"
	"pgregory.net/rapid"
)

func genHash(t *rapid.T, label string) Hash {
	switch rapid.IntRange(0, 2).Draw(t, label+"-form") {
	case 0:
		return UintHash(rapid.Uint64().Draw(t, label))
	case 1:
		return IntHash(rapid.Int64Range(math.MinInt64, -1).Draw(t, label))
	}
	return BytesHash(rapid.SliceOfN(rapid.Byte(), 0, 40).Draw(t, label))
}

// genRaw draws one msgpack value of the kinds extra_keys hold: nil, ints,
// strings, bytes, and tuples of them, nested.
func genRaw(t *rapid.T, depth int) RawValue {
	var v RawValue
	switch rapid.IntRange(0, 5).Draw(t, "raw") {
	case 0:
		v = msgp.AppendNil(v)
	case 1:
		v = appendInt(v, rapid.Int64().Draw(t, "rawint"))
	case 2:
		v = msgp.AppendString(v, rapid.String().Draw(t, "rawstr"))
	case 3:
		v = msgp.AppendBytes(v, rapid.SliceOf(rapid.Byte()).Draw(t, "rawbin"))
	default:
		if depth > 2 {
			return msgp.AppendNil(v)
		}
		n := rapid.IntRange(0, 4).Draw(t, "rawlen")
		v = msgp.AppendArrayHeader(v, uint32(n))
		for range n {
			v = append(v, genRaw(t, depth+1)...)
		}
	}
	return v
}

func optDraw[T any](t *rapid.T, g *rapid.Generator[T], label string, v *T, has *bool) {
	if rapid.Bool().Draw(t, "has-"+label) {
		*v, *has = g.Draw(t, label), true
	}
}

func genEvent(t *rapid.T) Event {
	e := Event{Kind: Kind(rapid.IntRange(1, 3).Draw(t, "kind"))}
	if e.Kind == AllBlocksCleared {
		return e
	}
	for range rapid.IntRange(0, 20).Draw(t, "blocks") {
		e.Hashes = append(e.Hashes, genHash(t, "hash"))
	}
	str := rapid.StringN(0, 40, -1)
	optDraw(t, str, "medium", &e.Medium, &e.HasMedium)
	optDraw(t, rapid.Int64(), "group", &e.GroupIdx, &e.HasGroupIdx)
	optDraw(t, str, "locality", &e.Locality, &e.HasLocality)
	if e.Kind == BlockRemoved {
		return e
	}
	if rapid.Bool().Draw(t, "has-parent") {
		e.Parent, e.HasParent = genHash(t, "parent"), true
	}
	e.Tokens = rapid.SliceOfN(rapid.Uint32(), 0, 300).Draw(t, "tokens")
	e.BlockSize = rapid.IntRange(0, math.MaxInt).Draw(t, "block-size")
	optDraw(t, rapid.Int64(), "lora-id", &e.LoRAID, &e.HasLoRAID)
	optDraw(t, rapid.StringN(0, 300, -1), "lora-name", &e.LoRAName, &e.HasLoRAName)
	optDraw(t, str, "spec-kind", &e.SpecKind, &e.HasSpecKind)
	optDraw(t, rapid.Int64(), "window", &e.SlidingWindow, &e.HasSlidingWindow)
	if rapid.Bool().Draw(t, "has-extra-keys") {
		e.ExtraKeys = []RawValue{}
		for range rapid.IntRange(0, 5).Draw(t, "extra-keys") {
			e.ExtraKeys = append(e.ExtraKeys, genRaw(t, 0))
		}
	}
	return e
}

func genBatch(t *rapid.T) *Batch {
	b := &Batch{TS: rapid.Float64().Draw(t, "ts")}
	optDraw(t, rapid.Int64(), "rank", &b.DPRank, &b.HasDPRank)
	for range rapid.IntRange(0, 20).Draw(t, "events") {
		b.Events = append(b.Events, genEvent(t))
	}
	return b
}

// carried is what of b an encoding carries: vLLM's array events have no
// locality; SGLang's events have no lora_name, extra keys, group, spec or
// locality.
func carried(b *Batch, enc Encoding) *Batch {
	if enc == EncodingMap {
		return b
	}
	n := *b
	n.Events = nil
	for _, e := range b.Events {
		if enc == EncodingArray {
			e.Locality, e.HasLocality = "", false
			n.Events = append(n.Events, e)
			continue
		}
		n.Events = append(n.Events, Event{Kind: e.Kind, Hashes: e.Hashes, Parent: e.Parent,
			HasParent: e.HasParent, Tokens: e.Tokens, BlockSize: e.BlockSize, LoRAID: e.LoRAID,
			HasLoRAID: e.HasLoRAID && e.Kind == BlockStored, Medium: e.Medium, HasMedium: e.HasMedium})
	}
	return &n
}

// TestRoundTrip: for random batches, DecodeBatch(AppendBatch(b, enc)) is b
// (less what enc cannot carry), decoding into a Batch reused across
// checks.
func TestRoundTrip(t *testing.T) {
	var into Batch
	rapid.Check(t, func(t *rapid.T) {
		b := genBatch(t)
		for _, enc := range []Encoding{EncodingMap, EncodingArray, EncodingSGLang} {
			payload := AppendBatch(nil, b, enc)
			if err := DecodeBatch(payload, &into); err != nil {
				t.Fatalf("%v: DecodeBatch: %v\npayload %x", enc, err, payload)
			}
			if d := batchDiff(carried(b, enc), &into); d != "" {
				t.Fatalf("%v: round trip (-want +got):\n%s", enc, d)
			}
		}
	})
}

// TestDecodeNeverPanics: random bytes, and valid payloads mutated (bytes
// changed, inserted, removed, cut short), decode to a batch or an error
// wrapping a sentinel; never a panic. A mutated payload that still decodes
// must re-encode to something that decodes to the same batch.
func TestDecodeNeverPanics(t *testing.T) {
	var into, again Batch
	rapid.Check(t, func(t *rapid.T) {
		var payload []byte
		if rapid.Bool().Draw(t, "random") {
			payload = rapid.SliceOfN(rapid.Byte(), 0, 200).Draw(t, "bytes")
		} else {
			enc := Encoding(rapid.IntRange(0, 2).Draw(t, "enc"))
			payload = AppendBatch(nil, genBatch(t), enc)
			for range rapid.IntRange(1, 4).Draw(t, "mutations") {
				payload = mutate(t, payload)
			}
		}
		err := DecodeBatch(payload, &into)
		if err != nil {
			checkDecodeError(t, err, len(payload))
			return
		}
		if err := DecodeBatch(AppendBatch(nil, &into, EncodingMap), &again); err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		into.Skipped = 0
		if d := batchDiff(&into, &again); d != "" {
			t.Fatalf("re-encoded batch decodes differently (-first +second):\n%s", d)
		}
	})
}

func mutate(t *rapid.T, p []byte) []byte {
	if len(p) == 0 {
		return p
	}
	i := rapid.IntRange(0, len(p)-1).Draw(t, "at")
	switch rapid.IntRange(0, 3).Draw(t, "how") {
	case 0:
		p[i] = rapid.Byte().Draw(t, "byte")
	case 1:
		p = append(p[:i:i], append([]byte{rapid.Byte().Draw(t, "ins")}, p[i:]...)...)
	case 2:
		p = append(p[:i:i], p[i+1:]...)
	default:
		p = p[:i]
	}
	return p
}

func checkDecodeError(t interface{ Fatalf(string, ...any) }, err error, size int) {
	de, ok := err.(*DecodeError)
	if !ok {
		t.Fatalf("error %T %v, want *DecodeError", err, err)
		return
	}
	switch de.Err {
	case ErrTruncated, ErrType, ErrRange, ErrTooLong, ErrMissingField, ErrTrailing:
	default:
		t.Fatalf("DecodeError wraps %v, not a sentinel", de.Err)
	}
	if de.Offset < 0 || de.Offset > size {
		t.Fatalf("DecodeError offset %d outside the %d-byte payload", de.Offset, size)
	}
}
