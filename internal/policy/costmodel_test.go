package policy

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

func TestPrefill(t *testing.T) {
	c := DefaultSettings().Cost
	for _, tc := range []struct {
		u, cached int
		want      float64
	}{
		{0, 0, 0.005},
		{-5, -1, 0.005},
		{1000, 0, 0.1 + 0.00165 + 0.005},
		{16, 3984, 0.0016 + 0.0000000033*16*3992 + 0.005},
		{4000, 0, 0.4 + 0.0264 + 0.005},
	} {
		if got := c.Prefill(tc.u, tc.cached); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Prefill(%d, %d) = %v, want %v", tc.u, tc.cached, got, tc.want)
		}
	}
}

// TestQueueCountsFreshLoad: W prices decode interference on the larger of
// the engine's last report and the gateway's own requests in flight, so a
// burst routed since the report counts at once, and a report counting
// other gateways' requests still does.
func TestQueueCountsFreshLoad(t *testing.T) {
	c := DefaultSettings().Cost
	d := c.DecodeInterferenceSecs
	for _, tc := range []struct {
		name              string
		running, inFlight int64
		queued            float64
		want              float64
	}{
		{"no report: in flight", -1, 4, 0, 4 * d},
		{"report below what the gateway has sent since", 2, 7, 0, 7 * d},
		{"report above: other gateways' requests", 9, 3, 0.25, 0.25 + 9*d},
		{"idle", 0, 0, 0, 0},
		{"negative counts are none", -1, -3, -1, 0},
	} {
		cand := Candidate{Running: tc.running, InFlight: tc.inFlight, QueuedPrefill: tc.queued}
		if got := c.queue(&cand); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: queue = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestTieDecidedByNothing: two idle replicas with the same estimate tie,
// and the tie-break picks; no term put the winner ahead, so none is named
// (it was named queue, with every queue empty).
func TestTieDecidedByNothing(t *testing.T) {
	p, _ := New(CostModel, 1)
	req := &Request{PromptTokens: 64, Blocks: chain(0, 3, 1, 4), BlockSize: 16}
	cands := []Candidate{{ID: "a", Cached: 0, Running: 0, KVUsage: 0.1}, {ID: "b", Cached: 0, Running: 0, KVUsage: 0.1}}
	e := p.Explain(req, cands)
	if e.Replicas[0].Estimate.TTFTSecs != e.Replicas[1].Estimate.TTFTSecs {
		t.Fatalf("estimates %v and %v: the test needs a tie", e.Replicas[0].Estimate.TTFTSecs, e.Replicas[1].Estimate.TTFTSecs)
	}
	if e.DecidedBy != "" {
		t.Errorf("a tie decided by %q, want none", e.DecidedBy)
	}
}

// TestWorkedExample is the design's example with the default parameters.
// A 4,000-token prompt is cached on r0 (3,984 tokens: all but its last
// block) and nowhere else.
//
//	r0: P(16, 3984) = 0.0001·16 + 3.3e-9·16·(3984 + 8) + 0.005 = 0.0068 s
//	r1: P(4000, 0)  = 0.0001·4000 + 3.3e-9·4000·2000 + 0.005  = 0.4314 s
//
// Behind 0.6 s of queued prefill and 3 running requests (W = 0.6 +
// 3·0.0005 = 0.6015 s), r0 would answer in 0.6083 s; the idle cold r1 in
// 0.4314 s, so r1 wins, by its queue. Once r1 has 0.3 s queued and 2
// running (W = 0.301 s, TTFT 0.7324 s), r0 wins, by its prefill.
func TestWorkedExample(t *testing.T) {
	p, _ := New(CostModel, 1)
	req := &Request{PromptTokens: 4000, Blocks: chain(0, 249, 1, 250), BlockSize: 16}
	cands := []Candidate{
		{ID: "r0", InFlight: 3, Cached: 3984, QueuedPrefill: 0.6, Running: 3, KVUsage: 0.4},
		{ID: "r1", InFlight: 0, Cached: 0, QueuedPrefill: 0, Running: 0, KVUsage: 0.1},
	}
	for _, step := range []struct {
		name                   string
		r1Queued               float64
		r1Running              int64
		winner, decidedBy      string
		r0Estimate, r1Estimate float64
	}{
		{"cold_idle_wins", 0, 0, "r1", TermQueue, 0.6083, 0.4314},
		{"cached_wins_once_cold_is_busier", 0.3, 2, "r0", TermPrefill, 0.6083, 0.7324},
	} {
		t.Run(step.name, func(t *testing.T) {
			cands[1].QueuedPrefill, cands[1].Running, cands[1].InFlight = step.r1Queued, step.r1Running, step.r1Running
			e := p.Explain(req, cands)
			if e.Winner != step.winner || e.DecidedBy != step.decidedBy {
				t.Errorf("winner %s decided by %s, want %s by %s", e.Winner, e.DecidedBy, step.winner, step.decidedBy)
			}
			for i, want := range []float64{step.r0Estimate, step.r1Estimate} {
				if got := e.Replicas[i].Estimate.TTFTSecs; math.Abs(got-want) > 0.0001 {
					t.Errorf("%s estimate %.4f s, want %.4f s", cands[i].ID, got, want)
				}
			}
			if d := p.Pick(req, cands); cands[d.Index].ID != step.winner {
				t.Errorf("picked %s, want %s", cands[d.Index].ID, step.winner)
			}
		})
	}
}

// TestMoreCacheNeverCostsMore: with everything else equal, a candidate
// predicted to hold more of the prompt is never estimated slower, for any
// non-negative parameters.
func TestMoreCacheNeverCostsMore(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cost := CostParams{
			PrefillTokenSecs:       rapid.Float64Range(0, 0.01).Draw(t, "a"),
			PrefillPairSecs:        rapid.Float64Range(0, 1e-6).Draw(t, "b"),
			PrefillFixedSecs:       rapid.Float64Range(0, 1).Draw(t, "d"),
			DecodeInterferenceSecs: rapid.Float64Range(0, 0.01).Draw(t, "i"),
		}
		// Prompts past 2^31 tokens too, where rounding once made more
		// cache cost more.
		prompt := rapid.OneOf(rapid.IntRange(0, 1_000_000), rapid.IntRange(1<<31-1000, 1<<40)).Draw(t, "prompt")
		c1 := rapid.IntRange(-1, prompt).Draw(t, "less")
		c2 := rapid.IntRange(max(c1, 0), prompt+10).Draw(t, "more")
		req := &Request{PromptTokens: prompt}
		cand := Candidate{
			InFlight:      rapid.Int64Range(0, 100).Draw(t, "in_flight"),
			QueuedPrefill: rapid.Float64Range(0, 100).Draw(t, "queued"),
			Running:       rapid.Int64Range(-1, 100).Draw(t, "running"),
		}
		a, b := cand, cand
		a.Cached, b.Cached = c1, c2
		ea := cost.estimate(req, &a, cachedTokens(req, &a))
		eb := cost.estimate(req, &b, cachedTokens(req, &b))
		if eb.TTFTSecs > ea.TTFTSecs || eb.PrefillSecs > ea.PrefillSecs {
			t.Fatalf("%d cached cost %v, %d cached cost %v", c2, eb, c1, ea)
		}
		// And through the policy: the better cached twin of a candidate
		// never loses to it on the estimate.
		s := DefaultSettings()
		s.Cost = cost
		p, _ := NewWith(CostModel, s)
		a.ID, b.ID = "less", "more"
		e := p.Explain(req, []Candidate{a, b})
		if e.Replicas[1].Estimate.TTFTSecs > e.Replicas[0].Estimate.TTFTSecs {
			t.Fatalf("cost_model estimates %v for more cache, %v for less", e.Replicas[1].Estimate, e.Replicas[0].Estimate)
		}
	})
}

