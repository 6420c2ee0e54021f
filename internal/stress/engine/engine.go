package engine

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"text/template"
	"time"

	"github.com/inferrail/inferrail/internal/stress"

	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/procs"
)

// Simulator stress scenario names.
const (
	ScenarioStreams = "sim-streams"
	ScenarioSoak    = "sim-soak"
	// ScenarioKVMirror runs its simulator in this process: it reads the
	// engine's cache to compare it with the mirror.
	ScenarioKVMirror = "kv-mirror"
)

// scenarios are the simulator stress scenarios, in the order Run runs
// them.
var scenarios = []stress.Scenario[Config, *simRun]{
	{Name: ScenarioStreams, Stresses: "the simulator's streaming path under a burst of concurrent streams", Params: "streams",
		Load: func(c *Config) stress.Validator { return c.Streams }, Run: stressStreams},
	{Name: ScenarioSoak, Stresses: "the simulator's memory and open files over a long mixed workload", Params: "soak",
		Load: func(c *Config) stress.Validator { return c.Soak }, Run: stressSoak},
	{Name: ScenarioKVMirror, Stresses: "the KV event stream and a mirror of the engine's cache built from it, under eviction and restarts", Params: "kv_mirror",
		Load: func(c *Config) stress.Validator { return c.KVMirror }, Run: stressKVMirror},
}

//go:embed descriptions.tmpl
var descriptionsText string

// descriptions say what each scenario does with its load
// (descriptions.tmpl).
var descriptions = stress.ParseDescriptions(descriptionsText, template.FuncMap{
	"kvDowntime": func(l KVMirrorLoad) time.Duration { return l.withDefaults().Downtime },
})

// Scenarios lists the simulator stress scenarios' names in the order Run
// runs them.
var Scenarios = stress.Names(scenarios)

// simRun is one scenario in progress: the config and the result it fills.
type simRun struct {
	c   *Config
	res Result
}

// Config says which simulator stress scenarios to run against which simulator
// binary and where their results go.
type Config struct {
	// SimBinary is the inferrail-sim executable started for each run.
	SimBinary string
	// SimEnv is added to each child's environment. Nil adds nothing.
	SimEnv []string
	// OutDir receives <scenario>.json for each scenario run and a
	// regenerated README.md.
	OutDir string
	// Scenarios to run, a subset of Scenarios. Empty means all.
	Scenarios []string
	// Command is the command line that reproduces the run, recorded in the
	// results. Empty records nothing.
	Command string

	Streams stress.StreamsLoad // sim-streams
	Soak    stress.SoakLoad    // sim-soak
	// KVMirror is kv-mirror's load; its simulator runs in this process,
	// not from SimBinary.
	KVMirror KVMirrorLoad
	// MaxNumSeqs is the children's --max-num-seqs. Zero means 256.
	MaxNumSeqs int
	// Logger reports progress at Info. Nil discards.
	Logger *slog.Logger
}

// DefaultConfig returns the scenarios: 2,000 streams of 16
// tokens, a 35,000-request soak at concurrency 64 with a 2,000-request
// warmup, and 10,000 requests at 1,000 req/s through a 2,048-block cache
// mirrored from its KV events, per kv-mirror variant.
func DefaultConfig() Config {
	return Config{
		SimBinary: "bin/inferrail-sim",
		OutDir:    "bench/results/sim",
		Scenarios: slices.Clone(Scenarios),
		Streams:   stress.StreamsLoad{Streams: 2000, MaxTokens: 16},
		Soak:      stress.SoakLoad{Requests: 35000, Concurrency: 64, Warmup: 2000, SampleEvery: 5000, Seed: 1},
		KVMirror: KVMirrorLoad{Requests: 10000, Rate: 1000, NumGPUBlocks: 2048, BufferSteps: 10000, ReplayCheck: 1000,
			Prefixes: 16, MaxTokens: 64, SaltEvery: 5, Seed: 1},
		MaxNumSeqs: 256,
	}
}

// Validate reports every problem with c at once.
func (c *Config) Validate() error {
	errs := []error{stress.Required("sim_binary", c.SimBinary), stress.Required("out_dir", c.OutDir),
		stress.NotNegative("max_num_seqs", c.MaxNumSeqs)}
	return errors.Join(append(errs, stress.ValidateSelection(c, scenarios, c.Scenarios)...)...)
}

// Result is one scenario's results file, <scenario>.json.
type Result struct {
	Scenario    string              `json:"scenario"`
	Description string              `json:"description"`
	Command     string              `json:"command,omitempty"`
	Environment measure.Environment `json:"environment"`
	Runs        []SimRun            `json:"runs"`
}

