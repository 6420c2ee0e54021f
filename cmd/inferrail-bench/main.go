// Command inferrail-bench is inferrail's benchmark harness: open-loop runs,
// comparisons, sweeps and their reports, the simulator and gateway stress
// scenarios and the demo:
//
//	inferrail-bench run --workload w1 --rate 6 --policy least_request -- --max-num-seqs 64
//	inferrail-bench compare --workload w1 --rate 6 --policies round_robin,least_request --reps 3
//	inferrail-bench compare --workload w1 --rate 4 --policies cost_model,peer:vllm-router:cache_aware,peer:sglang-router:cache_aware
//	inferrail-bench sweep --file bench/sweeps/smoke.toml --jobs 2
//	inferrail-bench report --in bench/results/smoke --out bench/report/smoke
//	inferrail-bench stress --sim-binary bin/inferrail-sim --out bench/results/sim
//	inferrail-bench gwstress --gateway-binary bin/inferrail-gateway --sim-binary bin/inferrail-sim --out bench/results/gateway
//	inferrail-bench demo --out bench/tmp/demo
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/inferrail/inferrail/internal/bench"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/plainproxy"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/stress/engine"
	"github.com/inferrail/inferrail/internal/stress/gateway"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "inferrail-bench:", err)
		}
		os.Exit(2)
	}
}

