package policy

import (
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"
)

// benchPrompts builds n prompts of 8,000 tokens (500 blocks of 16), over
// four system prompts of 4,000 tokens, each in a conversation of its own.
func benchPrompts(b *testing.B, n int) []*Request {
	b.Helper()
	out := make([]*Request, n)
	for i := range out {
		out[i] = &Request{
			ID:           fmt.Sprint("req-", i),
			PromptTokens: 8000,
			Blocks:       chain(uint64(i%4), 250, uint64(100+i), 500),
			BlockSize:    16,
			Session:      fmt.Sprint("conv-", i),
		}
	}
	return out
}

// benchCandidates builds n candidates with varied loads and caches: a
// quarter hold the request's system prompt, a few its whole history.
func benchCandidates(b *testing.B, n int) []Candidate {
	b.Helper()
	out := make([]Candidate, n)
	for i := range out {
		c := Candidate{
			ID:            fmt.Sprintf("replica-%03d", i),
			InFlight:      int64(i*7) % 13,
			QueuedPrefill: float64(i%5) * 0.1,
			Running:       int64(i*3) % 11,
			KVUsage:       float64(i%10) / 10,
		}
		switch {
		case i%16 == 0:
			c.Cached = 7984
		case i%4 == 0:
			c.Cached = 4000
		}
		out[i] = c
	}
	return out
}

// BenchmarkCostModelDecision is a full cost_model decision for an
// 8,000-token prompt at 8, 64 and 256 candidates, with hot system prompts
// (their demand crosses the utilization within the first iterations) and
// session affinity on. The index lookup that fills Cached is the gateway's
// and is not included. p99-ns/op is the 99th percentile of single
// decisions.
func BenchmarkCostModelDecision(b *testing.B) {
	for _, n := range []int{8, 64, 256} {
		b.Run(fmt.Sprint("candidates=", n), func(b *testing.B) {
			s := DefaultSettings()
			s.SessionAffinity = true
			p, _ := NewWith(CostModel, s)
			reqs := benchPrompts(b, 64)
			cands := benchCandidates(b, n)
			lat := make([]time.Duration, 0, 1<<16)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				start := time.Now()
				d := p.Pick(reqs[i%len(reqs)], cands)
				if len(lat) < cap(lat) {
					lat = append(lat, time.Since(start))
				}
				if d.Index < 0 {
					b.Fatal("no choice")
				}
				i++
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns/op")
		})
	}
}

// BenchmarkExplain is cost_model's explanation at 64 candidates.
func BenchmarkExplain(b *testing.B) {
	p, _ := New(CostModel, 1)
	reqs := benchPrompts(b, 64)
	cands := benchCandidates(b, 64)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p.Explain(reqs[i%len(reqs)], cands)
		i++
	}
}

// BenchmarkSharedPolicy runs 16 goroutines sharing one policy of each
// kind, with sessions and hot prefixes in play, and checks every decision:
// a candidate's index, and for cost_model within the bounded-load cap.
func BenchmarkSharedPolicy(b *testing.B) {
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			s := DefaultSettings()
			s.SessionAffinity = true
			p, _ := NewWith(name, s)
			reqs := benchPrompts(b, 256)
			cands := benchCandidates(b, 8)
			var total int64
			for _, c := range cands {
				total += c.InFlight
			}
			limit := boundedLoadCap(total, len(cands), s.Epsilon)
			var next, bad atomic.Int64
			b.SetParallelism((16 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					d := p.Pick(reqs[next.Add(1)%int64(len(reqs))], cands)
					if d.Index < 0 || d.Index >= len(cands) || (name == CostModel && cands[d.Index].InFlight+1 > limit) {
						bad.Add(1)
					}
				}
			})
			if n := bad.Load(); n > 0 {
				b.Fatalf("%d invalid decisions", n)
			}
		})
	}
}