// TestBoundedLoad: across any sequence of arrivals and departures, with
// sessions and hot prefixes in play, cost_model never gives a replica more
// than ceil((1+ε)·(in flight+1)/n) requests, and some replica is always
// within that cap.
func TestBoundedLoad(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		clk := newFakeClock()
		s := drawSettings(t, clk)
		quarters := int64(math.Round(s.Epsilon * 4))
		p, err := NewWith(CostModel, s)
		if err != nil {
			t.Fatal(err)
		}
		w := world{replicas: rapid.IntRange(1, 8).Draw(t, "replicas")}
		inFlight := make([]int64, w.replicas)
		for range rapid.IntRange(1, 150).Draw(t, "steps") {
			if rapid.IntRange(0, 2).Draw(t, "depart") == 0 {
				var busy []int
				for r, n := range inFlight {
					if n > 0 {
						busy = append(busy, r)
					}
				}
				if len(busy) > 0 {
					inFlight[rapid.SampledFrom(busy).Draw(t, "leaves")]--
				}
				continue
			}
			req := w.request(t)
			cands := w.candidates(t, req, inFlight)
			var total int64
			for _, c := range cands {
				total += c.InFlight
			}
			// ceil((1+q/4)·(total+1)/n) in integers.
			n := int64(len(cands))
			limit := ((4+quarters)*(total+1) + 4*n - 1) / (4 * n)
			within := slices.ContainsFunc(cands, func(c Candidate) bool { return c.InFlight+1 <= limit })
			if !within {
				t.Fatalf("no candidate of %v within the cap %d", cands, limit)
			}
			d := p.Pick(req, cands)
			if got := cands[d.Index].InFlight + 1; got > limit {
				t.Fatalf("gave %s its request number %d, cap %d (%d in flight over %d)", cands[d.Index].ID, got, limit, total, n)
			}
			over := slices.ContainsFunc(cands, func(c Candidate) bool { return c.InFlight+1 > limit })
			if over != slices.Contains(d.Guards, GuardBoundedLoad) {
				t.Fatalf("guards %v, but a candidate over the cap: %v", d.Guards, over)
			}
			var r int
			for i, id := range w.ids() {
				if id == cands[d.Index].ID {
					r = i
				}
			}
			inFlight[r]++
			clk.add(time.Duration(rapid.IntRange(0, 100).Draw(t, "ms")) * time.Millisecond)
		}
	})
}

func TestBoundedLoadCap(t *testing.T) {
	for _, tc := range []struct {
		total   int64
		n       int
		epsilon float64
		want    int64
	}{
		{0, 1, 1, 2},
		{0, 4, 1, 1},    // ceil(2/4)
		{5, 3, 1, 4},    // ceil(2·6/3)
		{7, 4, 0, 2},    // ceil(8/4)
		{8, 4, 0, 3},    // ceil(9/4)
		{9, 4, 0.25, 4}, // ceil(1.25·10/4) = ceil(3.125)
		{99, 4, 1, 50},
	} {
		if got := boundedLoadCap(tc.total, tc.n, tc.epsilon); got != tc.want {
			t.Errorf("boundedLoadCap(%d, %d, %v) = %d, want %d", tc.total, tc.n, tc.epsilon, got, tc.want)
		}
	}
}

// TestCostModelTies: the lowest estimate wins; among equal estimates more
// cached tokens, then fewer requests in flight; among equal estimates,
// caches and loads chance, the same way for the same seed. Checked against a naive reading of Explain's
// estimates, with candidates drawn from few cached lengths and loads so
// that they tie often, some of them set aside by bounded load or KV
// pressure.
func TestCostModelTies(t *testing.T) {
	req := &Request{PromptTokens: 2000}
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 12).Draw(t, "n")
		cands := make([]Candidate, n)
		for i := range cands {
			cands[i] = Candidate{
				ID:       fmt.Sprint("r", i),
				Cached:   rapid.SampledFrom([]int{0, 0, 512, 1024}).Draw(t, "cached"),
				InFlight: rapid.SampledFrom([]int64{0, 0, 1, 9}).Draw(t, "in_flight"),
				Running:  rapid.SampledFrom([]int64{-1, 0}).Draw(t, "running"), // known, it prices alike however many are in flight
				KVUsage:  rapid.SampledFrom([]float64{-1, 0.5, 0.95}).Draw(t, "kv_usage"),
			}
		}
		p, _ := New(CostModel, rapid.Uint64().Draw(t, "seed"))
		for range 5 {
			e := p.Explain(req, cands)
			// Each allowed candidate's rank, lowest first: estimate, then
			// fewer cached tokens, then more in flight.
			rank := func(i int) []float64 {
				r := e.Replicas[i]
				return []float64{r.Estimate.TTFTSecs, -float64(r.CachedTokens), float64(cands[i].InFlight)}
			}
			var tied []int
			for i, r := range e.Replicas {
				if r.SetAside != "" {
					continue
				}
				if len(tied) > 0 {
					switch slices.Compare(rank(i), rank(tied[0])) {
					case 1:
						continue
					case -1:
						tied = tied[:0]
					}
				}
				tied = append(tied, i)
			}
			got := p.Pick(req, cands).Index
			if !slices.Contains(tied, got) {
				t.Fatalf("picked %d, want one of %v: %+v", got, tied, e.Replicas)
			}
			if e.Decision.Index != got {
				t.Fatalf("explained %d, picked %d", e.Decision.Index, got)
			}
		}
	})

	t.Run("then_chance", func(t *testing.T) {
		// p, q and r tie; z and w are as cheap but busier, c cheaper
		// but past bounded load's cap, y dearer.
		cands := []Candidate{
			{ID: "z", InFlight: 1, Running: 0, KVUsage: -1},
			{ID: "p", Running: 0, KVUsage: -1},
			{ID: "y", Running: 0, KVUsage: -1, QueuedPrefill: 1},
			{ID: "q", Running: 0, KVUsage: -1},
			{ID: "w", InFlight: 1, Running: 0, KVUsage: -1},
			{ID: "c", Cached: 1024, InFlight: 9, Running: 0, KVUsage: -1},
			{ID: "r", Running: 0, KVUsage: -1},
		}
		checkTiesByChance(t, CostModel, req, cands, []string{"p", "q", "r"})
	})
}

