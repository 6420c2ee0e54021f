package calibrate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/inferrail/inferrail/internal/load"
)

// Design is which prompts calibration sends: every Uncached length after
// every Cached length, Reps times each, in a random order per cached
// length. Of the repetitions of a pair only the fastest is fitted (see
// FitFastest): a busy host only ever delays a prefill, so more repetitions
// make calibration on a noisy machine sturdier.
type Design struct {
	Uncached []int // tokens each probe computes; each >= 1
	Cached   []int // tokens each probe finds cached; each >= 0, 0 for none
	Reps     int   // repetitions of each (uncached, cached) pair; >= 1
}

// DefaultDesign spreads u and c over two orders of magnitude each, so a
// (linear in u), b (u·c and u²) and d (constant) pull apart, and tries each
// pair three times; on the simulator's default engine it takes about seven
// seconds.
func DefaultDesign() Design {
	return Design{Uncached: []int{64, 512, 2048}, Cached: []int{0, 4096, 16384}, Reps: 3}
}

// Validate reports every problem with d at once.
func (d Design) Validate() error {
	var errs []error
	if len(d.Uncached) < 2 || len(uniq(d.Uncached)) < 2 {
		errs = append(errs, errors.New("uncached: need at least two different lengths"))
	}
	for i, u := range d.Uncached {
		if u < 1 {
			errs = append(errs, fmt.Errorf("uncached[%d]: must be >= 1, got %d", i, u))
		}
	}
	if len(d.Cached) == 0 {
		errs = append(errs, errors.New("cached: need at least one length (0 for none)"))
	}
	for i, c := range d.Cached {
		if c < 0 {
			errs = append(errs, fmt.Errorf("cached[%d]: must be >= 0, got %d", i, c))
		}
	}
	if len(uniq(d.Uncached))*len(uniq(d.Cached)) < 3 {
		errs = append(errs, errors.New("need at least three different (uncached, cached) pairs to tell a, b and d apart"))
	}
	if d.Reps < 1 {
		errs = append(errs, fmt.Errorf("reps: must be >= 1, got %d", d.Reps))
	}
	return errors.Join(errs...)
}

