package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/inferrail/inferrail/internal/harness"
	"github.com/inferrail/inferrail/internal/stress"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/porthold"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/sim"
)

// Config says which gateway stress scenarios to run, against
// which binaries, how big, and where their results go.
type Config struct {
	// GatewayBinary is the inferrail-gateway executable started for each
	// scenario, with a generated config.
	GatewayBinary string
	// GatewayEnv is added to the gateway child's environment. Nil adds
	// nothing.
	GatewayEnv []string
	// SimBinary is the inferrail-sim executable of the scenarios that run
	// simulators as child processes.
	SimBinary string
	// SimEnv is added to each simulator child's environment. Nil adds
	// nothing.
	SimEnv []string
	// BenchBinary is the inferrail-bench executable whose plain-proxy
	// command gw-floor starts.
	BenchBinary string
	// BenchEnv is added to the plain proxy child's environment. Nil adds
	// nothing.
	BenchEnv []string
	// OutDir receives <scenario>.json for each scenario run and a
	// regenerated README.md.
	OutDir string
	// Scenarios to run, a subset of GatewayScenarios. Empty means all.
	Scenarios []string
	// Command is the command line that reproduces the run, recorded in the
	// results. Empty records nothing.
	Command string
	// Logger reports progress at Info. Nil discards.
	Logger *slog.Logger
	// ProbeInterval is how often the gateway of the fault scenarios (kill,
	// hang, flap) probes its replicas; each probe may take 80% of it. Zero
	// means 100 ms. Tests on a loaded machine lengthen it, where probes of
	// the in-process simulators would time out and take every replica out.
	ProbeInterval time.Duration

	Streams     GWStreamsLoad
	Overhead    OverheadLoad
	Observe     ObservabilityLoad
	Floor       FloorLoad
	Routing     RoutingLoad
	Kill        KillLoad
	Hang        HangLoad
	Flap        FlapLoad
	Disconnects DisconnectsLoad
	Hostile     HostileLoad
	Soak        stress.SoakLoad
	SlowReaders SlowReadersLoad
	SlowBody    SlowBodyLoad
	Control     ControlLoad
	Flow        FlowLoad
	Sizes       SizesLoad
	TokenFlood  TokenFloodLoad
	Fleet       FleetLoad
	Scrape      ScrapeLoad
	Churn       ChurnLoad
	Sessions    SessionsLoad
}

