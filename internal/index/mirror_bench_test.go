package index

import (
	"runtime"
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
// bytes). The breakdown metrics measure the Mirror's parts the same way,
// each alone with as many entries: its map from engine hash to block, its
// map from gateway hash to copy count, and the per-block structs.
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
	b.ReportMetric(float64(unsafe.Sizeof(mirrorBlock{})), "struct_size_B")

	blocksMap, _ := heapGrowth(func() any {
		one := &mirrorBlock{}
		mp := make(map[engineKey]*mirrorBlock)
		for i := range mirroredBlocks {
			mp[engineKey(uint64(i+1)*0x9e3779b97f4a7c15)] = one
		}
		return mp
	})
	oursMap, _ := heapGrowth(func() any {
		mp := make(map[blockhash.Hash]int32)
		for i := range mirroredBlocks {
			mp[blockhash.Hash{Hi: uint64(i) * 0x9e3779b97f4a7c15, Lo: uint64(i)}] = 1
		}
		return mp
	})
	structs, _ := heapGrowth(func() any {
		ptrs := make([]*mirrorBlock, mirroredBlocks)
		for i := range ptrs {
			ptrs[i] = &mirrorBlock{count: 1}
		}
		return ptrs
	})
	structs -= mirroredBlocks * uint64(unsafe.Sizeof((*mirrorBlock)(nil))) // the slice that keeps them
	b.ReportMetric(float64(blocksMap)/mirroredBlocks, "blocks_map_B/block")
	b.ReportMetric(float64(oursMap)/mirroredBlocks, "ours_map_B/block")
	b.ReportMetric(float64(structs)/mirroredBlocks, "structs_B/block")
}
