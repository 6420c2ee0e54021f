package policy

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// TestHotPrefixDemandPrompt: a system prompt held by one replica draws ten
// requests a second there. Counted as computed (the default), its demand
// is the little prefill of each question and it stays cold on its one
// holder; counted as prompts, it is the traffic's whole prefill, the work
// that holder carries, and the prefix gets owners enough to share it: an
// idle one then wins over the holder's queue.
func TestHotPrefixDemandPrompt(t *testing.T) {
	const sysBlocks = 250 // a 4,000-token system prompt
	req := func(i int) *Request {
		n := sysBlocks + 10
		return &Request{PromptTokens: n * 16, Blocks: chain(0, sysBlocks, uint64(100+i), n), BlockSize: 16}
	}
	cands := []Candidate{
		{ID: "holder", Cached: sysBlocks * 16, QueuedPrefill: 0.05, Running: -1, KVUsage: -1},
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
			clk, s, p := costModelCounting(t, tc.demand)
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

// TestHotPrefixDemandShare: few-shot templates of 1,600 tokens, each held
// by one of three replicas, draw the fleet's ten requests a second in turn.
// Counted as computed, none is hot: its holder computes only the question.
// Counted by share, four templates bring their holders 0.75 of a replica's
// arrivals each, more than utilization 0.5, and get a second owner priced
// as holding the whole template; eight bring 0.375 and stay on their
// holders.
func TestHotPrefixDemandShare(t *testing.T) {
	const sysBlocks = 100
	for _, tc := range []struct {
		demand    string
		templates int
		owners    int
	}{
		{DemandPrefill, 4, 0},
		{DemandShare, 4, 2},
		{DemandShare, 8, 0},
		{DemandShare, 2, 3},
	} {
		t.Run(fmt.Sprintf("%s/%d", tc.demand, tc.templates), func(t *testing.T) {
			clk, _, p := costModelCounting(t, tc.demand)
			// Template k's request i, and the replicas as the index sees
			// them: k's holder alone holds it.
			req := func(k, i int) *Request {
				n := sysBlocks + 10
				return &Request{PromptTokens: n * 16, Blocks: chain(uint64(k), sysBlocks, uint64(1000+i), n), BlockSize: 16}
			}
			cands := func(k int) []Candidate {
				c := []Candidate{
					{ID: "a", Running: -1, KVUsage: -1},
					{ID: "b", Running: -1, KVUsage: -1},
					{ID: "c", Running: -1, KVUsage: -1},
				}
				c[k%3].Cached = sysBlocks * 16
				return c
			}
			for i := range 200 { // 20 s at 10 a second
				k := i % tc.templates
				p.Pick(req(k, i), cands(k))
				clk.add(100 * time.Millisecond)
			}
			e := p.Explain(req(0, 5000), cands(0))
			if e.HotOwners != tc.owners {
				t.Fatalf("%d owners (demand %.3f), want %d", e.HotOwners, e.HotDemand, tc.owners)
			}
			if tc.demand != DemandShare {
				return
			}
			if want := 3 / float64(tc.templates); e.HotDemand < 0.9*want || e.HotDemand > 1.1*want {
				t.Errorf("demand %.3f replicas' worth, want about %.3f", e.HotDemand, want)
			}
			if tc.owners > 0 && e.HotCreditTokens != sysBlocks*16 {
				t.Errorf("owners credited with %d tokens, want the template's %d", e.HotCreditTokens, sysBlocks*16)
			}
			// Every replica is idle: the owners tie, and the one that
			// holds the template wins; a copy gains nothing yet.
			if e.Winner != "a" {
				t.Errorf("winner %s, want the holder among idle owners", e.Winner)
			}
		})
	}
}

// TestHotPrefixShareEvidence: a fleet's first requests are all one
// prefix's, a share of one; the prefix counts as hot by share only once it
// has drawn shareEvidence arrivals.
func TestHotPrefixShareEvidence(t *testing.T) {
	clk, _, p := costModelCounting(t, DemandShare)
	req := func(i int) *Request {
		return &Request{PromptTokens: 110 * 16, Blocks: chain(7, 100, uint64(1000+i), 110), BlockSize: 16}
	}
	cands := []Candidate{
		{ID: "a", Cached: 1600, Running: -1, KVUsage: -1},
		{ID: "b", Running: -1, KVUsage: -1},
		{ID: "c", Running: -1, KVUsage: -1},
	}
	need := int(shareEvidence / uint64(time.Second))
	for i := range need + 1 {
		owners := p.Explain(req(i), cands).HotOwners
		if hot := owners > 0; hot != (i >= need) {
			t.Fatalf("after %d arrivals: %d owners, want hot %v", i, owners, i >= need)
		}
		p.Pick(req(i), cands[:1])
		clk.add(10 * time.Millisecond)
	}
}

// costModelCounting is a cost_model on a fake clock whose hot prefixes
// count demand as demand says, with its settings.
func costModelCounting(t *testing.T, demand string) (*fakeClock, Settings, Policy) {
	t.Helper()
	clk := newFakeClock()
	s := clk.settings()
	s.HotPrefix.Demand = demand
	p, err := NewWith(CostModel, s)
	if err != nil {
		t.Fatal(err)
	}
	return clk, s, p
}
