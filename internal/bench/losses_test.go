package bench

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/workload"
)

// p99Result is one repetition of one policy at one rate, reduced to its p99
// TTFT (seconds).
func p99Result(wl string, rate float64, policy string, p99 float64) *RunResult {
	return &RunResult{
		Spec:         RunSpec{Policy: policy, Replicas: 3, SLO: DefaultSLO(), Workload: workload.Spec{Workload: wl, Rate: rate, Duration: time.Minute, Seed: 1}},
		Measurements: Measurements{Requests: 10, Measured: 10, Succeeded: 10, TTFT: measure.Percentiles{N: 10, P99: p99}},
	}
}

func TestLosses(t *testing.T) {
	type want struct {
		point   string
		rate    float64
		highest bool
		winner  string
	}
	for _, tt := range []struct {
		name    string
		results []*RunResult
		want    []want
	}{
		{"within 5% of the lowest is level", []*RunResult{
			p99Result("w1", 4, "cost_model", 1.04), p99Result("w1", 4, "p2c", 1.0),
		}, nil},
		{"6% behind at the median rate", []*RunResult{
			p99Result("w1", 2, "cost_model", 9), p99Result("w1", 2, "p2c", 1),
			p99Result("w1", 4, "cost_model", 1.06), p99Result("w1", 4, "p2c", 1.0), p99Result("w1", 4, "round_robin", 1.2),
			p99Result("w1", 6, "cost_model", 1), p99Result("w1", 6, "p2c", 2),
		}, []want{{"w1", 4, false, "p2c"}}},
		{"collapse at the highest rate, judged against least_request only", []*RunResult{
			p99Result("w3", 10, "cost_model", 1), p99Result("w3", 10, "least_request", 2),
			p99Result("w3", 14, "cost_model", 1), p99Result("w3", 14, "least_request", 2),
			p99Result("w3", 18, "cost_model", 16), p99Result("w3", 18, "least_request", 5), p99Result("w3", 18, "kv_aware", 2),
		}, []want{{"w3", 18, true, "least_request"}}},
		{"one rate is judged as the median only", []*RunResult{
			p99Result("hot", 15, "cost_model", 0.95), p99Result("hot", 15, "least_request", 0.9), p99Result("hot", 15, "peer:sglang-router:cache_aware", 0.5),
		}, []want{{"hot", 15, false, "peer:sglang-router:cache_aware"}}},
		{"no cost_model, nothing judged", []*RunResult{
			p99Result("w1", 4, "p2c", 1), p99Result("w1", 4, "round_robin", 2),
		}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			keys, groups := groupResults(tt.results)
			var got []want
			for _, l := range losses(keys, groups) {
				got = append(got, want{l.key.Point, l.key.Rate, l.highest, l.winner})
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("losses (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLossPairs: a loss counts the repetitions of the same requests in which
// cost_model was behind, pairing by Rep and leaving out unpaired ones.
func TestLossPairs(t *testing.T) {
	rep := func(r *RunResult, n int) *RunResult { r.Spec.Rep = n; return r }
	for _, tt := range []struct {
		name           string
		results        []*RunResult
		behind, paired int
	}{
		{"behind in every pair", []*RunResult{
			rep(p99Result("w1", 4, "cost_model", 2), 0), rep(p99Result("w1", 4, "p2c", 1), 0),
			rep(p99Result("w1", 4, "cost_model", 3), 1), rep(p99Result("w1", 4, "p2c", 2.5), 1),
			rep(p99Result("w1", 4, "cost_model", 2), 2), rep(p99Result("w1", 4, "p2c", 1.9), 2),
		}, 3, 3},
		{"one bad repetition makes the median loss", []*RunResult{
			rep(p99Result("w1", 4, "cost_model", 9), 0), rep(p99Result("w1", 4, "p2c", 1), 0),
			rep(p99Result("w1", 4, "cost_model", 2), 1), rep(p99Result("w1", 4, "p2c", 2.5), 1),
			rep(p99Result("w1", 4, "cost_model", 3), 2), rep(p99Result("w1", 4, "p2c", 1.5), 2),
		}, 2, 3},
		{"an unpaired repetition is left out", []*RunResult{
			rep(p99Result("w1", 4, "cost_model", 2), 0), rep(p99Result("w1", 4, "p2c", 1), 0),
			rep(p99Result("w1", 4, "cost_model", 3), 1),
		}, 1, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			keys, groups := groupResults(tt.results)
			ls := losses(keys, groups)
			if len(ls) != 1 {
				t.Fatalf("got %d losses, want 1", len(ls))
			}
			if ls[0].behind != tt.behind || ls[0].paired != tt.paired {
				t.Errorf("behind %d of %d, want %d of %d", ls[0].behind, ls[0].paired, tt.behind, tt.paired)
			}
		})
	}
}