const usage = `usage: inferrail-bench <command> [flags]

Commands:
  run      one open-loop run: a workload on its schedule against a fleet the
           run starts (N simulators behind a gateway) or against --url
  compare  the same workload for each of --policies, a cold fleet per run,
           --reps repetitions with new seeds; prints a table. A policy
           peer:<router>:<policy> (vllm-router, sglang-router) runs that
           router from .venv/peers in place of the gateway
  sweep    the runs of a TOML sweep file, policies innermost, resuming past
           runs whose result file matches
  report   a Markdown report from a directory of result files
  stress   run the simulator stress scenarios (sim-streams, sim-soak) and
           write their results and report
  gwstress run the gateway stress scenarios (gw-streams, gw-overhead,
           gw-routing, gw-kill, ...) against a gateway child process and write their results and
           report
  demo     a short W1 run under round_robin, then cost_model, on cold fleets;
           prints a comparison table and writes a chart and a report
  plain-proxy
           a bare net/http reverse proxy taking turns over --upstreams: the
           floor gw-floor compares the gateway's CPU per request with

Run "inferrail-bench <command> -h" for a command's flags.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "run":
		return runCmd(ctx, args[1:], stdout, stderr)
	case "compare":
		return compareCmd(ctx, args[1:], stdout, stderr)
	case "sweep":
		return sweepCmd(ctx, args[1:], stdout, stderr)
	case "report":
		return reportCmd(ctx, args[1:], stdout, stderr)
	case "stress":
		return stressCmd(ctx, args[1:], stdout, stderr)
	case "gwstress":
		return gwstress(ctx, args[1:], stdout, stderr)
	case "demo":
		return demo(ctx, args[1:], stdout, stderr)
	case "plain-proxy":
		return plainproxy.Command(ctx, args[1:], stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func stressCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := engine.DefaultConfig()
	fs := flag.NewFlagSet("inferrail-bench stress", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenarios := strings.Join(c.Scenarios, ",")
	verbose := false
	fs.StringVar(&c.SimBinary, "sim-binary", c.SimBinary, "inferrail-sim executable to start")
	fs.StringVar(&c.OutDir, "out", c.OutDir, "directory for <scenario>.json and README.md")
	fs.StringVar(&scenarios, "scenarios", scenarios, "comma-separated scenarios to run: "+strings.Join(engine.Scenarios, ", "))
	fs.IntVar(&c.MaxNumSeqs, "max-num-seqs", c.MaxNumSeqs, "the simulators' --max-num-seqs")
	fs.IntVar(&c.Streams.Streams, "streams", c.Streams.Streams, "sim-streams: concurrent streams")
	fs.IntVar(&c.Streams.MaxTokens, "stream-max-tokens", c.Streams.MaxTokens, "sim-streams: max_tokens of each stream")
	fs.IntVar(&c.Soak.Requests, "soak-requests", c.Soak.Requests, "sim-soak: requests, warmup included")
	fs.IntVar(&c.Soak.Concurrency, "soak-concurrency", c.Soak.Concurrency, "sim-soak: requests in flight")
	fs.IntVar(&c.Soak.Warmup, "soak-warmup", c.Soak.Warmup, "sim-soak: requests before the memory baseline")
	fs.IntVar(&c.Soak.SampleEvery, "soak-sample-every", c.Soak.SampleEvery, "sim-soak: memory sample under load every this many requests (0: none)")
	fs.BoolVar(&verbose, "v", false, "log the simulator children's life cycle")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("stress: unexpected argument %q", fs.Arg(0))
	}
	c.Scenarios = nil
	for s := range strings.SplitSeq(scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.Scenarios = append(c.Scenarios, s)
		}
	}
	if len(c.Scenarios) == 0 {
		return errors.New("stress: --scenarios: name at least one scenario")
	}
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	c.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	c.Command = "go run ./cmd/inferrail-bench stress " + shellJoin(args)
	if err := engine.Run(ctx, c); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "results and report written to %s\n", c.OutDir)
	return nil
}

func gwstress(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := gateway.DefaultConfig()
	if self, err := os.Executable(); err == nil {
		c.BenchBinary = self // gw-floor's plain proxy is this binary's plain-proxy command
	}
	fs := flag.NewFlagSet("inferrail-bench gwstress", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenarios := strings.Join(c.Scenarios, ",")
	verbose := false
	fs.StringVar(&c.GatewayBinary, "gateway-binary", c.GatewayBinary, "inferrail-gateway executable to start")
	fs.StringVar(&c.SimBinary, "sim-binary", c.SimBinary, "inferrail-sim executable to start")
	fs.StringVar(&c.OutDir, "out", c.OutDir, "directory for <scenario>.json and README.md")
	fs.StringVar(&scenarios, "scenarios", scenarios, "comma-separated scenarios to run: "+strings.Join(gateway.Scenarios, ", "))
	fs.IntVar(&c.Streams.Streams, "streams", c.Streams.Streams, "gw-streams: concurrent streams")
	fs.IntVar(&c.Overhead.Requests, "overhead-requests", c.Overhead.Requests, "gw-overhead: requests per leg")
	fs.IntVar(&c.Floor.Rate, "floor-rate", c.Floor.Rate, "gw-floor: request rate, req/s")
	fs.IntVar(&c.Floor.Requests, "floor-requests", c.Floor.Requests, "gw-floor: requests per leg")
	var routingVariants, routingRates string
	fs.StringVar(&routingVariants, "routing-variants", "", "gw-routing: comma-separated variants, each w<system prompt words>-<tok|notok>-<policy>-r<simulators> (default "+
		routingNames(c.Routing.Variants)+")")
	fs.StringVar(&routingRates, "routing-rates", "", "gw-routing: comma-separated rates in req/s for every variant (default: each default variant's own)")
	fs.IntVar(&c.Routing.Requests, "routing-requests", c.Routing.Requests, "gw-routing: requests per leg")
	fs.IntVar(&c.Disconnects.Streams, "disconnect-streams", c.Disconnects.Streams, "gw-disconnects: streams")
	fs.IntVar(&c.Hostile.Hostile, "hostile", c.Hostile.Hostile, "gw-hostile: hostile requests")
	fs.IntVar(&c.Soak.Requests, "soak-requests", c.Soak.Requests, "gw-soak: requests, warmup included")
	fs.BoolVar(&verbose, "v", false, "log the children's life cycle")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("gwstress: unexpected argument %q", fs.Arg(0))
	}
	c.Scenarios = nil
	for s := range strings.SplitSeq(scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.Scenarios = append(c.Scenarios, s)
		}
	}
	if len(c.Scenarios) == 0 {
		return errors.New("gwstress: --scenarios: name at least one scenario")
	}
	if routingVariants != "" || routingRates != "" {
		var rates []int
		for r := range strings.SplitSeq(routingRates, ",") {
			if r = strings.TrimSpace(r); r == "" {
				continue
			}
			n, err := strconv.Atoi(r)
			if err != nil {
				return fmt.Errorf("gwstress: --routing-rates: %q is not a number", r)
			}
			rates = append(rates, n)
		}
		var names []string
		for v := range strings.SplitSeq(routingVariants, ",") {
			if v = strings.TrimSpace(v); v != "" {
				names = append(names, v)
			}
		}
		variants, err := gateway.SelectRoutingVariants(c.Routing.Variants, names, rates)
		if err != nil {
			return fmt.Errorf("gwstress: --routing-variants: %w", err)
		}
		c.Routing.Variants = variants
	}
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	c.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	c.Command = "go run ./cmd/inferrail-bench gwstress " + shellJoin(args)
	if err := gateway.Run(ctx, c); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "results and report written to %s\n", c.OutDir)
	return nil
}

// routingNames lists variants by name.
func routingNames(variants []gateway.RoutingVariant) string {
	names := make([]string, len(variants))
	for i, v := range variants {
		names[i] = v.Name()
	}
	return strings.Join(names, ",")
}

// shellJoin quotes args for a POSIX shell where they need it.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=,:", r))
		}) < 0 {
			q[i] = a
			continue
		}
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func demo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := bench.DefaultDemoConfig()
	fs := flag.NewFlagSet("inferrail-bench demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var ef envFlags
	ef.register(fs)
	policies := strings.Join(c.Policies, ",")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "W1's mean offered rate in req/s")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "schedule length of each run")
	fs.IntVar(&c.SystemPrompts, "system-prompts", c.SystemPrompts, "W1's shared system prompts (0: the workload's default)")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "workload seed")
	fs.StringVar(&policies, "policies", policies, "comma-separated policies, the first the baseline")
	fs.StringVar(&c.Out, "out", "bench/tmp/demo", "directory for the result files, the chart and the report")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("demo: unexpected argument %q", fs.Arg(0))
	}
	c.Policies = nil
	for p := range strings.SplitSeq(policies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			c.Policies = append(c.Policies, p)
		}
	}
	env := ef.env(ctx, stderr, "go run ./cmd/inferrail-bench demo "+shellJoin(args))
	if !ef.verbose {
		// Progress is the demo's own output; the children's warnings still show.
		env.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return bench.Demo(ctx, c, env, stdout)
}

// specFlags registers the flags that say what a run measures and returns a
// function building the spec once the flags are parsed.
func specFlags(fs *flag.FlagSet) func(simArgs []string) (bench.RunSpec, error) {
	s := bench.RunSpec{Replicas: 3, SLO: bench.DefaultSLO(), Warmup: "0.1", Timeout: 5 * time.Minute}
	w := &s.Workload
	w.Workload, w.Model, w.Rate, w.Duration, w.Seed = "w1", "inferrail/sim-8b", 2, 60*time.Second, 1
	fs.StringVar(&s.URL, "url", "", "send to this gateway or engine instead of starting a fleet")
	fs.IntVar(&s.Replicas, "replicas", s.Replicas, "simulators of the run's own fleet")
	fs.StringVar(&s.Policy, "policy", "least_request", "the gateway's routing policy, or a peer router's: peer:vllm-router:cache_aware, peer:sglang-router:round_robin, …")
	fs.StringVar(&w.Workload, "workload", w.Workload, "w1, w2, w3, w4, w5, w6, w8, mix, hot or trace")
	fs.StringVar(&w.Model, "model", w.Model, "model name of every request")
	fs.Float64Var(&w.Rate, "rate", w.Rate, "mean requests per second")
	fs.DurationVar(&w.Duration, "duration", w.Duration, "schedule length (ignored with --requests unless given too)")
	fs.IntVar(&w.Requests, "requests", 0, "stop after this many requests instead (0: by duration)")
	fs.Uint64Var(&w.Seed, "seed", w.Seed, "workload seed")
	fs.StringVar(&w.Arrivals, "arrivals", "", "poisson (default) or gamma")
	fs.Float64Var(&w.CV, "cv", 0, "coefficient of variation of gamma gaps")
	fs.StringVar(&w.Ramp, "ramp", "", "diurnal: the rate follows a day's shape, mean kept")
	fs.IntVar(&w.SystemPrompts, "system-prompts", 0, "w1/hot/mix: distinct shared system prompts (0: the workload's default)")
	fs.Float64Var(&w.Zipf, "zipf", 0, "hot: Zipf exponent over system prompts (0: the workload's default)")
	fs.IntVar(&w.OutputTokens, "output-tokens", 0, "fixed output length (0: the workload's draw)")
	fs.StringVar(&w.TracePath, "trace", "", "trace: Mooncake-format JSONL to replay")
	fs.Float64Var(&w.TimeScale, "time-scale", 0, "trace: multiply timestamps (0: 1)")
	fs.Float64Var(&w.RateMultiplier, "rate-multiplier", 0, "trace: compress arrivals by this factor (0: 1)")
	fs.StringVar(&w.ShareGPTPath, "sharegpt", "", "w2: replay conversations from a ShareGPT JSON file")
	fs.StringVar(&s.Warmup, "warmup", s.Warmup, "left out of the figures: a duration (10s) or a fraction of the requests (0.1)")
	fs.DurationVar(&s.SLO.TTFT, "slo-ttft", s.SLO.TTFT, "goodput SLO: longest TTFT")
	fs.DurationVar(&s.SLO.TPOT, "slo-tpot", s.SLO.TPOT, "goodput SLO: longest time per output token")
	fs.DurationVar(&s.Timeout, "timeout", s.Timeout, "bound on each request")
	fs.Float64Var(&s.Speedup, "speedup", 0, "run the fleet this many times faster than the model's clock; figures stay in the model's time (0: real time)")
	return func(simArgs []string) (bench.RunSpec, error) {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if w.Requests > 0 && !set["duration"] {
			w.Duration = 0 // --requests alone replaces the default duration
		}
		if w.Workload == "trace" {
			// A trace keeps its own arrivals and replays whole unless cut.
			if !set["duration"] {
				w.Duration = 0
			}
			if !set["rate"] {
				w.Rate = 0
			}
		}
		if s.URL != "" {
			s.Policy, s.Replicas = "", 0
			if len(simArgs) > 0 {
				return s, errors.New("simulator flags after -- need a fleet of the run's own; drop --url")
			}
		}
		s.SimArgs = simArgs
		return s, s.Validate()
	}
}

// envFlags registers the flags that say how runs are carried out.
type envFlags struct {
	simBinary, gatewayBinary string
	peerVenv, peerSetup      string
	verbose                  bool
}

func (e *envFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&e.simBinary, "sim-binary", "bin/inferrail-sim", "inferrail-sim executable to start")
	fs.StringVar(&e.gatewayBinary, "gateway-binary", "bin/inferrail-gateway", "inferrail-gateway executable to start")
	fs.StringVar(&e.peerVenv, "peer-venv", ".venv/peers", "venv holding the peer routers (policies peer:<router>:<policy>)")
	fs.StringVar(&e.peerSetup, "peer-setup", "bench/peers/venv.sh", "script that makes --peer-venv before the first peer run (empty: use the venv as it is)")
	fs.BoolVar(&e.verbose, "v", false, "log the children's life cycle")
}

// preparePeers makes the peer routers' venv when any of runs needs it.
func (e *envFlags) preparePeers(ctx context.Context, env bench.RunEnv, runs []bench.RunSpec) error {
	if !bench.UsesPeers(runs) || e.peerSetup == "" {
		return nil
	}
	return procs.MakePeerVenv(ctx, e.peerSetup, e.peerVenv, env.Logger)
}

func (e *envFlags) env(ctx context.Context, stderr io.Writer, command string) bench.RunEnv {
	level := slog.LevelInfo
	if e.verbose {
		level = slog.LevelDebug
	}
	return bench.RunEnv{
		SimBinary: e.simBinary, GatewayBinary: e.gatewayBinary,
		PeerVenv:    e.peerVenv,
		Command:     command,
		Environment: measure.CurrentEnvironment(ctx),
		Logger:      slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	}
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inferrail-bench run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: inferrail-bench run [flags] [-- simulator flags]")
		fs.PrintDefaults()
	}
	spec := specFlags(fs)
	var ef envFlags
	ef.register(fs)
	out := fs.String("out", "bench/results/runs", "directory for the result file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := spec(fs.Args())
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	env := ef.env(ctx, stderr, "go run ./cmd/inferrail-bench run "+shellJoin(args))
	if err := ef.preparePeers(ctx, env, []bench.RunSpec{s}); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	r, err := bench.Measure(ctx, s, env)
	if r != nil {
		path := filepath.Join(*out, s.FileName())
		if werr := bench.WriteRunResult(path, r); werr != nil {
			return errors.Join(err, werr)
		}
		bench.WriteSummary(stdout, r)
		fmt.Fprintf(stdout, "result written to %s\n", path)
	}
	return err
}

func compareCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inferrail-bench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: inferrail-bench compare --policies a,b,c [flags] [-- simulator flags]")
		fs.PrintDefaults()
	}
	spec := specFlags(fs)
	var ef envFlags
	ef.register(fs)
	policies := fs.String("policies", "round_robin,least_request", "comma-separated policies, each on the same requests")
	reps := fs.Int("reps", 1, "repetitions, each with the next workload seed")
	jobs := fs.Int("jobs", 1, "fleets side by side")
	out := fs.String("out", "bench/results/compare", "directory for the result files")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := spec(fs.Args())
	if err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	if s.URL != "" {
		return errors.New("compare: a comparison starts its own fleets; drop --url")
	}
	var pols []string
	for p := range strings.SplitSeq(*policies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			pols = append(pols, p)
		}
	}
	if len(pols) == 0 || *reps < 1 {
		return errors.New("compare: name at least one policy and at least one repetition")
	}
	runs := bench.ComparePlan(s, pols, *reps)
	for i := range runs {
		if err := runs[i].Validate(); err != nil {
			return fmt.Errorf("compare: %w", err)
		}
	}
	env := ef.env(ctx, stderr, "go run ./cmd/inferrail-bench compare "+shellJoin(args))
	if err := ef.preparePeers(ctx, env, runs); err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	var results []*bench.RunResult
	sum, err := bench.Sweep(ctx, runs, bench.SweepOptions{Out: *out, Jobs: *jobs}, env)
	for _, r := range runs {
		if res, rerr := bench.ReadRunResult(filepath.Join(*out, r.FileName())); rerr == nil && res.Spec.Equal(&r) {
			results = append(results, res)
		}
	}
	fmt.Fprint(stdout, bench.RenderCompareTable(results))
	fmt.Fprintf(stdout, "%d runs (%d from earlier result files), results in %s\n", len(results), sum.Skipped, *out)
	return err
}

func sweepCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inferrail-bench sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var ef envFlags
	ef.register(fs)
	file := fs.String("file", "", "sweep file (TOML)")
	jobs := fs.Int("jobs", 1, "fleets side by side, each on its own ports")
	out := fs.String("out", "", "results directory (default: the file's out)")
	reuseDirs := fs.String("reuse", "", "comma-separated results directories whose runs of the same spec are copied instead of run again")
	trace := fs.String("trace", "", "Mooncake-format trace the file's trace points replay")
	dry := fs.Bool("n", false, "print the plan and stop")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("sweep: unexpected argument %q", fs.Arg(0))
	}
	if *file == "" {
		return errors.New("sweep: --file is required")
	}
	f, err := bench.LoadSweep(*file)
	if err != nil {
		return err
	}
	if *out == "" {
		*out = f.Out
	}
	if *out == "" {
		return errors.New("sweep: no results directory: set out in the file or --out")
	}
	runs, skipped := f.Plan(bench.PlanOptions{TracePath: *trace})
	for _, s := range skipped {
		fmt.Fprintln(stderr, "skipped:", s)
	}
	if *dry {
		for _, r := range runs {
			fmt.Fprintln(stdout, r.FileName())
		}
		fmt.Fprintf(stdout, "%d runs\n", len(runs))
		return nil
	}
	env := ef.env(ctx, stderr, "go run ./cmd/inferrail-bench sweep "+shellJoin(args))
	if err := ef.preparePeers(ctx, env, runs); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	var reuse []string
	for _, d := range strings.Split(*reuseDirs, ",") {
		if d = strings.TrimSpace(d); d != "" {
			reuse = append(reuse, d)
		}
	}
	sum, err := bench.Sweep(ctx, runs, bench.SweepOptions{Out: *out, Jobs: *jobs, Reuse: reuse, OnResult: func(path string, r *bench.RunResult) {
		fmt.Fprintf(stdout, "%s: %d/%d ok, TTFT p99 %.0f ms, goodput %.2f req/s, hit %.2f\n", filepath.Base(path),
			r.Measurements.Succeeded, r.Measurements.Measured, r.Measurements.TTFT.P99*1e3, r.Measurements.GoodputRPS, r.Measurements.HitRate)
	}}, env)
	fmt.Fprintf(stdout, "sweep: %d planned, %d already done, %d reused, %d ran, %d failed; results in %s\n", sum.Planned, sum.Skipped, sum.Reused, sum.Ran, len(sum.Failed), *out)
	for _, f := range sum.Failed {
		fmt.Fprintln(stdout, "failed:", f)
	}
	return err
}

func reportCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inferrail-bench report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "directory of result files")
	out := fs.String("out", "", "directory for report.md")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" || *out == "" || fs.NArg() > 0 {
		return errors.New("report: --in and --out are required, and nothing else")
	}
	path, err := bench.WriteRunReport(*in, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "report written to %s\n", path)
	return nil
}
