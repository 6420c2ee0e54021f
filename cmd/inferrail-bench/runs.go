package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inferrail/inferrail/internal/bench"
	"github.com/inferrail/inferrail/internal/cli"
	"github.com/inferrail/inferrail/internal/decisionlog"
	"github.com/inferrail/inferrail/internal/harness"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/progress"
	"github.com/inferrail/inferrail/internal/workload"
)

// specFlags registers the flags that say what a run measures and returns a
// function building the spec once the flags are parsed. A trace is read
// there, once, into tr, and a ShareGPT file into sg.
func specFlags(fs *flag.FlagSet, tr *readTrace, sg *readShareGPT) func(ctx context.Context, simArgs []string) (bench.RunSpec, error) {
	s := bench.RunSpec{Replicas: 3, SLO: bench.DefaultSLO(), Warmup: "0.1", Timeout: 5 * time.Minute}
	w := &s.Workload
	w.Workload, w.Model, w.Rate, w.Duration, w.Seed = "w1", "inferrail/sim-8b", 2, 60*time.Second, 1
	fs.StringVar(&s.URL, "url", "", "send to this gateway or engine instead of starting a fleet")
	fs.StringVar(&s.URL, "base-url", "", "the same as --url")
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
	fs.IntVar(&w.MaxPromptTokens, "max-prompt-tokens", 0, "w2, w3: end a conversation before a turn would pass this many tokens (0: 24,000); trace: cut longer inputs to it (0: whole)")
	fs.StringVar(&s.Warmup, "warmup", s.Warmup, "left out of the figures: a duration (10s) or a fraction of the requests (0.1)")
	fs.DurationVar(&s.SLO.TTFT, "slo-ttft", s.SLO.TTFT, "goodput SLO: longest TTFT")
	fs.DurationVar(&s.SLO.TPOT, "slo-tpot", s.SLO.TPOT, "goodput SLO: longest time per output token")
	fs.DurationVar(&s.Timeout, "timeout", s.Timeout, "bound on each request")
	fs.Float64Var(&s.Speedup, "speedup", 0, "run the fleet this many times faster than the model's clock; figures stay in the model's time (0: real time)")
	fs.StringVar(&s.Index, "index", bench.IndexApproximate, "the gateway's index.mode: approximate, or exact or auto with the simulators publishing KV events the gateway follows")
	fs.IntVar(&s.Gateways, "gateways", 1, "gateways with the same config in front of the same simulators, the client sending the requests to each in turn")
	fs.StringVar(&s.GatewayPatch, "gateway-patch", "", `JSON merge patch applied to the gateway config the run generates, e.g. '{"routing":{"session_affinity":true}}'`)
	fs.StringVar(&s.Variant, "variant", "", "name of --gateway-patch in the result's file name (required with it)")
	return func(ctx context.Context, simArgs []string) (bench.RunSpec, error) {
		var err error
		if s.Index, err = bench.NormalizeIndex(s.Index); err != nil {
			return s, err
		}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if w.Requests > 0 && !set["duration"] {
			w.Duration = 0 // --requests alone replaces the default duration
		}
		if s.Gateways < 1 {
			return s, errors.New("--gateways must be at least 1")
		}
		if s.Gateways == 1 {
			s.Gateways = 0 // one gateway: the same run as before the option
		}
		if s.URL != "" {
			if err := ownFleetOnly(fs, "policy", "replicas"); err != nil {
				return s, err
			}
			s.Policy, s.Replicas = "", 0
			if len(simArgs) > 0 {
				return s, errors.New("simulator flags after -- need a fleet of the run's own; drop --url")
			}
		}
		if w.Workload == "trace" {
			// A trace keeps its own arrivals and replays whole unless cut.
			if !set["duration"] {
				w.Duration = 0
			}
			if !set["rate"] {
				w.Rate = 0
			}
			var err error
			if simArgs, err = tr.shape(ctx, w, set["model"], s.URL == "", simArgs); err != nil {
				return s, err
			}
		}
		if w.Workload == workload.W2 {
			if err := sg.record(ctx, w); err != nil {
				return s, err
			}
		}
		s.SimArgs = simArgs
		return s, s.Validate()
	}
}

// readTrace is the trace a command's flags name, read once: a pipe or a
// FIFO cannot be opened twice.
type readTrace struct {
	path string
	recs []workload.TraceRecord
	// digest is the SHA-256 of the bytes read, which the specs replaying
	// the trace record (workload.Spec.TraceDigest).
	digest string
}

