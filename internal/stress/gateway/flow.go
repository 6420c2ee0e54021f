package gateway

// gw-flow: flow control and SLO admission on a fleet past saturation,
// each beside the same run without them, on one gateway child switched
// by PATCH /admin/config.
//
// Tenants: two API keys of the standard class. The quiet one sends at
// half its fair share (half the fleet's measured capacity) alone, then
// again while the other floods at ten times its share; then the same
// flooded run with the queue but without fair sharing of slots
// (flow.fair_share_window 0: keys share only the queue's order), and
// without flow control (no queue, default guards: requests pile onto the
// engines). SLO: W1 at a multiple of the fleet's measured
// W1 capacity, without admission control, then with flow control and a
// TTFT target on every request.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferrail/inferrail/internal/auth"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/harness"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/policy"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/stress"
	"github.com/inferrail/inferrail/internal/workload"
)

// FlowLoad is gw-flow.
type FlowLoad struct {
	// Sims is the number of simulator children; MaxNumSeqs is each one's
	// --max-num-seqs, and the replicas' guards with flow control.
	Sims, MaxNumSeqs int
	// Capacity is how long each closed-loop capacity measurement runs.
	Capacity time.Duration
	// Leg is how long each open-loop leg sends.
	Leg time.Duration
	// MaxTokens is each tenant request's output, produced in full.
	MaxTokens int
	// FloodFactor is the flooder's rate over its fair share (half the
	// fleet's capacity); the quiet tenant sends at half its share.
	FloodFactor float64
	// Overload is the W1 rate over the fleet's measured W1 capacity.
	Overload float64
	// TargetMs is the TTFT target of the SLO leg, in milliseconds.
	TargetMs int
	// W1Output is each W1 request's output length.
	W1Output int
	// KeyMaxQueued is flow.key_max_queued of the flow legs.
	KeyMaxQueued int
	// Seed draws the schedules.
	Seed uint64
	// Timeout bounds each request. Zero means 30 s.
	Timeout time.Duration
}

// Validate reports every setting that cannot run.
func (l FlowLoad) Validate() error {
	errs := []error{stress.Positive("sims", l.Sims), stress.Positive("max_num_seqs", l.MaxNumSeqs),
		stress.Positive("capacity", l.Capacity), stress.Positive("leg", l.Leg), stress.Positive("max_tokens", l.MaxTokens),
		stress.Positive("target_ms", l.TargetMs), stress.Positive("w1_output", l.W1Output), stress.Positive("key_max_queued", l.KeyMaxQueued)}
	if !(l.FloodFactor >= 1) || !(l.Overload > 0) {
		errs = append(errs, errors.New("flood_factor must be >= 1 and overload > 0"))
	}
	return errors.Join(errs...)
}

// FlowLeg is one open-loop run of gw-flow.
type FlowLeg struct {
	Name string `json:"name"`
	// Tenant is whose figures these are: quiet, flood, or w1.
	Tenant string  `json:"tenant"`
	Rate   float64 `json:"rate"`
	Sent   int     `json:"sent"`
	// OK completed with 200; Shed got 429, Refused 503, Failed anything
	// else (timeouts, broken streams).
	OK      int `json:"ok"`
	Shed    int `json:"shed"`
	Refused int `json:"refused"`
	Failed  int `json:"failed"`
	// TTFT is from the scheduled send to the first streamed byte, of the
	// requests that completed.
	TTFT measure.Percentiles `json:"ttft"`
	// Held is how long the gateway held them before sending them to an
	// engine (X-Inferrail-Gateway-Ms), and After the rest of their TTFT:
	// where the time went. Empty without the header.
	Held  measure.Percentiles `json:"held,omitzero"`
	After measure.Percentiles `json:"after_held,omitzero"`
	// MetTarget is how many completed within the TTFT target (SLO legs).
	MetTarget int `json:"met_target,omitempty"`
	// Goodput is completed requests within the target per second sent.
	Goodput float64 `json:"goodput_rps,omitempty"`
	// Samples are a few failures' messages.
	Samples []string `json:"error_samples,omitempty"`
}

