package stress

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/procs/procstest"
	"github.com/inferrail/inferrail/internal/sim"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestMain lets the test binary act as the simulator and gateway children
// the scenarios start.
func TestMain(m *testing.M) { procstest.Main(m) }

func TestSimEndToEnd(t *testing.T) {
	out := t.TempDir()
	c := DefaultSimConfig()
	c.SimBinary, c.SimEnv = os.Args[0], procstest.SimEnv()
	c.OutDir = out
	c.Command = "go run ./cmd/inferrail-bench stress --streams 40"
	c.Streams = StreamsLoad{Streams: 40, MaxTokens: 16, Timeout: 30 * time.Second}
	c.Soak = SoakLoad{Requests: 300, Concurrency: 16, Warmup: 100, SampleEvery: 100, IdleWindow: 100 * time.Millisecond, Timeout: 30 * time.Second, Seed: 1}
	c.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := Sim(t.Context(), c); err != nil {
		t.Fatal(err)
	}

	streams := readResult(t, filepath.Join(out, ScenarioStreams+".json"))
	if len(streams.Runs) != 2 {
		t.Fatalf("sim-streams has %d runs, want 2 (default and zero latency)", len(streams.Runs))
	}
	for _, run := range streams.Runs {
		f := run.Streams
		switch {
		case f == nil:
			t.Fatalf("%s: no figures", run.Variant)
		case f.Completed != 40 || f.Errors != 0:
			t.Errorf("%s: completed %d, errors %d (%v), want 40 and 0", run.Variant, f.Completed, f.Errors, f.ErrorSamples)
		case f.WallSeconds <= 0 || f.Stream.P50 <= 0 || f.Stream.P99 < f.Stream.P50 || f.TTFT.P50 <= 0:
			t.Errorf("%s: timings not filled: %+v", run.Variant, f)
		case run.SimStopError != "":
			t.Errorf("%s: %s", run.Variant, run.SimStopError)
		}
	}
	if streams.Environment.NumCPU <= 0 || streams.Environment.GoVersion == "" || streams.Environment.Date == "" {
		t.Errorf("environment not filled: %+v", streams.Environment)
	}

	soak := readResult(t, filepath.Join(out, ScenarioSoak+".json"))
	if len(soak.Runs) != 1 || soak.Runs[0].Soak == nil {
		t.Fatalf("sim-soak runs: %+v", soak.Runs)
	}
	f := soak.Runs[0].Soak
	if f.Errors != 0 {
		t.Errorf("soak errors %d: %v", f.Errors, f.ErrorSamples)
	}
	if f.Completed+f.Cancelled != 300 || f.Cancelled < f.Mix["left_mid_stream"] {
		t.Errorf("soak completed %d + cancelled %d, want 300 with at least %d left mid-stream", f.Completed, f.Cancelled, f.Mix["left_mid_stream"])
	}
	if m := f.Memory; m == nil || m.WarmupRSSBytes <= 0 || m.EndRSSBytes <= 0 || m.PeakRSSBytes <= 0 || len(m.Samples) < 3 {
		t.Errorf("memory not followed: %+v", m)
	}
	if g := f.Sim; g == nil || g.Running != 0 || g.Waiting != 0 || g.RequestSuccess["length"] == 0 {
		t.Errorf("simulator gauges after the soak: %+v", g)
	}

	readme, err := os.ReadFile(filepath.Join(out, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## sim-streams", "## sim-soak", "nproc", c.Command} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("README.md lacks %q", want)
		}
	}
}

func readResult(t *testing.T, path string) Result {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return r
}

// deadURL is a loopback URL where nothing listens.
func deadURL(t *testing.T) string {
	t.Helper()
	port, err := procs.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "http://127.0.0.1:" + strconv.Itoa(port)
}

func TestRunStreamsCountsErrors(t *testing.T) {
	f, err := RunStreams(t.Context(), deadURL(t), StreamsLoad{Streams: 20, MaxTokens: 16, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if f.Errors != 20 || f.Completed != 0 || f.ErrorKinds[measure.KindTransport] != 20 || f.WallSeconds != 0 {
		t.Errorf("RunStreams(nothing listening) = %+v, want 20 transport errors", f)
	}
}

func TestRunSoakCountsErrors(t *testing.T) {
	l := SoakLoad{Requests: 30, Concurrency: 4, Warmup: 10, Timeout: 5 * time.Second}
	f, err := RunSoak(t.Context(), deadURL(t), l, 0)
	if err != nil {
		t.Fatal(err)
	}
	if f.Errors != 30 || f.Completed != 0 || f.Cancelled != 0 || f.Memory != nil || f.Sim != nil {
		t.Errorf("RunSoak(nothing listening) = %+v, want 30 errors and no memory or gauges", f)
	}
}

func TestRunStreamsInProcess(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.ZeroLatency = true
	srv, err := sim.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	engineDone := make(chan error, 1)
	go func() { engineDone <- srv.Run(ctx) }()
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		cancel()
		<-engineDone
	})
	f, err := RunStreams(t.Context(), ts.URL, StreamsLoad{Streams: 50, MaxTokens: 7})
	if err != nil {
		t.Fatal(err)
	}
	if f.Completed != 50 || f.Errors != 0 {
		t.Errorf("completed %d, errors %d (%v), want 50 and 0", f.Completed, f.Errors, f.ErrorSamples)
	}
}