// shape reads w's trace and takes from it what its lines state (a traffic
// capture's do): the model they all name, unless --model is given, and the
// block size they all state, for the run's own simulators (ownFleet)
// unless their flags set one. A fleet at --url is what it is.
func (tr *readTrace) shape(ctx context.Context, w *workload.Spec, modelSet, ownFleet bool, simArgs []string) ([]string, error) {
	if w.TracePath == "" {
		return simArgs, nil
	}
	if err := tr.read(ctx, w.TracePath); err != nil {
		return nil, err
	}
	// A result records what it replayed, so that a sweep or a comparison
	// does not take one of another trace at the same path for its own.
	w.TraceDigest = tr.digest
	model, bs := workload.TraceShape(tr.recs)
	if model != "" && !modelSet {
		w.Model = model
	}
	if bs > 0 && ownFleet && !slices.ContainsFunc(simArgs, func(a string) bool { return strings.Contains(a, "block-size") }) {
		simArgs = append(slices.Clip(simArgs), "--block-size="+strconv.Itoa(bs))
	}
	return simArgs, nil
}

// read reads the trace at path, unless it is the one already read: the
// runs of a sweep or a comparison share one reading.
func (tr *readTrace) read(ctx context.Context, path string) error {
	if tr.recs != nil && tr.path == path {
		return nil
	}
	recs, digest, err := workload.ReadTraceDigest(ctx, path)
	if err != nil {
		return err
	}
	tr.path, tr.recs, tr.digest = path, recs, digest
	return nil
}

// readShareGPT holds the ShareGPT files a command's runs replay, each
// read once, by path: a pipe or a FIFO cannot be opened twice. Safe for
// concurrent reads once filled.
type readShareGPT struct {
	files map[string]shareGPTFile
}

type shareGPTFile struct {
	convs  []workload.Conversation
	digest string
}

// record reads w's ShareGPT file, unless read already, and records the
// SHA-256 of its bytes in w (workload.Spec.ShareGPTDigest), so that a
// result names the file it replayed and not only its path.
func (sg *readShareGPT) record(ctx context.Context, w *workload.Spec) error {
	if w.ShareGPTPath == "" {
		return nil
	}
	f, ok := sg.files[w.ShareGPTPath]
	if !ok {
		convs, digest, err := workload.ReadShareGPT(ctx, w.ShareGPTPath)
		if err != nil {
			return err
		}
		f = shareGPTFile{convs, digest}
		if sg.files == nil {
			sg.files = map[string]shareGPTFile{}
		}
		sg.files[w.ShareGPTPath] = f
	}
	w.ShareGPTDigest = f.digest
	return nil
}

// generate makes a spec's requests from the trace or ShareGPT file
// already read when the spec replays it, else as
// workload.GenerateRequests does.
func (e *envFlags) generate(ctx context.Context, s workload.Spec) (*workload.Requests, error) {
	if tr := &e.trace; tr.recs != nil && s.Workload == workload.Trace && s.TracePath == tr.path && s.TraceDigest == tr.digest {
		return workload.GenerateTrace(ctx, s, tr.recs)
	}
	if f, ok := e.sharegpt.files[s.ShareGPTPath]; ok && s.ShareGPTPath != "" && s.ShareGPTDigest == f.digest {
		return workload.GenerateShareGPT(ctx, s, f.convs)
	}
	return workload.GenerateRequests(ctx, s)
}

// envFlags registers the flags that say how runs are carried out.
type envFlags struct {
	trace                    readTrace
	sharegpt                 readShareGPT
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
	return bench.RunEnv{
		SimBinary: e.simBinary, GatewayBinary: e.gatewayBinary,
		PeerVenv:    e.peerVenv,
		Command:     command,
		Environment: measure.CurrentEnvironment(ctx),
		Logger:      cli.Logger(stderr, e.verbose),
		Progress:    progressOn(stderr),
		Generate:    e.generate,
	}
}

// progressOn is where runs show their progress: redrawn in place when
// stderr is a terminal, else a line per run.
func progressOn(stderr io.Writer) *progress.Display {
	if f, ok := stderr.(*os.File); ok {
		return progress.For(f)
	}
	return &progress.Display{W: stderr}
}