// DefaultConfig returns the issues' scenarios, sized to run
// in about ten minutes on a two-core machine (gw-routing takes about half
// of it). gw-overhead also runs at 500 req/s, below the rates of the
// issue, where the machine is not near saturation.
func DefaultConfig() Config {
	return Config{
		GatewayBinary: "bin/inferrail-gateway",
		SimBinary:     "bin/inferrail-sim",
		BenchBinary:   "bin/inferrail-bench",
		OutDir:        "bench/results/gateway",
		Scenarios:     slices.Clone(Scenarios),
		Streams:       GWStreamsLoad{StreamsLoad: stress.StreamsLoad{Streams: 2000, MaxTokens: 16}, MaxNumSeqs: 1024, DefaultLatency: true},
		Overhead:      OverheadLoad{Rates: []int{500, 2000, 5000}, Requests: 10000, Warmup: 1000, MaxTokens: 1, Seed: 1},
		Observe:       ObservabilityLoad{Rates: []int{2000}, Requests: 10000, Warmup: 1000, MaxTokens: 1, Seed: 1},
		Floor:         FloorLoad{Rate: 1000, Requests: 10000, Warmup: 1000, MaxTokens: 1, Seed: 1, ProjectRates: []int{500, 2000, 5000}},
		Routing:       RoutingLoad{Variants: DefaultRoutingVariants(), Requests: 3000, Warmup: 500, MaxTokens: 1, SystemPrompts: 8, QuestionWords: 12, Seed: 1},
		Kill:          KillLoad{Rate: 1000, Before: 2 * time.Second, Down: 2 * time.Second, After: 3 * time.Second},
		Hang:          HangLoad{Rate: 1000, Before: 1500 * time.Millisecond, Hang: 3 * time.Second, After: 2 * time.Second},
		Flap:          FlapLoad{Rate: 1000, Duration: 10 * time.Second, Toggle: 100 * time.Millisecond},
		Disconnects:   DisconnectsLoad{Streams: 1000, MaxTokens: 200, Percent: 70, MaxDelay: 6 * time.Second, Seed: 1},
		Hostile:       HostileLoad{Hostile: 3000, Valid: 1000, Concurrency: 32, HeaderTimeout: 2 * time.Second, RequestTimeout: 5 * time.Second, Seed: 1},
		Soak:          stress.SoakLoad{Requests: 35000, Concurrency: 64, Warmup: 2000, SampleEvery: 5000, Seed: 1},
		SlowReaders:   SlowReadersLoad{Clients: 20, StreamBytes: 32 << 20, Stall: 5 * time.Second, Others: 200},
		SlowBody:      SlowBodyLoad{BodyBytes: 8 << 20},
		Control:       ControlLoad{Rate: 2000, Requests: 10000, Warmup: 1000, MaxTokens: 1, PatchEvery: 20 * time.Millisecond, AdminReaders: 2, Seed: 1},
		Flow: FlowLoad{Sims: 2, MaxNumSeqs: 8, Capacity: 5 * time.Second, Leg: 20 * time.Second, MaxTokens: 16, FloodFactor: 10,
			Overload: 1.5, TargetMs: 2000, W1Output: 32, KeyMaxQueued: 16, Seed: 1},
		Sizes: SizesLoad{SizeScale: SizeScale{MessageBytes: 4 << 20, Messages: 50000, Tools: 1000, Depth: 9000}, Reps: 3,
			MaxWait: 400 * time.Millisecond, TokenizerDir: ".cache/tokenizers", Families: []string{"qwen3", "llama3_1", "gemma3"}},
		TokenFlood: TokenFloodLoad{Prompts: 400, Words: 20000, Workers: 1, Replicas: 3},
		Fleet:      FleetLoad{Legs: DefaultFleetLegs()},
		Scrape:     ScrapeLoad{Streams: 2000, MaxTokens: 16, Every: 10 * time.Millisecond},
		Sessions: SessionsLoad{Requests: 4000, Rate: 400, Simulators: 4, Sessions: 300, SystemPrompts: 16, SystemWords: 200, Zipf: 1,
			ExplainEvery: 10, Policy: "cost_model", MaxTokens: 4, Seed: 1},
		Churn: ChurnLoad{Members: 8000, Live: 16, Step: 4, Refresh: 20 * time.Millisecond, Rate: 200, RenderEvery: 10 * time.Millisecond, MaxPageBytes: 40000},
	}
}

// Validate reports every problem with c at once.
func (c *Config) Validate() error {
	errs := []error{stress.Required("gateway_binary", c.GatewayBinary), stress.Required("out_dir", c.OutDir)}
	if c.BenchBinary == "" && stress.Needed(scenarios, c.Scenarios, needBench) {
		errs = append(errs, errors.New("bench_binary: required by gw-floor and gw-fleet, which start its plain-proxy and fake-engines commands"))
	}
	if c.SimBinary == "" && stress.Needed(scenarios, c.Scenarios, needSims) {
		errs = append(errs, errors.New("sim_binary: required by the scenarios that run simulator children"))
	}
	errs = append(errs, stress.ValidateSelection(c, scenarios, c.Scenarios)...)
	return errors.Join(errs...)
}

