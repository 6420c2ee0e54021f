package policy

import (
	"math"
	"testing"
	"time"
)

// TestHotPrefixDemandPrompt: a system prompt held by one replica draws ten
// requests a second there. Counted as computed (the default), its demand
// is the little prefill of each question and it stays cold on its one
// holder; counted as prompts, it is the traffic's whole prefill, the work
// that holder carries, and the prefix gets owners enough to share it.
func TestHotPrefixDemandPrompt(t *testing.T) {
	const sysBlocks = 250 // a 4,000-token system prompt
	req := func(i int) *Request {
		n := sysBlocks + 10
		return &Request{PromptTokens: n * 16, Blocks: chain(0, sysBlocks, uint64(100+i), n), BlockSize: 16}
	}
	cands := []Candidate{
		{ID: "holder", Cached: sysBlocks * 16, Running: -1, KVUsage: -1},
		{ID: "x", Cached: 0, Running: -1, KVUsage: -1},
		{ID: "y", Cached: 0, Running: -1, KVUsage: -1},
	}
	for _, tc := range []struct {
		demand string
		hot    bool
	}{
		{DemandPrefill, false},
		{DemandPrompt, true},
	} {
		t.Run(tc.demand, func(t *testing.T) {
			clk := newFakeClock()
			s := clk.settings()
			s.HotPrefix.Demand = tc.demand
			p, err := NewWith(CostModel, s)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 100 { // 10 s at 10 a second, the holder alone offered
				p.Pick(req(i), cands[:1])
				clk.add(100 * time.Millisecond)
			}
			e := p.Explain(req(1000), cands)
			perRequest := s.Cost.Prefill(10*16, sysBlocks*16)
			if tc.demand == DemandPrompt {
				perRequest = s.Cost.Prefill((sysBlocks+10)*16, 0)
			}
			// The sketch decays: after one window it counts about 0.63 of
			// the rate, never more than the rate itself.
			if rate := 10 * perRequest; e.HotDemand > rate || e.HotDemand < 0.5*rate {
				t.Errorf("demand %.3f s/s, want within [%.3f, %.3f]", e.HotDemand, 0.5*rate, rate)
			}
			if hot := e.HotOwners > 0; hot != tc.hot {
				t.Fatalf("demand %.3f s/s: %d owners, want hot %v", e.HotDemand, e.HotOwners, tc.hot)
			}
			if tc.hot {
				if want := min(len(cands), int(math.Ceil(e.HotDemand/s.HotPrefix.Utilization))); e.HotOwners != want {
					t.Errorf("%d owners, want %d", e.HotOwners, want)
				}
				if e.Winner == "holder" {
					t.Errorf("an idle owner credited with the prompt should win over the holder: %+v", e.Replicas)
				}
			} else if e.Winner != "holder" {
				t.Errorf("winner %s, want the holder of the cold prefix", e.Winner)
			}
		})
	}
}
