package index

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/events"
)

// mirroredBlocks is how many blocks BenchmarkMirrorBytesPerBlock mirrors.
const mirroredBlocks = 1_000_000

// heapGrowth is how much the live heap grows while f's result is kept,
// measured after a collection on each side.
func heapGrowth(f func() any) (uint64, any) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	kept := f()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	return after.HeapAlloc - before.HeapAlloc, kept
}

// fillMirror stores n blocks in m: chains of 16 blocks of 16 tokens, each
// chain one BlockStored with no parent, all hashes distinct. The event's
// buffers are reused, so only what the mirror keeps stays on the heap.
func fillMirror(m *Mirror, n int) {
	const chain = 16
	ev := events.Event{Kind: events.BlockStored, BlockSize: 16, Medium: "GPU", HasMedium: true,
		Hashes: make([]events.Hash, chain), Tokens: make([]uint32, chain*16)}
	next := uint64(1)
	for stored := 0; stored < n; stored += chain {
		for j := range ev.Hashes {
			ev.Hashes[j] = events.UintHash(next * 0x9e3779b97f4a7c15) // spread, distinct
			next++
		}
		for j := range ev.Tokens {
			ev.Tokens[j] = uint32(next)*31 + uint32(j)
		}
		m.ApplyEvent(&ev)
	}
}

// BenchmarkMirrorBytesPerBlock fills a Mirror with a million blocks
// and reports the live heap it grew by, per block (goal: at most 120
// bytes for the whole index, BenchmarkEventsIndexBytesPerBlock), beside
// the size of one slot of its table: the rest is the table's empty slots.
func BenchmarkMirrorBytesPerBlock(b *testing.B) {
	seed := blockhash.Seed("inferrail/sim-8b", "", "")
	var perBlock float64
	for b.Loop() {
		grew, kept := heapGrowth(func() any {
			m := NewMirror(16, func(string, string) blockhash.Hash { return seed }, 0, 0)
			fillMirror(m, mirroredBlocks)
			return m
		})
		if m := kept.(*Mirror); m.Len() != mirroredBlocks || m.Stats.Skipped != 0 {
			b.Fatalf("the mirror holds %d blocks, want %d (stats %+v)", m.Len(), mirroredBlocks, m.Stats)
		}
		perBlock = float64(grew) / mirroredBlocks
	}
	b.ReportMetric(perBlock, "bytes/block")
	b.ReportMetric(float64(unsafe.Sizeof(blockSlot{})), "slot_B")
}

// BenchmarkEventsIndexBytesPerBlock is BenchmarkMirrorBytesPerBlock for the
// whole index of one events-sourced replica: its mirror and the holder map
// entries that routing reads (the LRU stays empty without routing), and
// what Stats estimates (stats-B/block).
func BenchmarkEventsIndexBytesPerBlock(b *testing.B) {
	benchEventsIndexBytes(b, mirroredBlocks)
}

// BenchmarkEventsIndexBytesPerBlockBySize is
// BenchmarkEventsIndexBytesPerBlock at sizes from a quarter million to two
// million blocks: tables grow in steps, so the bytes a block takes depend
// on where between two steps the count falls, and a million is one point.
func BenchmarkEventsIndexBytesPerBlockBySize(b *testing.B) {
	for _, n := range []int{250_000, 400_000, 550_000, 700_000, 850_000, 1_000_000, 1_250_000, 1_500_000, 1_750_000, 2_000_000} {
		b.Run(fmt.Sprintf("blocks=%d", n), func(b *testing.B) { benchEventsIndexBytes(b, n) })
	}
}

func benchEventsIndexBytes(b *testing.B, n int) {
	seed := blockhash.Seed("inferrail/sim-8b", "", "")
	var perBlock float64
	var st Stats
	for b.Loop() {
		grew, kept := heapGrowth(func() any {
			x := fleetIndex(n, []string{"r"})
			x.AttachEvents("r", EventsConfig{BlockSize: 16, MaxBlocks: 2 * n,
				Seed: func(string, string) blockhash.Hash { return seed }})
			x.SetSource("r", true)
			r := x.lockReplica("r")
			fillMirror(r.ev.mirror, n)
			r.mu.Unlock()
			return x
		})
		if st = kept.(*Approx).Stats(); st.Replicas[0].Held != n {
			b.Fatalf("the index holds %d blocks, want %d", st.Replicas[0].Held, n)
		}
		perBlock = float64(grew) / float64(n)
	}
	b.ReportMetric(perBlock, "bytes/block")
	b.ReportMetric(float64(st.Bytes)/float64(n), "stats-B/block")
}

