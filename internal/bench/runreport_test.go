package bench

import (
	"flag"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/workload"
)

var update = flag.Bool("update", false, "rewrite golden files")

// reportResults are hand-made results of a small sweep: W1 at two rates and
// W6 at one, three policies, two repetitions; cost_model does best on W1
// and round robin on W6.
func reportResults() []*RunResult {
	var out []*RunResult
	f := func(v float64) *float64 { return &v }
	for _, pt := range []struct {
		workload string
		rate     float64
	}{{"w1", 4}, {"w1", 6}, {"w6", 9}} {
		// The earlier a policy is listed, the better it does; on W6
		// round robin comes first, so cost_model loses somewhere.
		order := []string{"cost_model", "round_robin", "least_request"}
		if pt.workload == "w6" {
			order = []string{"round_robin", "cost_model", "least_request"}
		}
		for rep := range 2 {
			for i, pol := range order {
				k := 1 + float64(i) + float64(rep)/10 + pt.rate/100
				m := Measurements{
					// At most 1% failed: the p99s stand (TestFailuresCountInP99).
					Requests: 1000, Warmup: 100, Measured: 900, Succeeded: 900 - i,
					TTFT: measure.Percentiles{N: 90, P50: 0.05 * k, P99: 0.5 * k}, E2E: measure.Percentiles{N: 90, P50: 0.5 * k, P99: 2 * k},
					TPOT:       measure.Percentiles{N: 90, P50: 0.02 * k, P99: 0.04 * k},
					GoodputRPS: pt.rate / k, GoodFraction: 1 / k, ThroughputRPS: pt.rate,
					HitRate: 0.9 / k, Engine: &EngineHits{HitRate: 0.85 / k}, OracleHitRate: f(0.95),
					Replicas: map[string]int{"sim-1": 30, "sim-2": 30, "sim-3": 30 - i}, BusiestShare: 0.34 + float64(i)/100,
					Prediction: &Prediction{Requests: 90, Exact: 0.9, MeanError: 1.5},
				}
				if pol == "cost_model" {
					m.Estimate = &EstimateError{Requests: 90, MeanAbs: 0.2 * k, P90Abs: 0.5 * k, Mean: -0.1}
					m.Turns = &Turns{FollowUps: 60, Kept: 50 - 10*rep, KeptShare: float64(50-10*rep) / 60}
				}
				if i > 0 {
					m.Errors = map[string]int{"status_503": i}
				}
				out = append(out, &RunResult{
					Spec: RunSpec{Policy: pol, Rep: rep, Replicas: 3, Warmup: "0.1", SLO: DefaultSLO(),
						Workload: workload.Spec{Workload: pt.workload, Rate: pt.rate, Duration: time.Minute, Seed: uint64(1 + rep)}},
					Environment:  measure.Environment{GitCommit: "abc123", GoVersion: "go1.27.3", GOOS: "linux", GOARCH: "amd64", NumCPU: 2, CPUModel: "Test CPU"},
					Measurements: m,
				})
			}
		}
	}
	return out
}

func TestRenderRunReportGolden(t *testing.T) {
	got := RenderRunReport(reportResults())
	path := filepath.Join("testdata", "runreport.golden.md")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("report differs from %s (-want +got; rerun with -update to accept):\n%s", path, diff)
	}
	// The report depends on the results alone, not on their order.
	rs := reportResults()
	for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
		rs[i], rs[j] = rs[j], rs[i]
	}
	if again := RenderRunReport(rs); again != got {
		t.Errorf("the report changes with the order of its results")
	}
}

// A repetition in which no request succeeded has no latencies: it is left
// out of the latency medians, and a policy of no such success shows none;
// but its p99 TTFT counts as the worst (TestFailedRunIsWorst).
func TestFailedRunsLeftOutOfLatencies(t *testing.T) {
	good, also := demoResults()[1], demoResults()[1]
	failed := demoResults()[1]
	failed.Spec.Rep, also.Spec.Rep = 1, 2
	failed.Measurements.Succeeded, failed.Measurements.TTFT, failed.Measurements.E2E = 0, measure.Percentiles{}, measure.Percentiles{}
	failed.Measurements.Errors = map[string]int{"http_404": failed.Measurements.Measured}
	row := pointRows([]*RunResult{good, failed})[0]
	if row.TTFTP50 != good.Measurements.TTFT.P50 || row.E2EP50 != good.Measurements.E2E.P50 {
		t.Errorf("TTFT p50 %v, e2e p50 %v; want the succeeding run's", row.TTFTP50, row.E2EP50)
	}
	if row.Errors != failed.Measurements.Measured || row.Reps != 2 {
		t.Errorf("errors %d, reps %d; want the failed run's counted", row.Errors, row.Reps)
	}
	row = pointRows([]*RunResult{failed})[0]
	if !math.IsNaN(row.TTFTP50) || !math.IsInf(row.TTFTP99, 1) {
		t.Errorf("a policy of no success: TTFT p50 %v, p99 %v; want none and unreachable", row.TTFTP50, row.TTFTP99)
	}
	if report := RenderRunReport([]*RunResult{failed}); !strings.Contains(report, "| – | unreachable |") ||
		!strings.Contains(report, "left out of the other latency medians") {
		t.Errorf("report:\n%s", report)
	}
}

