package index

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"
)

const (
	benchReplicas = 64
	benchBlocks   = 512
	benchBS       = 16
	// A prompt of 512 full blocks and a partial one: all 512 may hit.
	benchTokens = benchBlocks*benchBS + 7
)

// fleetIndex is an index whose replicas ids joined, holding up to
// capacity blocks each.
func fleetIndex(capacity int, ids []string) *Approx {
	x := NewApprox(capacity)
	for _, id := range ids {
		x.Join(id)
	}
	return x
}

func benchIDs() []string {
	ids := make([]string, benchReplicas)
	for i := range ids {
		ids[i] = fmt.Sprintf("replica-%02d", i)
	}
	return ids
}

// matchFixture is a fleet of 64 replicas with 16,384 blocks of capacity
// each, filled by a chat-like workload, and 512-block queries.
type matchFixture struct {
	idx     *Approx
	ids     []string
	queries [][]blockhash.Hash
}

var (
	realisticMu     sync.Mutex
	realisticFleets = map[int]matchFixture{}
)

// extender makes chains as extend does; a fixture takes one so that its
// events-fed twin can remember what it made (benchChains.extend).
type extender func(prefix []blockhash.Hash, n int) []blockhash.Hash

// realisticFleet records 20,000 chat turns: 16 system prompts of 32-128
// blocks, 2,000 conversations that grow by 8-64 blocks a turn up to 512,
// each sent to its home replica 85% of the time. The queries continue
// conversations whose 480-block history sits on one replica, 300 blocks of
// it on another, and whose system prompt most replicas hold.
func realisticFleet(b *testing.B, queries int) matchFixture {
	b.Helper()
	realisticMu.Lock()
	defer realisticMu.Unlock()
	if f, ok := realisticFleets[queries]; ok {
		return f
	}
	realisticFleets[queries] = buildRealisticFleet(queries, extend)
	return realisticFleets[queries]
}

func buildRealisticFleet(queries int, extend extender) matchFixture {
	rng := rand.New(rand.NewPCG(1, 2))
	ids := benchIDs()
	idx := fleetIndex(16384, ids)
	systems := make([][]blockhash.Hash, 16)
	for i := range systems {
		systems[i] = extend(nil, 32+rng.IntN(97))
	}
	type conv struct {
		home int
		hist []blockhash.Hash
	}
	convs := make([]conv, 2000)
	for i := range convs {
		convs[i] = conv{rng.IntN(benchReplicas), systems[rng.IntN(len(systems))]}
	}
	for range 20_000 {
		c := &convs[rng.IntN(len(convs))]
		if len(c.hist) > benchBlocks-64 {
			c.hist = systems[rng.IntN(len(systems))] // a new conversation
		}
		c.hist = extend(c.hist, 8+rng.IntN(57))
		to := c.home
		if rng.IntN(100) >= 85 {
			to = rng.IntN(benchReplicas)
		}
		idx.Record(ids[to], c.hist)
	}
	var qs [][]blockhash.Hash
	for q := range queries {
		sys := systems[q%len(systems)]
		hist := extend(sys, 480-len(sys))
		idx.Record(ids[(q+1)%benchReplicas], hist[:300])
		idx.Record(ids[q%benchReplicas], hist)
		qs = append(qs, extend(hist, benchBlocks-480))
	}
	return matchFixture{idx, ids, qs}
}

// allHeldFleet has every replica holding the whole query: each Match reads
// all 512 blocks.
func allHeldFleet() matchFixture { return buildAllHeldFleet(extend) }

func buildAllHeldFleet(extend extender) matchFixture {
	ids := benchIDs()
	idx := fleetIndex(16384, ids)
	q := extend(nil, benchBlocks)
	for _, id := range ids {
		idx.Record(id, q)
	}
	return matchFixture{idx, ids, [][]blockhash.Hash{q}}
}