// BenchmarkCostModelHotPrefixes mirrors the gateway's decision at 64
// replicas (BenchmarkGatewayDecision in internal/gateway): 8,000-token
// prompts of 500 blocks of 16, candidates carrying the gateway's own counts
// only (no engine reports, minutes of queued prefill) and every root prefix
// hot, with session affinity on (most choices go back to the
// conversation's replica) and off (every choice ranks the hot prefix's
// owners and prices every candidate). The clock moves 100 µs per decision,
// and a warm-up of three windows settles each root at 17 to 63 owners,
// which takes ranking the candidates; the window is 1 s rather than 10 s
// so that the warm-up is short (the rate a demand settles at does not
// depend on it). history=true is sessions=false with history affinity on:
// one candidate holds nearly all of every prompt (7,984 of 8,000 tokens),
// so the index knows where each history is and history affinity adds only
// its checks (BenchmarkHistoryMiss prices the look-ups of a prompt it does
// not know).
func BenchmarkCostModelHotPrefixes(b *testing.B) {
	for _, mode := range []string{"sessions=true", "sessions=false", "history=true"} {
		b.Run(mode, func(b *testing.B) {
			clk := newFakeClock()
			s := clk.settings()
			s.SessionAffinity = mode == "sessions=true"
			s.HistoryAffinity = mode == "history=true"
			s.HotPrefix.Window = time.Second
			p, _ := NewWith(CostModel, s)
			reqs := benchPrompts(b, 64)
			cands := benchCandidates(b, 64)
			for i := range cands {
				cands[i].Running, cands[i].KVUsage, cands[i].QueuedPrefill = -1, -1, float64(i%5)*60
			}
			const step = 100 * time.Microsecond
			i := 0
			for ; time.Duration(i)*step < 3*s.HotPrefix.Window; i++ {
				p.Pick(reqs[i%len(reqs)], cands)
				clk.add(step)
			}
			if e := p.Explain(reqs[i%len(reqs)], cands); e.HotOwners <= 16 || e.HotOwners >= len(cands) {
				b.Fatalf("%d hot prefix owners, want a ranking", e.HotOwners)
			}
			b.ReportAllocs()
			for b.Loop() {
				if d := p.Pick(reqs[i%len(reqs)], cands); d.Index < 0 {
					b.Fatal("no choice")
				}
				clk.add(step)
				i++
			}
		})
	}
}

// BenchmarkSketchCountsAfterIdle counts a decision's 15 keys in a sketch
// whose every counter holds demand, with the clock moving one tick
// (window/16, 0.625 s by default) every decisions-per-tick decisions: a
// bucket is then last touched about 4,096/15/decisions-per-tick ticks
// before, some 270 ticks at one decision a tick (under 2 requests a
// second) and 17 at 16 a tick (26 a second). Decaying a long-idle bucket
// was where counting got slow.
func BenchmarkSketchCountsAfterIdle(b *testing.B) {
	for _, every := range []int{1, 16} {
		b.Run(fmt.Sprint("decisions-per-tick=", every), func(b *testing.B) {
			s := newSketch(10*time.Second, time.Time{})
			for k := range uint64(80_000) { // every counter, many times over
				s.addAt(mix64(k), 50_000_000, 0)
			}
			var t int64
			k, i := uint64(0), 0
			for b.Loop() {
				if i%every == 0 {
					t++
				}
				i++
				for range 15 {
					k++
					s.addAt(mix64(k), 1000, t)
				}
			}
		})
	}
}

// BenchmarkHistoryMiss is history affinity's look-up for a prompt that
// extends no earlier one, its costliest case: every 8th of its last 256
// blocks (32) looked up in a full table of 65,536 prompts, none found.
func BenchmarkHistoryMiss(b *testing.B) {
	s := DefaultSettings()
	s.HistoryAffinity = true
	p, _ := NewWith(CostModel, s)
	cm := p.(*costModel)
	for i := range s.Sessions {
		cm.history.put(blockhash.Hash{Hi: uint64(i) + 1, Lo: mix64(uint64(i))}, "r0")
	}
	req := &Request{PromptTokens: 500 * 16, Blocks: chain(0, 100, 1<<30, 500), BlockSize: 16}
	cands := benchCandidates(b, 64)
	sl := make([]slot, len(cands))
	b.ReportAllocs()
	for b.Loop() {
		if cm.home(req, cands, sl) >= 0 {
			b.Fatal("found a home")
		}
	}
}