// TestGuards covers each guard on its own.
func TestGuards(t *testing.T) {
	long := &Request{PromptTokens: 2000, Blocks: chain(0, 100, 1, 125), BlockSize: 16}
	short := &Request{PromptTokens: 250, Blocks: chain(0, 15, 2, 15), BlockSize: 16}
	c := func(id string, inFlight int64, cached int, kv float64) Candidate {
		return Candidate{ID: id, InFlight: inFlight, Cached: cached, Running: -1, KVUsage: kv}
	}
	for _, tc := range []struct {
		name   string
		req    *Request
		cands  []Candidate
		winner string
		guards []string
		aside  []string
	}{
		{
			name:   "cached_but_overloaded",
			req:    long,
			cands:  []Candidate{c("a", 5, 1984, -1), c("b", 0, 16, -1), c("c", 0, 0, -1)},
			winner: "b", // a's 6th would exceed ceil(2·6/3) = 4; b's block breaks its tie with c
			guards: []string{GuardBoundedLoad},
			aside:  []string{GuardBoundedLoad, "", ""},
		},
		{
			name:   "cached_within_its_share",
			req:    long,
			cands:  []Candidate{c("a", 1, 1984, -1), c("b", 0, 0, -1), c("c", 0, 0, -1)},
			winner: "a", // a's 2nd is within ceil(2·2/3) = 2
			aside:  []string{"", "", ""},
		},
		{
			name:   "kv_pressure_on_a_long_prompt",
			req:    long,
			cands:  []Candidate{c("a", 0, 1600, 0.95), c("b", 0, 0, 0.5)},
			winner: "b", // 400 tokens to compute on a > 256
			guards: []string{GuardKVPressure},
			aside:  []string{GuardKVPressure, ""},
		},
		{
			name:   "kv_pressure_ignored_for_little_to_compute",
			req:    long,
			cands:  []Candidate{c("a", 0, 1984, 0.95), c("b", 0, 0, 0.5)},
			winner: "a", // 16 tokens to compute on a
			aside:  []string{"", ""},
		},
		{
			name:   "kv_pressure_ignored_for_a_short_prompt",
			req:    short,
			cands:  []Candidate{c("a", 0, 16, 0.99), c("b", 0, 0, 0.99), c("c", 1, 0, 0.1)},
			winner: "a",
			aside:  []string{"", "", ""},
		},
		{
			name:   "kv_pressure_everywhere_is_waived",
			req:    long,
			cands:  []Candidate{c("a", 0, 1600, 0.95), c("b", 0, 0, 0.99)},
			winner: "a",
			guards: []string{GuardKVWaived},
			aside:  []string{"", ""},
		},
		{
			name:   "no_report_no_pressure",
			req:    long,
			cands:  []Candidate{c("a", 0, 1600, -1), c("b", 0, 0, 0.5)},
			winner: "a",
			aside:  []string{"", ""},
		},
		{
			name:   "both_guards",
			req:    long,
			cands:  []Candidate{c("a", 4, 1984, 0.5), c("b", 0, 1600, 0.95), c("c", 0, 0, 0.2)},
			winner: "c",
			guards: []string{GuardBoundedLoad, GuardKVPressure},
			aside:  []string{GuardBoundedLoad, GuardKVPressure, ""},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := New(CostModel, 1)
			e := p.Explain(tc.req, tc.cands)
			if e.Winner != tc.winner {
				t.Errorf("winner %s, want %s", e.Winner, tc.winner)
			}
			if diff := cmp.Diff(tc.guards, e.Decision.Guards); diff != "" {
				t.Errorf("guards (-want +got):\n%s", diff)
			}
			var aside []string
			for _, r := range e.Replicas {
				aside = append(aside, r.SetAside)
			}
			if diff := cmp.Diff(tc.aside, aside); diff != "" {
				t.Errorf("set aside (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFreeBlocksGuard: under KVGuardFreeBlocks a replica above κ is set
// aside only when the blocks the prompt would compute there outnumber its
// free ones; one of unknown size is treated as under KVGuardUsage. The
// prompt has 2,000 tokens; a holds 1,600 of them, so 400 tokens (25 blocks)
// are computed there.
func TestFreeBlocksGuard(t *testing.T) {
	long := &Request{PromptTokens: 2000, Blocks: chain(0, 100, 1, 125), BlockSize: 16}
	c := func(id string, cached int, kv float64, capacity int) Candidate {
		return Candidate{ID: id, Cached: cached, Running: -1, KVUsage: kv, KVCapacityBlocks: capacity}
	}
	for _, tc := range []struct {
		name   string
		guard  string
		a      Candidate
		winner string
		aside  string // a's
	}{
		{"usage_sets_aside_above_kappa", KVGuardUsage, c("a", 1600, 0.95, 4096), "b", GuardKVPressure},
		{"free_blocks_keeps_room_enough", KVGuardFreeBlocks, c("a", 1600, 0.95, 4096), "a", ""},      // 204 free ≥ 25
		{"free_blocks_exactly_enough", KVGuardFreeBlocks, c("a", 1600, 0.99, 2500), "a", ""},         // 25 free ≥ 25
		{"free_blocks_one_short", KVGuardFreeBlocks, c("a", 1600, 0.99, 2400), "b", GuardKVPressure}, // 24 free < 25
		{"free_blocks_unknown_size", KVGuardFreeBlocks, c("a", 1600, 0.95, 0), "b", GuardKVPressure},
		{"free_blocks_below_kappa", KVGuardFreeBlocks, c("a", 1600, 0.9, 100), "a", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := DefaultSettings()
			s.KVGuard = tc.guard
			p, err := NewWith(CostModel, s)
			if err != nil {
				t.Fatal(err)
			}
			e := p.Explain(long, []Candidate{tc.a, c("b", 0, 0.5, 4096)})
			if e.Winner != tc.winner || e.Replicas[0].SetAside != tc.aside {
				t.Errorf("winner %s with a set aside %q, want %s and %q", e.Winner, e.Replicas[0].SetAside, tc.winner, tc.aside)
			}
		})
	}
	s := DefaultSettings()
	s.KVGuard = "blocks"
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "kv_guard") {
		t.Errorf("Validate accepted kv_guard %q: %v", s.KVGuard, err)
	}
}

// TestKVGuardProperty: for any guard rule and any candidates, the KV guard
// sets aside exactly the candidates a naive reading of its rule names,
// unless that is every candidate the bounded-load guard left, when it is
// waived and sets none aside. Each check tries twenty fleets, so that the
// rarer cases (one candidate, the only one under pressure) come up.
func TestKVGuardProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := DefaultSettings()
		s.KVGuard = rapid.SampledFrom([]string{KVGuardUsage, KVGuardFreeBlocks}).Draw(t, "guard")
		s.Kappa = rapid.SampledFrom([]float64{0, 0.5, 0.92, 1}).Draw(t, "kappa")
		s.ShortPromptTokens = rapid.SampledFrom([]int{0, 256}).Draw(t, "short")
		s.Epsilon = 1000 // no candidate over the load cap
		p, err := NewWith(CostModel, s)
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			checkKVGuard(t, p, &s)
		}
	})
}

