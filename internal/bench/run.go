package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/progress"
	"github.com/inferrail/inferrail/internal/workload"
)

// RunEnv is how runs are carried out, as opposed to what they measure
// (RunSpec): binaries, environments and logging. It is not recorded in
// result files beyond Command and Environment.
type RunEnv struct {
	// SimBinary and GatewayBinary are started for a fleet.
	SimBinary, GatewayBinary string
	// SimEnv and GatewayEnv are added to the children's environments.
	SimEnv, GatewayEnv []string
	// PeerVenv is the venv holding the peer routers, for runs whose policy
	// is peer:<router>:<policy> (MakePeerVenv makes it). Empty fails such
	// runs.
	PeerVenv string
	// Command is the command line that reproduces the run, recorded in the
	// result. Empty records nothing.
	Command string
	// Environment describes the machine and commit; the zero value records
	// nothing.
	Environment measure.Environment
	// Logger reports progress at Info and the children at Debug. Nil
	// discards.
	Logger *slog.Logger
	// Generate makes a spec's requests, stopping when ctx is done. Nil
	// means workload.GenerateRequests.
	Generate func(context.Context, workload.Spec) (*workload.Requests, error)
	// Oracle computes the oracle hit rate of the requests after the first
	// warm. Nil means the workload's own, by workload.AnalyzeRequests.
	Oracle func(reqs *workload.Requests, blockSize, warm int) (float64, error)
	// OnSchedule is passed to RunOpenLoop (tests stall the scheduler with
	// it). Nil means none.
	OnSchedule func(i int)
	// Capture, if not empty, is a file the run's gateway captures its
	// traffic to (observability.capture), for a trace run to replay. With
	// a speedup the capture's timestamps are on the faster clock: replay
	// it with the same speedup and --time-scale. Only for a fleet of the
	// run's own with one gateway of ours. Measure refuses one the gateway
	// could not write before the run (PrepareCapture), and fails a run after
	// which it is missing or empty.
	Capture string
	// Outcomes, if not empty, is a file the run writes each of its
	// requests to (see WriteOutcomes). A run stopped by its context writes
	// none, as it returns no figures.
	Outcomes string
	// Progress shows each run's requests sent, done and failed as it goes
	// (see package progress). Nil shows nothing.
	Progress *progress.Display
}

func (e *RunEnv) logger() *slog.Logger {
	if e.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Logger
}

