package bench

import (
	"bytes"
	"fmt"
	"image/png"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/workload"
)

func TestChartData(t *testing.T) {
	got := chartData(reportResults())
	// reportResults' figures scale with k = 1 + i + rep/10 + rate/100 for the
	// i-th policy; the median over its two repetitions has rep/10 = 0.05.
	k := func(i int, rate float64) float64 { return 1 + float64(i) + 0.05 + rate/100 }
	goodput := func(i int, rate float64) float64 {
		// The median of two is their mean: rate/k at rep 0 and rep 1.
		return (rate/(k(i, rate)-0.05) + rate/(k(i, rate)+0.05)) / 2
	}
	type ranked struct {
		name string
		i    int
	}
	// Policies in the report's order; i is their index in reportResults'
	// order for the workload (round robin leads on W6).
	w1Order := []ranked{{"round_robin", 1}, {"least_request", 2}, {"cost_model", 0}}
	w6Order := []ranked{{"round_robin", 0}, {"least_request", 2}, {"cost_model", 1}}
	series := func(order []ranked, rates []float64, f func(i int, rate float64) float64) []chartSeries {
		var ss []chartSeries
		for _, p := range order {
			s := chartSeries{Policy: p.name, X: rates}
			for _, r := range rates {
				s.Values = append(s.Values, f(p.i, r))
			}
			ss = append(ss, s)
		}
		return ss
	}
	ttft := func(i int, rate float64) float64 { return 0.5 * k(i, rate) }
	want := []pointChart{
		{Point: "w1", Workload: "w1", TTFTP99: series(w1Order, []float64{4, 6}, ttft), Goodput: series(w1Order, []float64{4, 6}, goodput)},
		{Point: "w6", Workload: "w6", TTFTP99: series(w6Order, []float64{9}, ttft), Goodput: series(w6Order, []float64{9}, goodput)},
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("chartData (-want +got):\n%s", diff)
	}
}

