package engine

import (
	"encoding/json"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/stress"
	"github.com/inferrail/inferrail/internal/stress/stresstest"

	"github.com/inferrail/inferrail/internal/index"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/procs/procstest"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestMain lets the test binary act as the simulator children
// the scenarios start.
func TestMain(m *testing.M) { procstest.Main(m) }

func TestSimEndToEnd(t *testing.T) {
	out := t.TempDir()
	c := DefaultConfig()
	c.SimBinary, c.SimEnv = os.Args[0], procstest.SimEnv()
	c.OutDir = out
	c.Scenarios = []string{ScenarioStreams, ScenarioSoak} // TestKVMirror runs kv-mirror
	c.Command = "go run ./cmd/inferrail-bench stress --streams 40"
	c.Streams = stress.StreamsLoad{Streams: 40, MaxTokens: 16, Timeout: 30 * time.Second}
	c.Soak = stress.SoakLoad{Requests: 300, Concurrency: 16, Warmup: 100, SampleEvery: 100, IdleWindow: 100 * time.Millisecond, Timeout: 30 * time.Second, Seed: 1}
	c.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := Run(t.Context(), c); err != nil {
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

func TestSimConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want []string // substrings of the error; nil for valid
	}{
		{"default", func(*Config) {}, nil},
		{"no_binary", func(c *Config) { c.SimBinary = "" }, []string{"sim_binary: required"}},
		{"unknown_scenario", func(c *Config) { c.Scenarios = []string{"sim-soak", "nope"} }, []string{`scenarios[1]: unknown scenario "nope"`}},
		{"all_at_once", func(c *Config) {
			c.Streams.Streams = 0
			c.Soak.Warmup = c.Soak.Requests
			c.Soak.Concurrency = -1
		}, []string{"streams.streams: must be positive", "soak.concurrency: must be positive", "soak.warmup: must be within 0..34999"}},
		{"kv_mirror", func(c *Config) {
			c.KVMirror.ReplayCheck = c.KVMirror.BufferSteps + 1
			c.KVMirror.MaxTokens = 8
			c.KVMirror.Rate = 0
		}, []string{"kv_mirror.rate: must be positive", "kv_mirror.replay_check: must not exceed buffer_steps (10000), got 10001",
			"kv_mirror.max_tokens: must be at least 16 (one block), got 8"}},
		{"unrun_scenario_unchecked", func(c *Config) {
			c.Scenarios = []string{ScenarioSoak}
			c.Streams.Streams = 0
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			stresstest.CheckValidate(t, c.Validate(), tt.want)
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
			Runs: []SimRun{{Variant: "zero-latency", SimArgs: []string{"--max-num-seqs", "256", "--zero-latency"}, Soak: &stress.SoakFigures{
				Requests: 35000, Completed: 33000, Cancelled: 1990, Errors: 10,
				ErrorKinds: map[string]int{"status": 6, "timeout": 4}, ErrorSamples: []string{"status: status 500: `boom`"},
				Mix:         map[string]int{"chat": 9000, "chat_stream": 8000, "completion": 9000, "completion_stream": 9000, "left_mid_stream": 1400},
				LoadSeconds: 120.5, RequestsPerSecond: 290.456, Latency: stress.Latency{P50: 0.0123, P99: 0.25, Max: 1.5},
				Memory: &stress.SoakMemory{Pid: 42, WarmupRSSBytes: 20 << 20, EndRSSBytes: 23 << 20, GrowthBytes: 3 << 20, GrowthMiB: 3, PeakRSSBytes: 30 << 20,
					WarmupFDs: 70, EndFDs: 71, Samples: []stress.MemorySample{
						{Requests: 2000, Seconds: 5.5, RSSBytes: 20 << 20, FDs: 70, Idle: true},
						{Requests: 7000, Seconds: 20, RSSBytes: 30 << 20, FDs: 75},
						{Requests: 35000, Seconds: 123, RSSBytes: 23 << 20, FDs: 71, Idle: true},
					}},
				Sim: &stress.SimGauges{Preemptions: 12, RequestSuccess: map[string]float64{"abort": 3, "length": 30000, "stop": 3000}},
			}}},
		},
		{
			Scenario: ScenarioKVMirror, Description: "A mirror.", Command: cmd, Environment: env,
			Runs: []SimRun{
				{Variant: KVSteady, SimArgs: []string{"--zero-latency"}, KVMirror: &KVMirrorFigures{
					Requests: 10000, Completed: 10000, LoadSeconds: 10.01, Feed: FeedCounts{Received: 50000, Applied: 50000, Replays: 1},
					Mirror: index.MirrorStats{Stored: 40000, Removed: 38000}, EngineCopies: 2047, EngineDistinct: 2047, MirrorDistinct: 2047,
					ReplayWindow: 1000, ReplayChecked: 1000, ReplayEqual: 1000}},
				{Variant: KVEngineRestart, SimArgs: []string{"--zero-latency"}, KVMirror: &KVMirrorFigures{
					Requests: 10000, Completed: 9800, Failures: stress.Failures{Errors: 200, ErrorKinds: map[string]int{"transport": 200},
						ErrorSamples: []string{"transport: connection refused"}},
					LoadSeconds: 10.2, Feed: FeedCounts{Received: 45000, Applied: 46000, Replays: 2, Purges: 1, Duplicates: 3},
					Mirror: index.MirrorStats{Stored: 39000, Removed: 30000}, EngineCopies: 2047, EngineDistinct: 2047, MirrorDistinct: 2046,
					KeyMismatches: 1, MissingHashes: 1, ReplayWindow: 1000, ReplayChecked: 990, ReplayEqual: 989, ReplayUnseen: 10, DisruptedAt: 5000,
					Problems: []string{"the mirror differs from the engine"}}},
			},
		},
		{
			Scenario: ScenarioStreams, Description: "Many streams.", Command: cmd, Environment: env,
			Runs: []SimRun{
				{Variant: "default-latency", SimArgs: []string{"--max-num-seqs", "256"}, Streams: &stress.StreamsFigures{
					Streams: 2000, Completed: 2000, WallSeconds: 7.25, Stream: stress.Latency{P50: 3.5, P99: 7.1}, TTFT: stress.Latency{P50: 2.9, P99: 6.5}}},
				{Variant: "zero-latency", SimArgs: []string{"--max-num-seqs", "256", "--zero-latency"}, Streams: &stress.StreamsFigures{
					Streams: 2000, Completed: 1999, Errors: 1, ErrorKinds: map[string]int{"no_done": 1}, ErrorSamples: []string{"no_done: stream ended"},
					WallSeconds: 0.8, Stream: stress.Latency{P50: 0.4, P99: 0.79}, TTFT: stress.Latency{P50: 0.0004, P99: 0.7}}},
			},
		},
	}
	benchText := `goos: linux
BenchmarkEngineStep256-2     	  100000	     29052 ns/op	     34421 steps/s	    8836 B/op	      17 allocs/op
BenchmarkEngineStepMixed-2   	   50000	     62514 ns/op	     30329 requests/s	     15996 steps/s	   22526 B/op	      77 allocs/op
PASS
`
	stresstest.Golden(t, filepath.Join("testdata", "report.golden"), RenderReport(results, benchText), *update)
}

// TestCatalog: every scenario has a description that renders on the
// defaults, and describes no scenario that is gone; the golden holds each
// one with its parameters.
func TestCatalog(t *testing.T) {
	c := DefaultConfig()
	got, err := stress.Catalog(descriptions, scenarios, &c)
	if err != nil {
		t.Fatal(err)
	}
	stresstest.Golden(t, filepath.Join("testdata", "catalog.golden"), got, *update)
}