// runFlags is the flag set of a command that carries out runs of a spec
// given by flags (specFlags), the simulator flags after --.
func runFlags(name, synopsis string, stderr io.Writer) (*flag.FlagSet, func(ctx context.Context, simArgs []string) (bench.RunSpec, error), *envFlags) {
	fs := flag.NewFlagSet("inferrail-bench "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: inferrail-bench "+name+" "+synopsis)
		fs.PrintDefaults()
	}
	ef := &envFlags{}
	spec := specFlags(fs, &ef.trace, &ef.sharegpt)
	ef.register(fs)
	return fs, spec, ef
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, spec, ef := runFlags("run", "[flags] [-- simulator flags]", stderr)
	out := fs.String("out", "bench/results/runs", "directory for the result file, or the file itself when it ends in .json")
	capture := fs.String("capture", "", "the gateway captures the run's traffic to this file, a trace --workload trace replays (with --speedup, replay with the same --speedup and --time-scale)")
	outcomes := fs.String("outcomes", "", "write each request's outcome (schedule, replica, request ID, TTFT, estimate, tokens) to this file, one JSON line each")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := spec(ctx, fs.Args())
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	if s.URL != "" {
		if err := ownFleetOnly(fs, "capture", "sim-binary", "gateway-binary"); err != nil {
			return fmt.Errorf("run: %w", err)
		}
	}
	env := ef.env(ctx, stderr, commandLine("run", args))
	env.Outcomes = *outcomes
	if *capture != "" {
		if env.Capture, err = filepath.Abs(*capture); err != nil {
			return fmt.Errorf("run: %w", err)
		}
		if err := bench.PrepareCapture(env.Capture); err != nil {
			return fmt.Errorf("run: --capture: %w", err)
		}
	}
	path := filepath.Join(*out, s.FileName())
	if strings.HasSuffix(*out, ".json") {
		path = *out // the file itself, as the specification's --out names it
	}
	unmadeOut, err := resultDirEarly(path)
	if err != nil {
		return fmt.Errorf("run: --out: %w", err)
	}
	unmadeOutcomes, err := createEarly(*outcomes)
	if err != nil {
		unmadeOut()
		return fmt.Errorf("run: --outcomes: %w", err)
	}
	unmade := func() { unmadeOutcomes(); unmadeOut() }
	if err := ef.preparePeers(ctx, env, []bench.RunSpec{s}); err != nil {
		unmade()
		return fmt.Errorf("run: %w", err)
	}
	r, err := bench.Measure(ctx, s, env)
	switch {
	case r == nil:
		unmade()
		return err
	case err != nil:
		// An interrupted run would count its unsent requests as errors:
		// no result file, as a sweep writes none for it either, and no
		// outcomes file (Measure wrote none; the empty one made early goes).
		unmade()
		return fmt.Errorf("%w; no result written", err)
	}
	if err := bench.WriteRunResult(path, r); err != nil {
		return err
	}
	bench.WriteSummary(stdout, r)
	fmt.Fprintf(stdout, "result written to %s\n", path)
	if m := r.Measurements; m.Succeeded == 0 {
		return fmt.Errorf("run: none of the %d measured requests succeeded", m.Measured)
	}
	return nil
}

// ownFleetOnly refuses the flags named that only a fleet of the run's own
// reads, when set.
func ownFleetOnly(fs *flag.FlagSet, names ...string) error {
	var set []string
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(names, f.Name) {
			set = append(set, "--"+f.Name)
		}
	})
	if len(set) > 0 {
		return fmt.Errorf("%s: only for a fleet of the run's own; drop --url", strings.Join(set, ", "))
	}
	return nil
}

// createEarly creates path (when not empty) before a run, so that one the
// run cannot write fails now rather than after the run. It must be a
// regular file if it exists: opening a FIFO with no reader blocked the
// run forever, deaf to Ctrl-C, and one with a reader would have seen the
// file end here. unmade removes it again when it did not exist before, for
// a run that wrote nothing.
func createEarly(path string) (unmade func(), err error) {
	unmade = func() {}
	if path == "" {
		return unmade, nil
	}
	if err := harness.RegularOrAbsent(path); err != nil {
		return unmade, err
	}
	_, statErr := os.Stat(path)
	f, err := bench.OpenOutput(path, os.O_WRONLY|os.O_CREATE)
	if err != nil {
		return unmade, err
	}
	if err := f.Close(); err != nil {
		return unmade, err
	}
	if errors.Is(statErr, os.ErrNotExist) {
		unmade = func() { os.Remove(path) }
	}
	return unmade, nil
}

