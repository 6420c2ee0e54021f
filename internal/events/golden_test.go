// The golden tests hold the codec to msgspec's own bytes.
//
// testdata/goldens.json is written by the real msgspec (the version pinned
// in scripts/goldens/requirements.txt) from structs declared as vLLM and
// SGLang declare theirs; regenerate it with
//
//	python3 scripts/goldens/kvevents_goldens.py
//
// (it builds its own venv, .venv/goldens, from pinned, hashed wheels). The
// fixtures are committed: these tests need no Python.
package events

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

type goldenCase struct {
	Name   string       `json:"name"`
	Family string       `json:"family"`
	Encode bool         `json:"encode"`
	Hex    string       `json:"hex"`
	Batch  *goldenBatch `json:"batch"`
	Error  string       `json:"error"`
}

type goldenBatch struct {
	TS      float64       `json:"ts"`
	DPRank  *int64        `json:"dp_rank"`
	Events  []goldenEvent `json:"events"`
	Skipped int           `json:"skipped"`
}

type goldenEvent struct {
	Type          string       `json:"type"`
	BlockHashes   []goldenHash `json:"block_hashes"`
	Parent        *goldenHash  `json:"parent_block_hash"`
	TokenIDs      []uint32     `json:"token_ids"`
	BlockSize     int          `json:"block_size"`
	LoRAID        *int64       `json:"lora_id"`
	Medium        *string      `json:"medium"`
	LoRAName      *string      `json:"lora_name"`
	ExtraKeys     *[]string    `json:"extra_keys"`
	GroupIdx      *int64       `json:"group_idx"`
	SpecKind      *string      `json:"kv_cache_spec_kind"`
	SlidingWindow *int64       `json:"kv_cache_spec_sliding_window"`
	Locality      *string      `json:"locality"`
}

type goldenHash struct {
	U *uint64 `json:"u"`
	I *int64  `json:"i"`
	B *string `json:"b"`
}

