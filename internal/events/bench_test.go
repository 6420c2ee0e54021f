package events

import (
	"math/rand/v2"
	"testing"
)

// typicalBatch is a scheduler step's batch as a busy vLLM publishes it:
// stored events of blocksPerEvent 16-token blocks (token ids from a
// 152k vocabulary, so mostly uint16 and uint32 forms), uint64 hashes,
// extra_keys of Nones, group 0 and the spec kind, plus one removal per
// four stores, as evictions interleave with stores once the cache is full.
func typicalBatch(tb testing.TB, stores, blocksPerEvent int) *Batch {
	tb.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	b := &Batch{TS: 1755000000.25, HasDPRank: true}
	for i := 0; i < stores; i++ {
		e := Event{Kind: BlockStored, BlockSize: 16, Medium: "GPU", HasMedium: true,
			GroupIdx: 0, HasGroupIdx: true, SpecKind: "full_attention", HasSpecKind: true,
			Parent: UintHash(r.Uint64()), HasParent: i%2 == 1}
		for j := 0; j < blocksPerEvent; j++ {
			e.Hashes = append(e.Hashes, UintHash(r.Uint64()))
			e.ExtraKeys = append(e.ExtraKeys, RawValue{0xc0})
			for k := 0; k < 16; k++ {
				e.Tokens = append(e.Tokens, uint32(r.IntN(151936)))
			}
		}
		b.Events = append(b.Events, e)
		if i%4 == 3 {
			b.Events = append(b.Events, Event{Kind: BlockRemoved, Hashes: []Hash{UintHash(r.Uint64())},
				Medium: "GPU", HasMedium: true, HasGroupIdx: true})
		}
	}
	return b
}

func countBlocks(b *Batch) int {
	n := 0
	for _, e := range b.Events {
		if e.Kind == BlockStored {
			n += len(e.Hashes)
		}
	}
	return n
}

// BenchmarkDecodeBatch reports stored blocks decoded per second of one
// core (goal: at least 2 million) for each encoding.
func BenchmarkDecodeBatch(b *testing.B) {
	batch := typicalBatch(b, 16, 4)
	blocks := countBlocks(batch)
	for _, enc := range []Encoding{EncodingMap, EncodingArray, EncodingSGLang} {
		b.Run(enc.String(), func(b *testing.B) {
			payload := AppendBatch(nil, batch, enc)
			var into Batch
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			for b.Loop() {
				if err := DecodeBatch(payload, &into); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(blocks)*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
		})
	}
}

// BenchmarkAppendBatch is the encoder's side, for the simulator's
// publisher.
func BenchmarkAppendBatch(b *testing.B) {
	batch := typicalBatch(b, 16, 4)
	blocks := countBlocks(batch)
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendBatch(buf[:0], batch, EncodingMap)
	}
	b.ReportMetric(float64(blocks)*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
}

// TestDecodeAllocatesNothing: decoding batch after batch into one Batch
// reuses its memory (integer hashes; digest hashes take one string per
// event).
func TestDecodeAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	batch := typicalBatch(t, 16, 4)
	for _, enc := range []Encoding{EncodingMap, EncodingArray, EncodingSGLang} {
		payload := AppendBatch(nil, batch, enc)
		var into Batch
		if err := DecodeBatch(payload, &into); err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(20, func() {
			if err := DecodeBatch(payload, &into); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%v: %v allocations per decode, want 0", enc, allocs)
		}
	}
}
