package bench

import (
	"strings"
	"testing"
)

// sizedResult is p99Result on a fleet of n replicas.
func sizedResult(wl string, rate float64, n int, policy string, p99 float64) *RunResult {
	r := p99Result(wl, rate, policy, p99)
	r.Spec.Replicas = n
	return r
}

func TestFleetSizes(t *testing.T) {
	results := []*RunResult{
		// round robin needs 4 replicas, cost_model 2, least_request more
		// than 4; p2c ran on two sizes only.
		sizedResult("w1", 4, 2, "round_robin", 9), sizedResult("w1", 4, 3, "round_robin", 3), sizedResult("w1", 4, 4, "round_robin", 1.5),
		sizedResult("w1", 4, 2, "cost_model", 1.9), sizedResult("w1", 4, 3, "cost_model", 0.8), sizedResult("w1", 4, 4, "cost_model", 0.5),
		sizedResult("w1", 4, 2, "least_request", 9), sizedResult("w1", 4, 3, "least_request", 5), sizedResult("w1", 4, 4, "least_request", 2.5),
		sizedResult("w1", 4, 3, "p2c", 1.2), sizedResult("w1", 4, 4, "p2c", 1),
		// An ordinary point beside it, judged as before.
		p99Result("w6", 9, "cost_model", 1), p99Result("w6", 9, "round_robin", 0.5),
	}
	keys, groups := groupResults(results)
	loads := fleetSizes(keys, groups)
	if len(loads) != 1 || loads[0].point != "w1" || len(loads[0].sizes) != 3 {
		t.Fatalf("loads %+v, want w1's alone on three sizes", loads)
	}
	want := map[string]int{"round_robin": 4, "cost_model": 2, "least_request": 0, "p2c": 3}
	for _, f := range loads[0].policies {
		if f.smallest != want[f.policy] {
			t.Errorf("%s: smallest fleet %d, want %d", f.policy, f.smallest, want[f.policy])
		}
	}
	report := RenderRunReport(results)
	for _, line := range []string{
		"## Fleet size",
		"### w1 at 4 req/s (SLO: p99 TTFT within 2s)",
		"| cost_model | 2 | 2 (50%) | 1,900 | 800 | 500 |",
		"| least_request | more than 4 | – | 9,000 | 5,000 | 2,500 |",
		"| p2c | 3 | 1 (25%) | – | 1,200 | 1,000 |",
		"| w6 | 9 req/s | the lowest: round_robin |", // the ordinary point is still judged
	} {
		if !strings.Contains(report, line) {
			t.Errorf("report lacks %q", line)
		}
	}
	// cost_model loses to p2c on three replicas, but a sizing point is
	// judged by the fleet it needs, not in the losses.
	if strings.Contains(report, "| w1 | 4 req/s") {
		t.Errorf("the sizing point is judged beside the others:\n%s", report)
	}
}
