package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/workload"
	"github.com/pelletier/go-toml/v2"
)

// SweepFile is a sweep's TOML file: settings shared by every point, then
// the points. A point's own settings override the shared ones.
type SweepFile struct {
	// Out is the directory result files go to, unless the command line
	// names another.
	Out string `toml:"out"`
	// Model is the model name of every request. Default inferrail/sim-8b.
	Model string `toml:"model"`
	// Replicas is the number of simulators per fleet. Default 3.
	Replicas int `toml:"replicas"`
	// SimArgs are extra simulator flags. Nil adds none.
	SimArgs []string `toml:"sim_args"`
	// Policies run innermost, in this order. Required here or per point.
	Policies []string `toml:"policies"`
	// Reps is the number of repetitions of every point and rate, each with
	// workload seed Seed + rep. Default 1.
	Reps int `toml:"reps"`
	// Seed is the workload seed of the first repetition. Default 1.
	Seed uint64 `toml:"seed"`
	// Duration is the schedule length of every run; Requests, when > 0,
	// caps the requests instead.
	Duration Duration `toml:"duration"`
	Requests int      `toml:"requests"`
	// Warmup is a duration ("10s") or a fraction of the requests ("0.1").
	Warmup string `toml:"warmup"`
	// SLOTTFT and SLOTPOT judge goodput. Default 2s and 100ms.
	SLOTTFT Duration `toml:"slo_ttft"`
	SLOTPOT Duration `toml:"slo_tpot"`
	// Timeout bounds each request on the wall clock. Default 5m.
	Timeout Duration `toml:"timeout"`
	// Speedup runs every fleet this many times faster than the model's
	// clock (see RunSpec.Speedup); rates, durations and figures stay in
	// the model's time. Default 1.
	Speedup float64 `toml:"speedup"`
	// Index are the gateway's index modes (approximate, exact, auto) every
	// policy runs under, innermost after the policy; a peer router runs
	// once whatever they are, having no such mode. Default [approximate].
	Index []string `toml:"index"`
	// Gateways are the numbers of gateways, with the same config, every
	// gateway policy runs with (RunSpec.Gateways), innermost after the
	// index mode; a peer router runs alone. Default [1].
	Gateways []int `toml:"gateways"`
	// Variants are settings measured beside the defaults: each of the
	// policies a variant names runs once more under its gateway patch,
	// right after its run with the defaults. Default none.
	Variants []SweepVariant `toml:"variants"`

	Points []SweepPoint `toml:"points"`
}

// SweepPoint is a workload and its rates. Zero fields take the file's
// settings or the workload's defaults.
type SweepPoint struct {
	// Name names the point in file names and the report; unique. Default
	// the workload.
	Name string `toml:"name"`
	// Workload is w1 … w8, mix, hot or trace. Required.
	Workload string `toml:"workload"`
	// Rates are mean requests per second; for a trace point, multipliers of
	// the trace's own rate. At least one.
	Rates []float64 `toml:"rates"`

	Policies []string `toml:"policies"`
	Reps     int      `toml:"reps"`
	Duration Duration `toml:"duration"`
	Requests int      `toml:"requests"`
	Warmup   string   `toml:"warmup"`
	SimArgs  []string `toml:"sim_args"`
	Index    []string `toml:"index"`

	Arrivals      string  `toml:"arrivals"`
	CV            float64 `toml:"cv"`
	Ramp          string  `toml:"ramp"`
	SystemPrompts int     `toml:"system_prompts"`
	Zipf          float64 `toml:"zipf"`
	OutputTokens  int     `toml:"output_tokens"`
	TimeScale     float64 `toml:"time_scale"`
	ShareGPT      string  `toml:"sharegpt"`
	// MaxPromptTokens bounds prompts (w2, w3, trace; see workload.Spec).
	MaxPromptTokens int `toml:"max_prompt_tokens"`
	// Replicas are the fleet sizes the point runs on, each a fleet of its
	// own; default the file's. Several make a sizing point: the report
	// finds each policy's smallest fleet that serves the point's load
	// within the SLO.
	Replicas []int `toml:"replicas"`
	// SLOTTFT is the point's own TTFT target, for a workload whose prompts
	// take longer than the file's to prefill even on an idle engine;
	// default the file's.
	SLOTTFT Duration `toml:"slo_ttft"`
}

