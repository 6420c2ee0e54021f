package bench

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/workload"
	"pgregory.net/rapid"
)

// naiveQuantile is the nearest-rank quantile by its definition: the
// smallest value v of xs with at least p·n values <= v.
func naiveQuantile(xs []time.Duration, p float64) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	for _, v := range s {
		n := 0
		for _, x := range s {
			if x <= v {
				n++
			}
		}
		if float64(n) >= p*float64(len(s))-1e-9 {
			return v
		}
	}
	return s[len(s)-1]
}

func TestDistAgainstNaive(t *testing.T) {
	tests := []struct {
		in   []time.Duration
		want measure.Percentiles
	}{
		{nil, measure.Percentiles{}},
		{[]time.Duration{time.Second}, measure.Percentiles{N: 1, Mean: 1, P50: 1, P90: 1, P99: 1, P999: 1, Max: 1}},
		{[]time.Duration{4 * time.Second, time.Second, 3 * time.Second, 2 * time.Second},
			measure.Percentiles{N: 4, Mean: 2.5, P50: 2, P90: 4, P99: 4, P999: 4, Max: 4}},
	}
	for _, tt := range tests {
		in := slices.Clone(tt.in)
		got := distOf(in)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("distOf(%v) mismatch (-want +got):\n%s", tt.in, diff)
		}
		if !slices.Equal(in, tt.in) {
			t.Errorf("distOf changed its input: %v, was %v", in, tt.in)
		}
	}
}

func TestDistProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		xs := rapid.SliceOfN(rapid.Int64Range(0, int64(time.Hour)), 1, 300).Draw(t, "xs")
		ds := make([]time.Duration, len(xs))
		for i, x := range xs {
			ds[i] = time.Duration(x)
		}
		d := distOf(ds)
		for _, q := range []struct {
			p   float64
			got float64
		}{{0.5, d.P50}, {0.9, d.P90}, {0.99, d.P99}, {0.999, d.P999}, {1, d.Max}} {
			if want := naiveQuantile(ds, q.p).Seconds(); q.got != want {
				t.Fatalf("p%v = %v, naive reference %v", q.p, q.got, want)
			}
		}
		lo := slices.Min(ds).Seconds()
		if !(d.P50 <= d.P90 && d.P90 <= d.P99 && d.P99 <= d.Max) {
			t.Fatalf("percentiles out of order: %+v", d)
		}
		if d.Mean < lo-1e-9 || d.Mean > d.Max+1e-9 || d.N != len(ds) {
			t.Fatalf("mean %v outside [%v, %v] or n %d != %d", d.Mean, lo, d.Max, d.N, len(ds))
		}
	})
}

func TestSLOGood(t *testing.T) {
	slo := DefaultSLO()
	tests := []struct {
		name string
		o    Outcome
		want bool
	}{
		{"fast", Outcome{TTFT: time.Second, E2E: 2 * time.Second, CompletionTokens: 11}, true}, // TPOT 100 ms
		{"slow_decode", Outcome{TTFT: time.Second, E2E: 3 * time.Second, CompletionTokens: 11}, false},
		{"slow_first_token", Outcome{TTFT: 2001 * time.Millisecond, E2E: 2100 * time.Millisecond, CompletionTokens: 2}, false},
		{"one_token_judged_on_ttft", Outcome{TTFT: time.Second, E2E: 9 * time.Second, CompletionTokens: 1}, true},
		{"failed", Outcome{TTFT: time.Millisecond, E2E: time.Millisecond, CompletionTokens: 5, ErrKind: measure.KindTimeout}, false},
	}
	for _, tt := range tests {
		if got := slo.good(&tt.o); got != tt.want {
			t.Errorf("%s: good(%+v) = %v, want %v", tt.name, tt.o, got, tt.want)
		}
	}
}