// staggeredFleet has replica i holding the query's first 8(i+1) blocks: 64
// different answers, the deepest at 512.
func staggeredFleet() matchFixture { return buildStaggeredFleet(extend) }

func buildStaggeredFleet(extend extender) matchFixture {
	ids := benchIDs()
	idx := fleetIndex(16384, ids)
	q := extend(nil, benchBlocks)
	for i, id := range ids {
		idx.Record(id, q[:8*(i+1)])
	}
	return matchFixture{idx, ids, [][]blockhash.Hash{q}}
}

// reportLatency times n single calls of f and reports their p50 and p99.
func reportLatency(b *testing.B, n int, f func(i int)) {
	b.Helper()
	lat := make([]time.Duration, n)
	for i := range n {
		start := time.Now()
		f(i)
		lat[i] = time.Since(start)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[n/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[n*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkMatch512x64 asks for 512-block prompts over 64 replicas, the
// queries taken in turn. ns/op is the b.N average; p50-ns and p99-ns come
// from 200,000 calls timed one by one (each timing adds the cost of two
// clock reads, about 50 ns here).
func BenchmarkMatch512x64(b *testing.B) {
	for _, c := range []struct {
		name    string
		fixture func() matchFixture
	}{
		{"realistic", func() matchFixture { return realisticFleet(b, 64) }},
		// 1,024 queries: what they probe is too much for the caches.
		{"realistic_1024q", func() matchFixture { return realisticFleet(b, 1024) }},
		{"all_held", allHeldFleet},
		{"staggered", staggeredFleet},
	} {
		b.Run(c.name, func(b *testing.B) { benchMatch(b, c.fixture()) })
	}
}

// benchMatch times f's queries taken in turn, after collecting what
// building the fixture left behind, so that no collection of it runs
// beside the timed calls.
func benchMatch(b *testing.B, f matchFixture) {
	runtime.GC()
	dst := make([]int, len(f.ids))
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		dst = f.idx.Match(dst, f.ids, f.queries[i%len(f.queries)], benchTokens, benchBS)
		i++
	}
	reportLatency(b, 200_000, func(i int) {
		dst = f.idx.Match(dst, f.ids, f.queries[i%len(f.queries)], benchTokens, benchBS)
	})
	b.ReportMetric(float64(slices.Max(dst)), "deepest-blocks")
}

// BenchmarkRecord512 records 512-block prompts on one replica:
//   - warm: the same prompt again, every block held already;
//   - turn: a 448-block history held, 64 new blocks, as many evicted;
//   - cold: 512 new blocks, 512 evicted.
func BenchmarkRecord512(b *testing.B) {
	cases := []struct {
		name     string
		capacity int
		prompts  func() [][]blockhash.Hash
	}{
		{"warm", 16384, func() [][]blockhash.Hash { return [][]blockhash.Hash{extend(nil, benchBlocks)} }},
		{"turn", 448 + 16*64, func() [][]blockhash.Hash {
			hist := extend(nil, 448)
			ps := make([][]blockhash.Hash, 64)
			for i := range ps {
				ps[i] = extend(hist, 64)
			}
			return ps
		}},
		{"cold", 16384, func() [][]blockhash.Hash {
			ps := make([][]blockhash.Hash, 64) // 2x capacity: evicted before their turn comes again
			for i := range ps {
				ps[i] = extend(nil, benchBlocks)
			}
			return ps
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			ids := benchIDs()
			idx := fleetIndex(c.capacity, ids)
			for _, id := range ids[1:] { // the rest of the fleet holds something
				idx.Record(id, extend(nil, 256))
			}
			ps := c.prompts()
			for _, p := range ps { // reach the steady state first
				idx.Record(ids[0], p)
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				idx.Record(ids[0], ps[i%len(ps)])
				i++
			}
			reportLatency(b, 20_000, func(i int) { idx.Record(ids[0], ps[i%len(ps)]) })
			b.ReportMetric(float64(benchBlocks), "blocks/op")
		})
	}
}

// BenchmarkMemoryPerBlock fills 64 replicas with a million blocks and
// reports the heap the index takes per block held (B/block, from
// runtime.MemStats around the build, after GC) and what Stats estimates
// (stats-B/block):
//   - distinct: 64-block prompts, no block on two replicas: the worst case;
//   - shared: 16 system prompts of 448 blocks, each prompt one of them and
//     64 blocks of its own, so about half the blocks held are shared.
func BenchmarkMemoryPerBlock(b *testing.B) {
	const perReplica = 1_000_000 / benchReplicas
	for _, shared := range []bool{false, true} {
		name := "distinct"
		if shared {
			name = "shared"
		}
		b.Run(name, func(b *testing.B) {
			ids := benchIDs()
			var systems [][]blockhash.Hash
			for range 16 {
				systems = append(systems, extend(nil, 448))
			}
			var prompts [][]blockhash.Hash
			for range benchReplicas * (perReplica/64 + 16) {
				if shared {
					prompts = append(prompts, extend(systems[len(prompts)/benchReplicas%16], 64))
				} else {
					prompts = append(prompts, extend(nil, 64))
				}
			}
			var (
				idx           *Approx
				before, after runtime.MemStats
			)
			for b.Loop() {
				idx = nil
				runtime.GC()
				runtime.ReadMemStats(&before)
				idx = fleetIndex(perReplica, ids)
				for i, p := range prompts {
					idx.Record(ids[i%benchReplicas], p)
				}
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.StartTimer()
			}
			st := idx.Stats()
			distinct := 0
			for i := range idx.shards {
				distinct += idx.shards[i].count
			}
			b.ReportMetric(float64(distinct), "distinct-blocks")
			if st.Entries != benchReplicas*perReplica {
				b.Fatalf("%d entries, want %d", st.Entries, benchReplicas*perReplica)
			}
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(st.Entries), "B/block")
			b.ReportMetric(float64(st.Bytes)/float64(st.Entries), "stats-B/block")
			b.ReportMetric(float64(st.Entries), "blocks")
			runtime.KeepAlive(prompts)
		})
	}
}

// BenchmarkConcurrentRecordMatch runs the gateway's per-request work from
// every P at once: Match a 512-block prompt over 64 replicas, then Record
// it on the replica holding most of it. Prompts are 1,024 conversation
// turns over 64 histories of 448 blocks.
func BenchmarkConcurrentRecordMatch(b *testing.B) {
	ids := benchIDs()
	idx := fleetIndex(16384, ids)
	var prompts [][]blockhash.Hash
	for range 64 {
		hist := extend(nil, 448)
		for range 16 {
			prompts = append(prompts, extend(hist, 64))
		}
	}
	var seed atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(seed.Add(1), 5))
		dst := make([]int, len(ids))
		for pb.Next() {
			p := prompts[rng.IntN(len(prompts))]
			dst = idx.Match(dst, ids, p, benchTokens, benchBS)
			best := rng.IntN(len(ids))
			for i, d := range dst {
				if d > dst[best] {
					best = i
				}
			}
			idx.Record(ids[best], p)
		}
	})
}

// BenchmarkSoak40k records 40,000 distinct prompts of up to 512 blocks
// (hashing included) over 64 replicas of 8,192 blocks, then checks that
// every replica stayed within its capacity and the index is consistent.
func BenchmarkSoak40k(b *testing.B) {
	ids := benchIDs()
	var recorded int
	var idx *Approx
	for b.Loop() {
		idx = fleetIndex(8192, ids)
		recorded = soak(b, idx, ids, 40_000, benchBlocks, 7)
	}
	if err := idx.check(); err != nil {
		b.Fatal(err)
	}
	st := idx.Stats()
	b.ReportMetric(float64(recorded)/40_000, "blocks/prompt")
	b.ReportMetric(float64(st.Entries), "blocks-held")
	b.ReportMetric(float64(st.Bytes)/float64(st.Entries), "stats-B/block")
}