// Duration is a time.Duration written as a string ("90s") in TOML.
type Duration time.Duration

// UnmarshalText reads a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// ParseSweep reads a sweep file strictly: unknown keys are errors, and
// every problem of the settings is reported at once, with its path.
func ParseSweep(data []byte) (*SweepFile, error) {
	var f SweepFile
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		var sm *toml.StrictMissingError
		if errors.As(err, &sm) {
			return nil, fmt.Errorf("unknown keys:\n%s", sm.String())
		}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, fmt.Errorf("line %d, column %d: %s", row, col, de.Error())
		}
		return nil, err
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return &f, nil
}

// LoadSweep reads and checks the sweep file at path.
func LoadSweep(path string) (*SweepFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := ParseSweep(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Validate reports every problem of f at once, each with its path.
func (f *SweepFile) Validate() error {
	var errs []error
	fail := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
	}
	if f.Replicas < 0 || f.Replicas > maxReplicas {
		fail("replicas", "must be within 1-%d, not %d", maxReplicas, f.Replicas)
	}
	if f.Reps < 0 || f.Reps > MaxReps {
		fail("reps", "must be within 1-%d, not %d", MaxReps, f.Reps)
	}
	if f.Duration < 0 || f.SLOTTFT < 0 || f.SLOTPOT < 0 || f.Timeout < 0 {
		fail("duration, slo_ttft, slo_tpot, timeout", "must not be negative")
	}
	// A run refuses what its result file could not hold (checkBounds);
	// refused here, a sweep stops before its first run, not at the run
	// that reaches the value.
	for _, d := range []struct {
		path string
		d    Duration
	}{{"duration", f.Duration}, {"slo_ttft", f.SLOTTFT}, {"slo_tpot", f.SLOTPOT}, {"timeout", f.Timeout}} {
		errs = append(errs, checkLongest(d.path, d.d)...)
	}
	if _, err := ParseWarmup(f.Warmup); err != nil {
		fail("warmup", "%v", err)
	}
	if f.Speedup != 0 && !(f.Speedup >= 1 && f.Speedup <= maxSpeedup) {
		fail("speedup", "must be within 1-%d, not %v", maxSpeedup, f.Speedup)
	}
	if len(f.Points) == 0 {
		fail("points", "at least one is required")
	}
	names := map[string]int{}
	known := workloadNames()
	for i, p := range f.Points {
		path := fmt.Sprintf("points[%d]", i)
		switch {
		case p.Workload == "":
			fail(path+".workload", "required")
		case !slices.Contains(known, p.Workload):
			fail(path+".workload", "must be one of %s, not %q", strings.Join(known, ", "), p.Workload)
		}
		name := p.pointName()
		if j, ok := names[name]; ok && name != "" {
			fail(path+".name", "%q is also points[%d]'s name; give each point its own", name, j)
		}
		names[name] = i
		if len(p.Rates) == 0 {
			fail(path+".rates", "at least one is required")
		}
		errs = append(errs, f.checkRates(path, &p)...)
		if len(p.Policies) == 0 && len(f.Policies) == 0 {
			fail(path+".policies", "no policies here or in the shared settings")
		}
		errs = append(errs, checkPolicies(path+".policies", p.Policies)...)
		if p.Reps < 0 || p.Reps > MaxReps {
			fail(path+".reps", "must be within 1-%d, not %d", MaxReps, p.Reps)
		}
		if p.Duration < 0 {
			fail(path+".duration", "must not be negative")
		}
		if p.SLOTTFT < 0 {
			fail(path+".slo_ttft", "must not be negative")
		}
		errs = append(errs, checkLongest(path+".duration", p.Duration)...)
		errs = append(errs, checkLongest(path+".slo_ttft", p.SLOTTFT)...)
		if p.Duration == 0 && f.Duration == 0 && p.Requests == 0 && f.Requests == 0 && p.Workload != "trace" {
			fail(path+".duration", "no duration or requests here or in the shared settings")
		}
		if p.Warmup != "" {
			if _, err := ParseWarmup(p.Warmup); err != nil {
				fail(path+".warmup", "%v", err)
			}
		}
		if p.Arrivals != "" && p.Arrivals != "poisson" && p.Arrivals != "gamma" {
			fail(path+".arrivals", "must be poisson or gamma, not %q", p.Arrivals)
		}
		if p.Arrivals == "gamma" && !(p.CV > 0) {
			fail(path+".cv", "gamma arrivals need a cv > 0")
		}
		if p.MaxPromptTokens < 0 {
			fail(path+".max_prompt_tokens", "must be >= 0")
		} else if p.MaxPromptTokens > 0 && p.Workload != "w2" && p.Workload != "w3" && p.Workload != "trace" {
			fail(path+".max_prompt_tokens", "only for w2, w3 and trace")
		}
		if p.Ramp != "" && p.Ramp != "diurnal" {
			fail(path+".ramp", "must be empty or diurnal, not %q", p.Ramp)
		}
		errs = append(errs, checkIndexModes(path+".index", p.Index)...)
		errs = append(errs, checkFleetSizes(path+".replicas", p.Replicas)...)
	}
	errs = append(errs, checkIndexModes("index", f.Index)...)
	errs = append(errs, checkGatewayCounts(f.Gateways)...)
	errs = append(errs, checkPolicies("policies", f.Policies)...)
	errs = append(errs, f.checkVariants()...)
	if len(errs) == 0 {
		errs = append(errs, f.checkPlanSize()...)
	}
	return errors.Join(errs...)
}

// checkRates reports the rates of point p (at path) that are not finite
// numbers above 0, and those whose runs would make more requests than a
// run may (workload.CheckRunSize), as Plan gives them a duration or a
// request count.
func (f *SweepFile) checkRates(path string, p *SweepPoint) []error {
	var errs []error
	dur, reqs := p.Duration, p.Requests
	field := path + ".requests"
	if dur == 0 && reqs == 0 {
		dur, reqs, field = f.Duration, f.Requests, "requests"
	}
	generated := p.Workload != "trace" // a trace's lines bound its runs
	if generated && reqs > workload.MaxRequests {
		errs = append(errs, fmt.Errorf("%s: %d is more than the %d requests a run may make", field, reqs, workload.MaxRequests))
	}
	for j, r := range p.Rates {
		at := fmt.Sprintf("%s.rates[%d]", path, j)
		if !(r > 0) || math.IsInf(r, 1) {
			errs = append(errs, fmt.Errorf("%s: must be a finite number > 0, not %v", at, r))
		} else if generated && reqs == 0 {
			if err := workload.CheckRunSize(r, time.Duration(dur), 0); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", at, err))
			}
		}
	}
	return errs
}