func TestWarmup(t *testing.T) {
	sched := []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second}
	tests := []struct {
		in      string
		want    Warmup
		count   int
		wantErr bool
	}{
		{"", Warmup{}, 0, false},
		{"0", Warmup{}, 0, false},
		{"0.4", Warmup{Fraction: 0.4}, 2, false},
		{"2s", Warmup{Duration: 2 * time.Second}, 2, false},
		{"2500ms", Warmup{Duration: 2500 * time.Millisecond}, 3, false},
		{"1", Warmup{}, 0, true},
		{"-1s", Warmup{}, 0, true},
		{"soon", Warmup{}, 0, true},
	}
	for _, tt := range tests {
		got, err := ParseWarmup(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseWarmup(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseWarmup(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
		if n := got.count(sched); !tt.wantErr && n != tt.count {
			t.Errorf("warmup %q discards %d, want %d", tt.in, n, tt.count)
		}
	}
}

func TestMeasureOutcomes(t *testing.T) {
	ms := time.Millisecond
	outs := []Outcome{
		// Warmup: left out of everything.
		{Index: 0, Kind: "w1", Sched: 0, Sent: ms, TTFT: 9 * time.Second, E2E: 9 * time.Second, CompletionTokens: 2, PromptTokens: 100, HasUsage: true, Replica: "a"},
		{Index: 1, Kind: "w1", Sched: 100 * ms, Sent: 101 * ms, TTFT: 100 * ms, E2E: 1100 * ms, ITL: []time.Duration{50 * ms, 50 * ms},
			PromptTokens: 100, CachedTokens: 50, CompletionTokens: 11, HasUsage: true, Replica: "a",
			Predicted: true, PredPromptTokens: 100, PredCachedToks: 50},
		{Index: 2, Kind: "w6", Sched: 200 * ms, Sent: 203 * ms, TTFT: 3 * time.Second, E2E: 3900 * ms,
			PromptTokens: 100, CachedTokens: 0, CompletionTokens: 10, HasUsage: true, Replica: "b",
			Predicted: true, PredPromptTokens: 100, PredCachedToks: 16},
		{Index: 3, Kind: "w1", Sched: 300 * ms, Sent: 302 * ms, E2E: 30 * ms, Status: 503, ErrKind: "status_503", Err: "status 503", Replica: "b"},
		{Index: 4, Kind: "w1", Sched: 400 * ms, Sent: 400 * ms, TTFT: 200 * ms, E2E: 600 * ms,
			PromptTokens: 200, CachedTokens: 150, CompletionTokens: 5, HasUsage: true, Replica: "a",
			Predicted: true, PredPromptTokens: 200, PredCachedToks: 144},
	}
	m := measureOutcomes(outs, 1, DefaultSLO())
	if m.Requests != 5 || m.Warmup != 1 || m.Measured != 4 || m.Succeeded != 3 {
		t.Fatalf("counts: %d requests, %d warmup, %d measured, %d succeeded; want 5, 1, 4, 3", m.Requests, m.Warmup, m.Measured, m.Succeeded)
	}
	if m.Succeeded+sumValues(m.Errors) != m.Measured {
		t.Errorf("%d succeeded + errors %v != %d measured", m.Succeeded, m.Errors, m.Measured)
	}
	if diff := cmp.Diff(map[string]int{"status_503": 1}, m.Errors); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
	// Window: from 100 ms (first measured schedule) to 4.1 s (request 2's end).
	if got := m.WindowSeconds; math.Abs(got-4.0) > 1e-9 {
		t.Errorf("window %v s, want 4", got)
	}
	// Good: #1 (TTFT 0.1 s, TPOT 0.1 s) and #4 (TTFT 0.2, TPOT 0.1); #2 misses TTFT.
	if m.GoodFraction != 0.5 || math.Abs(m.GoodputRPS-0.5) > 1e-9 {
		t.Errorf("good fraction %v, goodput %v req/s; want 0.5 and 0.5", m.GoodFraction, m.GoodputRPS)
	}
	if m.TTFT.N != 3 || m.TTFT.Max != 3 || m.ITL.N != 2 || m.TPOT.N != 3 {
		t.Errorf("TTFT %+v, ITL %+v, TPOT %+v", m.TTFT, m.ITL, m.TPOT)
	}
	if m.SendLag.N != 4 || math.Abs(m.SendLag.Max-0.003) > 1e-12 {
		t.Errorf("send lag %+v, want 4 values up to 3 ms", m.SendLag)
	}
	if m.PromptTokens != 400 || m.CachedTokens != 200 || m.HitRate != 0.5 {
		t.Errorf("prompt %d cached %d hit %v; want 400, 200, 0.5", m.PromptTokens, m.CachedTokens, m.HitRate)
	}
	if diff := cmp.Diff(map[string]int{"a": 2, "b": 1}, m.Replicas); diff != "" || math.Abs(m.BusiestShare-2.0/3) > 1e-12 {
		t.Errorf("replicas %v busiest %v (diff %s)", m.Replicas, m.BusiestShare, diff)
	}
	wantPred := &Prediction{Requests: 3, Exact: 1.0 / 3, Over: 1.0 / 3, Under: 1.0 / 3, MeanError: (0 + 16 - 6) / 3.0,
		MeanAbsError: (0 + 16 + 6) / 3.0, PromptExact: 1, HitRate: (50 + 16 + 144) / 400.0}
	if diff := cmp.Diff(wantPred, m.Prediction); diff != "" {
		t.Errorf("prediction (-want +got):\n%s", diff)
	}
	if len(m.Kinds) != 2 || m.Kinds["w6"].Succeeded != 1 || m.Kinds["w1"].Measured != 3 {
		t.Errorf("kinds %+v", m.Kinds)
	}
	m.Engine = &EngineHits{Queries: 400, Hits: 100, HitRate: 0.25}
	m.setOracle(0.8)
	if *m.HitRateOfOracle != 0.625 || *m.EngineHitRateOfOracle != 0.3125 {
		t.Errorf("of oracle: usage %v engine %v; want 0.625, 0.3125", *m.HitRateOfOracle, *m.EngineHitRateOfOracle)
	}
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestMeasureArms: the requests of a split run are broken down by the
// policy that routed them; a run of one policy has no arms.
func TestMeasureArms(t *testing.T) {
	ms := time.Millisecond
	out := func(i int, policy string, ttft time.Duration, prompt, cached int) Outcome {
		return Outcome{Index: i, Sched: time.Duration(i) * 100 * ms, TTFT: ttft, E2E: ttft + 100*ms, PromptTokens: prompt,
			CachedTokens: cached, CompletionTokens: 2, HasUsage: true, Policy: policy}
	}
	outs := []Outcome{out(0, "cost_model", 100*ms, 100, 50), out(1, "kv_aware", 300*ms, 100, 0), out(2, "cost_model", 200*ms, 100, 100),
		{Index: 3, Sched: 300 * ms, E2E: ms, Status: 503, ErrKind: "status_503", Policy: "kv_aware"}}
	m := measureOutcomes(outs, 0, DefaultSLO())
	cm, kv := m.Arms["cost_model"], m.Arms["kv_aware"]
	if len(m.Arms) != 2 || cm.Measured != 2 || cm.Succeeded != 2 || kv.Measured != 2 || kv.Succeeded != 1 {
		t.Fatalf("arms %+v", m.Arms)
	}
	if cm.HitRate != 0.75 || kv.HitRate != 0 || cm.TTFT.Max != 0.2 || kv.TTFT.Max != 0.3 {
		t.Errorf("cost_model hit %v TTFT max %v, kv_aware hit %v TTFT max %v", cm.HitRate, cm.TTFT.Max, kv.HitRate, kv.TTFT.Max)
	}
	if one := measureOutcomes(outs[:1], 0, DefaultSLO()); one.Arms != nil {
		t.Errorf("a run of one policy has arms %v", one.Arms)
	}
	report := RenderRunReport([]*RunResult{{Spec: RunSpec{Policy: "split:cost_model=50,kv_aware=50", Workload: workload.Spec{Workload: "w1", Rate: 2}}, Measurements: m}})
	if !strings.Contains(report, "## Split arms") || !strings.Contains(report, "| kv_aware | 2 | 1 |") {
		t.Errorf("the report does not split the run by arm:\n%s", report)
	}
}

// TestTurnsOf: follow-up turns count against the conversation's previous
// successful turn, warmup turns only as history, failures and unnamed
// replicas not at all.
func TestTurnsOf(t *testing.T) {
	ok := func(session, replica string) Outcome { return Outcome{Session: session, Replica: replica} }
	failed := Outcome{Session: "a", Replica: "r3", ErrKind: "status"}
	cases := []struct {
		name string
		outs []Outcome
		warm int
		want *Turns
	}{
		{"no sessions", []Outcome{ok("", "r1"), ok("", "r1")}, 0, nil},
		{"first turns only", []Outcome{ok("a", "r1"), ok("b", "r2")}, 0, nil},
		{"kept and moved", []Outcome{ok("a", "r1"), ok("b", "r2"), ok("a", "r1"), ok("b", "r1"), ok("b", "r1")}, 0,
			&Turns{FollowUps: 3, Kept: 2, KeptShare: 2.0 / 3}},
		{"warmup is history", []Outcome{ok("a", "r1"), ok("a", "r2"), ok("a", "r2")}, 2,
			&Turns{FollowUps: 1, Kept: 1, KeptShare: 1}},
		{"a failure is no turn", []Outcome{ok("a", "r1"), failed, ok("a", "r1")}, 0,
			&Turns{FollowUps: 1, Kept: 1, KeptShare: 1}},
		{"no replica names", []Outcome{ok("a", ""), ok("a", "")}, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := turnsOf(c.outs, c.warm); !reflect.DeepEqual(got, c.want) {
				t.Errorf("turnsOf = %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestP99CountsFailures: the p99 reports rank by (runP99) is the
// nearest-rank p99 of every measured request with each failed one slower
// than any success (naiveQuantile over the successes' TTFTs and a time
// past them all for each failure), +Inf where that is a failure; a run
// without failures keeps its successes' p99 and writes no new field.
func TestP99CountsFailures(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ttfts := rapid.SliceOfN(rapid.Int64Range(1, int64(time.Minute)), 1, 300).Draw(t, "ttfts")
		failed := rapid.IntRange(0, 10).Draw(t, "failed")
		var outs []Outcome
		all := make([]time.Duration, 0, len(ttfts)+failed)
		for _, v := range ttfts {
			d := time.Duration(v)
			outs = append(outs, Outcome{TTFT: d, E2E: d, CompletionTokens: 1, HasUsage: true})
			all = append(all, d)
		}
		never := time.Hour // slower than any success
		for range failed {
			outs = append(outs, Outcome{ErrKind: "status_503", Status: 503})
			all = append(all, never)
		}
		m := measureOutcomes(outs, 0, DefaultSLO())
		want := naiveQuantile(all, 0.99).Seconds()
		if want == never.Seconds() {
			want = math.Inf(1)
		}
		if got := runP99(&m); got != want {
			t.Fatalf("%d successes, %d failed: p99 %v, naive %v", len(ttfts), failed, got, want)
		}
		if failed == 0 && (m.TTFTP99WithFailures != nil || runP99(&m) != m.TTFT.P99) {
			t.Fatalf("no failures: %v, with failures %v; want the successes' p99 %v alone", runP99(&m), m.TTFTP99WithFailures, m.TTFT.P99)
		}
		// A result file written before the field has only the counts:
		// more than 1% failed is unreachable still.
		m.TTFTP99WithFailures = nil
		if got := runP99(&m); math.IsInf(want, 1) != math.IsInf(got, 1) {
			t.Fatalf("without the field: %v, want unreachable %v", got, math.IsInf(want, 1))
		}
	})
}