// resultDirEarly makes the directory of the result file path before a
// run and checks it takes files (the result is written there through a
// temporary file) and that path is a regular file if it exists, so that an --out the
// run cannot write fails now rather than after the run. unmade removes the
// directories it made, for a run that wrote nothing.
func resultDirEarly(path string) (unmade func(), err error) {
	unmade = func() {}
	dir := filepath.Dir(path)
	var made []string // the directories MkdirAll makes, deepest first
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, os.ErrNotExist) || filepath.Dir(d) == d {
			break
		}
		made = append(made, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return unmade, err
	}
	unmade = func() {
		for _, d := range made {
			os.Remove(d) // only if still empty
		}
	}
	if err := bench.WritableDir(dir); err != nil {
		unmade()
		return func() {}, err
	}
	// The result is renamed into place: a FIFO or a device there would be
	// replaced by a regular file, unbeknown to whatever reads it.
	if err := harness.RegularOrAbsent(path); err != nil {
		unmade()
		return func() {}, err
	}
	return unmade, nil
}

func compareCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, spec, ef := runFlags("compare", "--policies a,b,c [flags] [-- simulator flags]", stderr)
	policies := fs.String("policies", "round_robin,least_request", "comma-separated policies, each on the same requests")
	reps := fs.Int("reps", 1, "repetitions, each with the next workload seed")
	jobs := fs.Int("jobs", 1, "fleets side by side")
	out := fs.String("out", "bench/results/compare", "directory for the result files")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := spec(ctx, fs.Args())
	if err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	if s.URL != "" {
		return errors.New("compare: a comparison starts its own fleets; drop --url")
	}
	if err := ownFleetOnly(fs, "policy"); err != nil {
		return errors.New("compare: --policy: name the policies with --policies")
	}
	pols := list(*policies)
	if len(pols) == 0 || *reps < 1 {
		return errors.New("compare: name at least one policy and at least one repetition")
	}
	if *reps > bench.MaxReps {
		return fmt.Errorf("compare: --reps must be at most %d", bench.MaxReps)
	}
	if *jobs < 1 {
		return errors.New("compare: --jobs must be at least 1")
	}
	runs := bench.ComparePlan(s, pols, *reps)
	for i := range runs {
		if err := runs[i].Validate(); err != nil {
			return fmt.Errorf("compare: %w", err)
		}
	}
	env := ef.env(ctx, stderr, commandLine("compare", args))
	if err := ef.preparePeers(ctx, env, runs); err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	var results []*bench.RunResult
	sum, err := bench.Sweep(ctx, runs, bench.SweepOptions{Out: *out, Jobs: *jobs, Name: "compare"}, env)
	for _, r := range runs {
		if res, rerr := bench.ReadRunResult(filepath.Join(*out, r.FileName())); rerr == nil && res.Spec.Equal(&r) {
			results = append(results, res)
		}
	}
	fmt.Fprint(stdout, bench.RenderCompareTable(results))
	fmt.Fprintf(stdout, "%d runs (%d from earlier result files), results in %s\n", len(results), sum.Skipped, *out)
	return err
}

func replayCheckCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, spec, ef := runFlags("replay-check", "--policies a,b,c [flags] [-- simulator flags]", stderr)
	policies := fs.String("policies", "round_robin,least_request,prefix_hash,cost_model", "comma-separated policies, each run live and on the replayed capture")
	out := fs.String("out", "bench/results/capture", "directory for the captures, result files and summary.md")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := spec(ctx, fs.Args())
	if err != nil {
		return fmt.Errorf("replay-check: %w", err)
	}
	if err := ownFleetOnly(fs, "policy"); err != nil {
		return errors.New("replay-check: --policy: name the policies with --policies")
	}
	c := bench.ReplayCheckConfig{Spec: s, Policies: list(*policies), Out: *out}
	command := commandLine("replay-check", args)
	rows, err := bench.ReplayCheck(ctx, c, ef.env(ctx, stderr, command))
	if err != nil {
		return err
	}
	table := bench.RenderReplayCheck(rows)
	fmt.Fprint(stdout, table)
	summary := fmt.Sprintf("# Replaying a traffic capture\n\n%s\n\nEach policy ran %s at %g req/s (seed %d) live, the gateway capturing the traffic;"+
		" then %s was replayed (`--workload trace`) under each policy. Gaps are in points of hit rate.\n\n%s",
		"`"+command+"`", s.Workload.Workload, s.Workload.Rate, s.Workload.Seed, filepath.Base(rows[0].ReplayedCapture), table)
	return os.WriteFile(filepath.Join(*out, "summary.md"), []byte(summary), 0o644)
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
	if *jobs < 1 {
		return errors.New("sweep: --jobs must be at least 1")
	}
	reuse := list(*reuseDirs)
	for _, dir := range reuse {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return fmt.Errorf("sweep: --reuse %s: not a directory", dir)
		}
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
	// The trace is read here, once, for every run that replays it (each
	// read it again, and a pipe or a FIFO had nothing left after the
	// first), and shapes them as it shapes run's: its model unless the file
	// names one, its block size unless the simulator flags set one.
	for i := range runs {
		r := &runs[i]
		if r.Workload.Workload == workload.W2 {
			if err := ef.sharegpt.record(ctx, &r.Workload); err != nil {
				return fmt.Errorf("sweep: %w", err)
			}
		}
		if r.Workload.Workload != workload.Trace {
			continue
		}
		if r.SimArgs, err = ef.trace.shape(ctx, &r.Workload, f.Model != "", r.URL == "", r.SimArgs); err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
	}
	env := ef.env(ctx, stderr, commandLine("sweep", args))
	if err := ef.preparePeers(ctx, env, runs); err != nil {
		return fmt.Errorf("sweep: %w", err)
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
	path, skipped, err := bench.WriteRunReport(*in, *out)
	for _, s := range skipped {
		fmt.Fprintln(stderr, "warning:", s)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "report written to %s\n", path)
	return nil
}