// withDefaults fills in the timeouts and windows left zero, so that the
// results record what ran.
func (c *Config) withDefaults() {
	for _, d := range []struct {
		t   *time.Duration
		def time.Duration
	}{
		{&c.Overhead.Timeout, 10 * time.Second}, {&c.Observe.Timeout, 10 * time.Second},
		{&c.Floor.Timeout, 10 * time.Second}, {&c.Control.Timeout, 10 * time.Second}, {&c.Flow.Timeout, 30 * time.Second},
		{&c.Routing.Timeout, 10 * time.Second}, {&c.Disconnects.Timeout, 2 * time.Minute}, {&c.Scrape.Timeout, 2 * time.Minute},
		{&c.Hostile.IdleWindow, 2 * time.Second},
	} {
		*d.t = stress.OrDefault(*d.t, d.def)
	}
	c.Streams.StreamsLoad = c.Streams.StreamsLoad.WithDefaults()
	c.Soak = c.Soak.WithDefaults()
}

// Result is one gateway scenario's results file, <scenario>.json.
// Exactly one of the figure fields is set, the one of its scenario.
type Result struct {
	Scenario    string              `json:"scenario"`
	Description string              `json:"description"`
	Command     string              `json:"command,omitempty"`
	Environment measure.Environment `json:"environment"`
	Setup       Setup               `json:"setup"`
	Parameters  map[string]any      `json:"parameters"`
	// Checks are the scenario's targets and whether the run met them.
	Checks []Check `json:"checks"`
	// Notes say what to keep in mind when reading the figures.
	Notes []string `json:"notes,omitempty"`

	Streams       []GWStreamsRun      `json:"streams,omitempty"`
	Overhead      []OverheadRate      `json:"overhead,omitempty"`
	Observability []ObservabilityRate `json:"observability,omitempty"`
	Floor         *FloorFigures       `json:"floor,omitempty"`
	Routing       []RoutingRun        `json:"routing,omitempty"`
	Kill          *KillFigures        `json:"kill,omitempty"`
	Hang          []HangFigures       `json:"hang,omitempty"`
	Flap          *FlapFigures        `json:"flap,omitempty"`
	Disconnects   *DisconnectsFigures `json:"disconnects,omitempty"`
	Hostile       *HostileFigures     `json:"hostile,omitempty"`
	Soak          *GWSoakFigures      `json:"soak,omitempty"`
	SlowReaders   *SlowReadersFigures `json:"slow_readers,omitempty"`
	SlowBody      *SlowBodyFigures    `json:"slow_body,omitempty"`
	Control       *ControlFigures     `json:"control,omitempty"`
	Flow          *FlowFigures        `json:"flow,omitempty"`
	Sizes         []SizesLeg          `json:"sizes,omitempty"`
	TokenFlood    *TokenFloodFigures  `json:"tokenize_flood,omitempty"`
	Fleet         *FleetFigures       `json:"fleet,omitempty"`
	Scrape        *ScrapeFigures      `json:"scrape,omitempty"`
	Churn         *ChurnFigures       `json:"churn,omitempty"`
	Sessions      *SessionsFigures    `json:"sessions,omitempty"`

	// Machine says how busy the machine was during the scenario, and how
	// much of that was other people's work.
	Machine procs.MachineShare `json:"machine"`
	// GatewayLog is what the gateway children logged, merged.
	GatewayLog procs.GatewayLog `json:"gateway_log"`
	// StopErrors are the children that did not stop cleanly, or exited
	// during the run.
	StopErrors []string `json:"stop_errors,omitempty"`
}

// Setup says what ran: the gateway, its engines and its config.
type Setup struct {
	Gateway    string   `json:"gateway"`
	Simulators string   `json:"simulators"`
	SimArgs    []string `json:"sim_args,omitempty"`
	// GatewayConfig is the YAML the (first) gateway child was started with.
	GatewayConfig string `json:"gateway_config"`
}

// Check is one target of a scenario and what the run got.
type Check struct {
	What   string `json:"what"`
	Target string `json:"target"`
	Got    string `json:"got"`
	Met    bool   `json:"met"`
}