// Measure carries out one open-loop run: it generates the spec's requests,
// starts a cold fleet (unless the spec names a URL), sends the requests on
// their schedule, reads the engines' prefix cache counters at the end of
// the warmup and after the last response, stops the fleet and returns the
// figures. Failed requests are part of the result; the error is for a run
// that could not be carried out.
func Measure(ctx context.Context, spec RunSpec, env RunEnv) (*RunResult, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if env.Capture != "" {
		if err := PrepareCapture(env.Capture); err != nil {
			return nil, err
		}
	}
	log := env.logger()
	reqs, wall, warm, err := planRun(ctx, &spec, &env)
	if err != nil {
		return nil, err
	}
	// The first requests are made while the fleet starts, not as they go.
	made := startAhead(ctx, wall, aheadBytes)
	defer made.stop()
	clock := spec.clock()
	res := &RunResult{Spec: spec, Command: env.Command, Environment: env.Environment}
	targets := []string{spec.URL}
	var fleet *Fleet
	cpu0 := procs.ReadCPUTimes()
	if spec.URL == "" {
		if fleet, err = startRunFleet(ctx, &spec, &env, res); err != nil {
			return nil, err
		}
		targets = fleet.URLs
	}
	stopFleet := func() {
		if fleet == nil {
			return
		}
		if len(fleet.Gateways) > 0 {
			var gl procs.GatewayLog
			for _, gw := range fleet.Gateways {
				gl.Merge(gw.Log())
			}
			res.GatewayLog = &gl
		}
		if fleet.Peer != nil {
			pl := fleet.Peer.Log()
			res.PeerLog = &pl
		}
		if err := fleet.Stop(); err != nil {
			res.StopErrors = append(res.StopErrors, err.Error())
		}
		fleet = nil
	}
	defer stopFleet()

	client := NewLoadClient()
	defer client.CloseIdleConnections()
	admin := procs.AdminClient()
	defer admin.CloseIdleConnections()

	made.ready()
	start := time.Now().Add(50 * time.Millisecond)
	res.Started = start.UTC().Format(time.RFC3339Nano)
	mark := markWarmup(ctx, fleet, admin, start, wall, warm)
	log.Info("run start", "workload", spec.Workload.Workload, "rate", spec.Workload.Rate, "policy", spec.Policy,
		"rep", spec.Rep, "requests", reqs.Len(), "warmup", warm)
	task := env.Progress.Start(strings.TrimSuffix(spec.FileName(), ".json"), reqs.Len(), wall.Head(wall.Len()-1).At)
	outs := RunOpenLoop(ctx, start, wall, OpenLoopOptions{URLs: targets, Client: client, Timeout: spec.Timeout,
		OnSchedule: mark.gate(warm, env.OnSchedule), Progress: &task.Counts, made: made})
	task.Finish()
	toModelTime(outs, reqs, clock)
	m := measureOutcomes(outs, warm, spec.SLO)
	m.setGateways(outs, warm, len(targets), targets...)
	m.Herding = herdingOf(outs, warm, fleetReplicas(fleet))
	if fleet != nil {
		readEngines(ctx, admin, fleet, mark, &m, res)
	}
	stopFleet()
	res.Machine = procs.MachineShareBetween(cpu0, procs.ReadCPUTimes(), runtime.NumCPU())
	if o, err := env.oracle()(reqs, spec.blockSize(), warm); err != nil {
		res.Notes = append(res.Notes, "oracle hit rate unknown: "+err.Error())
	} else {
		m.setOracle(o)
	}
	res.Measurements = m
	if ctx.Err() != nil {
		// No outcomes either: the requests the stop cut off would read as
		// timeouts of requests the engines had answered (status 200).
		return res, fmt.Errorf("run stopped: %w", ctx.Err())
	}
	if err := env.afterRun(res, outs, warm); err != nil {
		return nil, err
	}
	log.Info("run done", "workload", spec.Workload.Workload, "policy", spec.Policy, "rep", spec.Rep,
		"succeeded", m.Succeeded, "measured", m.Measured, "ttft_p99_s", m.TTFT.P99, "hit_rate", m.HitRate)
	return res, nil
}

// afterRun checks the capture of a run that was not stopped, which a run
// asked for but did not get fails, and writes its outcomes.
func (e *RunEnv) afterRun(res *RunResult, outs []Outcome, warm int) error {
	if e.Capture != "" {
		if err := checkCaptured(e.Capture); err != nil {
			return err
		}
	}
	if e.Outcomes != "" {
		if err := WriteOutcomes(e.Outcomes, outs, warm); err != nil {
			res.Notes = append(res.Notes, "outcomes not written: "+err.Error())
		}
	}
	return nil
}

// oracle is e.Oracle, or the workload's own.
func (e *RunEnv) oracle() func(reqs *workload.Requests, blockSize, warm int) (float64, error) {
	if e.Oracle == nil {
		return defaultOracle
	}
	return e.Oracle
}

// planRun generates the spec's requests and returns them, the same on the
// wall clock the run keeps (spec.clock() times faster than the model's)
// and how many of them warm up.
func planRun(ctx context.Context, spec *RunSpec, env *RunEnv) (reqs, wall *workload.Requests, warm int, err error) {
	gen := env.Generate
	if gen == nil {
		gen = defaultGenerate
	}
	reqs, err = gen(ctx, spec.Workload)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("generate workload: %w", err)
	}
	if reqs.Len() == 0 {
		return nil, nil, 0, errors.New("generate workload: no requests")
	}
	warmup, _ := ParseWarmup(spec.Warmup)
	sched := make([]time.Duration, reqs.Len())
	for i := range sched {
		sched[i] = reqs.Head(i).At
	}
	if !slices.IsSorted(sched) {
		return nil, nil, 0, errors.New("generate workload: requests not in time order")
	}
	warm = warmup.count(sched)
	if warm >= reqs.Len() {
		return nil, nil, 0, fmt.Errorf("warmup %s leaves none of the %d requests", spec.Warmup, reqs.Len())
	}
	// The schedule is in the model's time; the wall clock runs spec.clock()
	// times faster.
	wall = reqs
	if clock := spec.clock(); clock > 1 {
		wall = reqs.Retimed(func(at time.Duration) time.Duration { return toWall(at, clock) })
	}
	return reqs, wall, warm, nil
}

