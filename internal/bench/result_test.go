package bench

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/workload"
)

// TestFileNameNumbers: rates and trace multipliers are written in full,
// as committed results name them, unless that would outgrow a file name.
func TestFileNameNumbers(t *testing.T) {
	tests := []struct {
		w    workload.Spec
		want string
	}{
		{workload.Spec{Workload: "w1", Rate: 4}, "w1_rate4_rep0_cost_model.json"},
		{workload.Spec{Workload: "w1", Rate: 0.5}, "w1_rate0.5_rep0_cost_model.json"},
		{workload.Spec{Workload: "trace", RateMultiplier: 0.2}, "trace_x0.2_rep0_cost_model.json"},
		{workload.Spec{Workload: "trace", RateMultiplier: 1e300}, "trace_x1e300_rep0_cost_model.json"},
		{workload.Spec{Workload: "trace", RateMultiplier: 1e-300}, "trace_x1e-300_rep0_cost_model.json"},
		// Another time scale is another rate, in a file of its own.
		{workload.Spec{Workload: "trace", RateMultiplier: 0.2, TimeScale: 1}, "trace_x0.2_rep0_cost_model.json"},
		{workload.Spec{Workload: "trace", RateMultiplier: 0.2, TimeScale: 0.001}, "trace_x0.2ts0.001_rep0_cost_model.json"},
		{workload.Spec{Workload: "trace", TimeScale: 2}, "trace_x1ts2_rep0_cost_model.json"},
	}
	for _, tt := range tests {
		s := RunSpec{Policy: "cost_model", Workload: tt.w}
		if got := s.FileName(); got != tt.want {
			t.Errorf("FileName of %+v = %q, want %q", tt.w, got, tt.want)
		}
	}
}

// TestResultOutOfRange: a result file with a value no run writes is
// refused, naming the file and the field, rather than reported as
// nonsense (a p99 of 1e300 s printed as -9,223,372,036,854,775,808 ms,
// replicas -7 as "smallest fleet -7").
func TestResultOutOfRange(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(r *RunResult)
		want string
	}{
		{"p99_1e300", func(r *RunResult) { r.Measurements.TTFT.P99 = 1e300 }, "measurements.ttft.p99_seconds: 1e+300 is outside [0, 1e+06]"},
		{"replicas_negative", func(r *RunResult) { r.Spec.Replicas = -7 }, "spec.replicas: -7 is outside [0, 4096]"},
		{"more_succeeded_than_measured", func(r *RunResult) { r.Measurements.Succeeded = r.Measurements.Measured + 1 }, "measurements.succeeded: 172 is outside [0, 171]"},
		{"errors_past_measured", func(r *RunResult) { r.Measurements.Errors = map[string]int{"timeout": 500} }, "measurements.errors (all kinds): 500 is outside [0, 171]"},
		{"negative_goodput", func(r *RunResult) { r.Measurements.GoodputRPS = -1 }, "measurements.goodput_rps: -1 is outside [0, 1e+09]"},
		{"hit_rate_above_one", func(r *RunResult) { r.Measurements.HitRate = 2 }, "measurements.hit_rate: 2 is outside [0, 1]"},
		{"arm_latency", func(r *RunResult) {
			r.Measurements.Arms = map[string]KindFigures{"a": {Measured: 3, Succeeded: 3, TTFT: measure.Percentiles{N: 3, P99: -1}}}
		}, "measurements.arms.a.ttft.p99_seconds: -1 is outside [0, 1e+06]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			good := demoResults()[1]
			if err := good.Check(); err != nil {
				t.Fatalf("a sane result refused: %v", err)
			}
			r := demoResults()[1]
			tt.edit(r)
			path := filepath.Join(dir, r.Spec.FileName())
			if err := WriteRunResult(path, r); err != nil {
				t.Fatal(err)
			}
			for name, read := range map[string]func() error{
				"ReadRunResult":  func() error { _, err := ReadRunResult(path); return err },
				"ReadRunResults": func() error { _, _, err := ReadRunResults(dir); return err },
				"WriteRunReport": func() error { _, _, err := WriteRunReport(dir, filepath.Join(t.TempDir(), "out")); return err },
			} {
				if err := read(); err == nil || !strings.Contains(err.Error(), path+": ") || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("%s: %v, want %s: … %s", name, err, path, tt.want)
				}
			}
		})
	}
}