// FlowFigures are what gw-flow measured.
type FlowFigures struct {
	// Capacity and W1Capacity are the fleet's closed-loop throughputs on
	// the tenants' requests and on W1, req/s.
	Capacity   float64   `json:"capacity_rps"`
	W1Capacity float64   `json:"w1_capacity_rps"`
	Tenants    []FlowLeg `json:"tenants"`
	SLO        []FlowLeg `json:"slo"`
	// QuietP99Ratio is the quiet tenant's p99 TTFT flooded with flow
	// control over alone; QueueOnlyRatio the same with the queue but
	// without fair sharing of slots; NoFlowRatio without flow control.
	QuietP99Ratio  float64 `json:"quiet_p99_ratio"`
	QueueOnlyRatio float64 `json:"queue_order_only_p99_ratio"`
	NoFlowRatio    float64 `json:"no_flow_p99_ratio"`
	// GatewaySLO is the gateway's own inferrail_slo_requests_total of the
	// SLO leg: met and missed.
	GatewayMet    float64 `json:"gateway_slo_met"`
	GatewayMissed float64 `json:"gateway_slo_missed"`
	// LoadAverage is /proc/loadavg's one-minute figure at the start and
	// end: other agents share the machine.
	LoadAverage [2]string `json:"load_average"`
}

// flowKeys are the tenants' secrets.
type flowKeys struct{ quiet, flood string }

// flowSetup writes the keys file and starts the fleet.
func flowSetup(ctx context.Context, r *gwRun) (flowKeys, error) {
	dir, err := os.MkdirTemp("", "inferrail-gw-flow-")
	if err != nil {
		return flowKeys{}, err
	}
	r.dirs = append(r.dirs, dir)
	var keys flowKeys
	var entries []*auth.Key
	for _, k := range []struct {
		name   string
		secret *string
	}{{"quiet", &keys.quiet}, {"flood", &keys.flood}} {
		secret, h := auth.NewSecret()
		*k.secret = secret
		entries = append(entries, &auth.Key{Name: k.name, Hash: h})
	}
	path := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(path, []byte(auth.FormatFile(entries)), 0o600); err != nil {
		return keys, err
	}
	l := r.c.Flow
	r.sims, r.gw, err = r.simFleet(ctx, l.Sims, []string{"--max-num-seqs", strconv.Itoa(l.MaxNumSeqs)}, func(cfg *config.Config) {
		cfg.Routing.DefaultPolicy = policy.CostModel
		cfg.Models[0].Policy = ""
		cfg.Models[0].Tokenizer = "builtin:sim"
		cfg.Auth.KeysFile = path
		cfg.Server.ReloadInterval = 0
		cfg.Server.RequestTimeout = config.Duration(l.Timeout)
	})
	return keys, err
}

// fairWindow is flow.fair_share_window where gw-flow shares slots: the
// default.
var fairWindow = time.Duration(config.Default().Flow.FairShareWindow)

// Modes of flow control in gw-flow's legs.
const (
	flowOff   = iota // no queue, default guards
	flowQueue        // guards at the engines' batch, a queue, no fair sharing of slots
	flowFair         // the same, sharing slots between active keys
)

// flowPatch is the PATCH that puts flow control in mode.
func flowPatch(sims []*gwReplica, l FlowLoad, mode int) string {
	maxConc, maxPend, queued, perKey, window := 256, 64, 0, 0, time.Duration(0)
	if mode != flowOff {
		maxConc, maxPend, queued, perKey = l.MaxNumSeqs, l.MaxNumSeqs, 4*l.Sims*l.MaxNumSeqs, l.KeyMaxQueued
	}
	if mode == flowFair {
		window = fairWindow
	}
	reps := make([]map[string]any, len(sims))
	for i, s := range sims {
		reps[i] = map[string]any{"id": s.ID, "url": s.URL, "models": []string{procs.SimModel}, "max_concurrency": maxConc, "max_pending": maxPend}
	}
	b, _ := json.Marshal(map[string]any{"replicas": reps, "flow": map[string]any{"max_queued": queued, "key_max_queued": perKey,
		"fair_share_window": window.String()}})
	return string(b)
}