// lowestRE finds a report's headline: the policy it calls the lowest and
// its p99.
var lowestRE = regexp.MustCompile(`\*\*([^*\n]+)\*\* has the lowest p99 TTFT \(([^ ]+)`)

// TestFailedRunIsWorst: wherever a report compares p99 TTFTs, a policy
// whose repetitions all failed (or whose median repetition did) is the
// worst: never the lowest, never level, a loss when it is cost_model's,
// and a repetition that failed is behind one that served.
func TestFailedRunIsWorst(t *testing.T) {
	fail := func(r *RunResult) *RunResult {
		m := &r.Measurements
		m.Succeeded, m.TTFT, m.Errors = 0, measure.Percentiles{}, map[string]int{"status_503": m.Measured}
		return r
	}
	rep := func(r *RunResult, n int) *RunResult { r.Spec.Rep = n; return r }
	for _, tt := range []struct {
		name    string
		results []*RunResult
		// lowest is the headline's lowest ("" for none), losses the
		// winners of cost_model's losses, behind its repetitions behind.
		lowest, loss string
		behind       int
		lines        []string // in the report
		demo         string   // in the demo's comparison
	}{
		{"a rival that failed is not the lowest and hides no loss", []*RunResult{
			p99Result("w1", 4, "cost_model", 1.02), p99Result("w1", 4, "peer:sglang-router:cache_aware", 0.955),
			fail(p99Result("w1", 4, "round_robin", 0)), p99Result("w1", 4, "least_request", 5.72),
		}, "peer:sglang-router:cache_aware", "peer:sglang-router:cache_aware", 1, []string{
			"round_robin's is unreachable (goodput 0.00); 83% below least_request's 5,720 ms (goodput 0.00).",
			"| w1 | 4 req/s | median | the lowest: peer:sglang-router:cache_aware | 955 | 1,020 | +7% | 1 of 1 |",
			"| round_robin | 1 | – | unreachable |",
		}, "cost_model against round_robin: p99 TTFT lower, the other's unreachable,"},
		{"cost_model that failed loses", []*RunResult{
			fail(p99Result("w1", 4, "cost_model", 0)), p99Result("w1", 4, "least_request", 5.72), p99Result("w1", 4, "round_robin", 6),
		}, "least_request", "least_request", 1, []string{
			"| w1 | 4 req/s | median | the lowest: least_request | 5,720 | unreachable | unreachable | 1 of 1 |",
			"- p99 TTFT ≥ 40% below round_robin's: unreachable against 6,000 ms (**not met**)",
			"| w1 at 4 req/s | **median rate** | unreachable vs 5,720 | 0.00 vs 0.00 | no |",
		}, "cost_model against round_robin: p99 TTFT unreachable,"},
		{"one failed repetition of two is the median's worst", []*RunResult{
			rep(p99Result("w1", 4, "cost_model", 0.5), 0), rep(fail(p99Result("w1", 4, "cost_model", 0)), 1),
			rep(p99Result("w1", 4, "least_request", 2), 0), rep(p99Result("w1", 4, "least_request", 2), 1),
		}, "least_request", "least_request", 1, []string{"**least_request** has the lowest p99 TTFT (2,000 ms"}, "p99 TTFT unreachable,"},
		{"every policy failed: none is the lowest", []*RunResult{
			fail(p99Result("w1", 4, "cost_model", 0)), fail(p99Result("w1", 4, "least_request", 0)),
		}, "", "", 0, []string{"No policy has a p99 TTFT here: every one's is unreachable."}, "p99 TTFT both unreachable,"},
	} {
		t.Run(strings.ReplaceAll(tt.name, " ", "_"), func(t *testing.T) {
			keys, groups := groupResults(tt.results)
			report := RenderRunReport(tt.results)
			lowest := ""
			if m := lowestRE.FindStringSubmatch(report); m != nil {
				lowest = m[1]
				if m[2] == "unreachable" || m[2] == "–" {
					lowest += " (no p99)"
				}
			}
			if lowest != tt.lowest {
				t.Errorf("lowest %q, want %q", lowest, tt.lowest)
			}
			loss, behind := "", 0
			if ls := losses(keys, groups); len(ls) > 0 {
				loss, behind = ls[0].winner, ls[0].behind
			}
			if loss != tt.loss || behind != tt.behind {
				t.Errorf("loss to %q, %d behind; want %q, %d", loss, behind, tt.loss, tt.behind)
			}
			for _, line := range tt.lines {
				if !strings.Contains(report, line) {
					t.Errorf("report lacks %q:\n%s", line, report)
				}
			}
			if demo := RenderDemoTable(tt.results); !strings.Contains(demo, tt.demo) {
				t.Errorf("the demo's comparison lacks %q:\n%s", tt.demo, demo)
			}
			for _, bad := range []string{"NaN", "Inf", "**unreachable**", "has the lowest p99 TTFT (unreachable"} {
				if strings.Contains(report, bad) {
					t.Errorf("report has %q:\n%s", bad, report)
				}
			}
		})
	}
}