// TestCommittedResultsInRange: every committed result file passes Check.
func TestCommittedResultsInRange(t *testing.T) {
	paths, err := filepath.Glob("../../bench/results/*/*.json")
	if err == nil {
		var nested []string // a results directory holding one directory per sweep
		nested, err = filepath.Glob("../../bench/results/*/*/*.json")
		paths = append(paths, nested...)
	}
	if err != nil || len(paths) < 1000 {
		t.Fatalf("%d committed results, %v", len(paths), err)
	}
	for _, p := range paths {
		if _, err := ReadRunResult(p); err != nil && !strings.Contains(err.Error(), "cannot unmarshal") {
			t.Error(err)
		}
	}
}

// TestValidSpecsReadBack: every spec Validate accepts, written in a result
// file, reads back (Check passes), and one past a bound a result file
// holds is refused up front. Validate bounded none of these, so a run of
// --timeout 300h wrote a result that report, plot and a sweep's resume
// then refused.
func TestValidSpecsReadBack(t *testing.T) {
	const limit = time.Duration(maxResultSeconds) * time.Second
	trace := func(s *RunSpec) {
		s.Workload = workload.Spec{Workload: "trace", Model: "m", TracePath: "t.jsonl", Seed: 1}
	}
	tests := []struct {
		name  string
		edit  func(*RunSpec)
		valid bool
	}{
		{"defaults", func(*RunSpec) {}, true},
		{"timeout_at_limit", func(s *RunSpec) { s.Timeout = limit }, true},
		{"timeout_300h", func(s *RunSpec) { s.Timeout = 300 * time.Hour }, false},
		{"timeout_negative", func(s *RunSpec) { s.Timeout = -time.Second }, false},
		{"duration_at_limit", func(s *RunSpec) { s.Workload.Rate, s.Workload.Duration = 1, limit }, true},
		{"duration_300h", func(s *RunSpec) { s.Workload.Rate, s.Workload.Duration = 1, 300*time.Hour }, false},
		{"slo_ttft_300h", func(s *RunSpec) { s.SLO.TTFT = 300 * time.Hour }, false},
		{"slo_tpot_300h", func(s *RunSpec) { s.SLO.TPOT = 300 * time.Hour }, false},
		{"rate_at_limit", func(s *RunSpec) { s.Workload.Rate, s.Workload.Duration, s.Workload.Requests = maxResultRate, 0, 3 }, true},
		{"rate_2e9", func(s *RunSpec) { s.Workload.Rate, s.Workload.Duration, s.Workload.Requests = 2e9, 0, 3 }, false},
		{"trace", trace, true},
		{"trace_300h", func(s *RunSpec) { trace(s); s.Workload.Duration = 300 * time.Hour }, false},
		{"rate_multiplier_at_limit", func(s *RunSpec) { trace(s); s.Workload.RateMultiplier = maxResultRate }, true},
		{"rate_multiplier_2e9", func(s *RunSpec) { trace(s); s.Workload.RateMultiplier = 2e9 }, false},
		{"replicas_at_limit", func(s *RunSpec) { s.Replicas = maxReplicas }, true},
		{"replicas_65", func(s *RunSpec) { s.Replicas = maxReplicas + 1 }, false},
		{"replicas_5000", func(s *RunSpec) { s.Replicas = 5000 }, false},
		{"rep_at_limit", func(s *RunSpec) { s.Rep = MaxReps }, true},
		{"rep_1001", func(s *RunSpec) { s.Rep = MaxReps + 1 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := demoResults()[1]
			tt.edit(&r.Spec)
			err := r.Spec.Validate()
			if (err == nil) != tt.valid {
				t.Fatalf("Validate() = %v, want valid %v", err, tt.valid)
			}
			if err != nil {
				return
			}
			path := filepath.Join(t.TempDir(), r.Spec.FileName())
			if err := WriteRunResult(path, r); err != nil {
				t.Fatal(err)
			}
			if _, err := ReadRunResult(path); err != nil {
				t.Errorf("a result of a valid spec does not read back: %v", err)
			}
		})
	}
}