// gwMachineNote is the Environment note of gateway results.
const gwMachineNote = "Shared, noisy machine; the load generator (Go net/http client), the gateway and the simulators run on the same CPUs."

// Run runs the configured gateway scenarios one after another, each
// against a fresh gateway child and fresh simulators, writes
// <scenario>.json for each into c.OutDir and regenerates the README there.
// Request failures and missed targets are part of the results; the error is
// for scenarios that could not run at all.
func Run(ctx context.Context, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.withDefaults()
	env := measure.CurrentEnvironment(ctx)
	env.Note = gwMachineNote
	var start time.Time
	var cpu0 procs.CPUTimes
	suite := stress.Suite[Config, *gwRun]{Dir: c.OutDir, Logger: c.Logger,
		Begin: func(s stress.Scenario[Config, *gwRun]) *gwRun {
			start, cpu0 = time.Now(), procs.ReadCPUTimes()
			load := s.Load(&c)
			return &gwRun{c: &c, log: c.Logger.With("scenario", s.Name), res: &Result{
				Scenario: s.Name, Description: descriptions.Of(s.Name, load), Command: c.Command, Environment: env,
				Parameters: stress.Params(load),
			}}
		},
		End: func(s stress.Scenario[Config, *gwRun], r *gwRun, err error) (any, error) {
			r.cleanup()
			m := procs.MachineShareBetween(cpu0, procs.ReadCPUTimes(), runtime.NumCPU())
			r.res.Machine = m
			if err != nil {
				return nil, err
			}
			for _, ch := range r.res.Checks {
				c.Logger.Info("check", "scenario", s.Name, "what", ch.What, "target", ch.Target, "got", ch.Got, "met", ch.Met)
			}
			c.Logger.Info("scenario done", "scenario", s.Name, "seconds", time.Since(start).Seconds(),
				"ours_cpu_share", m.Ours, "others_cpu_share", m.Others, "interrupts_cpu_share", m.Interrupts, "steal_cpu_share", m.Steal)
			return r.res, nil
		},
	}
	if err := suite.Run(ctx, scenarios, c.Scenarios); err != nil {
		return err
	}
	return WriteReport(c.OutDir)
}

// gwRun is one scenario in progress: its config, its result and the
// children it started, which cleanup stops.
type gwRun struct {
	c   *Config
	log *slog.Logger
	res *Result

	fleet    harness.Fleet // the simulator children and the gateway
	replicas []*gwReplica  // every engine behind the gateway
	plains   []*procs.PlainProxy
	dirs     []string         // temporary directories, removed at the end
	holds    []*porthold.Hold // ports kept dead, released at the end
	// sims and gw are what a scenario's Setup (simFleetOf) started.
	sims []*gwReplica
	gw   *procs.Gateway
}

// gwReplica is one engine behind the gateway: a simulator child, an
// in-process simulator, or the harness's own firehose engine.
type gwReplica struct {
	ID    string
	URL   string
	proc  *procs.Sim // a child; nil otherwise
	local *sim.Local // in process; nil otherwise
	stop  func()     // any other engine; nil otherwise
}

// check records a target and whether it was met.
func (r *gwRun) check(what, target, got string, met bool) {
	r.res.Checks = append(r.res.Checks, Check{What: what, Target: target, Got: got, Met: met})
}

func (r *gwRun) note(format string, args ...any) {
	r.res.Notes = append(r.res.Notes, fmt.Sprintf(format, args...))
}

// simChildren starts n simulator children with args, named sim-1…sim-n.
func (r *gwRun) simChildren(ctx context.Context, n int, args []string) ([]*gwReplica, error) {
	first := len(r.fleet.Sims)
	err := r.fleet.StartSims(ctx, n, procs.SimOptions{Binary: r.c.SimBinary, Args: args, Env: r.c.SimEnv, Logger: r.log})
	var out []*gwReplica
	for i, p := range r.fleet.Sims[first:] {
		rep := &gwReplica{ID: harness.SimID(i), URL: p.URL, proc: p}
		r.replicas = append(r.replicas, rep)
		out = append(out, rep)
	}
	if err != nil {
		return nil, err
	}
	r.res.Setup.Simulators = fmt.Sprintf("%d inferrail-sim child processes (%s)", n, r.c.SimBinary)
	r.res.Setup.SimArgs = args
	return out, nil
}

