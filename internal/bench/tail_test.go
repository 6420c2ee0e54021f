package bench

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/decisionlog"
	"github.com/inferrail/inferrail/internal/measure"
	"pgregory.net/rapid"
)

// tailOutcomes are a run's outcomes as WriteOutcomes writes them: a
// warmup request, a failed one and four measured, two of them misses.
func tailOutcomes(t *testing.T) []byte {
	t.Helper()
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	outs := []Outcome{
		{Index: 0, Sched: 0, Sent: ms(1), RequestID: "r0", Replica: "a", Status: 200, TTFT: ms(900), E2E: ms(950), PromptTokens: 4000},
		{Index: 1, Sched: ms(500), Sent: ms(501), RequestID: "r1", Replica: "a", Status: 200, TTFT: ms(120), E2E: ms(400),
			PromptTokens: 4100, CachedTokens: 4000, Predicted: true, PredCachedToks: 4000, Estimated: ms(110)},
		{Index: 2, Sched: ms(700), Sent: ms(702), RequestID: "r2", Replica: "b", Status: 200, TTFT: ms(640), E2E: ms(900),
			PromptTokens: 4200, CachedTokens: 0, Predicted: true, PredCachedToks: 0, Estimated: ms(600)},
		{Index: 3, Sched: ms(710), RequestID: "r3", Status: 503, ErrKind: "status_503", Err: "status 503"},
		{Index: 4, Sched: ms(720), Sent: ms(722), RequestID: "r4", Replica: "a", Status: 200, TTFT: ms(700), E2E: ms(990),
			PromptTokens: 3000, CachedTokens: 1000, Predicted: true, PredCachedToks: 2900, Estimated: ms(90)},
		{Index: 5, Sched: ms(800), Sent: ms(800), Replica: "c", Status: 200, TTFT: ms(80), E2E: ms(300), PromptTokens: 50, CachedTokens: 40},
	}
	path := filepath.Join(t.TempDir(), "o.jsonl")
	if err := WriteOutcomes(path, outs, 1); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// tailDecisions is the decision log of tailOutcomes' run, on a clock two
// times faster, for two of its requests (r4's two attempts, the last
// kept).
func tailDecisions() []byte {
	n := func(v int) *int { return &v }
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	recs := []*decisionlog.Record{
		{RequestID: "r2", Winner: "b", Steered: "copy", Candidates: []decisionlog.Candidate{
			{Replica: "a", State: decisionlog.StateOffered, InFlight: 9, QueuedPrefillSecs: 0.01, CachedTokens: n(4000), EstimatedTTFTSecs: f(0.03)},
			{Replica: "b", State: decisionlog.StateOffered, InFlight: 3, CachedTokens: n(0), EstimatedTTFTSecs: f(0.3)},
			{Replica: "c", State: "unhealthy"},
		}},
		{RequestID: "r4", Winner: "b", DecidedBy: "prefill"},
		{RequestID: "r4", Attempt: 2, Winner: "a", DecidedBy: "queue", Candidates: []decisionlog.Candidate{
			{Replica: "a", State: decisionlog.StateOffered, InFlight: 4, Running: i(2), KVUsage: f(0.98), Waiting: f(2),
				CachedTokens: n(2900), EstimatedTTFTSecs: f(0.045)},
			{Replica: "b", State: decisionlog.StateTried, InFlight: 7},
			{Replica: "c", State: decisionlog.StateOffered, SetAside: "kv_pressure", InFlight: 1, Running: i(1), KVUsage: f(0.5), // a log from before waiting was recorded
				QueuedPrefillSecs: 0.25, CachedTokens: n(0), EstimatedTTFTSecs: f(0.4)},
		}},
	}
	var buf bytes.Buffer
	w := decisionlog.Open(decisionlog.Options{Sink: &buf})
	for _, r := range recs {
		w.Log(r)
	}
	_ = w.Close()
	return buf.Bytes()
}

// TestWriteTailGolden pins what tail says about a small run, with and
// without its decision log.
func TestWriteTailGolden(t *testing.T) {
	outs, err := ReadOutcomes(bytes.NewReader(tailOutcomes(t)))
	if err != nil {
		t.Fatal(err)
	}
	decs, err := ReadDecisions(bytes.NewReader(tailDecisions()))
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 6 || len(decs) != 2 || decs["r4"].Attempt != 2 {
		t.Fatalf("read %d outcomes and %d decisions (r4's attempt %d)", len(outs), len(decs), decs["r4"].Attempt)
	}
	var got bytes.Buffer
	WriteTail(&got, outs, decs, TailOptions{Top: 3, Speedup: 2})
	got.WriteString("--- without decisions, the default top\n")
	WriteTail(&got, outs, nil, TailOptions{})
	got.WriteString("--- nothing measured\n")
	WriteTail(&got, outs[:1], nil, TailOptions{})
	path := filepath.Join("testdata", "tail.golden")
	if *update {
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		t.Errorf("tail:\n%s\nwant (%s; -update rewrites it):\n%s", got.String(), path, want)
	}
}

// TestOutcomesRoundTrip: what WriteOutcomes writes, ReadOutcomes reads
// back field for field.
func TestOutcomesRoundTrip(t *testing.T) {
	outs, err := ReadOutcomes(bytes.NewReader(tailOutcomes(t)))
	if err != nil {
		t.Fatal(err)
	}
	want := OutcomeLine{Index: 4, SchedMS: 720, RequestID: "r4", Replica: "a", Status: 200, TTFTMS: 700, E2EMS: 990,
		EstimatedMS: 90, SendLagMS: 2, PromptTokens: 3000, CachedTokens: 1000, PredictedCached: 2900}
	if !reflect.DeepEqual(outs[4], want) {
		t.Errorf("read back %+v\nwant %+v", outs[4], want)
	}
	if !outs[0].Warmup || outs[1].Warmup || outs[3].ErrKind != "status_503" || outs[3].SendLagMS != 0 || outs[5].PredictedCached != -1 {
		t.Errorf("warmup %v %v, error %q, unsent lag %v, no prediction %d", outs[0].Warmup, outs[1].Warmup, outs[3].ErrKind, outs[3].SendLagMS, outs[5].PredictedCached)
	}
}

// TestReadTailErrors: a line that is not JSON is named by its number;
// blank lines are skipped; a line past maxLine is refused.
func TestReadTailErrors(t *testing.T) {
	if outs, err := ReadOutcomes(strings.NewReader("\n{\"index\":3}\n  \n")); err != nil || len(outs) != 1 || outs[0].Index != 3 {
		t.Errorf("blank lines: %v, %v", outs, err)
	}
	if _, err := ReadOutcomes(strings.NewReader("{\"index\":1}\n{\"index\":\n")); err == nil || !strings.Contains(err.Error(), "outcomes line 2") {
		t.Errorf("bad line: %v", err)
	}
	if _, err := ReadDecisions(strings.NewReader("[]\n")); err == nil || !strings.Contains(err.Error(), "decision log line 1") {
		t.Errorf("bad decision: %v", err)
	}
	long := `{"request_id":"` + strings.Repeat("x", maxLine) + `"}`
	if _, err := ReadDecisions(strings.NewReader(long)); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("long line: %v", err)
	}
}