func uniq(s []int) []int {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// within shrinks d proportionally when its longest prompt does not fit in
// maxLen tokens (0: no limit), keeping room for the generated token and for
// tokenizer slack. Cached lengths stay multiples of 16, vLLM's block size.
func (d Design) within(maxLen int) Design {
	const room = 64
	longest := slices.Max(d.Uncached) + slices.Max(d.Cached)
	if maxLen <= 0 || longest+room <= maxLen {
		return d
	}
	f := float64(max(maxLen-room, 2)) / float64(longest)
	out := Design{Reps: d.Reps}
	for _, u := range d.Uncached {
		out.Uncached = append(out.Uncached, max(1, int(float64(u)*f)))
	}
	for _, c := range d.Cached {
		out.Cached = append(out.Cached, int(float64(c)*f)/16*16)
	}
	return out
}

// Options configure a calibration run.
type Options struct {
	URL   string // the engine's base URL, such as http://127.0.0.1:8000
	Model string // model to probe; "" means the first /v1/models lists
	// Seed chooses the prompts' words. Use a fresh one per run (the clock),
	// so no prompt is cached from a run before; the result records it.
	Seed   uint64
	Design Design
	// Warmup requests are sent before the probes and left out of the fit
	// (a real engine's first requests can be slow). 0 sends none; a
	// negative count is refused.
	Warmup int
	// Client sends the requests; nil means a client of its own, which
	// follows no redirect.
	Client *http.Client
	// Timeout bounds each request; 0 means 2 minutes, and a negative one
	// is refused.
	Timeout time.Duration
	// Settle is how long to wait for the metrics page to count a finished
	// probe, and for an engine to go idle; 0 means 5 seconds.
	Settle time.Duration
	// Logger reports progress; nil discards it.
	Logger *slog.Logger
}

// Probe is one request calibration sent and what the engine measured.
type Probe struct {
	Kind            string  // "warmup", "prefix" (the cached part alone) or "probe"
	PlannedUncached int     // tokens the design meant to compute
	PlannedCached   int     // tokens the design meant to find cached
	PromptTokens    int     // the prompt's tokens, as the engine counted them
	Cached          int     // prompt tokens the engine found cached (prefix cache counters)
	TTFT            float64 // seconds, the engine's own TTFT histogram's sum delta
	HTTP            float64 // seconds from sending the request to its full answer
	Residual        float64 // TTFT minus the fitted P(u, c), seconds; 0 for warmups
	Slower          bool    // left out of the fit: a repetition of its shape was faster (see FitFastest)
	Outlier         bool    // left out of the fit (see FitRobust)
	// Unrepeated: left out of the fit because its shape was measured fewer
	// times than the design's repetitions (the first send of a cached
	// part computes all of it, once), so no faster twin vouches for it.
	Unrepeated bool
}

// Uncached is the prompt tokens the engine computed.
func (p Probe) Uncached() int { return p.PromptTokens - p.Cached }

// Result is a finished calibration.
type Result struct {
	URL       string
	Model     string
	Engine    load.Engine
	Seed      uint64
	Design    Design // as run, after fitting it to the model's context length
	Tokenizer string // how prompt lengths were planned: "/tokenize" or "estimate"
	Probes    []Probe
	Params    Params
}

// Run calibrates the engine at opts.URL: it checks the engine is idle,
// sends the design's prompts one at a time, each cached part alone first,
// reads each probe's TTFT and cached tokens from the engine's own metrics,
// and fits a, b and d with FitFastest over the fastest of each shape's
// repetitions.
func Run(ctx context.Context, opts Options) (*Result, error) {
	if err := opts.Design.Validate(); err != nil {
		return nil, fmt.Errorf("design: %w", err)
	}
	if opts.Timeout < 0 || opts.Warmup < 0 {
		return nil, fmt.Errorf("timeout %v and warmup %d: neither may be negative", opts.Timeout, opts.Warmup)
	}
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Minute
	}
	if opts.Settle <= 0 {
		opts.Settle = 5 * time.Second
	}
	if opts.Client == nil {
		// The engine named is the one measured: one that redirects is
		// refused, not measured on another host.
		opts.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &runner{
		e:   &engine{base: strings.TrimRight(opts.URL, "/"), client: opts.Client, timeout: opts.Timeout},
		opt: opts,
		log: log,
	}
	return r.run(ctx)
}

// runner is one calibration in progress.
type runner struct {
	e     *engine
	opt   Options
	log   *slog.Logger
	model string
	res   *Result
}

func (r *runner) run(ctx context.Context) (*Result, error) {
	info, err := r.e.model(ctx, r.opt.Model)
	if err != nil {
		return nil, err
	}
	r.model = info.name
	snap, err := r.e.scrape(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := r.idle(ctx, snap); err != nil {
		return nil, err
	}
	design := r.opt.Design.within(info.maxModelLen)
	r.res = &Result{URL: r.e.base, Model: info.name, Engine: snap.report.Engine, Seed: r.opt.Seed, Design: design}
	r.log.Info("calibrating", "url", r.e.base, "model", info.name, "engine", snap.report.Engine, "seed", r.opt.Seed)

	var count counter = func(ctx context.Context, text string, start bool) (int, error) {
		return r.e.tokenize(ctx, r.model, text, start)
	}
	r.res.Tokenizer = "/tokenize"
	if _, err := count(ctx, "calibration", true); errors.Is(err, errNoTokenize) {
		count, r.res.Tokenizer = nil, "estimate"
	} else if err != nil {
		return nil, err
	}
	pr := newPrompter(r.opt.Seed, count)

	warmups := r.opt.Warmup
	if count == nil {
		warmups = max(warmups, 1) // the first one sizes words in tokens
	}
	for i := range warmups {
		want := 64
		if count == nil && i == 0 {
			want = 256
		}
		text, err := pr.extend(ctx, "", want)
		if err != nil {
			return nil, err
		}
		p, err := r.probe(ctx, "warmup", want, 0, text)
		if err != nil {
			return nil, err
		}
		if count == nil && i == 0 && p.PromptTokens > 0 {
			pr.perWord = float64(p.PromptTokens) / float64(len(strings.Fields(text)))
		}
	}

	for _, c := range design.Cached {
		var prefix string
		if c > 0 {
			if prefix, err = pr.extend(ctx, "", c); err != nil {
				return nil, err
			}
		}
		var order []int
		for _, u := range design.Uncached {
			for range design.Reps {
				order = append(order, u)
			}
		}
		pr.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, u := range order {
			if c > 0 {
				if _, err := r.probe(ctx, "prefix", c, 0, prefix); err != nil {
					return nil, err
				}
			}
			text, err := pr.extend(ctx, prefix, u)
			if err != nil {
				return nil, err
			}
			if _, err := r.probe(ctx, "probe", u, c, text); err != nil {
				return nil, err
			}
		}
	}

	if err := r.fit(); err != nil {
		return nil, err
	}
	return r.res, nil
}

// shape is what makes probes repetitions of one another: the same kind and
// plan, and the engine finding part of the prompt cached or none of it (a
// cached part's first send computes it all).
type shape struct {
	kind             string
	planned, cached  int
	engineFoundCache bool
}

func (p Probe) shape() shape {
	return shape{p.Kind, p.PlannedUncached, p.PlannedCached, p.Cached > 0}
}

// fit fits the probes, the fastest of each shape, and marks each with its
// residual and fate.
func (r *runner) fit() error {
	params, err := fitProbes(r.res.Probes, r.res.Design.Reps)
	if err != nil {
		return fmt.Errorf("fit: %w", err)
	}
	r.res.Params = params
	return nil
}

// fitProbes fits the fastest of each shape among the probes measured at
// least reps times, and marks every probe with its residual and fate. A
// shape measured fewer times has no repetition to take the fastest of, and
// one late wakeup on the host would carry its whole delay into the fit: the
// first, uncached send of a long cached part is the costliest probe of all
// and so the one the least squares lean on most.
func fitProbes(probes []Probe, reps int) (Params, error) {
	counts := map[shape]int{}
	for _, p := range probes {
		if p.Kind != "warmup" {
			counts[p.shape()]++
		}
	}
	var points []Point
	var fitted []*Probe
	repeats := map[shape]int{}
	for i := range probes {
		p := &probes[i]
		if p.Kind == "warmup" {
			continue
		}
		k := p.shape()
		p.Unrepeated = counts[k] < reps
		if p.Unrepeated {
			continue
		}
		if repeats[k] == 0 {
			repeats[k] = len(repeats) + 1
		}
		points = append(points, Point{Uncached: float64(p.Uncached()), Cached: float64(p.Cached), TTFT: p.TTFT, Repeat: repeats[k]})
		fitted = append(fitted, p)
	}
	params, fates, err := FitFastest(points)
	if err != nil {
		return Params{}, err
	}
	for i := range probes {
		if p := &probes[i]; p.Kind != "warmup" {
			p.Residual = p.TTFT - params.Prefill(float64(p.Uncached()), float64(p.Cached))
		}
	}
	for i, p := range fitted {
		p.Slower, p.Outlier = fates[i] == Slower, fates[i] == Outlier
	}
	return params, nil
}

// idle waits, up to Settle, for the engine to have nothing running or
// waiting, starting from snap, and returns the snapshot that showed it.
func (r *runner) idle(ctx context.Context, snap *snapshot) (*snapshot, error) {
	deadline := time.Now().Add(r.opt.Settle)
	for {
		rep := snap.report
		if rep.Running == 0 && rep.Waiting == 0 {
			return snap, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: %g requests running and %g waiting; calibrate an engine nothing else is using",
				ErrNotIdle, rep.Running, rep.Waiting)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
		var err error
		if snap, err = r.e.scrape(ctx); err != nil {
			return nil, err
		}
	}
}

// probe sends one prompt and records what the engine measured of it.
func (r *runner) probe(ctx context.Context, kind string, plannedU, plannedC int, prompt string) (Probe, error) {
	before, err := r.e.scrape(ctx)
	if err != nil {
		return Probe{}, err
	}
	if before, err = r.idle(ctx, before); err != nil {
		return Probe{}, err
	}
	start := time.Now()
	promptTokens, err := r.e.complete(ctx, r.model, prompt)
	if err != nil {
		return Probe{}, err
	}
	wall := time.Since(start).Seconds()

	// Engines update their metrics a moment after answering.
	deadline := time.Now().Add(r.opt.Settle)
	var after *snapshot
	for {
		if after, err = r.e.scrape(ctx); err != nil {
			return Probe{}, err
		}
		if after.ttftCount < before.ttftCount || after.ttftSum < before.ttftSum {
			// A sum that went backwards gave negative TTFTs, and an
			// all-zero cost model was fitted to them.
			return Probe{}, fmt.Errorf("%w: the TTFT histogram went backwards (count %g to %g, sum %g s to %g s); did the engine restart?",
				ErrEngine, before.ttftCount, after.ttftCount, before.ttftSum, after.ttftSum)
		}
		if after.ttftCount-before.ttftCount >= 1 {
			break
		}
		if time.Now().After(deadline) {
			return Probe{}, fmt.Errorf("%w: the engine answered but its TTFT histogram did not count the request within %s", ErrEngine, r.opt.Settle)
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return Probe{}, err
		}
	}
	if n := after.ttftCount - before.ttftCount; n > 1 {
		return Probe{}, fmt.Errorf("%w: %g requests got their first token during one probe; calibrate an engine nothing else is using", ErrNotIdle, n)
	}
	ttft := after.ttftSum - before.ttftSum
	if !(ttft > 0) || math.IsInf(ttft, 0) {
		return Probe{}, fmt.Errorf("%w: the TTFT histogram's sum moved by %g s over a request; a time to first token is positive and finite", ErrEngine, ttft)
	}
	hits := after.report.PrefixHits - before.report.PrefixHits
	queries := after.report.PrefixQueries - before.report.PrefixQueries
	if hits < 0 || queries < 0 {
		return Probe{}, fmt.Errorf("%w: prefix cache counters went backwards; did the engine restart?", ErrEngine)
	}
	p := Probe{
		Kind: kind, PlannedUncached: plannedU, PlannedCached: plannedC,
		PromptTokens: promptTokens, Cached: int(hits),
		TTFT: ttft, HTTP: wall,
	}
	if p.PromptTokens == 0 { // no usage in the answer
		p.PromptTokens = int(queries)
	}
	if p.Cached > p.PromptTokens {
		return Probe{}, fmt.Errorf("%w: %d cached tokens reported for a prompt of %d", ErrEngine, p.Cached, p.PromptTokens)
	}
	r.res.Probes = append(r.res.Probes, p)
	r.log.Debug("probe", "kind", kind, "prompt_tokens", p.PromptTokens, "cached", p.Cached,
		"ttft_ms", p.TTFT*1e3, "http_ms", wall*1e3)
	return p, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