// A report of a directory that is not there, or of a file, is an error,
// not a report of no results.
func TestWriteRunReportNeedsADirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "result.json")
	if err := os.WriteFile(file, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{filepath.Join(dir, "missing"), file} {
		out := filepath.Join(t.TempDir(), "report")
		if _, _, err := WriteRunReport(in, out); err == nil {
			t.Errorf("a report of %s: no error", in)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("a report of %s was written", in)
		}
	}
	if _, _, err := WriteRunReport(dir, t.TempDir()); err != nil {
		t.Errorf("a directory: %v", err)
	}
}

// A trace run at the default multiplier (0 in the spec) is at ×1 the
// trace's rate, in its file name, its summary and the report alike.
func TestTraceDefaultMultiplierLabel(t *testing.T) {
	for _, tt := range []struct {
		multiplier float64
		file, text string
	}{
		{0, "trace_x1_rep0.json", "×1 the trace's rate"},
		{0.5, "trace_x0.5_rep0.json", "×0.5 the trace's rate"},
	} {
		r := &RunResult{Spec: RunSpec{URL: "http://127.0.0.1:1", Warmup: "0", SLO: DefaultSLO(),
			Workload: workload.Spec{Workload: workload.Trace, Model: "m", TracePath: "t.jsonl", RateMultiplier: tt.multiplier}}}
		if got := r.Spec.FileName(); got != tt.file {
			t.Errorf("multiplier %g: file %s, want %s", tt.multiplier, got, tt.file)
		}
		if got := keyOf(r).rateText(); got != tt.text {
			t.Errorf("multiplier %g: report says %q, want %q", tt.multiplier, got, tt.text)
		}
		var summary strings.Builder
		WriteSummary(&summary, r)
		if !strings.HasPrefix(summary.String(), "trace at "+tt.text+" ") {
			t.Errorf("multiplier %g: summary %q", tt.multiplier, summary.String())
		}
	}
}

// A policy name with a | or a line break keeps the report's table rows
// whole.
func TestReportEscapesPolicyNames(t *testing.T) {
	r := demoResults()[1]
	r.Spec.Policy = "peer:a|b\nc"
	for name, text := range map[string]string{"report": RenderRunReport([]*RunResult{r}), "compare": RenderCompareTable([]*RunResult{r})} {
		if !strings.Contains(text, `| peer:a\|b c |`) {
			t.Errorf("%s: the policy's cell is not escaped:\n%s", name, text)
		}
	}
}

// TestReportStatesGoodputWindow: the report says what goodput's window is,
// drain included, so no reader expects it to reach the offered rate.
func TestReportStatesGoodputWindow(t *testing.T) {
	report := RenderRunReport(reportResults())
	for _, want := range []string{
		"*Goodput* is the measured requests that succeeded within the SLO per second of the run's window, which runs from the scheduled send " +
			"of the first measured request to the end of the last measured response, failed ones included",
		"goodput falls short of it even when every request meets the SLO, its window taking in the drain after the last send",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}