// FuzzTail: whatever the files hold, what reads is within bounds, and
// the description counts the requests as a naive pass does and lists the
// slowest measured ones, slowest first, as many as asked.
func FuzzTail(f *testing.F) {
	f.Add([]byte(`{"index":1,"status":200,"ttft_ms":5,"prompt_tokens":10,"request_id":"a"}`), []byte(`{"request_id":"a","candidates":[{"replica":"x","cached_tokens":null}]}`))
	f.Add([]byte(`{"index":-1,"warmup":true}`), []byte(`{"request_id":"","candidates":null}`))
	f.Add([]byte("{\"index\":1,\"status\":200,\"ttft_ms\":5}\n{\"index\":2,\"status\":201,\"ttft_ms\":7.5}\n{\"index\":3,\"status\":500}\n{\"index\":4,\"status\":200,\"error\":\"cut\",\"ttft_ms\":9}"), []byte(nil))
	f.Fuzz(func(t *testing.T, outcomes, decisions []byte) {
		outs, err := ReadOutcomes(bytes.NewReader(outcomes))
		if err != nil {
			return
		}
		var ttfts []float64 // the measured requests', a naive count
		warm := 0
		for _, o := range outs {
			for _, ms := range []float64{o.SchedMS, o.TTFTMS, o.E2EMS, o.EstimatedMS} {
				if !(ms >= 0 && ms <= maxOutcomeMS) {
					t.Fatalf("read a time of %g ms", ms)
				}
			}
			switch {
			case o.Warmup:
				warm++
			case o.ErrKind == "" && o.Status >= 200 && o.Status < 300:
				ttfts = append(ttfts, o.TTFTMS)
			}
		}
		slices.Sort(ttfts)
		slices.Reverse(ttfts)
		decs, _ := ReadDecisions(bytes.NewReader(decisions))
		for _, top := range []int{2, 0} {
			var b strings.Builder
			WriteTail(&b, outs, decs, TailOptions{Top: top, Speedup: 3})
			lines := strings.Split(b.String(), "\n")
			head := fmt.Sprintf("%d requests succeeded after the warmup (%d in the warmup, %d failed)", len(ttfts), warm, len(outs)-warm-len(ttfts))
			if lines[0] != head {
				t.Fatalf("first line %q, want %q", lines[0], head)
			}
			want := min(top, len(ttfts))
			if top == 0 && len(ttfts) > 0 {
				want = len(ttfts) - measure.Rank(len(ttfts), 0.99)
			}
			var listed []string
			for _, l := range lines {
				if strings.HasPrefix(l, "  #") {
					listed = append(listed, l)
				}
			}
			if len(listed) != want {
				t.Fatalf("top %d of %d measured: listed %d\n%s", top, len(ttfts), len(listed), b.String())
			}
			for i, l := range listed {
				_, after, _ := strings.Cut(l, "TTFT ")
				if ms := fmt.Sprintf("%.0f ms", ttfts[i]); !strings.HasPrefix(after, ms) {
					t.Fatalf("listed %d: %q, want TTFT %s\n%s", i, l, ms, b.String())
				}
			}
		}
	})
}