// MaxReps bounds a sweep's or a comparison's repetitions, and
// maxPlannedRuns the runs of one sweep: a plan is made whole before the
// first run, and reps = 1e9 once grew it to gigabytes. A thousand
// repetitions of a run of a minute is most of a day's runs.
const (
	MaxReps        = 1000
	maxPlannedRuns = 100_000
)

// checkPlanSize reports a plan of more than maxPlannedRuns runs, naming
// its largest point, without making it.
func (f *SweepFile) checkPlanSize() []error {
	total, largest, at := f.planSize()
	if total <= maxPlannedRuns {
		return nil
	}
	return []error{fmt.Errorf("points: the plan has %.0f runs, more than %d: points[%d] alone has %.0f "+
		"(rates × reps × fleet sizes × policies with their index modes, gateway counts and variants); split the sweep",
		total, maxPlannedRuns, at, largest)}
}

// planSize counts the runs Plan makes of f (its trace points too), and
// those of its largest point, the at'th.
func (f *SweepFile) planSize() (total, largest float64, at int) {
	for i := range f.Points {
		n := f.pointRuns(&f.Points[i])
		total += n
		if n > largest {
			largest, at = n, i
		}
	}
	return total, largest, at
}

// pointRuns counts the runs Plan makes of p, in floating point so that no
// product overflows.
func (f *SweepFile) pointRuns(p *SweepPoint) float64 {
	reps := p.Reps
	if reps == 0 {
		reps = max(f.Reps, 1)
	}
	sizes := max(len(p.Replicas), 1)
	policies := p.Policies
	if len(policies) == 0 {
		policies = f.Policies
	}
	perRate := 0.0
	for _, pol := range policies {
		perRate += float64(len(indexModes(p.Index, f.Index, pol))) * float64(len(gatewayCounts(f.Gateways, pol))) *
			float64(1+len(f.variantsOf(pol)))
	}
	return float64(len(p.Rates)) * float64(reps) * float64(sizes) * perRate
}