func runGWFlow(ctx context.Context, r *gwRun) error {
	l := r.c.Flow
	f := &FlowFigures{}
	r.res.Flow = f
	f.LoadAverage[0] = loadAverage()
	keys, err := flowSetup(ctx, r)
	if err != nil {
		return err
	}
	admin := &adminClient{base: r.gw.AdminURL, client: gwClient(4)}
	client := gwClient(1024)
	fl := &flowLoop{url: r.gw.URL + "/v1/chat/completions", client: client, timeout: l.Timeout}
	tenantBody := func(i int) []byte { return gwStreamBody(procs.SimModel, i, l.MaxTokens, true) }
	if _, err := admin.patch(ctx, flowPatch(r.sims, l, flowFair)); err != nil {
		return err
	}
	f.Capacity = fl.capacity(ctx, 2*l.Sims*l.MaxNumSeqs, l.Capacity, tenantBody, bearerOf(keys.quiet))
	share := f.Capacity / 2
	quiet := flowStream{tenant: "quiet", rate: share / 2, body: tenantBody, header: bearerOf(keys.quiet)}
	flood := flowStream{tenant: "flood", rate: l.FloodFactor * share, body: tenantBody, header: bearerOf(keys.flood)}
	for _, leg := range []struct {
		name    string
		mode    int
		streams []flowStream
	}{
		{"alone", flowFair, []flowStream{quiet}},
		{"flooded_flow_control", flowFair, []flowStream{quiet, flood}},
		{"flooded_queue_order_only", flowQueue, []flowStream{quiet, flood}},
		{"flooded_no_flow_control", flowOff, []flowStream{quiet, flood}},
	} {
		if _, err := admin.patch(ctx, flowPatch(r.sims, l, leg.mode)); err != nil {
			return err
		}
		f.Tenants = append(f.Tenants, fl.run(ctx, leg.name, l.Leg, l.Seed, leg.streams, 0)...)
		r.log.Info("leg done", "leg", leg.name)
	}
	if err := r.flowSLO(ctx, admin, fl, f, bearerOf(keys.quiet)); err != nil {
		return err
	}
	f.LoadAverage[1] = loadAverage()
	r.flowChecks(f)
	return nil
}

// flowSLO runs W1 past the fleet's capacity without and with admission.
// key is the credential W1 is sent with.
func (r *gwRun) flowSLO(ctx context.Context, admin *adminClient, fl *flowLoop, f *FlowFigures, key []string) error {
	l := r.c.Flow
	if _, err := admin.patch(ctx, flowPatch(r.sims, l, flowFair)); err != nil {
		return err
	}
	// Capacity on W1: a closed loop over a schedule's bodies, in order.
	probe, err := workload.Generate(workload.Spec{Workload: workload.W1, Model: procs.SimModel, Rate: 1000, Requests: 20000,
		Seed: l.Seed + 7, OutputTokens: l.W1Output})
	if err != nil {
		return err
	}
	w1Body := func(reqs []workload.Request) func(int) []byte {
		return func(i int) []byte { return reqs[i%len(reqs)].Body }
	}
	f.W1Capacity = fl.capacity(ctx, 2*l.Sims*l.MaxNumSeqs, l.Capacity, w1Body(probe), key)
	if f.W1Capacity == 0 {
		return fmt.Errorf("no W1 request completed in %s of closed loop after as long a warmup: lengthen the capacity window", l.Capacity)
	}
	rate := l.Overload * f.W1Capacity
	reqs, err := workload.Generate(workload.Spec{Workload: workload.W1, Model: procs.SimModel, Rate: rate, Duration: l.Leg, Seed: l.Seed + 11, OutputTokens: l.W1Output})
	if err != nil {
		return err
	}
	target := time.Duration(l.TargetMs) * time.Millisecond
	sched := func(i int) time.Duration { return reqs[i].At }
	w1 := flowStream{tenant: "w1", rate: rate, body: w1Body(reqs), header: key, at: sched, n: len(reqs)}
	if _, err := admin.patch(ctx, flowPatch(r.sims, l, flowOff)); err != nil {
		return err
	}
	f.SLO = append(f.SLO, fl.run(ctx, "w1_no_admission", l.Leg, l.Seed, []flowStream{w1}, target)...)
	if _, err := admin.patch(ctx, flowPatch(r.sims, l, flowFair)); err != nil {
		return err
	}
	w1.header = append(key, openai.HeaderTTFTTarget, strconv.Itoa(l.TargetMs))
	before, err := r.gw.Metrics(ctx, fl.client)
	if err != nil {
		return err
	}
	f.SLO = append(f.SLO, fl.run(ctx, "w1_slo_admission", l.Leg, l.Seed, []flowStream{w1}, target)...)
	if after, err := r.gw.Metrics(ctx, fl.client); err == nil {
		f.GatewayMet = after.Sum("inferrail_slo_requests_total", `result="met"`) - before.Sum("inferrail_slo_requests_total", `result="met"`)
		f.GatewayMissed = after.Sum("inferrail_slo_requests_total", `result="missed"`) - before.Sum("inferrail_slo_requests_total", `result="missed"`)
	}
	return nil
}