// checkKVGuard draws one request and fleet and checks p's KV guard on them
// against the naive reading of s's rule.
func checkKVGuard(t *rapid.T, p Policy, s *Settings) {
	// Some prompts whose blocks to compute equal, or pass by one, the
	// free blocks of half a 100-block cache.
	prompt := rapid.OneOf(rapid.IntRange(0, 4000), rapid.SampledFrom([]int{784, 785, 800, 801, 1600, 1601})).Draw(t, "prompt")
	req := &Request{PromptTokens: prompt, Blocks: chain(0, 1, 1, prompt/16), BlockSize: 16}
	cands := make([]Candidate, rapid.IntRange(1, 4).Draw(t, "n"))
	want := make([]bool, len(cands))
	pressured := 0
	for i := range cands {
		c := Candidate{ID: fmt.Sprint("r", i), Running: -1,
			Cached:           rapid.SampledFrom([]int{-1, 0, prompt / 2, prompt}).Draw(t, "cached"),
			KVUsage:          rapid.SampledFrom([]float64{-1, 0, 0.5, 0.92, 0.95, 1}).Draw(t, "kv"),
			KVCapacityBlocks: rapid.SampledFrom([]int{0, 100, 4096}).Draw(t, "capacity"),
		}
		cands[i] = c
		compute := prompt - max(c.Cached, 0)
		blocks := (compute + 15) / 16
		free := int((1 - c.KVUsage) * float64(c.KVCapacityBlocks))
		sized := c.KVCapacityBlocks > 0
		above := c.KVUsage > s.Kappa
		switch {
		case compute <= s.ShortPromptTokens || c.KVUsage < 0:
		case s.KVGuard == KVGuardUsage:
			want[i] = above
		default:
			want[i] = above && (!sized || blocks > free)
		}
		if want[i] {
			pressured++
		}
	}
	e := p.Explain(req, cands)
	waived := pressured == len(cands)
	if waived != slices.Contains(e.Decision.Guards, GuardKVWaived) || (pressured > 0 && !waived) != slices.Contains(e.Decision.Guards, GuardKVPressure) {
		t.Fatalf("%s guard: guards %v with %d of %d candidates under pressure: %+v", s.KVGuard, e.Decision.Guards, pressured, len(cands), cands)
	}
	for i, r := range e.Replicas {
		if got := r.SetAside == GuardKVPressure; got != (want[i] && !waived) {
			t.Fatalf("%s guard: %s (%+v) set aside %q, want under pressure %v (waived %v)", s.KVGuard, r.ID, cands[i], r.SetAside, want[i], waived)
		}
	}
}

// TestSessionAffinity: a conversation goes back to its replica while the
// guards allow it, then follows the new one.
func TestSessionAffinity(t *testing.T) {
	clk := newFakeClock()
	s := clk.settings()
	s.SessionAffinity = true
	p, _ := NewWith(CostModel, s)
	req := &Request{PromptTokens: 500, Session: "conv-1"}
	cands := []Candidate{
		{ID: "a", Running: -1, KVUsage: -1, QueuedPrefill: 0.2},
		{ID: "b", Running: -1, KVUsage: -1},
		{ID: "c", Running: -1, KVUsage: -1, QueuedPrefill: 0.1},
	}
	if d := p.Pick(req, cands); cands[d.Index].ID != "b" || d.Steered != "" {
		t.Fatalf("first turn went to %s steered %q, want b by estimate", cands[d.Index].ID, d.Steered)
	}
	// b is now the most expensive, but the conversation stays.
	cands[1].QueuedPrefill, cands[1].InFlight = 1, 1
	if d := p.Pick(req, cands); cands[d.Index].ID != "b" || d.Steered != SteerSession {
		t.Fatalf("second turn went to %s steered %q, want b by session", cands[d.Index].ID, d.Steered)
	}
	// Bounded load sets b aside: ceil(2·(3+1)/3) = 3 < 3+1.
	cands[1].InFlight = 3
	d := p.Pick(req, cands)
	if cands[d.Index].ID != "c" || d.Steered != "" || !slices.Contains(d.Guards, GuardBoundedLoad) {
		t.Fatalf("third turn: %+v, want c by estimate with b set aside", d)
	}
	// The conversation now follows c, even when b is free again.
	cands[1].InFlight, cands[1].QueuedPrefill = 0, 0
	if d := p.Pick(req, cands); cands[d.Index].ID != "c" || d.Steered != SteerSession {
		t.Fatalf("fourth turn: %+v, want c by session", d)
	}
	// A replica that is no longer offered is not waited for.
	if d := p.Pick(req, []Candidate{cands[0], cands[1]}); d.Steered == SteerSession {
		t.Fatalf("steered to a replica not offered: %+v", d)
	}
	// Without affinity, sessions mean nothing.
	q, _ := New(CostModel, 1)
	q.Pick(req, cands)
	if d := q.Pick(req, cands); d.Steered == SteerSession {
		t.Fatalf("affinity off, still steered: %+v", d)
	}
}