// checkFleetSizes reports each of a point's fleet sizes that is out of
// range or listed twice.
func checkFleetSizes(path string, sizes []int) []error {
	var errs []error
	for j, n := range sizes {
		if n < 1 || n > maxReplicas {
			errs = append(errs, fmt.Errorf("%s[%d]: must be within 1-%d, not %d", path, j, maxReplicas, n))
		} else if slices.Index(sizes, n) < j {
			errs = append(errs, fmt.Errorf("%s[%d]: %d is listed twice", path, j, n))
		}
	}
	return errs
}

// checkLongest reports a duration longer than a result file may hold.
func checkLongest(path string, d Duration) []error {
	if limit := time.Duration(maxResultSeconds) * time.Second; time.Duration(d) > limit {
		return []error{fmt.Errorf("%s: must be at most %v, not %v", path, limit, time.Duration(d))}
	}
	return nil
}

// checkIndexModes reports each of modes that is no index mode.
func checkIndexModes(path string, modes []string) []error {
	var errs []error
	for i, m := range modes {
		if _, err := NormalizeIndex(m); err != nil {
			errs = append(errs, fmt.Errorf("%s[%d]: must be approximate, exact or auto, not %q", path, i, m))
		}
	}
	return errs
}

// checkPolicies reports each policy of a list at path that is empty or
// that no run could start.
func checkPolicies(path string, policies []string) []error {
	var errs []error
	for i, pol := range policies {
		if pol == "" {
			errs = append(errs, fmt.Errorf("%s[%d]: must not be empty", path, i))
		} else if err := checkPolicy(pol); err != nil {
			errs = append(errs, fmt.Errorf("%s[%d]: %v", path, i, err))
		}
	}
	return errs
}

// checkGatewayCounts reports each of counts outside 1-maxGateways.
func checkGatewayCounts(counts []int) []error {
	var errs []error
	for i, n := range counts {
		if n < 1 || n > maxGateways {
			errs = append(errs, fmt.Errorf("gateways[%d]: must be within 1-%d, not %d", i, maxGateways, n))
		}
	}
	return errs
}

// workloadNames are the workloads a sweep point may name.
func workloadNames() []string {
	return []string{"w1", "w2", "w3", "w4", "w5", "w6", "w8", "mix", "hot", "trace"}
}

func (p *SweepPoint) pointName() string {
	if p.Name != "" {
		return p.Name
	}
	return p.Workload
}

// PlanOptions complete a sweep's plan with what only the command line
// knows.
type PlanOptions struct {
	// TracePath is the Mooncake-format trace that trace points replay.
	// Empty leaves trace points out of the plan (Plan says so).
	TracePath string
}

