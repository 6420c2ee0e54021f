package bench

import (
	"bytes"
	"image/png"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/workload"
)

// demoResults are a demo's two runs: round_robin, then cost_model with a
// fifth of its p99 TTFT.
func demoResults() []*RunResult {
	run := func(policy string, ttftP99, hit, goodput float64, errs int) *RunResult {
		m := Measurements{
			Requests: 190, Warmup: 19, Measured: 171, Succeeded: 171 - errs,
			TTFT: measure.Percentiles{P50: 0.075, P90: ttftP99 / 2, P99: ttftP99}, E2E: measure.Percentiles{P50: 4.2, P99: 6.9},
			HitRate: hit, BusiestShare: 0.39, GoodputRPS: goodput, GoodFraction: goodput / 4.5,
		}
		if errs > 0 {
			m.Errors = map[string]int{"timeout": errs}
		}
		return &RunResult{
			Spec: RunSpec{Policy: policy, Replicas: 3, Warmup: "0.1", SLO: DefaultSLO(),
				Workload: workload.Spec{Workload: "w1", Rate: 5, Duration: 40 * time.Second, Seed: 1, SystemPrompts: 16}},
			Measurements: m,
		}
	}
	return []*RunResult{run("round_robin", 3.571, 0.62, 3.48, 1), run("cost_model", 0.634, 0.93, 4.13, 0)}
}

func TestRenderDemoTable(t *testing.T) {
	got := RenderDemoTable(demoResults())
	want := `policy       TTFT p50  TTFT p99   e2e p50   e2e p99  hit rate  busiest     goodput  within SLO  errors
round_robin     75 ms  3,571 ms  4,200 ms  6,900 ms       62%      39%  3.48 req/s         77%   1/171
cost_model      75 ms    634 ms  4,200 ms  6,900 ms       93%      39%  4.13 req/s         92%   0/171

cost_model against round_robin: p99 TTFT 82% lower, p50 TTFT the same, hit rate 62% → 93%, goodput 19% higher.
`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RenderDemoTable (-want +got):\n%s", diff)
	}
	if got := RenderDemoTable(nil); got != "no results\n" {
		t.Errorf("RenderDemoTable(nil) = %q", got)
	}
}

func TestRenderDemoChartDeterministic(t *testing.T) {
	rows := pointRows(demoResults())
	a, err := renderDemoChart("W1 at 5 req/s: time to first token", rows)
	if err != nil {
		t.Fatal(err)
	}
	b, err := renderDemoChart("W1 at 5 req/s: time to first token", rows)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("two renderings of the demo chart differ")
	}
	if _, err := png.Decode(bytes.NewReader(a)); err != nil {
		t.Fatal(err)
	}
}

func TestDemoConfigSpec(t *testing.T) {
	c := DefaultDemoConfig()
	runs := ComparePlan(c.spec(), c.Policies, 1)
	for _, s := range runs {
		if err := s.Validate(); err != nil {
			t.Fatalf("the default demo's %s run: %v", s.Policy, err)
		}
	}
	if len(runs) != 2 || runs[0].Policy != "round_robin" || runs[1].Policy != "cost_model" ||
		runs[0].Workload != runs[1].Workload {
		t.Errorf("the demo's runs are not round_robin then cost_model on the same workload: %+v", runs)
	}
}

func TestRenderIndexTable(t *testing.T) {
	run := func(index string, exact, over, under, hit float64, st *procs.IndexStatus) *RunResult {
		return &RunResult{
			Spec: RunSpec{Policy: "cost_model", Index: index},
			Measurements: Measurements{Measured: 270, HitRate: hit, TTFT: measure.Percentiles{P50: 0.23, P99: 0.7},
				Prediction: &Prediction{Requests: 270, Exact: exact, Over: over, Under: under}},
			Index: st,
		}
	}
	following := &procs.IndexStatus{Replicas: []procs.IndexReplica{{ID: "sim-1", Source: "events"}},
		KVEvents: []procs.KVStream{{ID: "sim-1", Source: "events"}}}
	lagging := &procs.IndexStatus{Replicas: []procs.IndexReplica{{ID: "sim-1", Source: "approximate"}},
		KVEvents: []procs.KVStream{{ID: "sim-1", Source: "approximate", Reason: "silent"}}}
	got := RenderIndexTable([]*RunResult{run("", 0.89, 0.1, 0.01, 0.13, nil), run("exact", 0.99, 0.01, 0, 0.15, following),
		run("auto", 0.5, 0.5, 0, 0.1, lagging)})
	want := `index        exact  over  under  hit rate  TTFT p50  TTFT p99     followed events  errors
approximate    89%   10%     1%       13%    230 ms    700 ms                   –   0/270
exact          99%    1%     0%       15%    230 ms    700 ms                 yes   0/270
auto           50%   50%     0%       10%    230 ms    700 ms  no (sim-1: silent)   0/270
`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RenderIndexTable (-want +got):\n%s", diff)
	}
}

func TestIndexDemoSpecs(t *testing.T) {
	d := DefaultIndexDemo()
	runs, err := d.specs(1)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].Index != "" || runs[1].Index != IndexExact || runs[0].Workload != runs[1].Workload ||
		runs[0].FileName() == runs[1].FileName() {
		t.Errorf("runs %+v", runs)
	}
	d.Modes = []string{"fast"}
	if _, err := d.specs(1); err == nil {
		t.Error("an unknown mode was accepted")
	}
}