// flowChecks records the scenario's targets.
func (r *gwRun) flowChecks(f *FlowFigures) {
	leg := func(legs []FlowLeg, name, tenant string) FlowLeg {
		for _, l := range legs {
			if l.Name == name && l.Tenant == tenant {
				return l
			}
		}
		return FlowLeg{}
	}
	alone, flooded, noFlow := leg(f.Tenants, "alone", "quiet"), leg(f.Tenants, "flooded_flow_control", "quiet"), leg(f.Tenants, "flooded_no_flow_control", "quiet")
	queueOnly := leg(f.Tenants, "flooded_queue_order_only", "quiet")
	if alone.TTFT.P99 > 0 {
		f.QuietP99Ratio, f.NoFlowRatio = flooded.TTFT.P99/alone.TTFT.P99, noFlow.TTFT.P99/alone.TTFT.P99
		f.QueueOnlyRatio = queueOnly.TTFT.P99 / alone.TTFT.P99
	}
	r.check("quiet tenant's p99 TTFT flooded, with flow control, over alone", "<= 1.5",
		fmt.Sprintf("%.2f (%s / %s; queue order only %.2f; without flow control %.2f)", f.QuietP99Ratio, stress.Secs(flooded.TTFT.P99),
			stress.Secs(alone.TTFT.P99), f.QueueOnlyRatio, f.NoFlowRatio),
		f.QuietP99Ratio > 0 && f.QuietP99Ratio <= 1.5)
	fl := leg(f.Tenants, "flooded_flow_control", "flood")
	r.check("the flooder is limited: shed with 429", "> 0", fmt.Sprintf("%d of %d shed, %d completed", fl.Shed, fl.Sent, fl.OK), fl.Shed > 0)
	r.check("quiet tenant served in full with flow control", "0 shed or failed",
		fmt.Sprintf("%d shed, %d refused, %d failed", flooded.Shed, flooded.Refused, flooded.Failed), flooded.Shed+flooded.Refused+flooded.Failed == 0)
	slo := leg(f.SLO, "w1_slo_admission", "w1")
	share := 0.0
	if slo.OK > 0 {
		share = float64(slo.MetTarget) / float64(slo.OK)
	}
	r.check("W1 past capacity: admitted requests meeting the TTFT target", ">= 99%",
		fmt.Sprintf("%.1f%% (%d of %d; %d shed)", 100*share, slo.MetTarget, slo.OK, slo.Shed), slo.OK > 0 && share >= 0.99)
}

// flowStream is one tenant's open-loop traffic.
type flowStream struct {
	tenant string
	rate   float64
	body   func(i int) []byte
	header []string
	// at and n are a fixed schedule; nil at means Poisson at rate.
	at func(i int) time.Duration
	n  int
}

// flowLoop sends flow streams and measures them.
type flowLoop struct {
	url     string
	client  *http.Client
	timeout time.Duration
}

// flowShot is one request's outcome.
type flowShot struct {
	status int
	ttft   time.Duration
	held   time.Duration // the gateway's X-Inferrail-Gateway-Ms; -1 without it
	err    error
}

// run sends every stream for d at once and returns one leg per stream.
func (fl *flowLoop) run(ctx context.Context, name string, d time.Duration, seed uint64, streams []flowStream, target time.Duration) []FlowLeg {
	start := time.Now().Add(50 * time.Millisecond)
	legs := make([]FlowLeg, len(streams))
	var wg sync.WaitGroup
	for k, s := range streams {
		at, n := s.at, s.n
		if at == nil {
			at, n = poissonSchedule(s.rate, d, seed+uint64(k))
		}
		wg.Go(func() {
			shots := make([]flowShot, n)
			harness.Loop{Start: start, N: n, At: at}.Run(ctx, func(i int, _ time.Duration) {
				shots[i] = fl.send(ctx, start.Add(at(i)), s.body(i), s.header)
			})
			legs[k] = flowLegOf(name, s, shots, d, target)
		})
	}
	wg.Wait()
	return legs
}

