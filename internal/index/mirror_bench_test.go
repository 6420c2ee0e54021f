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
			x := NewApprox(n)
			x.AttachEvents("r", EventsConfig{BlockSize: 16, MaxBlocks: 2 * n,
				Seed: func(string, string) blockhash.Hash { return seed }})
			x.SetSource("r", true)
			r := x.lockReplica("r", false)
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

// BenchmarkMatch512x64Events is BenchmarkMatch512x64's staggered fleet with
// every replica following its engine's events: replica i's mirror holds
// the query's first 8(i+1) blocks, stored as one BlockStored from the
// tokens. Match reads the same holder map either way, so its cost should
// not change with the source.
func BenchmarkMatch512x64Events(b *testing.B) {
	ids := benchIDs()
	idx := NewApprox(16384)
	toks := make([]int, benchBlocks*benchBS)
	for i := range toks {
		toks[i] = 1000 + i
	}
	q := blockhash.Extend(nil, testSeed, toks, benchBS)
	seed := func(string, string) blockhash.Hash { return testSeed }
	for i, id := range ids {
		idx.AttachEvents(id, EventsConfig{BlockSize: benchBS, Seed: seed})
		idx.SetSource(id, true)
		n := 8 * (i + 1)
		ev := events.Event{Kind: events.BlockStored, BlockSize: benchBS, Medium: "GPU", HasMedium: true,
			Tokens: make([]uint32, n*benchBS)}
		for j := range n {
			ev.Hashes = append(ev.Hashes, events.UintHash(uint64(i)<<32|uint64(j+1)))
		}
		for j := range ev.Tokens {
			ev.Tokens[j] = uint32(toks[j])
		}
		idx.ApplyEvents(id, &events.Batch{Events: []events.Event{ev}})
	}
	dst := make([]int, len(ids))
	b.ReportAllocs()
	for b.Loop() {
		dst = idx.Match(dst, ids, q, benchTokens, benchBS)
	}
	reportLatency(b, 200_000, func(int) { dst = idx.Match(dst, ids, q, benchTokens, benchBS) })
	if slices.Max(dst) != benchBlocks {
		b.Fatalf("the deepest replica holds %d blocks, want %d", slices.Max(dst), benchBlocks)
	}
	b.ReportMetric(float64(slices.Max(dst)), "deepest-blocks")
}