// SimRun is one simulator configuration of a scenario.
type SimRun struct {
	Variant    string                 `json:"variant"`
	SimArgs    []string               `json:"sim_args"`
	Parameters map[string]any         `json:"parameters"`
	Streams    *stress.StreamsFigures `json:"streams,omitempty"`
	Soak       *stress.SoakFigures    `json:"soak,omitempty"`
	KVMirror   *KVMirrorFigures       `json:"kv_mirror,omitempty"`
	// SimStopError is how the simulator failed to stop cleanly, if it did.
	SimStopError string `json:"sim_stop_error,omitempty"`
}

// Run runs the configured simulator scenarios one after another, each
// against fresh simulator children, writes <scenario>.json for each into
// c.OutDir and regenerates the README there. Request failures are part of the
// results; the error is for scenarios that could not run at all.
func Run(ctx context.Context, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = 256
	}
	env := measure.CurrentEnvironment(ctx)
	suite := stress.Suite[Config, *simRun]{Dir: c.OutDir, Logger: c.Logger,
		Begin: func(s stress.Scenario[Config, *simRun]) *simRun {
			r := &simRun{c: &c}
			r.res.Description = descriptions.Of(s.Name, s.Load(&c))
			return r
		},
		End: func(s stress.Scenario[Config, *simRun], r *simRun, err error) (any, error) {
			r.res.Scenario, r.res.Command, r.res.Environment = s.Name, c.Command, env
			return &r.res, err
		},
	}
	if err := suite.Run(ctx, scenarios, c.Scenarios); err != nil {
		return err
	}
	return WriteReport(c.OutDir)
}

func stressStreams(ctx context.Context, r *simRun) error {
	c, res := r.c, &r.res
	variants := []struct {
		name string
		args []string
	}{
		{"default-latency", nil},
		{"zero-latency", []string{"--zero-latency"}},
	}
	for _, v := range variants {
		args := append([]string{"--max-num-seqs", fmt.Sprint(c.MaxNumSeqs)}, v.args...)
		run := SimRun{Variant: v.name, SimArgs: args, Parameters: stress.Params(c.Streams.WithDefaults())}
		err := withSim(ctx, c, args, &run, func(p *procs.Sim) error {
			c.Logger.Info("sim-streams", "variant", v.name, "streams", c.Streams.Streams, "sim_pid", p.Pid)
			f, err := stress.RunStreams(ctx, p.URL, c.Streams)
			if err != nil {
				return err
			}
			run.Streams = &f
			c.Logger.Info("sim-streams done", "variant", v.name, "completed", f.Completed, "errors", f.Errors,
				"wall_seconds", f.WallSeconds, "p50_seconds", f.Stream.P50, "p99_seconds", f.Stream.P99)
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		res.Runs = append(res.Runs, run)
	}
	return nil
}

func stressSoak(ctx context.Context, r *simRun) error {
	c, res, l := r.c, &r.res, r.c.Soak
	args := []string{"--max-num-seqs", fmt.Sprint(c.MaxNumSeqs), "--zero-latency"}
	run := SimRun{Variant: "zero-latency", SimArgs: args, Parameters: stress.Params(l.WithDefaults())}
	err := withSim(ctx, c, args, &run, func(p *procs.Sim) error {
		c.Logger.Info("sim-soak", "requests", l.Requests, "concurrency", l.Concurrency, "sim_pid", p.Pid)
		f, err := stress.RunSoak(ctx, p.URL, l, p.Pid)
		if err != nil {
			return err
		}
		run.Soak = &f
		attrs := []any{"completed", f.Completed, "cancelled", f.Cancelled, "errors", f.Errors, "load_seconds", f.LoadSeconds}
		if f.Memory != nil {
			attrs = append(attrs, "rss_growth_mib", f.Memory.GrowthMiB)
		}
		c.Logger.Info("sim-soak done", attrs...)
		return nil
	})
	if err != nil {
		return err
	}
	res.Runs = append(res.Runs, run)
	return nil
}

// withSim runs f against a fresh simulator child and stops the child
// afterwards, recording an unclean stop in run.
func withSim(ctx context.Context, c *Config, args []string, run *SimRun, f func(*procs.Sim) error) error {
	p, err := procs.StartSim(ctx, procs.SimOptions{Binary: c.SimBinary, Args: args, Env: c.SimEnv, Logger: c.Logger})
	if err != nil {
		return err
	}
	ferr := f(p)
	select {
	case <-p.Exited():
		// The child died under load: that is a result, not a harness error.
		run.SimStopError = "simulator exited during the run: " + p.Output()
	default:
	}
	if err := p.Stop(); err != nil && run.SimStopError == "" {
		run.SimStopError = err.Error()
	}
	if run.SimStopError != "" {
		c.Logger.Warn("simulator did not stop cleanly", "err", run.SimStopError)
	}
	return ferr
}