// startRunFleet starts the run's own cold fleet and records its setup in
// res.
func startRunFleet(ctx context.Context, spec *RunSpec, env *RunEnv, res *RunResult) (*Fleet, error) {
	fleet, err := StartFleet(ctx, FleetOptions{
		SimBinary: env.SimBinary, GatewayBinary: env.GatewayBinary,
		SimEnv: env.SimEnv, GatewayEnv: env.GatewayEnv, PeerVenv: env.PeerVenv,
		Replicas: spec.Replicas, SimArgs: spec.SimArgs, Model: spec.Workload.Model,
		Policy: spec.Policy, BlockSize: spec.blockSize(), Seed: int64(spec.Workload.Seed) + 1,
		Speedup: spec.clock(), Index: spec.Index, Gateways: spec.GatewayCount(), Capture: env.Capture, GatewayPatch: spec.GatewayPatch, Logger: env.logger(),
	})
	if err != nil {
		return nil, err
	}
	res.Setup = RunSetup{
		Simulators: fmt.Sprintf("%d inferrail-sim child processes (%s)", spec.Replicas, env.SimBinary),
		SimArgs:    append(fleetModelArgs(spec.Workload.Model), spec.SimArgs...),
	}
	if p := fleet.Peer; p != nil {
		res.Setup.Gateway = fmt.Sprintf("%s %s child process (%s) with its policy %s on loopback ports, in place of inferrail-gateway",
			p.Policy.Router, p.Version, p.Argv[0], p.Policy.Policy)
		res.Setup.Peer = &PeerSetup{Router: p.Policy.Router, Version: p.Version, Policy: p.Policy.Policy, Argv: p.Argv}
	} else {
		res.Setup.Gateway = "inferrail-gateway child process (" + env.GatewayBinary + ") with a generated config on loopback ports"
		if n := len(fleet.Gateways); n > 1 {
			res.Setup.Gateway = fmt.Sprintf("%d inferrail-gateway child processes (%s) with the same generated config on loopback ports of their own, the client sending the requests to each in turn",
				n, env.GatewayBinary)
		}
		res.Setup.Gateways = len(fleet.Gateways)
		res.Setup.GatewayConfig = fleet.Gateway.ConfigYAML
		res.Setup.IndexMode = spec.IndexMode()
	}
	return fleet, nil
}

// counterReading is the engines' counters as read at one moment, or why
// they could not be.
type counterReading struct {
	counters engineReading
	err      error
}

// warmupMark is the engines' counters at the end of the warmup, which the
// figures after the warmup start from. A goroutine of its own reads them
// halfway between the last warmup request's time and the first measured
// one's, so that the scheduler does not wait on the read; but the
// scheduler does wait, before it sends the first measured request, for the
// read to be done: on a machine so busy that the read ran late, measured
// requests the engines had already counted would be missing from the
// figures (a run of 24 measured requests once found 17 in the engines'
// counters). The wait, if any, shows as that request's send lag.
type warmupMark struct {
	ch   <-chan counterReading
	once sync.Once
	r    counterReading
}

// markWarmup starts reading the counters of fleet's engines for a run that
// starts at start on schedule wall, whose first warm requests are its
// warmup; nil without a fleet.
func markWarmup(ctx context.Context, fleet *Fleet, admin *http.Client, start time.Time, wall *workload.Requests, warm int) *warmupMark {
	if fleet == nil {
		return nil
	}
	at := start.Add(wall.Head(warm).At)
	if warm > 0 {
		at = start.Add((wall.Head(warm-1).At + wall.Head(warm).At) / 2)
	}
	ch := make(chan counterReading, 1)
	urls := fleet.SimURLs()
	go func() {
		if !measure.SleepUntil(ctx, at) {
			ch <- counterReading{err: ctx.Err()}
			return
		}
		h, err := engineCounters(ctx, admin, urls)
		ch <- counterReading{h, err}
	}()
	return &warmupMark{ch: ch}
}

// reading waits for the counters and returns them.
func (w *warmupMark) reading() counterReading {
	w.once.Do(func() { w.r = <-w.ch })
	return w.r
}