func (h goldenHash) hash(t *testing.T) Hash {
	t.Helper()
	switch {
	case h.U != nil:
		return UintHash(*h.U)
	case h.I != nil:
		return IntHash(*h.I)
	case h.B != nil:
		return BytesHash(mustHex(t, *h.B))
	}
	t.Fatal("golden hash with no value")
	return Hash{}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// opt sets *v and *has from a golden's optional field.
func opt[T any](p *T, v *T, has *bool) {
	if p != nil {
		*v, *has = *p, true
	}
}

func (g *goldenBatch) batch(t *testing.T) *Batch {
	t.Helper()
	b := &Batch{TS: g.TS, Skipped: g.Skipped}
	opt(g.DPRank, &b.DPRank, &b.HasDPRank)
	for _, ge := range g.Events {
		e := Event{BlockSize: ge.BlockSize, Tokens: ge.TokenIDs}
		switch ge.Type {
		case "BlockStored":
			e.Kind = BlockStored
		case "BlockRemoved":
			e.Kind = BlockRemoved
		case "AllBlocksCleared":
			e.Kind = AllBlocksCleared
		default:
			t.Fatalf("golden event of type %q", ge.Type)
		}
		for _, h := range ge.BlockHashes {
			e.Hashes = append(e.Hashes, h.hash(t))
		}
		if ge.Parent != nil {
			e.Parent, e.HasParent = ge.Parent.hash(t), true
		}
		opt(ge.LoRAID, &e.LoRAID, &e.HasLoRAID)
		opt(ge.Medium, &e.Medium, &e.HasMedium)
		opt(ge.LoRAName, &e.LoRAName, &e.HasLoRAName)
		opt(ge.GroupIdx, &e.GroupIdx, &e.HasGroupIdx)
		opt(ge.SpecKind, &e.SpecKind, &e.HasSpecKind)
		opt(ge.SlidingWindow, &e.SlidingWindow, &e.HasSlidingWindow)
		opt(ge.Locality, &e.Locality, &e.HasLocality)
		if ge.ExtraKeys != nil {
			e.ExtraKeys = []RawValue{}
			for _, k := range *ge.ExtraKeys {
				e.ExtraKeys = append(e.ExtraKeys, mustHex(t, k))
			}
		}
		b.Events = append(b.Events, e)
	}
	return b
}

func loadGoldens(tb testing.TB) []goldenCase {
	tb.Helper()
	data, err := os.ReadFile("testdata/goldens.json")
	if err != nil {
		tb.Fatal(err)
	}
	var cases []goldenCase
	if err := json.Unmarshal(data, &cases); err != nil {
		tb.Fatal(err)
	}
	return cases
}

// batchDiff compares batches: Hash by value, nil and empty Events, Hashes
// and Tokens alike, but not ExtraKeys, where nil (None) and empty (an
// empty list) differ on the wire.
func batchDiff(want, got *Batch) string {
	// A timestamp may be NaN (a publisher's float, carried as sent), which
	// equals itself here.
	return cmp.Diff(normalBatch(want), normalBatch(got), cmp.Comparer(func(a, b Hash) bool { return a == b }), cmpopts.EquateNaNs())
}

func normalBatch(b *Batch) Batch {
	n := *b
	n.Events = append([]Event{}, b.Events...)
	for i := range n.Events {
		e := &n.Events[i]
		if e.Hashes == nil {
			e.Hashes = []Hash{}
		}
		if e.Tokens == nil {
			e.Tokens = []uint32{}
		}
	}
	return n
}

func sentinelByName(t *testing.T, name string) error {
	t.Helper()
	for _, e := range []struct {
		name string
		err  error
	}{
		{"ErrTruncated", ErrTruncated}, {"ErrType", ErrType}, {"ErrRange", ErrRange},
		{"ErrTooLong", ErrTooLong}, {"ErrMissingField", ErrMissingField}, {"ErrTrailing", ErrTrailing},
		{"ErrTooMany", ErrTooMany},
	} {
		if e.name == name {
			return e.err
		}
	}
	t.Fatalf("no sentinel %s", name)
	return nil
}

// TestGoldens: every golden payload decodes to its expectation (or fails
// with its sentinel), and every expectation the encoder can produce
// encodes to msgspec's exact bytes in its family's encoding.
func TestGoldens(t *testing.T) {
	cases := loadGoldens(t)
	if len(cases) < 40 {
		t.Fatalf("only %d golden cases", len(cases))
	}
	encodings := map[string]Encoding{"map": EncodingMap, "array": EncodingArray, "sglang": EncodingSGLang}
	var reused Batch // one Batch for every case: decoding must not leak one case into the next
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			payload := mustHex(t, c.Hex)
			err := DecodeBatch(payload, &reused)
			if c.Error != "" {
				var de *DecodeError
				if !errors.Is(err, sentinelByName(t, c.Error)) || !errors.As(err, &de) {
					t.Fatalf("DecodeBatch: %v, want %s", err, c.Error)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeBatch: %v", err)
			}
			want := c.Batch.batch(t)
			if d := batchDiff(want, &reused); d != "" {
				t.Fatalf("decoded batch (-want +got):\n%s", d)
			}
			var fresh Batch
			if err := DecodeBatch(payload, &fresh); err != nil {
				t.Fatal(err)
			}
			if d := batchDiff(want, &fresh); d != "" {
				t.Fatalf("decoded into a fresh batch (-want +got):\n%s", d)
			}
			if !c.Encode {
				return
			}
			enc, ok := encodings[c.Family]
			if !ok {
				t.Fatalf("family %q", c.Family)
			}
			if got := AppendBatch(nil, want, enc); string(got) != string(payload) {
				t.Fatalf("AppendBatch(%v):\n got %x\nwant %x", enc, got, payload)
			}
		})
	}
}

// TestSpecExample: the example batch of the reference notes is 315 bytes
// and round-trips through the map encoding.
func TestSpecExample(t *testing.T) {
	for _, c := range loadGoldens(t) {
		if c.Name != "map/spec-example" {
			continue
		}
		payload := mustHex(t, c.Hex)
		if len(payload) != 315 {
			t.Fatalf("spec example: %d bytes, want 315", len(payload))
		}
		var b Batch
		if err := DecodeBatch(payload, &b); err != nil {
			t.Fatal(err)
		}
		if len(b.Events) != 3 || b.Events[0].Hashes[0] != UintHash(0x2ceabcfae6d332ea) || len(b.Events[0].Tokens) != 32 {
			t.Fatalf("spec example decoded to %+v", b)
		}
		return
	}
	t.Fatal("no spec example among the goldens")
}