// TestHistoryAffinity: a conversation's next turn goes back to its
// replica when the index has forgotten its history everywhere, and only
// then; prompts that add nothing new are not remembered.
func TestHistoryAffinity(t *testing.T) {
	clk := newFakeClock()
	s := clk.settings()
	s.HistoryAffinity = true
	p, _ := NewWith(CostModel, s)
	const sys = 10 // blocks of a shared system prompt
	turn := func(conv uint64, n int) *Request {
		return &Request{PromptTokens: n*16 + 5, Blocks: chain(0, sys, conv, n), BlockSize: 16}
	}
	cands := []Candidate{
		{ID: "a", Running: -1, KVUsage: -1, QueuedPrefill: 0.2, Cached: sys * 16},
		{ID: "b", Running: -1, KVUsage: -1, Cached: sys * 16},
		{ID: "c", Running: -1, KVUsage: -1, QueuedPrefill: 0.1, Cached: sys * 16},
	}
	if d := p.Pick(turn(1, 20), cands); cands[d.Index].ID != "b" || d.Steered != "" {
		t.Fatalf("first turn went to %s steered %q, want b by estimate", cands[d.Index].ID, d.Steered)
	}
	// b is now the most expensive and the index holds only the system
	// prompt anywhere: the history is forgotten, the turn goes home.
	cands[1].QueuedPrefill, cands[1].InFlight = 1, 1
	if d := p.Pick(turn(1, 30), cands); cands[d.Index].ID != "b" || d.Steered != SteerHistory {
		t.Fatalf("second turn went to %s steered %q, want b by history", cands[d.Index].ID, d.Steered)
	}
	// Where the index still knows a replica holding the whole earlier
	// turn, pricing decides, whichever replica that is.
	cands[0].Cached = 30 * 16
	d := p.Pick(turn(1, 40), cands)
	if d.Steered == SteerHistory {
		t.Fatalf("third turn steered by history though the index knows where it is: %+v", d)
	}
	home := d.Index // the conversation's latest turn is here now
	cands[0].Cached = sys * 16
	// A conversation never seen, or a prompt that extends none, is priced.
	if d := p.Pick(turn(2, 25), cands); d.Steered == SteerHistory {
		t.Fatalf("a new conversation steered by history: %+v", d)
	}
	// Bounded load sets the home aside: with 6 in flight there and at
	// most 1 elsewhere, ceil(2·(7+1)/3) = 6 < 6+1.
	inFlight := cands[home].InFlight
	cands[home].InFlight = 6
	if d := p.Pick(turn(1, 50), cands); d.Index == home || d.Steered == SteerHistory {
		t.Fatalf("steered to %s, which the guards set aside: %+v", cands[home].ID, d)
	}
	cands[home].InFlight = inFlight
	// A prompt whose every block some replica held is not where a
	// conversation ends: a short question under the system prompt is not
	// remembered, so the next request under it is not drawn to its replica.
	short := &Request{PromptTokens: sys*16 + 7, Blocks: chain(0, sys, 3, sys), BlockSize: 16}
	cands[2].QueuedPrefill = 0
	if d := p.Pick(short, cands); cands[d.Index].ID != "c" {
		t.Fatalf("short prompt went to %s, want c by estimate", cands[d.Index].ID)
	}
	// Even once the index has forgotten the system prompt too.
	cands[2].QueuedPrefill = 0.5
	for i := range cands {
		cands[i].Cached = 0
	}
	if d := p.Pick(turn(4, sys+3), cands); d.Steered == SteerHistory {
		t.Fatalf("a prompt under the shared system prompt drawn to the short one's replica: %+v", d)
	}
	// The explanation names the same winner and reason.
	cands[1].QueuedPrefill = 2
	ex := p.Explain(turn(1, 60), cands)
	if d := p.Pick(turn(1, 60), cands); ex.Winner != cands[d.Index].ID || ex.Decision.Steered != SteerHistory || d.Steered != SteerHistory {
		t.Fatalf("explain %s %q against pick %s %q", ex.Winner, ex.Decision.Steered, cands[d.Index].ID, d.Steered)
	}
	// Without it, histories mean nothing.
	q, _ := New(CostModel, 1)
	q.Pick(turn(1, 20), cands)
	if d := q.Pick(turn(1, 30), cands); d.Steered == SteerHistory {
		t.Fatalf("affinity off, still steered: %+v", d)
	}
}

// TestRequestTimeDrivesTheSketch: a request's At, when set, is the time
// its demand is counted and read at, whatever the policy's own clock says
// (here it never moves).
func TestRequestTimeDrivesTheSketch(t *testing.T) {
	clk := newFakeClock()
	p, _ := NewWith(CostModel, clk.settings())
	req := func(conv uint64, at time.Time) *Request {
		return &Request{PromptTokens: 260 * 16, Blocks: chain(0, 250, conv, 260), BlockSize: 16, At: at}
	}
	cands := []Candidate{{ID: "a", Running: -1, KVUsage: -1}, {ID: "b", Running: -1, KVUsage: -1}}
	at := clk.now()
	for i := range 400 { // 0.93 s of prefill per second, as in TestHotPrefixReplication
		p.Pick(req(uint64(100+i), at), cands[:1])
		at = at.Add(25 * time.Millisecond)
	}
	if d := p.Explain(req(1, at), cands).HotDemand; d < 0.5 {
		t.Fatalf("demand %.3f at the last request's time, want the steady 0.59", d)
	}
	if d := p.Explain(req(1, at.Add(time.Hour)), cands).HotDemand; d != 0 {
		t.Fatalf("demand %.3f an hour later by the request's time", d)
	}
	if d := p.Explain(req(1, time.Time{}), cands).HotDemand; d == 0 {
		t.Fatal("without a time of its own, the request is not read at the policy's clock")
	}
}