func TestReadStream(t *testing.T) {
	const (
		role   = `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n"
		hello  = `data: {"choices":[{"index":0,"delta":{"content":"hello "},"finish_reason":null}]}` + "\n\n"
		last   = `data: {"choices":[{"index":0,"delta":{"content":"world "},"finish_reason":"length"}]}` + "\n\n"
		usage2 = `data: {"choices":[],"usage":{"prompt_tokens":5,"total_tokens":7,"completion_tokens":2}}` + "\n\n"
		usage3 = `data: {"choices":[],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3}}` + "\n\n"
		done   = "data: [DONE]\n\n"
	)
	tests := []struct {
		name   string
		stream string
		check  streamCheck
		want   string // error kind, "" for none
	}{
		{"good", role + hello + last + usage2 + done, streamCheck{maxTokens: 2, exact: true, wantUsage: true}, ""},
		{"good_without_usage", role + hello + last + done, streamCheck{maxTokens: 2}, ""},
		{"no_done", role + hello + last + usage2, streamCheck{maxTokens: 2, wantUsage: true}, measure.KindNoDone},
		{"cut_mid_event", role + hello + `data: {"cho`, streamCheck{maxTokens: 2}, measure.KindSSE},
		{"after_done", role + hello + last + done + hello, streamCheck{maxTokens: 2}, measure.KindAfterDone},
		{"no_finish", role + hello + usage2 + done, streamCheck{maxTokens: 2, wantUsage: true}, measure.KindFinish},
		{"two_finishes", role + last + last + done, streamCheck{maxTokens: 2}, measure.KindFinish},
		{"missing_usage", role + hello + last + done, streamCheck{maxTokens: 2, wantUsage: true}, measure.KindUsage},
		{"unasked_usage", role + hello + last + usage2 + done, streamCheck{maxTokens: 2}, measure.KindUsage},
		{"usage_over_max", role + hello + last + usage3 + done, streamCheck{maxTokens: 2, wantUsage: true}, measure.KindUsage},
		{"usage_not_exact", role + hello + last + usage2 + done, streamCheck{maxTokens: 3, exact: true, wantUsage: true}, measure.KindUsage},
		{"bad_json", "data: {nope\n\n" + done, streamCheck{maxTokens: 2}, measure.KindJSON},
		{"error_event", `data: {"error": {"message": "boom", "code": 500}}` + "\n\n" + done, streamCheck{maxTokens: 2}, measure.KindErrorEvent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := readStream(strings.NewReader(tt.stream), tt.check)
			got := ""
			if err != nil {
				var le *measure.RequestError
				if !errors.As(err, &le) {
					t.Fatalf("readStream = %v, not a measure.RequestError", err)
				}
				got = le.Kind
			}
			if got != tt.want {
				t.Errorf("readStream error kind = %q (%v), want %q", got, err, tt.want)
			}
		})
	}
	t.Run("leave", func(t *testing.T) {
		n := 0
		err := readStream(strings.NewReader(role+hello+last+done), streamCheck{maxTokens: 2, onContent: func() bool { n++; return false }})
		if !errors.Is(err, errLeft) || n != 1 {
			t.Errorf("readStream = %v after %d content chunks, want errLeft after 1", err, n)
		}
	})
}

func TestParseGauges(t *testing.T) {
	page := `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 10.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 1.0
vllm:request_success_created{engine="0",finished_reason="stop",model_name="m"} 1.7e+09
`
	got, err := parseGauges(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	want := &SimGauges{Running: 3, Waiting: 1, KVUsage: 0.25, Preemptions: 2, RequestSuccess: map[string]float64{"stop": 10, "abort": 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseGauges = %+v, want %+v", got, want)
	}
}

func TestSimConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*SimConfig)
		want []string // substrings of the error; nil for valid
	}{
		{"default", func(*SimConfig) {}, nil},
		{"no_binary", func(c *SimConfig) { c.SimBinary = "" }, []string{"sim_binary: required"}},
		{"unknown_scenario", func(c *SimConfig) { c.Scenarios = []string{"sim-soak", "nope"} }, []string{`scenarios[1]: unknown scenario "nope"`}},
		{"all_at_once", func(c *SimConfig) {
			c.Streams.Streams = 0
			c.Soak.Warmup = c.Soak.Requests
			c.Soak.Concurrency = -1
		}, []string{"streams.streams: must be positive", "soak.concurrency: must be positive", "soak.warmup: must be within 0..34999"}},
		{"unrun_scenario_unchecked", func(c *SimConfig) {
			c.Scenarios = []string{ScenarioSoak}
			c.Streams.Streams = 0
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultSimConfig()
			tt.edit(&c)
			checkValidate(t, c.Validate(), tt.want)
		})
	}
}

