package bench

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

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

// TestLosses: every point and rate is judged against the lowest p99 there,
// whatever the rate's place; the collapse check adds the highest of
// several rates where cost_model is level with the lowest but above
// least_request.
func TestLosses(t *testing.T) {
	type want struct {
		point    string
		rate     float64
		place    string
		collapse bool
		winner   string
	}
	for _, tt := range []struct {
		name    string
		results []*RunResult
		want    []want
	}{
		{"within_5%_of_the_lowest_is_level", []*RunResult{
			p99Result("w1", 4, "cost_model", 1.04), p99Result("w1", 4, "p2c", 1.0),
		}, nil},
		{"6%_behind_at_the_median_rate", []*RunResult{
			p99Result("w1", 2, "cost_model", 1), p99Result("w1", 2, "p2c", 2),
			p99Result("w1", 4, "cost_model", 1.06), p99Result("w1", 4, "p2c", 1.0), p99Result("w1", 4, "round_robin", 1.2),
			p99Result("w1", 6, "cost_model", 1), p99Result("w1", 6, "p2c", 2),
		}, []want{{"w1", 4, "median", false, "p2c"}}},
		{"loss_at_the_lowest_rate", []*RunResult{
			p99Result("w8", 8, "cost_model", 0.566), p99Result("w8", 8, "round_robin", 0.5), p99Result("w8", 8, "least_request", 0.6),
			p99Result("w8", 11, "cost_model", 0.6), p99Result("w8", 11, "round_robin", 0.7),
			p99Result("w8", 15, "cost_model", 0.9), p99Result("w8", 15, "round_robin", 1.2),
		}, []want{{"w8", 8, "lowest", false, "round_robin"}}},
		{"loss_past_the_knee_to_kv_aware_below_least_request", []*RunResult{
			p99Result("w3", 10, "cost_model", 0.3), p99Result("w3", 10, "least_request", 1.2),
			p99Result("w3", 14, "cost_model", 0.34), p99Result("w3", 14, "least_request", 6),
			p99Result("w3", 18, "cost_model", 2.976), p99Result("w3", 18, "least_request", 16.9), p99Result("w3", 18, "kv_aware", 1.65),
		}, []want{{"w3", 18, "highest", false, "kv_aware"}}},
		{"loss_at_an_other_rate", []*RunResult{
			p99Result("w1", 2, "cost_model", 1), p99Result("w1", 2, "peer:sglang-router:cache_aware", 1),
			p99Result("w1", 4, "cost_model", 1), p99Result("w1", 4, "peer:sglang-router:cache_aware", 1),
			p99Result("w1", 6, "cost_model", 1.2), p99Result("w1", 6, "peer:sglang-router:cache_aware", 1),
			p99Result("w1", 8, "cost_model", 1), p99Result("w1", 8, "peer:sglang-router:cache_aware", 1),
		}, []want{{"w1", 6, "other", false, "peer:sglang-router:cache_aware"}}},
		{"collapse_at_the_highest_rate_within_5%_of_the_lowest", []*RunResult{
			p99Result("w3", 10, "cost_model", 1), p99Result("w3", 10, "least_request", 2),
			p99Result("w3", 14, "cost_model", 1), p99Result("w3", 14, "least_request", 2),
			p99Result("w3", 18, "cost_model", 1.04), p99Result("w3", 18, "least_request", 1.02), p99Result("w3", 18, "kv_aware", 1),
		}, []want{{"w3", 18, "highest", true, "least_request"}}},
		{"collapse_to_the_lowest_least_request", []*RunResult{
			p99Result("w2", 12, "cost_model", 3), p99Result("w2", 12, "least_request", 3.4),
			p99Result("w2", 15, "cost_model", 20), p99Result("w2", 15, "least_request", 19.6),
		}, []want{{"w2", 15, "highest", true, "least_request"}}},
		{"a_collapse_behind_the_lowest_is_listed_once", []*RunResult{
			p99Result("w3", 10, "cost_model", 1), p99Result("w3", 10, "least_request", 2),
			p99Result("w3", 18, "cost_model", 16), p99Result("w3", 18, "least_request", 5), p99Result("w3", 18, "kv_aware", 2),
		}, []want{{"w3", 18, "highest", false, "kv_aware"}}},
		{"below_least_request_at_the_highest_rate_is_no_collapse", []*RunResult{
			p99Result("w3", 10, "cost_model", 1), p99Result("w3", 10, "least_request", 2),
			p99Result("w3", 18, "cost_model", 1.02), p99Result("w3", 18, "least_request", 1.03), p99Result("w3", 18, "kv_aware", 1),
		}, nil},
		{"one_rate_is_its_median_with_no_collapse_check", []*RunResult{
			p99Result("hot", 15, "cost_model", 0.95), p99Result("hot", 15, "least_request", 0.9), p99Result("hot", 15, "peer:sglang-router:cache_aware", 0.5),
			p99Result("w2-top", 15, "cost_model", 1.02), p99Result("w2-top", 15, "least_request", 1),
		}, []want{{"hot", 15, "median", false, "peer:sglang-router:cache_aware"}}},
		{"every_loss_in_the_points_order", []*RunResult{
			p99Result("w1", 2, "cost_model", 2), p99Result("w1", 2, "kv_aware", 1),
			p99Result("w1", 4, "cost_model", 2), p99Result("w1", 4, "kv_aware", 1),
			p99Result("w1", 6, "cost_model", 2), p99Result("w1", 6, "kv_aware", 1), p99Result("w1", 6, "least_request", 1.5),
		}, []want{{"w1", 2, "lowest", false, "kv_aware"}, {"w1", 4, "median", false, "kv_aware"}, {"w1", 6, "highest", false, "kv_aware"}}},
		{"no_cost_model_nothing_judged", []*RunResult{
			p99Result("w1", 4, "p2c", 1), p99Result("w1", 4, "round_robin", 2),
		}, nil},
		{"cost_model_alone_nothing_judged", []*RunResult{
			p99Result("w1", 4, "cost_model", 1), p99Result("w1", 6, "cost_model", 2), p99Result("w1", 6, "p2c", 2),
		}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			keys, groups := groupResults(tt.results)
			var got []want
			for _, l := range losses(keys, groups) {
				got = append(got, want{l.key.Point, l.key.Rate, l.place, l.collapse, l.winner})
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

// TestLossesMatchNaive checks losses against a naive reading of the rule on
// random points: medians of each policy's repetitions at every rate,
// cost_model's against the lowest, and least_request's at the highest of
// several rates.
func TestLossesMatchNaive(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		policies := []string{"cost_model", "least_request", "kv_aware", "round_robin", "peer:sglang-router:cache_aware"}
		nRates := rapid.IntRange(1, 5).Draw(t, "rates")
		var results []*RunResult
		type naive struct {
			rate     float64
			place    string
			collapse bool
			theirs   float64
		}
		var want []naive
		for i := range nRates {
			rate := float64(2 * (i + 1))
			pols := rapid.SliceOfNDistinct(rapid.SampledFrom(policies), 1, len(policies), rapid.ID[string]).Draw(t, "policies")
			reps := rapid.IntRange(1, 4).Draw(t, "reps")
			med := map[string]float64{}
			for _, pol := range pols {
				var vs []float64
				for rep := range reps {
					// Whole tenths, so ties and near-ties at 5% happen.
					v := float64(rapid.IntRange(1, 40).Draw(t, "p99")) / 10
					r := p99Result("w", rate, pol, v)
					r.Spec.Rep = rep
					results = append(results, r)
					vs = append(vs, v)
				}
				slices.Sort(vs)
				med[pol] = (vs[(len(vs)-1)/2] + vs[len(vs)/2]) / 2
			}
			cm, ok := med["cost_model"]
			if !ok || len(med) < 2 {
				continue
			}
			lowest := math.Inf(1)
			for _, v := range med {
				lowest = min(lowest, v)
			}
			place := "other"
			switch {
			case i == (nRates-1)/2:
				place = "median"
			case i == 0:
				place = "lowest"
			case i == nRates-1:
				place = "highest"
			}
			lr, hasLR := med["least_request"]
			switch {
			case cm > lowest*1.05:
				want = append(want, naive{rate, place, false, lowest})
			case place == "highest" && hasLR && cm > lr:
				want = append(want, naive{rate, place, true, lr})
			}
		}
		keys, groups := groupResults(results)
		var got []naive
		for _, l := range losses(keys, groups) {
			got = append(got, naive{l.key.Rate, l.place, l.collapse, l.theirs})
			if w := pointRows(groups[l.key]); !slices.ContainsFunc(w, func(r PolicyRow) bool { return r.Policy == l.winner && r.TTFTP99 == l.theirs }) {
				t.Errorf("winner %s has no row with p99 %v", l.winner, l.theirs)
			}
		}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(naive{})); diff != "" {
			t.Fatalf("losses (-naive +got):\n%s", diff)
		}
	})
}