// plotCmd is report for the result files named, wherever they are, with
// the flags before or after them: the specification's
// "plot results/try/w1.json --out report/try".
func plotCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inferrail-bench plot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "directory for report.md and the charts")
	var files []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		files, args = append(files, fs.Arg(0)), fs.Args()[1:]
	}
	if len(files) == 0 || *out == "" {
		return errors.New("plot: name one or more result files, and --out")
	}
	var results []*bench.RunResult
	for _, f := range files {
		r, err := bench.ReadRunResult(f)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		if r.Spec.Workload.Workload == "" {
			return fmt.Errorf("plot: %s is not a run's result file", f)
		}
		results = append(results, r)
	}
	path, err := bench.WriteReportOf(results, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "report written to %s\n", path)
	return nil
}

func tailCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inferrail-bench tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	outcomes := fs.String("outcomes", "", "a run's outcomes file (run --outcomes)")
	decisions := fs.String("decisions", "", "the run's decision log (observability.decision_log with sample_rate 1), to show how each request was decided")
	var o bench.TailOptions
	fs.IntVar(&o.Top, "top", 0, "how many of the slowest requests to list (0: those that set the p99, the one at its rank and every one above)")
	fs.Float64Var(&o.MissShare, "miss", 0.5, "a request is a miss when its engine found less than this share of its prompt cached")
	fs.Float64Var(&o.Speedup, "speedup", 1, "the run's --speedup, which the decision log's seconds are faster by (0: real time, as 1)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *outcomes == "" || fs.NArg() > 0 {
		return errors.New("tail: --outcomes is required, and no arguments")
	}
	if o.Top < 0 || !(o.MissShare > 0 && o.MissShare <= 1) || !(o.Speedup == 0 || o.Speedup >= 1) {
		return errors.New("tail: --top must be >= 0, --miss in (0, 1] and --speedup 0 or >= 1")
	}
	outs, err := readWith(*outcomes, bench.ReadOutcomes)
	if err != nil {
		return fmt.Errorf("tail: %w", err)
	}
	var decs map[string]*decisionlog.Record
	if *decisions != "" {
		if decs, err = readWith(*decisions, bench.ReadDecisions); err != nil {
			return fmt.Errorf("tail: %w", err)
		}
	}
	for _, w := range bench.TailWarnings(outs, decs) {
		fmt.Fprintln(stderr, "warning:", w)
	}
	bench.WriteTail(stdout, outs, decs, o)
	return nil
}

// readWith opens path and reads it with read; errors name path.
func readWith[T any](path string, read func(io.Reader) (T, error)) (T, error) {
	f, err := os.Open(path)
	if err != nil {
		var zero T
		return zero, err
	}
	defer f.Close()
	v, err := read(f)
	if err != nil {
		return v, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
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
	fs.IntVar(&c.Index.Requests, "index-requests", c.Index.Requests, "W2 requests of the index comparison, approximate against exact (0: skip it)")
	fs.Float64Var(&c.Index.Rate, "index-rate", c.Index.Rate, "W2's mean offered rate in req/s in the index comparison")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("demo: unexpected argument %q", fs.Arg(0))
	}
	c.Policies = list(policies)
	env := ef.env(ctx, stderr, commandLine("demo", args))
	if !ef.verbose {
		// Progress is the demo's own output; the children's warnings still show.
		env.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return bench.Demo(ctx, c, env, stdout)
}