func TestRenderReportGolden(t *testing.T) {
	env := measure.Environment{GitCommit: "0123456789abcdef0123456789abcdef01234567", GitDirty: true, Date: "2026-11-29T12:00:00Z",
		GoVersion: "go1.27.3", GOOS: "linux", GOARCH: "amd64", NumCPU: 2, CPUModel: "AMD EPYC", Note: measure.MachineNote}
	cmd := "go run ./cmd/inferrail-bench stress --sim-binary bin/inferrail-sim --out bench/results/sim"
	results := []Result{
		{
			Scenario: ScenarioSoak, Description: "A soak.", Command: cmd, Environment: env,
			Runs: []Run{{Variant: "zero-latency", SimArgs: []string{"--max-num-seqs", "256", "--zero-latency"}, Soak: &SoakFigures{
				Requests: 35000, Completed: 33000, Cancelled: 1990, Errors: 10,
				ErrorKinds: map[string]int{"status": 6, "timeout": 4}, ErrorSamples: []string{"status: status 500: `boom`"},
				Mix:         map[string]int{"chat": 9000, "chat_stream": 8000, "completion": 9000, "completion_stream": 9000, "left_mid_stream": 1400},
				LoadSeconds: 120.5, RequestsPerSecond: 290.456, Latency: Latency{P50: 0.0123, P99: 0.25, Max: 1.5},
				Memory: &SoakMemory{Pid: 42, WarmupRSSBytes: 20 << 20, EndRSSBytes: 23 << 20, GrowthBytes: 3 << 20, GrowthMiB: 3, PeakRSSBytes: 30 << 20,
					WarmupFDs: 70, EndFDs: 71, Samples: []MemorySample{
						{Requests: 2000, Seconds: 5.5, RSSBytes: 20 << 20, FDs: 70, Idle: true},
						{Requests: 7000, Seconds: 20, RSSBytes: 30 << 20, FDs: 75},
						{Requests: 35000, Seconds: 123, RSSBytes: 23 << 20, FDs: 71, Idle: true},
					}},
				Sim: &SimGauges{Preemptions: 12, RequestSuccess: map[string]float64{"abort": 3, "length": 30000, "stop": 3000}},
			}}},
		},
		{
			Scenario: ScenarioStreams, Description: "Many streams.", Command: cmd, Environment: env,
			Runs: []Run{
				{Variant: "default-latency", SimArgs: []string{"--max-num-seqs", "256"}, Streams: &StreamsFigures{
					Streams: 2000, Completed: 2000, WallSeconds: 7.25, Stream: Latency{P50: 3.5, P99: 7.1}, TTFT: Latency{P50: 2.9, P99: 6.5}}},
				{Variant: "zero-latency", SimArgs: []string{"--max-num-seqs", "256", "--zero-latency"}, Streams: &StreamsFigures{
					Streams: 2000, Completed: 1999, Errors: 1, ErrorKinds: map[string]int{"no_done": 1}, ErrorSamples: []string{"no_done: stream ended"},
					WallSeconds: 0.8, Stream: Latency{P50: 0.4, P99: 0.79}, TTFT: Latency{P50: 0.0004, P99: 0.7}}},
			},
		},
	}
	benchText := `goos: linux
BenchmarkEngineStep256-2     	  100000	     29052 ns/op	     34421 steps/s	    8836 B/op	      17 allocs/op
BenchmarkEngineStepMixed-2   	   50000	     62514 ns/op	     30329 requests/s	     15996 steps/s	   22526 B/op	      77 allocs/op
PASS
`
	got := RenderReport(results, benchText)
	path := filepath.Join("testdata", "report.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("RenderReport differs from %s at %s (run with -update to accept)", path, firstDiff(string(want), string(got)))
	}
}

// firstDiff describes the first line where got departs from want.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\nwant %q\ngot  %q", i+1, wl, gl)
		}
	}
	return "no line"
}

// checkValidate checks a Validate result: nil when want is nil, else an
// error naming every problem in want.
func checkValidate(t *testing.T, err error, want []string) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Errorf("Validate() = %v, want nil", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("Validate() = nil, want %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Validate() = %q, want it to contain %q", err, w)
		}
	}
}
