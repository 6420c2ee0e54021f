package policy_test

import (
	"fmt"

	"github.com/inferrail/inferrail/internal/policy"
)

// The design's worked example: r0 holds the prompt but has 0.6 s of
// prefill queued; r1 is idle and cold.
func ExamplePolicy_Explain() {
	p, err := policy.New(policy.CostModel, 42)
	if err != nil {
		panic(err)
	}
	req := &policy.Request{PromptTokens: 4000}
	cands := []policy.Candidate{
		{ID: "r0", InFlight: 3, Cached: 3984, QueuedPrefill: 0.6, Running: 3, KVUsage: -1},
		{ID: "r1", InFlight: 0, Cached: 0, Running: 0, KVUsage: -1},
	}
	e := p.Explain(req, cands)
	fmt.Printf("winner %s, decided by %s\n", e.Winner, e.DecidedBy)
	for _, r := range e.Replicas {
		fmt.Printf("%s: queue %.4f + prefill %.4f = %.4f s\n", r.ID, r.Estimate.QueueSecs, r.Estimate.PrefillSecs, r.Estimate.TTFTSecs)
	}
	d := p.Pick(req, cands)
	fmt.Printf("picked %s, estimated TTFT %.4f s\n", cands[d.Index].ID, d.EstimatedTTFT)
	// Output:
	// winner r1, decided by queue
	// r0: queue 0.6015 + prefill 0.0068 = 0.6083 s
	// r1: queue 0.0000 + prefill 0.4314 = 0.4314 s
	// picked r1, estimated TTFT 0.4314 s
}
