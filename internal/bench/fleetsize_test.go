package bench

import (
	"fmt"
	"slices"
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
		"| w6 | 9 req/s | median | the lowest: round_robin |", // the ordinary point is still judged
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

// TestFailuresCountInP99: a policy that refuses most of its requests
// quickly has a low p99 over the few it serves; reports rank and judge it
// by the p99 over every request, which then is a failure: not within the
// SLO, not the lowest. At most 1% failed, the p99 with the failures counted
// (or, in a result written before that figure, the successes') stands.
func TestFailuresCountInP99(t *testing.T) {
	shed := func(r *RunResult, measured, failed int, withFailures *float64) *RunResult {
		m := &r.Measurements
		m.Requests, m.Measured, m.Succeeded = measured, measured, measured-failed
		m.Errors, m.TTFTP99WithFailures = map[string]int{"status_503": failed}, withFailures
		return r
	}
	f := func(v float64) *float64 { return &v }
	for _, tt := range []struct {
		name    string
		results []*RunResult
		lines   []string
	}{
		{"a fleet shedding 80% is not within the SLO", []*RunResult{
			shed(sizedResult("w1", 6, 2, "cost_model", 0.95), 269, 216, nil), sizedResult("w1", 6, 3, "cost_model", 1.052),
			sizedResult("w1", 6, 2, "round_robin", 9), sizedResult("w1", 6, 3, "round_robin", 3),
		}, []string{"| cost_model | 3 | – | unreachable | 1,052 |", "| round_robin | more than 3 | – | 9,000 | 3,000 |"}},
		{"a policy shedding 80% is not the lowest", []*RunResult{
			shed(p99Result("w1", 4, "cost_model", 0.185), 107, 87, nil), p99Result("w1", 4, "least_request", 0.5),
			p99Result("w1", 4, "round_robin", 0.6),
		}, []string{
			"**least_request** has the lowest p99 TTFT (500 ms",
			"| w1 | 4 req/s | median | the lowest: least_request | 500 | unreachable | unreachable | 1 of 1 |",
			"| cost_model | 1 | 0 | unreachable |",
		}},
		{"1% failed: the p99 with them counted", []*RunResult{
			shed(p99Result("w1", 4, "cost_model", 0.5), 200, 2, f(0.7)), p99Result("w1", 4, "least_request", 0.6),
		}, []string{"**least_request** has the lowest p99 TTFT (600 ms", "| cost_model | 1 | 0 | 700 |"}},
		{"1% failed, written before the figure: the successes' p99", []*RunResult{
			shed(p99Result("w1", 4, "cost_model", 0.5), 200, 2, nil), p99Result("w1", 4, "least_request", 0.6),
		}, []string{"**cost_model** has the lowest p99 TTFT (500 ms"}},
		{"more than 1% failed, written before the figure: unreachable", []*RunResult{
			shed(p99Result("w1", 4, "cost_model", 0.5), 200, 3, nil), p99Result("w1", 4, "least_request", 0.6),
		}, []string{"**least_request** has the lowest p99 TTFT (600 ms", "| cost_model | 1 | 0 | unreachable |"}},
	} {
		t.Run(strings.ReplaceAll(tt.name, " ", "_"), func(t *testing.T) {
			if m := &tt.results[0].Measurements; m.Succeeded < m.Measured {
				var b strings.Builder
				WriteSummary(&b, tt.results[0])
				if !strings.Contains(b.String(), fmt.Sprintf("TTFT p99 over every measured request, the %d failed counted slower than any success: ", m.Measured-m.Succeeded)) {
					t.Errorf("the run's summary does not give the p99 with its failures:\n%s", b.String())
				}
			}
			report := RenderRunReport(tt.results)
			for _, line := range tt.lines {
				if !strings.Contains(report, line) {
					t.Errorf("report lacks %q:\n%s", line, report)
				}
			}
		})
	}
}

// TestFleetSizeChart: a sizing point's charts are against the fleet size,
// a value per size (against the rate every size stood at one x), while an
// ordinary point's stay against the rate.
func TestFleetSizeChart(t *testing.T) {
	results := []*RunResult{
		sizedResult("w1", 6, 2, "round_robin", 9), sizedResult("w1", 6, 4, "round_robin", 1.5), sizedResult("w1", 6, 3, "round_robin", 3),
		sizedResult("w1", 6, 2, "cost_model", 1.9), sizedResult("w1", 6, 3, "cost_model", 0.8),
		p99Result("w6", 9, "cost_model", 1), p99Result("w6", 9, "round_robin", 0.5),
	}
	want := map[string]map[string][][2]float64{ // point → policy → (x, p99)
		"w1": {"round_robin": {{2, 9}, {3, 3}, {4, 1.5}}, "cost_model": {{2, 1.9}, {3, 0.8}}},
		"w6": {"round_robin": {{9, 0.5}}, "cost_model": {{9, 1}}},
	}
	charts := chartData(results)
	for _, c := range charts {
		for _, s := range c.TTFTP99 {
			var got [][2]float64
			for i, x := range s.X {
				got = append(got, [2]float64{x, s.Values[i]})
			}
			if !slices.Equal(got, want[c.Point][s.Policy]) {
				t.Errorf("%s %s: (x, p99) %v, want %v", c.Point, s.Policy, got, want[c.Point][s.Policy])
			}
		}
	}
	files, err := RenderRunCharts(results)
	if err != nil || len(files) != 4 {
		t.Fatalf("charts %d, %v; want 4", len(files), err)
	}
	if report := RenderRunReport(results); !strings.Contains(report, "![w1: p99 TTFT against fleet size](w1-ttft-p99.png)") ||
		!strings.Contains(report, "![w6: p99 TTFT against load](w6-ttft-p99.png)") {
		t.Errorf("chart links:\n%s", report)
	}
}