// TestHotPrefixReplication: a system prompt cached on one replica whose
// demand grows past the utilization gets owners that are priced as holding
// it, so a cold owner with a shorter queue wins; a conversation's history
// is credited only where it is. Demand is counted as prefill alone: by
// share, a prompt that is all the arrivals is hot from the start.
func TestHotPrefixReplication(t *testing.T) {
	clk := newFakeClock()
	s := clk.settings()
	s.HotPrefix.Demand = DemandPrefill
	p, _ := NewWith(CostModel, s)
	const sysBlocks = 250 // a 4,000-token system prompt
	turn := func(conv uint64, tail int) *Request {
		n := sysBlocks + tail
		return &Request{PromptTokens: n * 16, Blocks: chain(0, sysBlocks, conv, n), BlockSize: 16}
	}
	cands := []Candidate{
		{ID: "holder", Cached: sysBlocks * 16, QueuedPrefill: 0.05, Running: -1, KVUsage: -1},
		{ID: "x", Cached: 0, Running: -1, KVUsage: -1},
		{ID: "y", Cached: 0, Running: -1, KVUsage: -1},
		{ID: "z", Cached: 0, Running: -1, KVUsage: -1},
	}
	// Not hot yet: the holder wins by its cache.
	e := p.Explain(turn(1, 10), cands)
	if e.Winner != "holder" || e.HotOwners != 0 {
		t.Fatalf("cold start: winner %s with %d owners, want holder and none", e.Winner, e.HotOwners)
	}
	// 40 requests a second for 10 s, while the holder is the only
	// candidate, each 0.023 s of prefill there: 0.93 s of prefill per
	// second, which the sketch counts as 0.59 after a window.
	for i := range 400 {
		p.Pick(turn(uint64(100+i), 10), cands[:1])
		clk.add(25 * time.Millisecond)
	}
	e = p.Explain(turn(1, 10), cands)
	if e.HotDemand < 0.5 || e.HotOwners != int(math.Ceil(e.HotDemand/0.5)) {
		t.Fatalf("demand %.3f with %d owners", e.HotDemand, e.HotOwners)
	}
	if e.HotCreditTokens != sysBlocks*16 {
		t.Fatalf("owners credited %d tokens, want the system prompt's %d", e.HotCreditTokens, sysBlocks*16)
	}
	if !e.Replicas[0].HotOwner {
		t.Fatalf("the holder is not an owner: %+v", e.Replicas)
	}
	// With a credited owner idle, the holder's queue now loses.
	if e.Winner == "holder" || e.Decision.Steered != SteerHotPrefix {
		t.Fatalf("winner %s steered %q, want an idle owner by hot_prefix", e.Winner, e.Decision.Steered)
	}
	// The same with the owner offered first, so that the runner-up, the
	// holder, comes after the winner.
	if e := p.Explain(turn(1, 10), []Candidate{cands[1], cands[0]}); e.Winner != "x" || e.Decision.Steered != SteerHotPrefix {
		t.Fatalf("owner first: winner %s steered %q, want x by hot_prefix", e.Winner, e.Decision.Steered)
	}
	owner := e.Replicas[e.Decision.Index]
	if !owner.HotOwner || owner.PricedCachedTokens != sysBlocks*16 || owner.CachedTokens != 0 {
		t.Fatalf("winner %+v, want an owner priced with the system prompt", owner)
	}
	if got, want := e.Decision.EstimatedTTFT, DefaultSettings().Cost.Prefill(260*16, 0); math.Abs(got-want) > 1e-12 {
		t.Errorf("estimated TTFT %v, want the cold prefill %v: credit is for pricing only", got, want)
	}

	// A conversation's history (40 blocks past the system prompt) held by
	// the holder alone is not hot: other owners get only the system prompt,
	// to the block when another candidate's cache ends there, else to the
	// last multiple of hotStride blocks.
	conv := turn(7, 50)
	withHistory := slices.Clone(cands)
	withHistory[0].Cached = (sysBlocks + 40) * 16
	withHistory[0].QueuedPrefill = 0
	for _, tc := range []struct {
		xCached, want int
	}{
		{0, 224 * 16}, // the marks past 128 blocks are 32 apart
		{sysBlocks * 16, sysBlocks * 16},
	} {
		withHistory[1].Cached = tc.xCached
		e = p.Explain(conv, withHistory)
		if e.HotCreditTokens != tc.want {
			t.Errorf("x holding %d: credited %d tokens, want %d", tc.xCached, e.HotCreditTokens, tc.want)
		}
		if e.Winner != "holder" {
			t.Errorf("x holding %d: winner %s, want the holder of the history", tc.xCached, e.Winner)
		}
	}
}

// TestMarks checks the marks demand is counted at against their
// definition, and that a mark past 4·hotStride blocks is always within a
// quarter of any depth above it.
func TestMarks(t *testing.T) {
	const limit = 1 << 14
	isMark := make([]bool, limit+1) // by definition
	for d := hotStride; d <= limit; d += hotStride {
		octave := 1 << (bits.Len(uint(d)) - 1)
		isMark[d] = d <= 4*hotStride || d%(octave/4) == 0
	}
	var walked []int // as countDemand walks them
	for d := hotStride; d <= limit; d += markStep(d) {
		walked = append(walked, d)
	}
	var want []int
	for d, m := range isMark {
		if m {
			want = append(want, d)
		}
	}
	if !slices.Equal(walked, want) {
		t.Fatalf("walked marks %v, want %v", walked, want)
	}
	below := 0
	for d := range limit + 1 {
		if isMark[d] {
			below = d
		}
		if got := markAtOrBelow(d); got != below {
			t.Fatalf("markAtOrBelow(%d) = %d, want %d", d, got, below)
		}
		if d >= 4*hotStride && 4*below < 3*d {
			t.Fatalf("the mark below %d blocks is %d, more than a quarter short", d, below)
		}
	}
	if n := len(want); n > 4*bits.Len(limit/hotStride) {
		t.Errorf("%d marks up to %d blocks", n, limit)
	}
}

func TestSettingsValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Settings)
		want   []string
	}{
		{"defaults", func(*Settings) {}, nil},
		{"hot_prefix_off", func(s *Settings) { s.HotPrefix = HotPrefixParams{} }, nil},
		{"negative_epsilon", func(s *Settings) { s.Epsilon = -1 }, []string{"epsilon: must be >= 0"}},
		{"nan_epsilon", func(s *Settings) { s.Epsilon = math.NaN() }, []string{"epsilon: must be >= 0"}},
		{"kappa", func(s *Settings) { s.Kappa = 1.5 }, []string{"kappa: must be between 0 and 1"}},
		{"several", func(s *Settings) {
			s.ShortPromptTokens = -1
			s.Sessions = 0
			s.PrefixHashBlocks = 0
			s.Cost.PrefillPairSecs = -1
			s.KVAware.LoadWeight = math.Inf(1)
			s.HotPrefix.Window = 0
			s.HotPrefix.Utilization = 2
			s.HotPrefix.Demand = "uncached"
		}, []string{
			"short_prompt_tokens: must be >= 0",
			"sessions: must be >= 1",
			"prefix_hash.blocks: must be >= 1",
			"cost_model.prefill_pair_secs: must be >= 0",
			"kv_aware.load_weight: must be >= 0",
			"hot_prefix.window: must be > 0",
			"hot_prefix.utilization: must be > 0 and <= 1",
			"hot_prefix.demand: must be prefill, prompt or share",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := DefaultSettings()
			tc.change(&s)
			err := s.Validate()
			var got []string
			if err != nil {
				got = strings.Split(err.Error(), "\n")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Validate (-want +got):\n%s", diff)
			}
			if _, err := NewWith(CostModel, s); (err != nil) != (tc.want != nil) {
				t.Errorf("NewWith: %v", err)
			}
		})
	}
	if _, err := New("nope", 0); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("New(nope) = %v, want ErrUnknownPolicy", err)
	}
}

// TestChooseOwners checks owner selection, by insertion or through the
// k-th highest rank, against sorting every candidate by (holds the root, weight,
// position) and taking the first k, as sets.
func TestChooseOwners(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 80).Draw(t, "n")
		k := rapid.IntRange(1, n).Draw(t, "k")
		root := rapid.Uint64().Draw(t, "root")
		cands := make([]Candidate, n)
		sl := make([]slot, n)
		for i := range cands {
			cands[i].ID = rapid.SampledFrom([]string{"a", "b", "c", "d", "e", "f"}).Draw(t, "id") // repeats make ties
			sl[i].cached = rapid.SampledFrom([]int{0, 64, 128}).Draw(t, "cached")
		}
		got := slices.Clone(chooseOwners(root, 64, cands, sl, make([]ownerRank, n), make([]int, n), k, nil))
		slices.Sort(got)
		if want := naiveOwners(root, 64, cands, sl, k); !slices.Equal(got, want) {
			t.Fatalf("owners %v, want %v", got, want)
		}
	})
}

// TestChooseOwnersReusingSlots checks owner selection as Pick runs it, on
// slots kept from earlier calls (with their cached ID keys) for other
// candidate lists, up to many candidates, against sorting every candidate
// by (holds the root, weight, position).
func TestChooseOwnersReusingSlots(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var sl []slot
		var rk []ownerRank
		var order []int
		for range rapid.IntRange(1, 4).Draw(t, "calls") {
			n := rapid.SampledFrom([]int{1, 2, 17, 40, 64, 300, 600}).Draw(t, "n")
			k := rapid.IntRange(1, n).Draw(t, "k")
			root := rapid.Uint64().Draw(t, "root")
			ids := rapid.IntRange(1, 2*n).Draw(t, "distinct_ids") // fewer than n make ties
			cands := make([]Candidate, n)
			if cap(sl) < n {
				sl, rk, order = make([]slot, n), make([]ownerRank, n), make([]int, n)
			}
			sl, rk, order = sl[:n], rk[:n], order[:n]
			for i := range cands {
				cands[i].ID = fmt.Sprint("r", rapid.IntRange(0, ids-1).Draw(t, "id"))
				sl[i].cached = rapid.SampledFrom([]int{0, 64, 128}).Draw(t, "cached")
			}
			got := slices.Clone(chooseOwners(root, 64, cands, sl, rk, order, k, nil))
			slices.Sort(got)
			if want := naiveOwners(root, 64, cands, sl, k); !slices.Equal(got, want) {
				t.Fatalf("owners %v, want %v", got, want)
			}
		}
	})
}

// naiveOwners is chooseOwners' reference: every candidate sorted by
// (holds held tokens, rendezvous weight less its lowest bit, position),
// the first k, in increasing order.
func naiveOwners(root uint64, held int, cands []Candidate, sl []slot, k int) []int {
	key := func(i int) uint64 {
		w := rendezvous(root, cands[i].ID) >> 1
		if sl[i].cached >= held {
			w |= 1 << 63
		}
		return w
	}
	want := make([]int, len(cands))
	for i := range want {
		want[i] = i
	}
	slices.SortStableFunc(want, func(a, b int) int {
		switch ka, kb := key(a), key(b); {
		case ka > kb:
			return -1
		case ka < kb:
			return 1
		}
		return 0
	})
	want = want[:k]
	slices.Sort(want)
	return want
}

// TestSlotSize: a decision writes a slot per candidate, so slots stay at
// half a cache line.
func TestSlotSize(t *testing.T) {
	if n := unsafe.Sizeof(slot{}); n != 32 {
		t.Errorf("a slot is %d bytes", n)
	}
}

// TestPace: a candidate's pace scales its estimate, so an engine that has
// been slower than estimated loses a choice it would win on load and
// cache; explain says the pace decided it. No pace, or a pace that is not
// a positive number, prices as 1.
func TestPace(t *testing.T) {
	req := &Request{PromptTokens: 4000, Blocks: chain(0, 249, 1, 250), BlockSize: 16}
	cands := []Candidate{
		{ID: "slow", Cached: 0, Running: 0, KVUsage: 0.1},
		{ID: "busy", Cached: 0, QueuedPrefill: 0.1, Running: 2, KVUsage: 0.1},
	}
	for _, tt := range []struct {
		name      string
		pace      float64
		winner    string
		decidedBy string
	}{
		{"none", 0, "slow", TermQueue},
		{"one", 1, "slow", TermQueue},
		{"not a number", math.NaN(), "slow", TermQueue},
		{"negative", -2, "slow", TermQueue},
		{"infinite", math.Inf(1), "slow", TermQueue},
		{"a little slower", 1.1, "slow", TermQueue},
		{"twice as slow", 2, "busy", TermPace},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := New(CostModel, 1)
			cands[0].Pace = tt.pace
			e := p.Explain(req, cands)
			if e.Winner != tt.winner || e.DecidedBy != tt.decidedBy {
				t.Errorf("winner %s decided by %s, want %s by %s", e.Winner, e.DecidedBy, tt.winner, tt.decidedBy)
			}
			unpaced := DefaultSettings().Cost.estimate(req, &Candidate{ID: "x", Running: 0}, 0).TTFTSecs
			want := unpaced * paceOf(&cands[0])
			if got := e.Replicas[0].Estimate.TTFTSecs; math.Abs(got-want) > 1e-12 {
				t.Errorf("estimate %.6f s, want %.6f", got, want)
			}
			if d := p.Pick(req, cands); cands[d.Index].ID != tt.winner {
				t.Errorf("picked %s, want %s", cands[d.Index].ID, tt.winner)
			}
		})
	}
}