// Plan expands f into its runs in the order they run: points in file
// order, then rates, then repetitions, then policies and their index
// modes innermost, so drift
// over a long sweep falls on every policy alike. skipped names what was
// left out and why.
func (f *SweepFile) Plan(o PlanOptions) (runs []RunSpec, skipped []string) {
	or := func(v, def int) int {
		if v > 0 {
			return v
		}
		return def
	}
	model := f.Model
	if model == "" {
		model = procs.SimModel
	}
	seed := f.Seed
	if seed == 0 {
		seed = 1
	}
	slo := DefaultSLO()
	if f.SLOTTFT > 0 {
		slo.TTFT = time.Duration(f.SLOTTFT)
	}
	if f.SLOTPOT > 0 {
		slo.TPOT = time.Duration(f.SLOTPOT)
	}
	timeout := 5 * time.Minute
	if f.Timeout > 0 {
		timeout = time.Duration(f.Timeout)
	}
	for _, p := range f.Points {
		if p.Workload == "trace" && o.TracePath == "" {
			skipped = append(skipped, p.pointName()+": a trace point needs --trace PATH")
			continue
		}
		policies := p.Policies
		if len(policies) == 0 {
			policies = f.Policies
		}
		simArgs := p.SimArgs
		if simArgs == nil {
			simArgs = f.SimArgs
		}
		dur, reqs := p.Duration, p.Requests
		if dur == 0 && reqs == 0 {
			dur, reqs = f.Duration, f.Requests
		}
		warmup := p.Warmup
		if warmup == "" {
			warmup = f.Warmup
		}
		sizes := p.Replicas
		if len(sizes) == 0 {
			sizes = []int{or(f.Replicas, 3)}
		}
		pointSLO := slo
		if p.SLOTTFT > 0 {
			pointSLO.TTFT = time.Duration(p.SLOTTFT)
		}
		for _, rate := range p.Rates {
			for rep := range or(p.Reps, or(f.Reps, 1)) {
				w := workload.Spec{
					Workload: p.Workload, Model: model, Rate: rate,
					Duration: time.Duration(dur), Requests: reqs, Seed: seed + uint64(rep),
					Arrivals: p.Arrivals, CV: p.CV, Ramp: p.Ramp,
					SystemPrompts: p.SystemPrompts, Zipf: p.Zipf, OutputTokens: p.OutputTokens,
					ShareGPTPath: p.ShareGPT, MaxPromptTokens: p.MaxPromptTokens,
				}
				if p.Workload == "trace" {
					w.Rate, w.TracePath, w.TimeScale, w.RateMultiplier = 0, o.TracePath, p.TimeScale, rate
				}
				for _, n := range sizes {
					for _, pol := range policies {
						for _, mode := range indexModes(p.Index, f.Index, pol) {
							for _, gws := range gatewayCounts(f.Gateways, pol) {
								run := RunSpec{
									Point: p.pointName(), Policy: pol, Rep: rep, Workload: w,
									Replicas: n, Sized: len(p.Replicas) > 0, SimArgs: slices.Clone(simArgs),
									Warmup: warmup, SLO: pointSLO, Timeout: timeout, Speedup: f.Speedup, Index: mode, Gateways: gws,
								}
								runs = append(runs, run)
								for _, v := range f.variantsOf(pol) {
									run.SimArgs = slices.Clone(simArgs)
									run.Variant, run.GatewayPatch = v.Name, v.GatewayPatch
									runs = append(runs, run)
								}
							}
						}
					}
				}
			}
		}
	}
	return runs, skipped
}

// indexModes are the RunSpec.Index values policy runs under at a point:
// the point's modes, else the file's, else approximate alone; a peer
// router's only.
func indexModes(point, file []string, policy string) []string {
	modes := point
	if len(modes) == 0 {
		modes = file
	}
	var out []string
	for _, m := range modes {
		n, _ := NormalizeIndex(m)
		if !slices.Contains(out, n) && (n == "" || !procs.IsPeerPolicy(policy)) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		out = []string{""}
	}
	return out
}

// gatewayCounts are the RunSpec.Gateways values policy runs with: the
// file's counts (one is 0, as before the option), else one; a peer
// router's only.
func gatewayCounts(counts []int, policy string) []int {
	var out []int
	for _, n := range counts {
		if n == 1 {
			n = 0
		}
		if !slices.Contains(out, n) && (n == 0 || !procs.IsPeerPolicy(policy)) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		out = []int{0}
	}
	return out
}