// gate is the scheduler's hook: it waits for the reading before request
// warm, then calls next (which may be nil).
func (w *warmupMark) gate(warm int, next func(int)) func(int) {
	return func(i int) {
		if i == warm && w != nil {
			w.reading()
		}
		if next != nil {
			next(i)
		}
	}
}

// readEngines reads the gateway's index into res and the gateways'
// unpredicted requests into m, then the engines' counters again after the
// load and takes what changed since the warmup's end into m: the prefix
// cache hits and, without the gateway's replica header (a peer router),
// the requests per replica.
func readEngines(ctx context.Context, admin *http.Client, fleet *Fleet, mark *warmupMark, m *Measurements, res *RunResult) {
	switch gws := fleet.Gateways; {
	case len(gws) == 1:
		var err error
		if res.Index, err = gws[0].Index(ctx, admin); err != nil {
			res.Notes = append(res.Notes, "gateway index not read: "+err.Error())
		}
	case len(gws) > 1:
		// Every gateway's, until their mirrors agree: the engines' last
		// events may still be on their way to one of them.
		sts, agreement, err := agreeIndexes(ctx, admin, gws, 5*time.Second)
		if err != nil {
			res.Notes = append(res.Notes, "gateway indexes not read: "+err.Error())
			break
		}
		res.Index, res.GatewayIndexes, res.Agreement = sts[0], sts, agreement
	}
	for _, gw := range fleet.Gateways {
		page, err := gw.Metrics(ctx, admin)
		if err != nil {
			res.Notes = append(res.Notes, "gateway metrics not read: "+err.Error())
			continue
		}
		const name = "inferrail_tokenized_requests_total"
		m.Unpredicted += int(page.Sum(name, procs.Label("result", "slow")) + page.Sum(name, procs.Label("result", "busy")))
		m.countDecisions(page)
	}
	if fleet.Peer != nil {
		var err error
		if res.PeerDecisions, err = fleet.Peer.Decisions(ctx, admin); err != nil {
			res.Notes = append(res.Notes, "peer router's decisions not read: "+err.Error())
		}
	}
	b := mark.reading()
	after, err := engineCounters(ctx, admin, fleet.SimURLs())
	if err = errors.Join(b.err, err); err != nil {
		res.Notes = append(res.Notes, "engine counters not read: "+err.Error())
		return
	}
	m.Engine = after.hits.since(b.counters.hits)
	if len(m.Replicas) == 0 {
		// No x-inferrail-replica header (a peer router): count by the
		// simulators' own counters instead.
		m.setEngineReplicas(after.servedSince(b.counters))
	}
}

// toWall is the wall-clock offset of the model-time offset d on a clock
// running clock times faster.
func toWall(d time.Duration, clock float64) time.Duration {
	return time.Duration(float64(d) / clock)
}

// toModelTime turns the outcomes of a run on a clock clock times faster
// back into the model's time: each is scheduled where reqs has it, and
// every time it measured is stretched by clock.
func toModelTime(outs []Outcome, reqs *workload.Requests, clock float64) {
	if clock <= 1 {
		return
	}
	stretch := func(d time.Duration) time.Duration { return time.Duration(float64(d) * clock) }
	for i := range outs {
		o := &outs[i]
		o.Sched = reqs.Head(o.Index).At
		o.Dispatched, o.Sent = stretch(o.Dispatched), stretch(o.Sent)
		o.TTFT, o.E2E, o.Estimated = stretch(o.TTFT), stretch(o.E2E), stretch(o.Estimated)
		for j := range o.ITL {
			o.ITL[j] = stretch(o.ITL[j])
		}
	}
}

// rateLabel is the run's rate as a summary names it.
func (s *RunSpec) rateLabel() string {
	if s.Workload.Workload != workload.Trace {
		return fmt.Sprintf("%g req/s", s.Workload.Rate)
	}
	rate := fmt.Sprintf("×%g the trace's rate", s.rateMultiplier())
	if ts := s.Workload.WithDefaults().TimeScale; ts != 1 {
		rate += fmt.Sprintf(" (its timestamps ×%g)", ts)
	}
	return rate
}