// simLocals starts n in-process simulators (sim.StartLocal), which the
// scenario can kill, restart or break, named sim-1…sim-n.
func (r *gwRun) simLocals(n int, cfg sim.Config, args []string) ([]*gwReplica, error) {
	var out []*gwReplica
	for i := range n {
		l, err := sim.StartLocal(cfg, "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		rep := &gwReplica{ID: harness.SimID(i), URL: l.URL(), local: l}
		r.replicas = append(r.replicas, rep)
		out = append(out, rep)
	}
	r.res.Setup.Simulators = fmt.Sprintf("%d in-process simulators (sim.StartLocal in the harness process, so they can be killed or broken on demand)", n)
	r.res.Setup.SimArgs = args
	return out, nil
}

// simFleet starts n simulator children with args and a gateway child over
// them, with the scenarios' config (default health) as edit, when not nil,
// changes it.
func (r *gwRun) simFleet(ctx context.Context, n int, args []string, edit func(*config.Config)) ([]*gwReplica, *procs.Gateway, error) {
	sims, err := r.simChildren(ctx, n, args)
	if err != nil {
		return nil, nil, err
	}
	cfg := gwConfig(sims, healthDefault)
	if edit != nil {
		edit(cfg)
	}
	gw, err := r.gateway(ctx, cfg)
	return sims, gw, err
}

// simFleetOf is the Setup of a scenario that runs against n simulator
// children with args behind a gateway child with the scenarios' config
// (default health), which edit, when not nil, changes.
func simFleetOf(n int, args []string, edit func(c *Config, cfg *config.Config)) func(context.Context, *gwRun) error {
	return func(ctx context.Context, r *gwRun) error {
		var err error
		r.sims, r.gw, err = r.simFleet(ctx, n, args, func(cfg *config.Config) {
			if edit != nil {
				edit(r.c, cfg)
			}
		})
		return err
	}
}

// gateway starts a gateway child with cfg.
func (r *gwRun) gateway(ctx context.Context, cfg *config.Config) (*procs.Gateway, error) {
	if err := r.fleet.StartGateway(ctx, procs.GatewayOptions{Binary: r.c.GatewayBinary, Env: r.c.GatewayEnv, Config: cfg, Logger: r.log}); err != nil {
		return nil, err
	}
	p := r.fleet.Gateway
	if r.res.Setup.GatewayConfig == "" {
		r.res.Setup.Gateway = fmt.Sprintf("inferrail-gateway child process (%s) with a generated config on loopback ports", r.c.GatewayBinary)
		r.res.Setup.GatewayConfig = p.ConfigYAML
	}
	return p, nil
}

// stopGateway stops gw now (before the scenario's other children),
// recording its log and an unclean exit.
func (r *gwRun) stopGateway(gw *procs.Gateway) {
	if gw == nil || r.fleet.Gateway != gw {
		return
	}
	r.stopErrors(r.fleet.StopRouter())
	r.res.GatewayLog.Merge(gw.Log())
}

func (r *gwRun) stopErrors(errs []error) {
	for _, err := range errs {
		r.res.StopErrors = append(r.res.StopErrors, err.Error())
	}
}

// cleanup stops every child the scenario started and is still running.
func (r *gwRun) cleanup() {
	r.stopGateway(r.fleet.Gateway)
	for _, p := range r.plains {
		if err := p.Stop(); err != nil {
			r.res.StopErrors = append(r.res.StopErrors, err.Error())
		}
	}
	r.plains = nil
	r.stopReplicas()
	for _, d := range r.dirs {
		_ = os.RemoveAll(d)
	}
	r.dirs = nil
	for _, h := range r.holds {
		h.Release()
	}
	r.holds = nil
}

// stopReplicas stops every engine started so far.
func (r *gwRun) stopReplicas() {
	r.stopErrors(r.fleet.StopSims())
	for _, rep := range r.replicas {
		switch {
		case rep.local != nil:
			rep.local.Close()
		case rep.stop != nil:
			rep.stop()
		}
	}
	r.replicas = nil
}

// gwHealth is how the gateway probes its replicas in a scenario.
type gwHealth int

const (
	// healthDefault keeps the gateway's defaults: a probe every second,
	// three failures to take a replica out, 5 s first ejection.
	healthDefault gwHealth = iota
	// healthFast probes every 100 ms (timeout 80 ms; see
	// GatewayConfig.ProbeInterval), ejects for 1 s first: for the scenarios
	// that break replicas on purpose.
	healthFast
)

// gwConfig is the gateway config of a scenario: one model served by
// every replica, with caps large enough that the breakers never refuse
// (max_concurrency and max_pending 2048), and JSON logs at debug level so
// the harness can count attempts and panics.
func gwConfig(replicas []*gwReplica, h gwHealth) *config.Config {
	reps := make([]harness.Replica, len(replicas))
	for i, rep := range replicas {
		reps[i] = harness.Replica{ID: rep.ID, URL: rep.URL}
	}
	cfg := harness.GatewayConfig(reps, harness.GatewayOptions{Model: procs.SimModel, Aliases: []string{"sim"}, Caps: 2048,
		RequestTimeout: 30 * time.Second, LogLevel: "debug"})
	if h == healthFast {
		cfg.Health.Interval = config.Duration(100 * time.Millisecond)
		cfg.Health.Timeout = config.Duration(80 * time.Millisecond)
		cfg.Health.EjectionBackoff = config.Duration(time.Second)
		cfg.Health.MaxEjectionBackoff = config.Duration(10 * time.Second)
	}
	return cfg
}

// waitIdle polls the gateway and the simulator children until no request
// is in flight anywhere, for at most limit, and reports how long that took
// and what was left.
func waitIdle(ctx context.Context, client *http.Client, gw *procs.Gateway, sims []*gwReplica, limit time.Duration) (time.Duration, idleState) {
	start := time.Now()
	var st idleState
	for {
		st = idleState{}
		if p, err := gw.Metrics(ctx, client); err == nil {
			st.GatewayInFlight = p.Sum("inferrail_replica_in_flight")
			st.GatewayPending = p.Sum("inferrail_replica_pending")
		} else {
			st.Err = err.Error()
		}
		for _, s := range sims {
			p, err := procs.ScrapePage(ctx, client, s.URL+"/metrics")
			if err != nil {
				st.Err = err.Error()
				continue
			}
			st.SimRunning += p.Sum("vllm:num_requests_running")
			st.SimWaiting += p.Sum("vllm:num_requests_waiting")
		}
		if st.Err == "" && st.GatewayInFlight == 0 && st.GatewayPending == 0 && st.SimRunning == 0 && st.SimWaiting == 0 {
			return time.Since(start), st
		}
		if time.Since(start) > limit || ctx.Err() != nil {
			return time.Since(start), st
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// idleState is what was still in flight when waitIdle returned.
type idleState struct {
	GatewayInFlight float64 `json:"gateway_in_flight"`
	GatewayPending  float64 `json:"gateway_pending"`
	SimRunning      float64 `json:"sim_running"`
	SimWaiting      float64 `json:"sim_waiting"`
	Err             string  `json:"error,omitempty"`
}

func (s idleState) idle() bool {
	return s.Err == "" && s.GatewayInFlight == 0 && s.GatewayPending == 0 && s.SimRunning == 0 && s.SimWaiting == 0
}