// SweepOptions say where a sweep's results go and how many fleets run at
// once.
type SweepOptions struct {
	// Out is the results directory. Required.
	Out string
	// Jobs is the number of runs side by side, each with its own fleet on
	// its own ports. Zero means 1.
	Jobs int
	// OnResult, when not nil, is called after each run with its result
	// file's path; calls are serialized.
	OnResult func(path string, r *RunResult)
	// Reuse names other results directories, such as a bigger sweep's: a
	// planned run whose result file there records the same spec is copied
	// into Out, byte for byte, instead of being run again. Directories that
	// do not exist are passed over.
	Reuse []string
	// Name is what errors call the runs: "sweep" unless set (compare).
	Name string
}

// SweepSummary counts what a sweep did.
type SweepSummary struct {
	// Reused counts the runs copied from SweepOptions.Reuse; Skipped those
	// already in Out.
	Planned, Skipped, Reused, Ran int
	// Failed are the runs that could not be carried out, with why.
	Failed []string
}

// reuse copies the result file name from the first of dirs where it
// records spec into out, and reports whether it did.
func reuse(dirs []string, out, name string, spec *RunSpec) (bool, error) {
	for _, dir := range dirs {
		from := filepath.Join(dir, name)
		if !done(from, spec) {
			continue
		}
		b, err := os.ReadFile(from)
		if err != nil {
			return false, err
		}
		if err := os.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
			return false, fmt.Errorf("sweep: reuse %s: %w", from, err)
		}
		return true, nil
	}
	return false, nil
}

// Sweep carries out runs, skipping those whose result file in o.Out
// already records the same spec, and writes a result file per run. Runs
// that fail are recorded in the summary and the sweep goes on; the error
// says how many failed.
func Sweep(ctx context.Context, runs []RunSpec, o SweepOptions, env RunEnv) (SweepSummary, error) {
	s := SweepSummary{Planned: len(runs)}
	name := o.Name
	if name == "" {
		name = "sweep"
	}
	if o.Out == "" {
		return s, errors.New(name + ": no results directory")
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return s, err
	}
	seen := map[string]bool{}
	var todo []RunSpec
	for i := range runs {
		file := runs[i].FileName()
		if seen[file] {
			return s, fmt.Errorf("%s: two runs write %s; give the points distinct names", name, file)
		}
		seen[file] = true
		if done(filepath.Join(o.Out, file), &runs[i]) {
			s.Skipped++
			continue
		}
		reused, err := reuse(o.Reuse, o.Out, file, &runs[i])
		if err != nil {
			return s, err
		}
		if reused {
			s.Reused++
			continue
		}
		todo = append(todo, runs[i])
	}
	log := env.logger()
	log.Info("sweep", "planned", s.Planned, "done_already", s.Skipped, "reused", s.Reused, "to_run", len(todo), "jobs", max(1, o.Jobs))
	var mu sync.Mutex // guards s and serializes OnResult
	next := make(chan RunSpec)
	var wg sync.WaitGroup
	for range max(1, o.Jobs) {
		wg.Go(func() {
			for spec := range next {
				path := filepath.Join(o.Out, spec.FileName())
				r, err := Measure(ctx, spec, env)
				if err == nil {
					err = WriteRunResult(path, r)
				}
				mu.Lock()
				if err != nil {
					s.Failed = append(s.Failed, spec.FileName()+": "+err.Error())
					log.Error("run failed", "run", spec.FileName(), "err", err)
				} else {
					s.Ran++
					if o.OnResult != nil {
						o.OnResult(path, r)
					}
				}
				mu.Unlock()
			}
		})
	}
feed:
	for _, spec := range todo {
		select {
		case next <- spec:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if ctx.Err() != nil {
		return s, fmt.Errorf("%s stopped: %w", name, ctx.Err())
	}
	if len(s.Failed) > 0 {
		return s, fmt.Errorf("%s: %d of %d runs failed", name, len(s.Failed), len(todo))
	}
	return s, nil
}