// WriteSummary prints a run's figures in a few lines.
func WriteSummary(w io.Writer, r *RunResult) {
	s, m := &r.Spec, &r.Measurements
	target := s.Policy
	if s.URL != "" {
		target = s.URL
	} else if s.Index != "" {
		target += " (index " + s.Index + ")"
	}
	if s.Gateways > 1 {
		target += fmt.Sprintf(" through %d gateways", s.Gateways)
	}
	fmt.Fprintf(w, "%s at %s (seed %d, rep %d) via %s: %d requests, %d after warmup, %d succeeded\n",
		s.Workload.Workload, s.rateLabel(), s.Workload.Seed, s.Rep, target, m.Requests, m.Measured, m.Succeeded)
	writeLatencies(w, m)
	fmt.Fprintf(w, "  throughput %.2f req/s, %.0f tok/s; goodput %.2f req/s (%.0f%% within TTFT %v, TPOT %v)\n",
		m.ThroughputRPS, m.OutputTokensPerSec, m.GoodputRPS, 100*m.GoodFraction, s.SLO.TTFT, s.SLO.TPOT)
	hit := fmt.Sprintf("  hit rate %.3f (usage)", m.HitRate)
	if m.Engine != nil {
		hit += fmt.Sprintf(", %.3f (engines)", m.Engine.HitRate)
	}
	if m.OracleHitRate != nil {
		hit += fmt.Sprintf("; oracle %.3f", *m.OracleHitRate)
		if m.HitRateOfOracle != nil {
			hit += fmt.Sprintf(", usage at %.0f%% of it", 100**m.HitRateOfOracle)
		}
	}
	fmt.Fprintln(w, hit)
	if m.Engine != nil && m.Engine.Preemptions > 0 {
		fmt.Fprintf(w, "  engines preempted %.0f running requests: their KV caches ran out of free blocks\n", m.Engine.Preemptions)
	}
	if len(m.Replicas) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(m.Replicas)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, m.Replicas[k]))
		}
		from := ""
		if m.ReplicasFrom != "" {
			from = " (from the " + m.ReplicasFrom + "' counters)"
		}
		fmt.Fprintf(w, "  replicas%s %s; busiest share %.2f\n", from, strings.Join(parts, ", "), m.BusiestShare)
	}
	if t := m.Turns; t != nil {
		fmt.Fprintf(w, "  follow-up turns on their conversation's replica: %d of %d (%.0f%%)\n", t.Kept, t.FollowUps, 100*t.KeptShare)
	}
	if p := m.Prediction; p != nil {
		fmt.Fprintf(w, "  predictions (%d): exact %.0f%%, over %.0f%%, under %.0f%%, mean error %+.1f tokens, predicted hit rate %.3f\n",
			p.Requests, 100*p.Exact, 100*p.Over, 100*p.Under, p.MeanError, p.HitRate)
	}
	if m.Unpredicted > 0 {
		fmt.Fprintf(w, "  unpredicted: %d requests of the run routed before the tokenizer was free or done (tokenizer.max_wait)\n", m.Unpredicted)
	}
	if len(r.PeerDecisions) > 0 {
		fmt.Fprintf(w, "  the router's decisions of the run, warmup included: %s\n", countsText(r.PeerDecisions))
	}
	if len(m.Steered)+len(m.Guards) > 0 {
		fmt.Fprintf(w, "  decisions of the run, warmup included: steered %s; guards %s\n", orNone(countsText(m.Steered)), orNone(countsText(m.Guards)))
	}
	if e := m.Estimate; e != nil {
		fmt.Fprintf(w, "  estimated TTFT (%d): |error| mean %.0f%%, p90 %.0f%%; mean error %+.0f%%\n", e.Requests, 100*e.MeanAbs, 100*e.P90Abs, 100*e.Mean)
	}
	if len(m.ReplicaTTFTP99) > 1 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(m.ReplicaTTFTP99)) {
			parts = append(parts, k+" "+msec(m.ReplicaTTFTP99[k]))
		}
		fmt.Fprintf(w, "  TTFT p99 by replica: %s\n", strings.Join(parts, ", "))
	}
	if h := m.Herding; h != nil {
		fmt.Fprintf(w, "  sent to a replica with %.2f more requests in flight than the least busy on average, %.1f%% with %d or more; %.2f more waiting for a first token, %.1f%% with %d or more\n",
			h.MeanExcess, 100*h.Piled, pileExcess, h.MeanExcessWaiting, 100*h.PiledWaiting, pileExcess)
		if ws := h.Sources; ws != nil {
			fmt.Fprintf(w, "  waiting there when sent: %.2f of its own gateway's (%.2f on the average replica)", ws.Own, ws.OwnAverage)
			if r.Spec.GatewayCount() > 1 {
				fmt.Fprintf(w, ", %.2f sent through another within %v (%.2f on the average replica)", ws.OtherRecent, recentWindow, ws.OtherRecentAverage)
			}
			fmt.Fprintln(w)
		}
	}
	writeIndexStatus(w, r.Index)
	writeGateways(w, r)
	if len(m.Errors) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(m.Errors)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, m.Errors[k]))
		}
		fmt.Fprintf(w, "  errors: %s\n", strings.Join(parts, ", "))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	for _, e := range r.StopErrors {
		fmt.Fprintf(w, "  stop error: %.300s\n", e)
	}
}