// poissonSchedule is n arrivals at rate over d.
func poissonSchedule(rate float64, d time.Duration, seed uint64) (func(int) time.Duration, int) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	var ats []time.Duration
	for t := time.Duration(0); ; {
		t += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if t >= d {
			break
		}
		ats = append(ats, t)
	}
	return func(i int) time.Duration { return ats[i] }, len(ats)
}

// flowLegOf summarizes a stream's shots.
func flowLegOf(name string, s flowStream, shots []flowShot, d time.Duration, target time.Duration) FlowLeg {
	leg := FlowLeg{Name: name, Tenant: s.tenant, Rate: s.rate, Sent: len(shots)}
	var ttfts, held, after []time.Duration
	for _, sh := range shots {
		switch {
		case sh.err != nil:
			leg.Failed++
			if len(leg.Samples) < measure.MaxErrorSamples {
				leg.Samples = append(leg.Samples, sh.err.Error())
			}
		case sh.status == http.StatusOK:
			leg.OK++
			ttfts = append(ttfts, sh.ttft)
			if sh.held >= 0 {
				held, after = append(held, sh.held), append(after, sh.ttft-sh.held)
			}
			if target > 0 && sh.ttft <= target {
				leg.MetTarget++
			}
		case sh.status == http.StatusTooManyRequests:
			leg.Shed++
		case sh.status == http.StatusServiceUnavailable:
			leg.Refused++
		default:
			leg.Failed++
			if len(leg.Samples) < measure.MaxErrorSamples {
				leg.Samples = append(leg.Samples, "status "+strconv.Itoa(sh.status))
			}
		}
	}
	leg.TTFT = measure.Summarize(ttfts)
	if len(held) > 0 {
		leg.Held, leg.After = measure.Summarize(held), measure.Summarize(after)
	}
	if target > 0 {
		leg.Goodput = float64(leg.MetTarget) / d.Seconds()
	}
	return leg
}

// send posts one streamed request and reads it to the end; its TTFT is
// from sched, its scheduled time, to the first byte of the body.
func (fl *flowLoop) send(ctx context.Context, sched time.Time, body []byte, header []string) flowShot {
	ctx, cancel := context.WithTimeout(ctx, fl.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fl.url, bytes.NewReader(body))
	if err != nil {
		return flowShot{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := fl.client.Do(req)
	if err != nil {
		return flowShot{err: measure.Classify(ctx, err)}
	}
	defer resp.Body.Close()
	sh := flowShot{status: resp.StatusCode, held: -1}
	if ms, err := strconv.ParseFloat(resp.Header.Get(openai.HeaderGatewayMs), 64); err == nil && ms >= 0 {
		sh.held = time.Duration(ms * float64(time.Millisecond))
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.Peek(1); err != nil {
		return flowShot{err: measure.Classify(ctx, err)}
	}
	sh.ttft = time.Since(sched)
	if _, err := io.Copy(io.Discard, br); err != nil {
		return flowShot{err: measure.Classify(ctx, err)}
	}
	return sh
}

// capacity is the fleet's throughput in req/s over window, closed loop
// with conc requests always in flight, after a warmup as long as window
// (which fills the engines' caches and batches).
func (fl *flowLoop) capacity(ctx context.Context, conc int, window time.Duration, body func(int) []byte, header []string) float64 {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next, done atomic.Int64
	begin := time.Now().Add(window)
	end := begin.Add(window)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for time.Now().Before(end) {
				i := int(next.Add(1))
				sh := fl.send(ctx, time.Now(), body(i), header)
				if now := time.Now(); sh.err == nil && sh.status == http.StatusOK && now.After(begin) && now.Before(end) {
					done.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return float64(done.Load()) / window.Seconds()
}

func bearerOf(secret string) []string { return []string{"Authorization", "Bearer " + secret} }

// loadAverage is /proc/loadavg's one-minute figure; "" where there is none.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := bytes.Fields(b)
	if len(f) == 0 {
		return ""
	}
	return string(f[0])
}