// BenchmarkMatch512x64Events is BenchmarkMatch512x64 with every replica
// following its engine's events: each fixture is built as there, then
// every block each replica's shadow LRU holds is stored in that replica's
// mirror by BlockStored events (one a block, parents first, from the
// tokens), into an index whose replicas all follow their events. Match
// reads the same holder map either way, so its cost should not change
// with the source; the twin is checked to answer every query as the
// original does.
func BenchmarkMatch512x64Events(b *testing.B) {
	for _, c := range []struct {
		name  string
		build func(extender) matchFixture
	}{
		{"realistic", func(e extender) matchFixture { return buildRealisticFleet(64, e) }},
		{"realistic_1024q", func(e extender) matchFixture { return buildRealisticFleet(1024, e) }},
		{"all_held", buildAllHeldFleet},
		{"staggered", buildStaggeredFleet},
	} {
		b.Run(c.name, func(b *testing.B) {
			chains := benchChains{}
			benchMatch(b, eventsTwin(b, c.build(chains.extend), chains))
		})
	}
}

// benchChains remembers every block a fixture made: its parent and its
// one token (block size 1, as extend makes them), so that its events can
// be sent.
type benchChains map[blockhash.Hash]benchBlock

type benchBlock struct {
	parent blockhash.Hash
	depth  int32 // 0 for a first block, whose parent is the seed
	token  uint32
}

// extend is the package's extend, remembering what it makes.
func (c benchChains) extend(prefix []blockhash.Hash, n int) []blockhash.Hash {
	base := fresh.Add(int64(n)) - int64(n)
	out := slices.Clip(slices.Clone(prefix))
	for i := range n {
		parent := testSeed
		if len(out) > 0 {
			parent = out[len(out)-1]
		}
		tok := uint32(base) + uint32(i) + 1
		h := blockhash.Next(parent, []uint32{tok})
		c[h] = benchBlock{parent: parent, depth: int32(len(out)), token: tok}
		out = append(out, h)
	}
	return out
}

// eventsTwin returns f with its index rebuilt from KV events: every block
// each replica holds in f, stored in that replica's mirror.
func eventsTwin(b *testing.B, f matchFixture, chains benchChains) matchFixture {
	b.Helper()
	idx := fleetIndex(16384, f.ids)
	engineKeys := map[blockhash.Hash]uint64{}
	keyOf := func(h blockhash.Hash) events.Hash {
		k, ok := engineKeys[h]
		if !ok {
			k = uint64(len(engineKeys)+1) * 0x9e3779b97f4a7c15 // the engine's own numbers
			engineKeys[h] = k
		}
		return events.UintHash(k)
	}
	for _, id := range f.ids {
		at := idx.AttachEvents(id, EventsConfig{BlockSize: 1, Seed: func(string, string) blockhash.Hash { return testSeed }})
		idx.SetSource(id, true)
		r := f.idx.lockReplica(id)
		var held []blockhash.Hash
		for n := r.lru.front(); n != 0; n = r.lru.nodes[n].next {
			held = append(held, r.lru.nodes[n].hash)
		}
		r.mu.Unlock()
		slices.SortStableFunc(held, func(x, y blockhash.Hash) int { return int(chains[x].depth - chains[y].depth) })
		batch := events.Batch{}
		for _, h := range held {
			c, ok := chains[h]
			if !ok {
				b.Fatalf("replica %s holds block %v the fixture did not make", id, h)
			}
			ev := events.Event{Kind: events.BlockStored, BlockSize: 1, Medium: "GPU", HasMedium: true,
				Hashes: []events.Hash{keyOf(h)}, Tokens: []uint32{c.token}}
			if c.depth > 0 {
				ev.Parent, ev.HasParent = keyOf(c.parent), true
			}
			batch.Events = append(batch.Events, ev)
		}
		idx.ApplyEvents(at, &batch)
		if st := idx.Events(id); st.Source != SourceEvents || st.Mirrored != len(held) || st.Orphans != 0 {
			b.Fatalf("replica %s: %+v after storing its %d blocks", id, st, len(held))
		}
	}
	twin := matchFixture{idx, f.ids, f.queries}
	for i, q := range f.queries {
		want := f.idx.Match(nil, f.ids, q, benchTokens, benchBS)
		if got := twin.idx.Match(nil, f.ids, q, benchTokens, benchBS); !slices.Equal(got, want) {
			b.Fatalf("query %d: the events-fed index answers %v, the original %v", i, got, want)
		}
	}
	return twin
}
