package kvfeed

import (
	"math/rand/v2"
	"testing"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/events"
	"github.com/inferrail/inferrail/internal/index"
)

// ingestCycle is a run of encoded batches that a mirror can apply over
// and over: batch i stores request i's new blocks, chained after one of a
// few shared prefixes, in events of several 16-token blocks each, and
// removes, one BlockRemoved per block as vLLM sends them, the blocks of
// request i-window (mod the cycle), as a full cache evicts the oldest.
type ingestCycle struct {
	payloads    [][]byte
	prefixes    []*events.Batch // the shared prefixes, stored once, never removed
	blockEvents int             // block stores and removals in one pass over payloads
}

// buildIngestCycle makes a cycle of n batches, each storing blocksPerReq
// blocks in events of blocksPerEvent, keeping window requests cached.
func buildIngestCycle(tb testing.TB, n, window, blocksPerReq, blocksPerEvent int) *ingestCycle {
	tb.Helper()
	r := rand.New(rand.NewPCG(3, 4))
	c := &ingestCycle{}
	// Shared prefixes: 8 system prompts of 4 blocks each.
	prefixTail := make([]events.Hash, 8)
	for p := range prefixTail {
		ev := storedEvent(r, nil, 4)
		prefixTail[p] = ev.Hashes[3]
		c.prefixes = append(c.prefixes, &events.Batch{TS: 1, Events: []events.Event{ev}, HasDPRank: true})
	}
	reqs := make([][]events.Hash, n) // each request's block hashes
	stores := make([][]events.Event, n)
	for i := range n {
		parent := prefixTail[r.IntN(len(prefixTail))]
		for left := blocksPerReq; left > 0; left -= blocksPerEvent {
			ev := storedEvent(r, &parent, min(left, blocksPerEvent))
			reqs[i] = append(reqs[i], ev.Hashes...)
			parent = ev.Hashes[len(ev.Hashes)-1]
			stores[i] = append(stores[i], ev)
		}
	}
	for i := range n {
		b := &events.Batch{TS: 1755000000.25 + float64(i), HasDPRank: true, Events: stores[i]}
		for _, h := range reqs[(i-window+n)%n] {
			b.Events = append(b.Events, events.Event{Kind: events.BlockRemoved, Hashes: []events.Hash{h},
				Medium: "GPU", HasMedium: true, HasGroupIdx: true})
		}
		c.payloads = append(c.payloads, events.AppendBatch(nil, b, events.EncodingMap))
		c.blockEvents += 2 * blocksPerReq
	}
	return c
}

// storedEvent is a BlockStored of blocks fresh 16-token blocks with random
// hashes and token ids from a 152k vocabulary, after parent when not nil.
func storedEvent(r *rand.Rand, parent *events.Hash, blocks int) events.Event {
	ev := events.Event{Kind: events.BlockStored, BlockSize: 16, Medium: "GPU", HasMedium: true,
		HasGroupIdx: true, SpecKind: "full_attention", HasSpecKind: true}
	if parent != nil {
		ev.Parent, ev.HasParent = *parent, true
	}
	for range blocks {
		ev.Hashes = append(ev.Hashes, events.UintHash(r.Uint64()))
		ev.ExtraKeys = append(ev.ExtraKeys, events.RawValue{0xc0})
		for range 16 {
			ev.Tokens = append(ev.Tokens, uint32(r.IntN(151936)))
		}
	}
	return ev
}

// BenchmarkIngest decodes real msgpack batches and applies them to an
// index.Mirror, as a Feed and its sink do on one goroutine, and reports
// the block events (blocks stored plus blocks removed) handled per second
// of one core (goal: at least 2 million; run with -cpu 1 for one core).
// The mirror holds about 2,000 requests' blocks throughout: each batch
// stores one request's blocks and evicts an older request's. The decode
// and apply sub-benchmarks time each half alone.
func BenchmarkIngest(b *testing.B) {
	for _, shape := range []struct {
		name                         string
		blocksPerReq, blocksPerEvent int
	}{
		{"8blocks_in_events_of_4", 8, 4},
		{"32blocks_in_events_of_16", 32, 16},
	} {
		const n, window = 4096, 2048
		c := buildIngestCycle(b, n, window, shape.blocksPerReq, shape.blocksPerEvent)
		decoded := make([]events.Batch, len(c.payloads))
		for i, p := range c.payloads {
			if err := events.DecodeBatch(p, &decoded[i]); err != nil {
				b.Fatal(err)
			}
		}
		for _, mode := range []string{"decode_and_apply", "decode", "apply"} {
			b.Run(shape.name+"/"+mode, func(b *testing.B) {
				benchIngest(b, c, decoded, mode)
			})
		}
	}
}

func benchIngest(b *testing.B, c *ingestCycle, decoded []events.Batch, mode string) {
	seed := blockhash.Seed("inferrail/sim-8b", "", "")
	m := index.NewMirror(16, func(string, string) blockhash.Hash { return seed }, 1<<16, 0)
	for _, p := range c.prefixes {
		m.Apply(p)
	}
	var batch events.Batch
	pass := func() {
		for i, p := range c.payloads {
			if mode == "apply" {
				m.Apply(&decoded[i])
				continue
			}
			if err := events.DecodeBatch(p, &batch); err != nil {
				b.Fatal(err)
			}
			if mode == "decode_and_apply" {
				m.Apply(&batch)
			}
		}
	}
	pass() // warm: from here on every removal finds its block
	bytes := 0
	for _, p := range c.payloads {
		bytes += len(p)
	}
	b.SetBytes(int64(bytes))
	b.ReportAllocs()
	for b.Loop() {
		pass()
	}
	b.ReportMetric(float64(c.blockEvents)*float64(b.N)/b.Elapsed().Seconds(), "block_events/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(c.blockEvents)/float64(b.N), "ns/block_event")
	if st := m.Stats; st.Skipped != 0 || m.Orphans() != 0 {
		b.Fatalf("mirror stats %+v, %d orphans: the batches do not chain", st, m.Orphans())
	}
}
