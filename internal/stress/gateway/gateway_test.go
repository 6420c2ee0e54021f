package gateway

import (
	"context"
	"encoding/json"
	"flag"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/stress"
	"github.com/inferrail/inferrail/internal/stress/stresstest"

	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/procs/procstest"
	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestMain lets the test binary act as the simulator, gateway and plain
// proxy children the scenarios start.
func TestMain(m *testing.M) { procstest.Main(m) }

// testGatewayConfig is a small run of every scenario against helper
// children (the test binary itself).
func testGatewayConfig(t *testing.T) Config {
	t.Helper()
	c := DefaultConfig()
	c.GatewayBinary, c.GatewayEnv = os.Args[0], procstest.GatewayEnv()
	c.SimBinary, c.SimEnv = os.Args[0], procstest.SimEnv()
	c.BenchBinary, c.BenchEnv = os.Args[0], procstest.BenchEnv()
	c.OutDir = t.TempDir()
	c.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	c.Streams = GWStreamsLoad{StreamsLoad: stress.StreamsLoad{Streams: 50, MaxTokens: 8}, MaxNumSeqs: 256}
	c.Overhead = OverheadLoad{Rates: []int{500}, Requests: 100, Warmup: 20, MaxTokens: 1, Seed: 1}
	c.Observe = ObservabilityLoad{Rates: []int{300}, Requests: 60, Warmup: 10, MaxTokens: 1, Seed: 1}
	c.Floor = FloorLoad{Rate: 300, Requests: 60, Warmup: 10, MaxTokens: 1, Seed: 1, ProjectRates: []int{2000}}
	c.Routing = RoutingLoad{Variants: []RoutingVariant{{SystemWords: 20, Tokenizer: true, Policy: "kv_aware", Replicas: 2, Rates: []int{300}}},
		Requests: 60, Warmup: 10, MaxTokens: 1, SystemPrompts: 4, QuestionWords: 8, Seed: 1}
	// Down gives the admin poller, which a loaded machine slows to a few
	// scrapes a second, time to see the replica out; After leaves time for
	// readmission even when passive ejections, doubling from 1 s, kept it
	// out past its restart.
	c.Kill = KillLoad{Rate: 200, Before: 500 * time.Millisecond, Down: time.Second, After: 3 * time.Second}
	if raceEnabled {
		// 200 req/s into simulators in this race-instrumented process
		// left them, on a machine whose every core was busy, too slow to
		// answer even 800 ms probes: every replica went out of rotation.
		c.Kill.Rate = 50
	}
	// The simulators of the fault scenarios run in this (race-instrumented)
	// process: 80 ms probes of them time out on a loaded machine and take
	// every replica out; passive ejection still takes the killed one out at
	// once.
	c.ProbeInterval = time.Second
	c.Hang = HangLoad{Rate: 200, Before: 300 * time.Millisecond, Hang: 600 * time.Millisecond, After: 300 * time.Millisecond}
	c.Flap = FlapLoad{Rate: 200, Duration: time.Second, Toggle: 100 * time.Millisecond}
	// Streams last 1.2 s, far past the latest leave (0.3 s), so no client
	// leaves a stream its engine has already finished, even on a slow machine.
	c.Disconnects = DisconnectsLoad{Streams: 40, MaxTokens: 60, Percent: 70, MaxDelay: 300 * time.Millisecond, Seed: 1}
	c.Hostile = HostileLoad{Hostile: 100, Valid: 20, Concurrency: 8, HeaderTimeout: 300 * time.Millisecond, RequestTimeout: time.Second, Seed: 1, IdleWindow: 100 * time.Millisecond}
	c.Soak = stress.SoakLoad{Requests: 300, Concurrency: 16, Warmup: 100, SampleEvery: 100, IdleWindow: 100 * time.Millisecond, Seed: 1}
	c.SlowReaders = SlowReadersLoad{Clients: 2, StreamBytes: 4 << 20, Stall: 300 * time.Millisecond, Others: 10}
	c.SlowBody = SlowBodyLoad{BodyBytes: 32 << 10}
	c.Control = ControlLoad{Rate: 300, Requests: 60, Warmup: 10, MaxTokens: 1, PatchEvery: 20 * time.Millisecond, AdminReaders: 1, Seed: 1}
	c.Sizes = SizesLoad{SizeScale: SizeScale{MessageBytes: 64 << 10, Messages: 200, Tools: 20, Depth: 50}, Reps: 2, MaxWait: 2 * time.Second}
	c.TokenFlood = TokenFloodLoad{Prompts: 40, Words: 2000, Workers: 1, Replicas: 2}
	return c
}

// TestGatewayStressControl: gw-control's legs, storm and replay at a small
// size: nothing fails, every patch applies and the log replays to every
// pick.
func TestGatewayStressControl(t *testing.T) {
	c := testGatewayConfig(t)
	c.Scenarios = []string{ScenarioControl}
	if err := Run(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	f := readGWResult(t, c.OutDir, ScenarioControl).Control
	if f == nil {
		t.Fatal("gw-control: no figures")
	}
	if len(f.Legs) != 4 || f.None.Requests != 120 || f.Shadowed.Requests != 120 || f.None.Errors+f.Shadowed.Errors != 0 {
		t.Errorf("gw-control legs: none %d requests %d errors, shadowed %d requests %d errors (%v %v)",
			f.None.Requests, f.None.Errors, f.Shadowed.Requests, f.Shadowed.Errors, f.None.ErrorSamples, f.Shadowed.ErrorSamples)
	}
	if f.Storm.Requests != 60 || f.Storm.Errors != 0 || f.Patches == 0 || f.PatchErrors != 0 || f.ApplyTime.N == 0 || f.AdminErrors != 0 {
		t.Errorf("gw-control storm: %d requests, %d errors (%v), %d patches, %d failed (%v), %d apply times, %d admin errors",
			f.Storm.Requests, f.Storm.Errors, f.Storm.ErrorSamples, f.Patches, f.PatchErrors, f.PatchSamples, f.ApplyTime.N, f.AdminErrors)
	}
	// Every shadowed request of the two shadowed legs (their warmups too)
	// reached the shadows, and the storm's shadowed ones; the replay
	// checks each of them.
	if f.ShadowDecisions < 120 || f.ReplayError != "" || f.Replay.Picks < 120*len(controlShadows) || f.Replay.Generations < 4 {
		t.Errorf("gw-control shadows: %d decisions, %d dropped, replay %+v, error %q", f.ShadowDecisions, f.ShadowDropped, f.Replay, f.ReplayError)
	}
}

// TestGatewayStressSizes: gw-sizes and gw-tokenize-flood at a small size.
// Every size is answered, a chat or an OpenAI 4xx, and tokenized (the wait
// allowed is long) except the arguments the API does not allow as an
// object; every request of the flood is served, and the gateway's
// tokenizer results account for every answer with and without a
// prediction.
func TestGatewayStressSizes(t *testing.T) {
	c := testGatewayConfig(t)
	c.Scenarios = []string{ScenarioSizes, ScenarioTokenFlood}
	if err := Run(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	sizes := readGWResult(t, c.OutDir, ScenarioSizes)
	if len(sizes.Sizes) != 1 || len(sizes.Sizes[0].Bodies) != 5 {
		t.Fatalf("gw-sizes: %+v, want one leg of 5 bodies", sizes.Sizes)
	}
	for _, f := range sizes.Sizes[0].Bodies {
		want := "tokenized"
		if f.Body == "nested-arguments-object" {
			want = "invalid"
		}
		if f.Bad != "" || len(f.Statuses) != 2 || len(f.Outcomes) != 2 || len(f.DirectSeconds) != 2 || f.Outcomes[0] != want || f.Outcomes[1] != want || f.HarnessResult == "" {
			t.Errorf("gw-sizes %s: statuses %v, outcomes %v (want %s), bad %q, harness %q", f.Body, f.Statuses, f.Outcomes, want, f.Bad, f.HarnessResult)
		}
		if want == "tokenized" && f.PromptTokens == 0 {
			t.Errorf("gw-sizes %s: tokenized without a prompt token count", f.Body)
		}
		// Served, not refused: the bodies with tools need the simulator's
		// tool flags.
		if want == "tokenized" && slices.ContainsFunc(f.Statuses, func(s int) bool { return s != http.StatusOK }) {
			t.Errorf("gw-sizes %s: statuses %v, want 200s (errors %q)", f.Body, f.Statuses, f.ErrorMessages)
		}
	}
	if !sizes.Checks[0].Met {
		t.Errorf("gw-sizes: %+v", sizes.Checks[0])
	}
	flood := readGWResult(t, c.OutDir, ScenarioTokenFlood).TokenFlood
	if flood == nil {
		t.Fatal("gw-tokenize-flood: no figures")
	}
	var results float64
	for _, n := range flood.Outcomes {
		results += n
	}
	if flood.Served != 40 || flood.Errors != 0 || results != 40 || flood.Exact != flood.Predicted ||
		int(flood.Outcomes["tokenized"]) != flood.Predicted || flood.EngineTokens < 2000 {
		t.Errorf("gw-tokenize-flood: %+v", flood)
	}
}

func TestGatewayStressEndToEnd(t *testing.T) {
	c := testGatewayConfig(t)
	c.Scenarios = []string{ScenarioStreams, ScenarioOverhead, ScenarioFloor, ScenarioKill}
	c.Command = "go run ./cmd/inferrail-bench gwstress --streams 50"
	if err := Run(t.Context(), c); err != nil {
		t.Fatal(err)
	}

	streams := readGWResult(t, c.OutDir, ScenarioStreams)
	if len(streams.Streams) != 1 {
		t.Fatalf("gw-streams has %d runs, want 1", len(streams.Streams))
	}
	s := streams.Streams[0]
	if s.Completed != 50 || s.Errors != 0 {
		t.Errorf("gw-streams: completed %d, errors %d (%v), want 50 and 0", s.Completed, s.Errors, s.ErrorSamples)
	}
	served, finished := 0, 0.0
	for _, n := range s.PerReplica {
		served += n
	}
	for _, n := range s.SimFinished {
		finished += n
	}
	if served != 50 || finished != 50 || s.WallSeconds <= 0 || s.Stream.N != 50 || !s.IdleAfter.idle() {
		t.Errorf("gw-streams figures not filled: %+v", s)
	}
	if streams.Setup.GatewayConfig == "" || streams.Environment.NumCPU <= 0 || len(streams.Checks) != 2 {
		t.Errorf("gw-streams setup, environment or checks missing: %+v", streams)
	}

	overhead := readGWResult(t, c.OutDir, ScenarioOverhead)
	if len(overhead.Overhead) != 1 {
		t.Fatalf("gw-overhead has %d rates, want 1", len(overhead.Overhead))
	}
	o := overhead.Overhead[0]
	if len(o.Legs) != 4 || o.Direct.Requests != 200 || o.Gateway.Requests != 200 || o.Direct.Errors != 0 || o.Gateway.Errors != 0 {
		t.Errorf("gw-overhead legs: %+v", o)
	}
	if o.Direct.Latency.N != 200 || o.Gateway.Latency.P50 <= 0 || o.Gateway.SendLag.N != 200 {
		t.Errorf("gw-overhead latencies not filled: direct %+v, gateway %+v", o.Direct, o.Gateway)
	}

	floor := readGWResult(t, c.OutDir, ScenarioFloor).Floor
	if floor == nil || len(floor.Legs) != 6 || len(floor.Targets) != 3 || len(floor.Projections) != 1 {
		t.Fatalf("gw-floor figures: %+v", floor)
	}
	for _, tg := range floor.Targets {
		// Every target's requests cost its client and its engines some
		// CPU, and the proxies their own; 10 ms clock ticks over 120
		// requests still leave each above zero only in sum, so check sums.
		if tg.Requests != 120 || tg.Errors != 0 || tg.Latency.N != 120 {
			t.Errorf("gw-floor %s: %d requests, %d errors (%v), %d latencies", tg.Target, tg.Requests, tg.Errors, tg.ErrorSamples, tg.Latency.N)
		}
	}
	if p := floor.Projections[0]; p.Rate != 2000 || p.Gateway <= 0 || p.Plain <= 0 || p.Direct <= 0 {
		t.Errorf("gw-floor projection: %+v", p)
	}

	kill := readGWResult(t, c.OutDir, ScenarioKill).Kill
	if kill == nil {
		t.Fatal("gw-kill: no figures")
	}
	if want := int(4.5 * float64(c.Kill.Rate)); kill.SentBeforeKill+kill.SentAfterKill != kill.Requests || kill.Requests != want { // over 4.5 s
		t.Errorf("gw-kill: %d sent before and %d after the kill, want %d in all", kill.SentBeforeKill, kill.SentAfterKill, want)
	}
	if kill.FailedSentAfterKill != 0 {
		t.Errorf("gw-kill: %d requests sent after the kill failed: %v", kill.FailedSentAfterKill, kill.ErrorSamples)
	}
	if kill.OutOfRotationAfter < 0 || kill.OutOfRotationBy == "" || kill.PollSeconds <= 0 || kill.ServedAfterRestart == 0 {
		t.Errorf("gw-kill: replica never seen out of rotation, or never back: %+v", kill)
	}

	readme, err := os.ReadFile(filepath.Join(c.OutDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## gw-streams", "## gw-overhead", "## gw-floor", "## gw-kill", "nproc", c.Command, "## Summary"} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("README.md lacks %q", want)
		}
	}
}

// TestGatewayStressObservability runs gw-observability small: both
// gateways serve every request, and the observing one logs every decision
// and fails every span export.
func TestGatewayStressObservability(t *testing.T) {
	c := testGatewayConfig(t)
	c.Scenarios = []string{ScenarioObserve}
	if err := Run(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	res := readGWResult(t, c.OutDir, ScenarioObserve)
	if len(res.Observability) != 1 {
		t.Fatalf("gw-observability has %d rates, want 1", len(res.Observability))
	}
	o := res.Observability[0]
	if len(o.Legs) != 6 || o.Direct.Requests != 120 || o.Off.Requests != 120 || o.On.Requests != 120 || o.Off.Errors+o.On.Errors+o.Direct.Errors != 0 {
		t.Errorf("legs: %+v", o)
	}
	// The observing gateway made one decision per request, warmups
	// included, and exported no span: nobody listens at its collector.
	if o.MetricsError != "" || o.DecisionsWritten+o.DecisionsDropped != 2*(60+10) || o.SpansExported != 0 {
		t.Errorf("counts: %+v", o.ObservedCounts)
	}
	if len(res.Checks) != 3 {
		t.Errorf("checks: %+v", res.Checks)
	}
}

func TestGatewayStressFaultsAndAbuse(t *testing.T) {
	c := testGatewayConfig(t)
	c.Scenarios = []string{ScenarioDisconnects, ScenarioHostile}
	if err := Run(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	d := readGWResult(t, c.OutDir, ScenarioDisconnects).Disconnects
	if d == nil || d.Streams != 40 || d.Planned == 0 || d.Completed+d.Left+d.Errors != 40 || d.SimReceived == 0 {
		t.Fatalf("gw-disconnects figures: %+v", d)
	}
	if d.SimFinished["abort"] != d.ExpectedAborts || !d.Idle.idle() {
		t.Errorf("gw-disconnects: %v aborts, want %v; idle %+v", d.SimFinished["abort"], d.ExpectedAborts, d.Idle)
	}
	h := readGWResult(t, c.OutDir, ScenarioHostile).Hostile
	if h == nil || h.Requests != 120 || len(h.Kinds) != len(hostileShares)+1 {
		t.Fatalf("gw-hostile figures: %+v", h)
	}
	if h.GatewayFailures != 0 || h.Hangs != 0 || h.ValidFailures != 0 || !h.HealthyAfter {
		t.Errorf("gw-hostile: %d gateway failures, %d hangs, %d valid failures, healthy %v: %+v", h.GatewayFailures, h.Hangs, h.ValidFailures, h.HealthyAfter, h.Kinds)
	}
}

// TestGatewayDeadReplicaErrors checks that failures are counted: a gateway
// whose only replica is not listening fails every request.
func TestGatewayDeadReplicaErrors(t *testing.T) {
	c := testGatewayConfig(t)
	cfg := gwConfig([]*gwReplica{{ID: "dead", URL: stresstest.DeadURL(t)}}, healthFast)
	gw, err := procs.StartGateway(t.Context(), procs.GatewayOptions{Binary: c.GatewayBinary, Env: c.GatewayEnv, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := gw.Stop(); err != nil {
			t.Error(err)
		}
	})
	client := stress.NewClient(16)
	defer client.CloseIdleConnections()
	body := gwChatBody(procs.SimModel, 0, 1)
	shots := stress.OpenLoop(t.Context(), time.Now(), stress.FixedSchedule(500, 30), 10*time.Second, func(ctx context.Context, _ int) (int, string, error) {
		return postChat(ctx, client, gw.URL+"/v1/chat/completions", body, "", 1)
	})
	n, kinds, samples := stress.TallyShots(shots)
	if n != 30 || kinds[measure.KindStatus] != 30 {
		t.Errorf("%d errors %v (%v), want 30 status errors", n, kinds, samples)
	}
	for _, s := range shots {
		if s.Status != 502 && s.Status != 503 {
			t.Errorf("status %d, want 502 or 503", s.Status)
		}
	}
	// Requests that reach the dead replica log their failed attempts; on a
	// busy machine the probes may have set it aside before the first one
	// did, and then the probes' warning says why every request got a 503.
	if log := gw.Log(); log.Messages["DEBUG attempt failed"]+log.Messages["WARN replica fails probes"] == 0 || len(log.Panics) != 0 {
		t.Errorf("gateway log: %+v", log)
	}
}

func readGWResult(t *testing.T, dir, scenario string) Result {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, scenario+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", scenario, err)
	}
	return r
}

func TestGatewayConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want []string // substrings of the error; nil for valid
	}{
		{"default", func(*Config) {}, nil},
		{"no_gateway", func(c *Config) { c.GatewayBinary = "" }, []string{"gateway_binary: required"}},
		{"unknown_scenario", func(c *Config) { c.Scenarios = []string{"gw-kill", "nope"} }, []string{`scenarios[1]: unknown scenario "nope"`}},
		{"sim_needed", func(c *Config) { c.SimBinary = "" }, []string{"sim_binary: required"}},
		{"bench_needed", func(c *Config) { c.BenchBinary = "" }, []string{"bench_binary: required by gw-floor"}},
		{"floor", func(c *Config) {
			c.Scenarios = []string{ScenarioFloor}
			c.Floor.Rate, c.Floor.ProjectRates = 0, []int{-1}
		}, []string{"floor.rate: must be positive", "floor.project_rates[0]: must be positive"}},
		{"sim_not_needed", func(c *Config) {
			c.SimBinary = ""
			c.Scenarios = []string{ScenarioKill, ScenarioHang, ScenarioFlap}
		}, nil},
		{"all_at_once", func(c *Config) {
			c.Overhead.Rates = []int{2000, 0}
			c.Kill.Down = 0
			c.Disconnects.Percent = 101
			c.SlowBody.BodyBytes = 10
		}, []string{"overhead.rates[1]: must be positive", "kill.down: must be positive", "disconnects.percent: must be within 0..100",
			"slow_body.body_bytes: must be at least 1024"}},
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

func TestLogWarnings(t *testing.T) {
	l := procs.GatewayLog{Messages: map[string]int{"INFO inferrail-gateway listening": 1, "DEBUG attempt failed": 1, "WARN replica fails probes": 1,
		"DEBUG http: panic serving <addr>: boom": 1}}
	if got := logWarnings(l); got != `"WARN replica fails probes" × 1` {
		t.Errorf("logWarnings = %q", got)
	}
}

func TestHostileMix(t *testing.T) {
	for _, n := range []int{100, 3000} {
		l := DefaultConfig().Hostile
		l.Hostile = n
		reqs := hostileMix(l, "127.0.0.1:1")
		kinds := map[string]int{}
		for _, q := range reqs {
			kinds[q.kind]++
			if q.wait <= 0 || (len(q.parts) == 0 && q.kind != "idle-conn") {
				t.Errorf("%s %q: wait %v, %d parts", q.kind, q.variant, q.wait, len(q.parts))
			}
		}
		if len(reqs) != n+l.Valid || kinds["valid"] != l.Valid || len(kinds) != len(hostileShares)+1 {
			t.Errorf("hostileMix(%d): %d requests by kind %v", n, len(reqs), kinds)
		}
	}
}

func TestSpreadPercent(t *testing.T) {
	ids := []string{"a", "b", "c"}
	tests := []struct {
		counts map[string]int
		want   float64
	}{
		{map[string]int{"a": 100, "b": 100, "c": 100}, 0},
		{map[string]int{"a": 110, "b": 100, "c": 90}, 10},
		{map[string]int{"a": 300}, 200},
		{nil, 100},
	}
	for _, tt := range tests {
		if got := spreadPercent(tt.counts, ids); got != tt.want {
			t.Errorf("spreadPercent(%v) = %v, want %v", tt.counts, got, tt.want)
		}
	}
}

func TestRenderGatewayReportGolden(t *testing.T) {
	env := measure.Environment{GitCommit: "0123456789abcdef0123456789abcdef01234567", GitDirty: true, Date: "2026-11-30T12:00:00Z",
		GoVersion: "go1.27.3", GOOS: "linux", GOARCH: "amd64", NumCPU: 2, CPUModel: "AMD EPYC", Note: gwMachineNote}
	cmd := "go run ./cmd/inferrail-bench gwstress --gateway-binary bin/inferrail-gateway --sim-binary bin/inferrail-sim --out bench/results/gateway"
	cfg := gwConfig([]*gwReplica{{ID: "sim-1", URL: "http://127.0.0.1:8001"}, {ID: "sim-2", URL: "http://127.0.0.1:8002"}}, healthFast)
	cfg.Server.Listen, cfg.Server.AdminListen = "127.0.0.1:8080", "127.0.0.1:9090"
	cfgYAML, err := yaml.Marshal(cfg) // as procs.StartGateway writes it
	if err != nil {
		t.Fatal(err)
	}
	setup := Setup{Gateway: "inferrail-gateway child process", Simulators: "2 inferrail-sim child processes",
		SimArgs: []string{"--zero-latency"}, GatewayConfig: string(cfgYAML)}
	lat := measure.Percentiles{N: 100, Mean: 0.0012, P50: 0.001, P90: 0.0015, P99: 0.0031, P999: 0.0042, Max: 0.005}
	base := func(scenario string) Result {
		return Result{Scenario: scenario, Description: "About " + scenario + ".", Command: cmd, Environment: env, Setup: setup,
			Parameters: map[string]any{"n": 1}, Checks: []Check{{What: "errors", Target: "0", Got: "0", Met: true}},
			Machine: procs.MachineShare{LoadAvgStart: "1.00 0.50 0.25", LoadAvgEnd: "2.00 1.00 0.50", Ours: 0.75, Others: 0.125, Interrupts: 0.05, Steal: 0.01}}
	}
	streams := base(ScenarioStreams)
	streams.Streams = []GWStreamsRun{{Variant: "zero-latency", SimArgs: []string{"--max-num-seqs", "1024", "--zero-latency"}, Streams: 2000,
		Completed: 1999, Errors: 1, ErrorKinds: map[string]int{"no_done": 1}, ErrorSamples: []string{"no_done: `cut`"}, WallSeconds: 1.25,
		Stream: lat, TTFT: lat, PerReplica: map[string]int{"sim-1": 667, "sim-2": 666, "sim-3": 666},
		SimFinished: map[string]float64{"sim-1": 667, "sim-2": 666, "sim-3": 667}, SpreadPercent: 0.05, GatewayPeakRSSBytes: 60 << 20}}
	streams.Checks = append(streams.Checks, Check{What: "even | spread", Target: "within 10%", Got: "35%", Met: false})
	overhead := base(ScenarioOverhead)
	leg := OverheadLeg{Target: "direct", Requests: 10000, Latency: lat, SendLag: measure.Percentiles{N: 10000, P50: 0.00005, P99: 0.0002}, AchievedRate: 1999.6,
		CPUPerRequest: 0.000101, OthersCPUShare: 0.02}
	gleg := leg
	gleg.Target, gleg.Latency.P50, gleg.Latency.P99 = "gateway", 0.0013, 0.0036
	overhead.Overhead = []OverheadRate{{Rate: 2000, Requests: 10000, Legs: []OverheadLeg{leg, gleg, gleg, leg}, Direct: leg, Gateway: gleg,
		AddedP50: 0.0003, AddedP90: 0.0004, AddedP99: 0.0005, AddedMean: -0.00001}}
	observe := base(ScenarioObserve)
	offLeg, onLeg := gleg, gleg
	offLeg.Target, onLeg.Target, onLeg.Latency.P99 = "off", "on", 0.0037
	observe.Observability = []ObservabilityRate{observabilityRate(2000, 10000, []OverheadLeg{leg, offLeg, onLeg, onLeg, offLeg, leg}),
		{Rate: 5000, Requests: 10000, ObservedCounts: ObservedCounts{MetricsError: "scrape: refused"}}}
	observe.Observability[0].ObservedCounts = ObservedCounts{DecisionsWritten: 22000, SpansFailed: 512, SpansDropped: 65000}
	floor := base(ScenarioFloor)
	pleg := gleg
	pleg.Target, pleg.CPUPerRequest = "plain", 0.00009
	for _, lg := range []*OverheadLeg{&leg, &gleg, &pleg} {
		lg.ClientCPUPerRequest, lg.EnginesCPUPerRequest = 0.00012, 0.0001
	}
	floor.Floor = &FloorFigures{Rate: 1000, Requests: 10000, Legs: []OverheadLeg{leg, gleg, pleg, pleg, gleg, leg}, Targets: []OverheadLeg{leg, gleg, pleg},
		GatewayOverPlain: 1.12, CPUs: 2, Projections: []FloorProjection{{Rate: 5000, Direct: 1.1, Gateway: 1.6, Plain: 1.55}}}
	routing := base(ScenarioRouting)
	routing.Routing = []RoutingRun{{Name: "w200-tok-kv_aware-r3", Variant: RoutingVariant{SystemWords: 200, Tokenizer: true, Policy: "kv_aware", Replicas: 3, Rates: []int{2000, 5000}},
		Rates: []RoutingRate{
			{OverheadRate: overhead.Overhead[0], Decisions: 20000, DecisionP50: BucketQuantile{N: 20000, Seconds: 1e-6, Low: 4e-7, High: 1.6e-6},
				DecisionP99: BucketQuantile{N: 20000, Seconds: 3.2e-6, Low: 1.6e-6, High: 6.4e-6}, Tokenizations: 20000,
				TokenizeP99: BucketQuantile{N: 20000, Seconds: 4e-5, Low: 1.6e-5, High: 6.4e-5}, Tokenized: map[string]float64{"tokenized": 19000, "busy": 1000},
				TokenizedShare: 0.95, PromptTokens: 10000000, PredictedCachedTokens: 8000000, PredictedHitRate: 0.8},
			{OverheadRate: OverheadRate{Rate: 5000, Requests: 10000, Direct: leg, Gateway: gleg}, Decisions: 20000,
				DecisionP99: BucketQuantile{N: 20000, Seconds: 0.4194304, Low: 0.4194304}, Tokenizations: 20000,
				TokenizeP99: BucketQuantile{N: 20000, Seconds: 0.02, Low: 0.016384, High: 0.065536}, Tokenized: map[string]float64{"tokenized": 20000},
				TokenizedShare: 1, PromptTokens: 10000000, PredictedCachedTokens: 8000000, PredictedHitRate: 0.8, MetricsError: "scrape: refused"},
		}}, {Name: "w0-notok-least_request-r3", Variant: RoutingVariant{Policy: "least_request", Replicas: 3, Rates: []int{2000}},
		Rates: []RoutingRate{{OverheadRate: overhead.Overhead[0], Decisions: 20000, DecisionP99: BucketQuantile{N: 20000, Seconds: 3.2e-6, Low: 1.6e-6, High: 6.4e-6}}}}}
	kill := base(ScenarioKill)
	kill.Kill = &KillFigures{Requests: 7000, Replica: "sim-2", KillAtSeconds: 2.001, RestartAtSeconds: 4.002, SentBeforeKill: 2000, InFlightAtKill: 2,
		FailedSentBeforeKill: 1, SentAfterKill: 5000, ErrorKinds: map[string]int{"status": 1}, ErrorSamples: []string{"status: status 502"},
		OutOfRotationAfter: 0.0042, OutOfRotationBy: "passive ejection", PollSeconds: 0.0011, LastRoutedAfter: 0.0042, AttemptsAfterKill: 3,
		ServingAgainAfter: 0.081, ServedAfterRestart: 900, Latency: lat, LatencyAfterKill: lat, PerReplica: map[string]int{"sim-1": 3000, "sim-2": 1000, "sim-3": 2999},
		Retries: 3, Ejections: 1}
	kill.Notes = []string{"A note."}
	hang := base(ScenarioHang)
	hang.Hang = []HangFigures{{Policy: "least_request", Requests: 6500, Replica: "sim-2", HangAtSeconds: 1.5, HealAtSeconds: 4.5, DownAfter: 0.31, PollSeconds: 0.002,
		SentToHung: 4, SentToHungLatency: lat, OthersLatency: lat, AttemptErrors: map[string]int{"replica failed its health checks while the request waited": 4},
		BackAfter: 0.1, PerReplica: map[string]int{"sim-1": 3000, "sim-2": 500, "sim-3": 3000}, Retries: 4}}
	flap := base(ScenarioFlap)
	flap.Flap = &FlapFigures{Requests: 10000, Replica: "sim-2", Toggles: 100, Latency: lat, PerReplica: map[string]int{"sim-1": 4000, "sim-2": 2000, "sim-3": 4000}, Retries: 200, Ejections: 5}
	flap.GatewayLog = procs.GatewayLog{Messages: map[string]int{"WARN replica ejected after failed requests": 5, "INFO replica passes probes again": 3},
		AttemptErrors: map[string]int{"sim-2: status 503": 29}}
	disc := base(ScenarioDisconnects)
	disc.Disconnects = &DisconnectsFigures{Streams: 1000, Planned: 700, Left: 650, LeftBeforeHead: 40, FinishedFirst: 50, Completed: 350, WallSeconds: 9.5,
		SimFinished: map[string]float64{"abort": 640, "length": 360}, SimReceived: 1000, ExpectedAborts: 640, GatewayDisconnects: 650, IdleAfter: 0.05}
	hostile := base(ScenarioHostile)
	hostile.Hostile = &HostileFigures{Requests: 4000, Hostile: 3000, Valid: 1000, Kinds: []HostileKindFigures{
		{Kind: "absurd-headers", Requests: 400, Outcomes: map[string]int{"400": 300, "431": 20, "501": 20, "505": 20, "200": 40}},
		{Kind: "slowloris", Requests: 60, Outcomes: map[string]int{"closed": 60}},
		{Kind: "wrong-method", Requests: 300, Outcomes: map[string]int{"405": 299, "timeout": 1}, Failures: 1, FailureSamples: []string{"GET /v1/completions: no answer"}},
	}, Hangs: 1, SlowClose: lat, StalledBody: lat, Seconds: 12.5, RSSBeforeBytes: 20 << 20, RSSPeakBytes: 120 << 20, RSSAfterBytes: 40 << 20,
		FDsBefore: 20, FDsAfter: 25, HealthyAfter: true, GatewayErrors: map[string]float64{"bad_request": 900, "not_found": 400}}
	hostile.GatewayLog = procs.GatewayLog{Panics: []string{"http: panic serving 127.0.0.1:1: `boom`"}}
	soak := base(ScenarioSoak)
	soak.Soak = &GWSoakFigures{Soak: stress.SoakFigures{Requests: 35000, Completed: 33000, Cancelled: 2000, Mix: map[string]int{"chat": 17500, "completion": 17500},
		LoadSeconds: 20, RequestsPerSecond: 1750, Latency: stress.Latency{P50: 0.02, P99: 0.08},
		Memory: &stress.SoakMemory{WarmupRSSBytes: 30 << 20, EndRSSBytes: 32 << 20, GrowthBytes: 2 << 20, GrowthMiB: 2, PeakRSSBytes: 40 << 20, WarmupFDs: 30, EndFDs: 30,
			Samples: []stress.MemorySample{{Requests: 2000, Seconds: 2, RSSBytes: 30 << 20, FDs: 30, Idle: true}, {Requests: 35000, Seconds: 25, RSSBytes: 32 << 20, FDs: 30, Idle: true}}}},
		Sims: &stress.SimGauges{RequestSuccess: map[string]float64{"length": 30000, "stop": 3000, "abort": 2000}}}
	slowReaders := base(ScenarioSlowReaders)
	slowReaders.SlowReaders = &SlowReadersFigures{Clients: 20, StreamBytes: 32 << 20, ReadBeforeStall: 64 << 10, EngineWrittenMin: 1 << 20,
		EngineWrittenMax: 3 << 20, EngineWrittenTotal: 40 << 20, BaselineRSSBytes: 20 << 20, StallPeakRSSBytes: 22 << 20, StallEndRSSBytes: 21 << 20,
		DrainPeakRSSBytes: 25 << 20, AfterIdleRSSBytes: 21 << 20, StallAboveBaseline: 2 << 20, Others: 200, OthersLatency: lat, DrainCompleted: 20,
		DrainBytes: 640 << 20, DrainSeconds: 2, DrainMiBPerSec: 320}
	slowBody := base(ScenarioSlowBody)
	slowBody.SlowBody = &SlowBodyFigures{BodyBytes: 8 << 20, Writes: 8 << 20, UploadSeconds: 30, AnswerSeconds: 0.01, Status: 200, Replica: "sim-1",
		BaselineRSSBytes: 20 << 20, PeakRSSBytes: 40 << 20, AfterRSSBytes: 30 << 20, Progress: []SlowBodySample{{Seconds: 0, SentBytes: 0, RSSBytes: 20 << 20},
			{Seconds: 30, SentBytes: 8 << 20, RSSBytes: 40 << 20}}}
	slowBody.StopErrors = []string{"gateway pid 7: exit status 1"}
	sizes := base(ScenarioSizes)
	sizes.Sizes = []SizesLeg{{Tokenizer: "builtin:sim", Bodies: []SizesFigure{
		{Body: "huge-message", Bytes: 4 << 20, Statuses: []int{400, 400}, Outcomes: []string{"slow", "tokenized"}, PromptTokens: 1000,
			ErrorMessages: []string{"400 BadRequestError: too\nlong", "400 BadRequestError: too\nlong"}, AnswerSeconds: []float64{0.3, 0.2},
			TokenizeSeconds: []float64{0.25, 0.1}, DirectSeconds: []float64{0.1, 0.15}, AddedSeconds: 0.125, HarnessSeconds: 0.2, HarnessResult: "tokenized (1000)"},
		{Body: "nested-arguments-object", Bytes: 40 << 10, Statuses: []int{502}, Outcomes: []string{"invalid"}, AnswerSeconds: []float64{0.01},
			TokenizeSeconds: []float64{0.001}, DirectSeconds: []float64{0.02}, AddedSeconds: -0.01, HarnessResult: "messages[1]: bad", Bad: "status 502 | `x`"},
	}}}
	flood := base(ScenarioTokenFlood)
	flood.TokenFlood = &TokenFloodFigures{Prompts: 400, Words: 20000, BodyBytes: 120 << 10, Workers: 1, Served: 399, Errors: 1,
		ErrorKinds: map[string]int{"status": 1}, ErrorSamples: []string{"status 503"}, Outcomes: map[string]float64{"tokenized": 4, "busy": 266, "slow": 129},
		Predicted: 4, Exact: 4, EngineTokens: 44547, Latency: lat, WallSeconds: 4.6, TokenizeWaitMean: 0.04}
	fleetRes := base(ScenarioFleet)
	age := measure.Percentiles{N: 3000, Mean: 0.05, P50: 0.05, P90: 0.09, P99: 0.1, Max: 0.106}
	fleetRes.Fleet = &FleetFigures{Legs: []FleetLegFigures{
		{Name: "3-engines", Healthy: 3, Rate: 1000, Requests: 10000, AchievedRate: 1000, Latency: lat, Decisions: 10000, Reads: 30000, Age: age,
			ReferenceAge: age, Scrapes: map[string]float64{"ok": 300}, Machine: procs.MachineShare{LoadAvgEnd: "1.00 2.00 3.00"}, Target: 0.102},
		{Name: "20-hostile", Healthy: 4, Huge: 10, Endless: 10, Rate: 1000, Requests: 5000, Failures: stress.Failures{Errors: 1, ErrorSamples: []string{"status: status 503"}},
			AchievedRate: 999, Latency: lat, Decisions: 5000, Reads: 19000, Stale: 1000, Age: age, ReferenceAge: age, ReferenceFailures: 2,
			Scrapes: map[string]float64{"ok": 200, "error": 10, "too_large": 100}, Target: 0.104},
	}}
	scrapeRes := base(ScenarioScrape)
	scrapeRes.Scrape = &ScrapeFigures{Streams: 2000, Completed: 2000, WallSeconds: 7.5, Scrapes: 700, Inconsistent: 1, Problems: []string{"x went from 2 to 1"},
		Series: 47, PageBytes: 29000, Fetch: lat, ScrapesPerSecond: 93, RequestsCounted: 2010,
		Reference: ReferenceScrapes{Scrapes: 650, PageBytes: 9000, Fetch: lat, ScrapesPerSecond: 86}}
	churnRes := base(ScenarioChurn)
	churnRes.Churn = &ChurnFigures{Members: 8000, Live: 16, Lookups: 2000, Seconds: 40, Requests: 8000, PageBytes: 90000, PageBytesEnd: 25000,
		Render: lat, Fetch: lat, Floor: lat, ReplicasOnPage: 24}
	sessionsRes := base(ScenarioSessions)
	sessionsRes.Sessions = &SessionsFigures{Requests: 4000, AchievedRate: 400, Latency: lat, PerReplica: map[string]int{"sim-1": 1000, "sim-2": 1000, "sim-3": 1000, "sim-4": 1000},
		BusiestShare: 0.25, FollowUps: 3700, Kept: 3600, KeptShare: 3600.0 / 3700, Explains: 400, ExplainErrors: 1, ExplainSample: []string{"status: explain status 500"},
		PromptShares: []float64{0.3, 0.15, 0.1, 0.08, 0.05}}
	flowRes := base(ScenarioFlow)
	ttft := func(p50, p99 float64) measure.Percentiles { return measure.Percentiles{N: 100, P50: p50, P99: p99} }
	flowRes.Flow = &FlowFigures{Capacity: 38.4, W1Capacity: 12.5, Tenants: []FlowLeg{
		{Name: "alone", Tenant: "quiet", Rate: 9.6, Sent: 100, OK: 100, TTFT: ttft(0.034, 0.052)},
		{Name: "flooded_flow_control", Tenant: "quiet", Rate: 9.6, Sent: 100, OK: 100, TTFT: ttft(0.036, 0.06),
			Held: ttft(0.0002, 0.02), After: ttft(0.0358, 0.05)},
		{Name: "flooded_flow_control", Tenant: "flood", Rate: 192, Sent: 1950, OK: 230, Shed: 1720, TTFT: ttft(0.8, 1.1)},
		{Name: "flooded_no_flow_control", Tenant: "quiet", Rate: 9.6, Sent: 100, OK: 40, Refused: 60, TTFT: ttft(9.8, 12.3)},
	}, SLO: []FlowLeg{{Name: "w1_slo_admission", Tenant: "w1", Rate: 18.75, Sent: 180, OK: 145, Shed: 35, TTFT: ttft(0.9, 1.7), MetTarget: 145, Goodput: 14.5}},
		QuietP99Ratio: 60.0 / 52, QueueOnlyRatio: 7, NoFlowRatio: 12.3 / 0.052, GatewayMet: 145, LoadAverage: [2]string{"0.50", "3.00"}}
	results := []Result{flood, sizes, slowBody, soak, hostile, disc, flap, hang, kill, routing, floor, observe, overhead, streams, slowReaders,
		fleetRes, scrapeRes, churnRes, sessionsRes, flowRes}

	stresstest.Golden(t, filepath.Join("testdata", "gwreport.golden"), RenderReport(results), *update)
}

// TestCatalog: every scenario has a description that renders on the
// defaults, and describes no scenario that is gone; the golden holds each
// one with the parameters its results record.
func TestCatalog(t *testing.T) {
	c := DefaultConfig()
	c.withDefaults()
	got, err := stress.Catalog(descriptions, scenarios, &c)
	if err != nil {
		t.Fatal(err)
	}
	stresstest.Golden(t, filepath.Join("testdata", "catalog.golden"), got, *update)
}

// TestGatewayStressFleet: gw-fleet at a small size, over a fake-engines
// child: every request served, the decisions logged read the healthy
// replicas' stamped reports, never older than the gateway's 250 ms limit
// counted from sending the scrape (so from the engine's rendering too), and
// the hostile replicas' pages were refused, never read.
func TestGatewayStressFleet(t *testing.T) {
	c := testGatewayConfig(t)
	c.Scenarios = []string{ScenarioFleet}
	c.Fleet = FleetLoad{Legs: []FleetLeg{
		{Name: "small", Healthy: 3, Rate: 100, Duration: time.Second, SampleRate: 1, Target: 102 * time.Millisecond},
		{Name: "hostile", Healthy: 2, Huge: 1, Endless: 1, Rate: 100, Duration: time.Second, SampleRate: 1, Target: 104 * time.Millisecond},
	}}
	if err := Run(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	res := readGWResult(t, c.OutDir, ScenarioFleet)
	if res.Fleet == nil || len(res.Fleet.Legs) != 2 {
		t.Fatalf("gw-fleet: figures %+v, want two legs", res.Fleet)
	}
	for _, lg := range res.Fleet.Legs {
		if lg.Requests != 100 || lg.Errors != 0 {
			t.Errorf("%s: %d requests, %d errors (%v), want 100 and 0", lg.Name, lg.Requests, lg.Errors, lg.ErrorSamples)
		}
		if lg.Decisions < 100 || lg.Reads == 0 || lg.HostileWithReport != 0 {
			t.Errorf("%s: %d decisions logged, %d reports read, %d hostile replicas with a report", lg.Name, lg.Decisions, lg.Reads, lg.HostileWithReport)
		}
		if lg.Age.N != lg.Reads || lg.Age.Max > 0.250+0.001 {
			t.Errorf("%s: report ages %+v, want within [0, 250 ms]: the gateway's limit on a report's age", lg.Name, lg.Age)
		}
	}
	// The 50 MB and endless pages are refused as too large, or cut by the
	// timeout on a machine too slow to read 4 MiB in 100 ms.
	if h := res.Fleet.Legs[1]; h.Scrapes["too_large"]+h.Scrapes["error"] == 0 {
		t.Errorf("hostile leg: scrapes %v, want the hostile pages refused", h.Scrapes)
	}
}

// TestGatewayStressChurn: gw-churn at a small size: every member passes
// through the group, no request fails and the page names no departed
// replica afterwards.
func TestGatewayStressChurn(t *testing.T) {
	c := testGatewayConfig(t)
	c.Scenarios = []string{ScenarioChurn}
	c.Churn = ChurnLoad{Members: 60, Live: 6, Step: 3, Refresh: 20 * time.Millisecond, Rate: 100, RenderEvery: 10 * time.Millisecond, MaxPageBytes: 40000}
	if err := Run(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	f := readGWResult(t, c.OutDir, ScenarioChurn).Churn
	if f == nil {
		t.Fatal("gw-churn: no figures")
	}
	if f.Lookups < 18 || f.Errors != 0 || f.Requests == 0 || f.Departed != 0 || f.Render.N == 0 || f.Floor.N == 0 || f.PageBytes == 0 {
		t.Errorf("gw-churn: %+v", f)
	}
}

// TestGatewayStressSessions: gw-sessions at a small size: every turn and
// explain answered, turns spread over the replicas, follow-ups counted.
func TestGatewayStressSessions(t *testing.T) {
	c := testGatewayConfig(t)
	c.Scenarios = []string{ScenarioSessions}
	c.Sessions = SessionsLoad{Requests: 120, Rate: 200, Simulators: 2, Sessions: 12, SystemPrompts: 4, SystemWords: 20, Zipf: 1,
		ExplainEvery: 10, Policy: "cost_model", MaxTokens: 2, Seed: 1}
	if err := Run(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	f := readGWResult(t, c.OutDir, ScenarioSessions).Sessions
	if f == nil {
		t.Fatal("gw-sessions: no figures")
	}
	served := 0
	for _, n := range f.PerReplica {
		served += n
	}
	if f.Errors != 0 || f.ExplainErrors != 0 || f.Explains != 12 || served != 120 || f.FollowUps != 120-12 || f.Kept > f.FollowUps ||
		f.BusiestShare < 0.5 || f.BusiestShare > 1 || len(f.PromptShares) != 4 {
		t.Errorf("gw-sessions: %+v", f)
	}
}