func TestChartDataPolicyMissingAtARate(t *testing.T) {
	// A policy run at only some rates has a value at those alone.
	var rs []*RunResult
	for _, run := range []struct {
		policy string
		rate   float64
	}{{"cost_model", 2}, {"round_robin", 2}, {"cost_model", 4}} {
		rs = append(rs, &RunResult{
			Spec:         RunSpec{Policy: run.policy, Workload: workload.Spec{Workload: "w2", Rate: run.rate}},
			Measurements: Measurements{TTFT: measure.Percentiles{P99: run.rate / 10}, GoodputRPS: run.rate},
		})
	}
	got := chartData(rs)
	want := []pointChart{{Point: "w2", Workload: "w2",
		TTFTP99: []chartSeries{{Policy: "round_robin", X: []float64{2}, Values: []float64{0.2}}, {Policy: "cost_model", X: []float64{2, 4}, Values: []float64{0.2, 0.4}}},
		Goodput: []chartSeries{{Policy: "round_robin", X: []float64{2}, Values: []float64{2}}, {Policy: "cost_model", X: []float64{2, 4}, Values: []float64{2, 4}}},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("chartData (-want +got):\n%s", diff)
	}
}

func TestChartFileNames(t *testing.T) {
	for _, tt := range []struct{ point, ttft, goodput string }{
		{"w1", "w1-ttft-p99.png", "w1-goodput.png"},
		{"w1 32/prompts", "w1-32-prompts-ttft-p99.png", "w1-32-prompts-goodput.png"},
	} {
		ttft, goodput := chartFileNames(tt.point)
		if ttft != tt.ttft || goodput != tt.goodput {
			t.Errorf("chartFileNames(%q) = %q, %q, want %q, %q", tt.point, ttft, goodput, tt.ttft, tt.goodput)
		}
	}
}

// TestRenderRunChartsDeterministic draws the charts twice, the second time
// from the results in another order, and wants the same bytes: the
// report's PNGs are rebuilt byte for byte from the same files.
func TestRenderRunChartsDeterministic(t *testing.T) {
	first, err := RenderRunCharts(reportResults())
	if err != nil {
		t.Fatal(err)
	}
	rs := reportResults()
	slices.Reverse(rs)
	second, err := RenderRunCharts(rs)
	if err != nil {
		t.Fatal(err)
	}
	names := slices.Sorted(maps.Keys(first))
	want := []string{"w1-goodput.png", "w1-ttft-p99.png", "w6-goodput.png", "w6-ttft-p99.png"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Fatalf("chart files (-want +got):\n%s", diff)
	}
	for _, n := range names {
		if !bytes.Equal(first[n], second[n]) {
			t.Errorf("%s: two renderings differ", n)
		}
		img, err := png.Decode(bytes.NewReader(first[n]))
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		// 18 × 10 cm at 120 dpi.
		if b := img.Bounds(); b.Dx() != 850 || b.Dy() != 472 {
			t.Errorf("%s: %d × %d pixels, want 850 × 472", n, b.Dx(), b.Dy())
		}
	}
}

func TestRenderLineChartOddValues(t *testing.T) {
	for name, s := range map[string]chartSeries{
		"nan":       {Policy: "cost_model", X: []float64{1, 2}, Values: []float64{math.NaN(), math.NaN()}},
		"zeros":     {Policy: "cost_model", X: []float64{1, 2}, Values: []float64{0, 0}},
		"one_point": {Policy: "peer", X: []float64{3}, Values: []float64{1.5}},
		"some_inf":  {Policy: "round_robin", X: []float64{1, 2, 3}, Values: []float64{1, math.Inf(1), 2}},
	} {
		for _, logY := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/log=%v", name, logY), func(t *testing.T) {
				c := lineChart{title: "t", xLabel: "x", yLabel: "y", logY: logY}
				if !logY {
					c.offered = diagonal
				}
				b, err := renderLineChart(c, []chartSeries{s})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := png.Decode(bytes.NewReader(b)); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestWriteRunReportCharts writes the report of result files twice and
// wants the same files, every chart the Markdown links among them.
func TestWriteRunReportCharts(t *testing.T) {
	in := t.TempDir()
	for _, r := range reportResults() {
		if err := WriteRunResult(filepath.Join(in, r.Spec.FileName()), r); err != nil {
			t.Fatal(err)
		}
	}
	outs := []string{t.TempDir(), t.TempDir()}
	for _, out := range outs {
		if _, _, err := WriteRunReport(in, out); err != nil {
			t.Fatal(err)
		}
	}
	md, err := os.ReadFile(filepath.Join(outs[0], "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	var linked []string
	for _, m := range regexp.MustCompile(`!\[[^\]]*\]\(([^)]+)\)`).FindAllStringSubmatch(string(md), -1) {
		linked = append(linked, m[1])
	}
	if len(linked) != 4 {
		t.Errorf("report links %d charts, want 4: %v", len(linked), linked)
	}
	entries, err := os.ReadDir(outs[0])
	if err != nil {
		t.Fatal(err)
	}
	var written []string
	for _, e := range entries {
		written = append(written, e.Name())
		a, errA := os.ReadFile(filepath.Join(outs[0], e.Name()))
		b, errB := os.ReadFile(filepath.Join(outs[1], e.Name()))
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs between two reports of the same files (%v, %v)", e.Name(), errA, errB)
		}
	}
	for _, l := range linked {
		if !slices.Contains(written, l) {
			t.Errorf("report links %s, which was not written (wrote %s)", l, strings.Join(written, ", "))
		}
	}
}

// verdictResults are cost_model and least_request (and round_robin) on w1–w3
// at one rate each; wins decides whether cost_model wins at a workload.
func verdictResults(workloads []string, wins func(w string) bool) []*RunResult {
	var rs []*RunResult
	for _, w := range workloads {
		for _, pol := range []string{"round_robin", "least_request", "cost_model"} {
			m := Measurements{Measured: 100, TTFT: measure.Percentiles{P99: 1}, GoodputRPS: 4, HitRate: 0.5}
			if pol == "cost_model" && wins(w) {
				m = Measurements{Measured: 100, TTFT: measure.Percentiles{P99: 0.5}, GoodputRPS: 6, HitRate: 0.9}
			}
			rs = append(rs, &RunResult{
				Spec:         RunSpec{Policy: pol, Replicas: 3, SLO: DefaultSLO(), Workload: workload.Spec{Workload: w, Rate: 5, Duration: time.Minute}},
				Measurements: m,
			})
		}
	}
	return rs
}

func TestVerdict(t *testing.T) {
	for _, tt := range []struct {
		name      string
		workloads []string
		wins      func(string) bool
		want      []string
	}{
		{"met", []string{"w1", "w2", "w3"}, func(string) bool { return true }, []string{
			"**Met** on W1, W2 and W3.",
			"- hit rate ≥ 80%: 90% from usage (met)",
			"- p99 TTFT ≥ 40% below round_robin's: 500 ms against 1,000 ms, 50% below (met)",
			"- goodput ≥ 30% above least_request's: 6.00 req/s against 4.00, 50% above (met)",
		}},
		{"not_met", []string{"w1", "w2", "w3"}, func(w string) bool { return w != "w2" }, []string{
			"**Not met** at w2 at 5 req/s.",
			"| w2 at 5 req/s | **median rate** | 1,000 vs 1,000 | 4.00 vs 4.00 | no |",
		}},
		{"not_judged", []string{"w1"}, func(string) bool { return true }, []string{
			"**Not judged**: met where measured, but no results compare cost_model with least_request on w2 and w3.",
		}},
		{"targets_missed", []string{"w1"}, func(string) bool { return false }, []string{
			"**Not met** at w1 at 5 req/s. Nothing compares cost_model with least_request on w2 and w3.",
			"- hit rate ≥ 80%: 50% from usage (**not met**)",
			"- p99 TTFT ≥ 40% below round_robin's: 1,000 ms against 1,000 ms, the same (**not met**)",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := RenderRunReport(verdictResults(tt.workloads, tt.wins))
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("report lacks %q:\n%s", w, got)
				}
			}
		})
	}
}

// TestGoodputTargetAgainstNone: a least_request that met the SLO on no
// request is beaten by any goodput, not left unjudged.
func TestGoodputTargetAgainstNone(t *testing.T) {
	rs := verdictResults([]string{"w1"}, func(string) bool { return true })
	for _, r := range rs {
		if r.Spec.Policy == "least_request" {
			r.Measurements.GoodputRPS = 0
		}
	}
	got := RenderRunReport(rs)
	if want := "- goodput ≥ 30% above least_request's: 6.00 req/s against none (met)"; !strings.Contains(got, want) {
		t.Errorf("report lacks %q:\n%s", want, got)
	}
}