// TestTailRefusesAndWarns: times that are negative or past a
// time.Duration are refused; lines that are not outcomes, and a decision
// log that matches no request, are warned of.
func TestTailRefusesAndWarns(t *testing.T) {
	for _, tt := range []struct{ line, want string }{
		{`{"index":1,"status":200,"ttft_ms":-5}`, "outcomes line 1: ttft_ms: must be in [0, 1e+09], not -5"},
		{`{"index":1,"status":200,"ttft_ms":1e300}`, "outcomes line 1: ttft_ms: must be in [0, 1e+09], not 1e+300"},
		{`{"index":1,"status":200,"e2e_ms":9.3e15}`, "outcomes line 1: e2e_ms: must be in [0, 1e+09]"},
		{`{"index":1,"status":200,"sched_ms":-1}`, "outcomes line 1: sched_ms: must be in [0, 1e+09]"},
	} {
		if _, err := ReadOutcomes(strings.NewReader(tt.line)); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.line, err, tt.want)
		}
	}
	trace := `{"timestamp":0,"input_length":700,"output_length":8,"hash_ids":[0,1]}`
	outs, err := ReadOutcomes(strings.NewReader(trace + "\n" + `{"index":1,"status":200,"request_id":"a"}`))
	if err != nil {
		t.Fatal(err)
	}
	other := map[string]*decisionlog.Record{"zzz": {RequestID: "zzz"}}
	warns := TailWarnings(outs, other)
	if len(warns) != 2 || !strings.HasPrefix(warns[0], "1 of the 2 outcome lines have neither a status nor an error") ||
		!strings.HasPrefix(warns[1], "the decision log matches none of the 2 requests") {
		t.Errorf("warnings %q", warns)
	}
	if warns := TailWarnings(outs[1:], map[string]*decisionlog.Record{"a": {RequestID: "a"}}); len(warns) != 0 {
		t.Errorf("outcomes and their decisions: warnings %q", warns)
	}
	if warns := TailWarnings(outs[1:], nil); len(warns) != 0 {
		t.Errorf("no decision log: warnings %q", warns)
	}
}

// TestTailListsThePercentile: by default tail lists exactly the requests
// at or above the nearest-rank p99, the one that is the p99 included,
// against a naive reference (naiveQuantile) over distinct TTFTs.
func TestTailListsThePercentile(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 400).Draw(t, "n")
		order := rapid.Permutation(seq(n)).Draw(t, "order")
		outs := make([]OutcomeLine, n)
		ds := make([]time.Duration, n)
		for i, v := range order {
			outs[i] = OutcomeLine{Index: i, Status: 200, TTFTMS: float64(v + 1), PromptTokens: 10, CachedTokens: 10}
			ds[i] = time.Duration(v+1) * time.Millisecond
		}
		p99 := naiveQuantile(ds, 0.99)
		var want []int // indices at or above the p99, slowest first
		for i, d := range ds {
			if d >= p99 {
				want = append(want, i)
			}
		}
		slices.SortFunc(want, func(a, b int) int { return cmp.Compare(ds[b], ds[a]) })
		var b strings.Builder
		WriteTail(&b, outs, nil, TailOptions{})
		var got []int
		for _, line := range strings.Split(b.String(), "\n") {
			var i int
			if _, err := fmt.Sscanf(line, "  #%d at", &i); err == nil {
				got = append(got, i)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("n %d, p99 %v: listed %v, want %v\n%s", n, p99, got, want, b.String())
		}
		if !strings.Contains(b.String(), fmt.Sprintf("among the slowest %d\n", len(want))) {
			t.Fatalf("n %d: the count is not %d:\n%s", n, len(want), b.String())
		}
	})
}

// seq is 0, 1, …, n−1.
func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}