// writeLatencies prints m's latency percentiles; a run of no success has
// none, not zeros.
func writeLatencies(w io.Writer, m *Measurements) {
	d := func(name string, x measure.Percentiles) {
		fmt.Fprintf(w, "  %-8s p50 %s  p90 %s  p99 %s  mean %s\n", name, msec(x.P50), msec(x.P90), msec(x.P99), msec(x.Mean))
	}
	if !m.noneSucceeded() {
		d("TTFT", m.TTFT)
		if failed := m.Measured - m.Succeeded; failed > 0 {
			// What reports rank by: a low p99 over the few served hides
			// the failures.
			fmt.Fprintf(w, "  TTFT p99 over every measured request, the %d failed counted slower than any success: %s\n", failed, p99Text(runP99(m)))
		}
		d("TPOT", m.TPOT)
		d("ITL", m.ITL)
		d("e2e", m.E2E)
	} else {
		fmt.Fprintln(w, "  TTFT, TPOT, ITL, e2e: n/a (no request succeeded)")
	}
	d("send lag", m.SendLag)
}

// noneSucceeded reports whether every measured request of m failed: a run
// with no latency to show.
func (m *Measurements) noneSucceeded() bool {
	return m.Succeeded == 0 && len(m.Errors) > 0
}

// fleetReplicas are the replica names of fleet's gateways; nil for no
// fleet (an existing URL) or a peer router, which names none.
func fleetReplicas(fleet *Fleet) []string {
	if fleet == nil || len(fleet.Gateways) == 0 {
		return nil
	}
	var ids []string
	for _, r := range fleet.Replicas() {
		ids = append(ids, r.ID)
	}
	return ids
}

// p99Text is a p99 as msec writes it, or unreachable.
func p99Text(s float64) string {
	if unreachable(s) {
		return unreachableText + " (more than 1% failed)"
	}
	return msec(s)
}

// msec formats seconds as milliseconds.
func msec(s float64) string {
	switch {
	case s == 0:
		return "0"
	case s < 0.01:
		return fmt.Sprintf("%.2fms", s*1e3)
	default:
		return fmt.Sprintf("%.0fms", s*1e3)
	}
}

// writeIndexStatus says, for each engine whose KV events the gateway
// followed, where its predictions came from at the end and what the stream
// carried.
func writeIndexStatus(w io.Writer, st *procs.IndexStatus) {
	if st == nil {
		return
	}
	for _, k := range st.KVEvents {
		why := ""
		if k.Reason != "" {
			why = " (" + k.Reason + ")"
		}
		digest := ""
		if k.Digest != "" {
			digest = ", digest " + k.Digest
		}
		fmt.Fprintf(w, "  kv events %s: source %s%s, %d batches applied, %d gaps, %d replays, %d mirrored blocks%s\n",
			k.ID, k.Source, why, k.Applied, k.Gaps, k.Replays, k.Mirrored, digest)
	}
}

// countDecisions adds a gateway's steered and guarded decisions (its
// metrics page) to m's.
func (m *Measurements) countDecisions(page procs.PromPage) {
	add := func(dst *map[string]int, name, key string) {
		for v, n := range page.ByLabel(name, key) {
			if n < 1 {
				continue
			}
			if *dst == nil {
				*dst = map[string]int{}
			}
			(*dst)[v] += int(n)
		}
	}
	add(&m.Steered, "inferrail_routing_steered_total", "reason")
	add(&m.Guards, "inferrail_routing_guards_total", "guard")
}

// orNone is s, or "none" when it is empty.
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
