package policy

import "testing"

// TestSteeredOnlyWhenTheCreditDecides: a winner is reported steered by
// the copy or the hot-prefix credit only when, with nobody credited,
// another allowed candidate would have beaten it. Two candidates credited
// alike far ahead of the prompt's holder won without any credit, yet the
// winner was reported steered, since it was judged against the other's
// credited rank (found by a review); with the holder just ahead, the
// credit decides.
func TestSteeredOnlyWhenTheCreditDecides(t *testing.T) {
	const sysBlocks, tail = 125, 5
	req := func(i int) *Request {
		n := sysBlocks + tail
		return &Request{PromptTokens: n * 16, Blocks: chain(0, sysBlocks, uint64(100+i), n), BlockSize: 16}
	}
	for _, tc := range []struct {
		name     string
		copies   bool
		warmups  int
		holderQ  float64 // the holder's queued prefill at the decision, seconds
		steering string
	}{
		{"copy, holder far behind", true, 2, 10, ""},
		{"hot prefix, holder far behind", false, 12, 10, ""},
		{"hot prefix, holder just ahead", false, 12, 0.05, SteerHotPrefix},
		{"copy, holder just ahead", true, 2, 0.18, SteerCopy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			s := clk.settings()
			s.HotPrefix.Copies = tc.copies
			if tc.copies {
				s.HotPrefix.Demand, s.HotPrefix.Utilization = DemandPrefill, 1
			}
			p, _ := NewWith(CostModel, s)
			// The holder wins the warm-ups, with waiting counted: the
			// root's demand builds a credit for the others.
			warm := []Candidate{
				{ID: "holder", Cached: sysBlocks * 16, QueuedPrefill: 0.05, Running: -1, KVUsage: -1},
				{ID: "x", Running: -1, KVUsage: -1},
				{ID: "y", QueuedPrefill: 0.01, Running: -1, KVUsage: -1},
			}
			for i := range tc.warmups {
				p.Pick(req(i), warm)
			}
			cands := []Candidate{
				{ID: "holder", Cached: sysBlocks * 16, QueuedPrefill: tc.holderQ, Running: -1, KVUsage: -1},
				{ID: "x", Running: -1, KVUsage: -1},
				{ID: "y", Running: -1, KVUsage: -1},
			}
			e := p.Explain(req(99), cands)
			d := p.Pick(req(99), cands)
			if d.Steered != tc.steering || e.Decision.Steered != tc.steering {
				t.Errorf("winner %s steered %q (explained %q), want %q", cands[d.Index].ID, d.Steered, e.Decision.Steered, tc.steering)
			}
		})
	}
}