// TestCommonPaceChangesNothing: when every engine keeps the same pace, a
// power of two (so scaling is exact), cost_model picks as it does without
// paces, through any sequence of requests: only paces that differ steer.
func TestCommonPaceChangesNothing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		clk := newFakeClock()
		s := drawSettings(t, clk)
		plain, err := NewWith(CostModel, s)
		if err != nil {
			t.Fatal(err)
		}
		paced, _ := NewWith(CostModel, s)
		pace := rapid.SampledFrom([]float64{0.25, 0.5, 2, 4}).Draw(t, "pace")
		w := world{replicas: rapid.IntRange(1, 6).Draw(t, "replicas")}
		for range rapid.IntRange(1, 30).Draw(t, "requests") {
			req := w.request(t)
			cands := w.candidates(t, req, nil)
			withPace := slices.Clone(cands)
			for i := range withPace {
				withPace[i].Pace = pace
			}
			a, b := plain.Pick(req, cands), paced.Pick(req, withPace)
			if a.Index != b.Index {
				t.Fatalf("pace %v everywhere: picked %s, without paces %s", pace, cands[b.Index].ID, cands[a.Index].ID)
			}
			clk.add(time.Duration(rapid.IntRange(0, 200).Draw(t, "gap_ms")) * time.Millisecond)
		}
	})
}

// TestCopyCredit: requests for a system prompt that one replica holds wait
// behind its queue while two replicas without it stand by, x idle and y
// with a little queued. Each request adds the holder's queue beyond the
// least, 0.05 s, to what a copy would have saved, shared between the two;
// only the idle x is credited, and once its share outweighs the miss the
// next request makes a copy there. Without hot_prefix.copies every
// request waits at the holder; an hour later the waiting is forgotten.
func TestCopyCredit(t *testing.T) {
	const sysBlocks, tail = 125, 5 // a 2,000-token system prompt and 80 tokens of its own
	req := func(i int) *Request {
		n := sysBlocks + tail
		return &Request{PromptTokens: n * 16, Blocks: chain(0, sysBlocks, uint64(100+i), n), BlockSize: 16}
	}
	cands := []Candidate{
		{ID: "holder", Cached: sysBlocks * 16, QueuedPrefill: 0.05, Running: -1, KVUsage: -1},
		{ID: "x", Cached: 0, Running: -1, KVUsage: -1},
		{ID: "y", Cached: 0, QueuedPrefill: 0.01, Running: -1, KVUsage: -1},
	}
	cost := DefaultSettings().Cost
	hit := 0.05 + cost.Prefill(tail*16, sysBlocks*16)
	miss := cost.Prefill((sysBlocks+tail)*16, 0)
	// The first request whose credit, 0.05·i/2, brings the miss below the
	// holder's estimate.
	first := int(math.Floor((miss-hit)/0.025)) + 1
	for _, copies := range []bool{false, true} {
		clk := newFakeClock()
		s := clk.settings()
		s.HotPrefix.Demand, s.HotPrefix.Utilization, s.HotPrefix.Copies = DemandPrefill, 1, copies
		p, _ := NewWith(CostModel, s)
		for i := range first + 1 {
			e := p.Explain(req(i), cands)
			credit := e.Replicas[1].Estimate.CopyCreditSecs
			if want := 0.025 * float64(i); copies && math.Abs(credit-want) > 1e-8 || !copies && credit != 0 {
				t.Fatalf("copies %v, request %d: credit %v, want %v", copies, i, credit, want)
			}
			if c0, c2 := e.Replicas[0].Estimate.CopyCreditSecs, e.Replicas[2].Estimate.CopyCreditSecs; c0 != 0 || c2 != 0 {
				t.Fatalf("credit for a copy on the holder %v, on the queued y %v", c0, c2)
			}
			d := p.Pick(req(i), cands)
			if got := cands[d.Index].ID; got != e.Winner || d.Steered != e.Decision.Steered {
				t.Fatalf("request %d: picked %s steered %q, explained %s %q", i, got, d.Steered, e.Winner, e.Decision.Steered)
			}
			switch {
			case !copies || i < first:
				if e.Winner != "holder" || d.Steered != "" {
					t.Fatalf("copies %v, request %d: winner %s steered %q, want the holder", copies, i, e.Winner, d.Steered)
				}
			default:
				if e.Winner != "x" || d.Steered != SteerCopy || e.DecidedBy != TermCopy {
					t.Fatalf("request %d: winner %s steered %q decided by %q, want a copy on x", i, e.Winner, d.Steered, e.DecidedBy)
				}
			}
		}
		if !copies {
			continue
		}
		// The copy itself waited nothing: the credit stands as it was.
		if c := p.Explain(req(0), cands).Replicas[1].Estimate.CopyCreditSecs; math.Abs(c-0.025*float64(first)) > 1e-8 {
			t.Fatalf("credit %v after the copy, want %v", c, 0.025*float64(first))
		}
		// Against the holder alone, x takes all of the credit.
		if c := p.Explain(req(0), cands[:2]).Replicas[1].Estimate.CopyCreditSecs; math.Abs(c-0.05*float64(first)) > 1e-8 {
			t.Fatalf("holder and x: credit %v, want %v", c, 0.05*float64(first))
		}
		// No credit where every candidate holds the prompt or none does,
		// nor on a candidate whose engine reports requests waiting.
		all := slices.Clone(cands)
		for i := range all {
			all[i].Cached = sysBlocks * 16
		}
		busy := slices.Clone(cands)
		busy[1].Waiting = 1
		for name, cs := range map[string][]Candidate{"all hold": all, "none holds": cands[1:], "x has waiting": busy} {
			for _, r := range p.Explain(req(0), cs).Replicas {
				if r.Estimate.CopyCreditSecs != 0 {
					t.Errorf("%s: %s credited %v", name, r.ID, r.Estimate.CopyCreditSecs)
				}
			}
		}
		clk.add(time.Hour)
		if e := p.Explain(req(0), cands); e.Winner != "holder" || e.Replicas[1].Estimate.CopyCreditSecs != 0 {
			t.Fatalf("an hour later: winner %s, credit %v", e.Winner, e.Replicas[1].Estimate.CopyCreditSecs)
		}
	}
}
