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

	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/stress"
)

// OverheadLoad is gw-overhead: the same open-loop schedule sent straight to
// one simulator and through the gateway, to measure what the gateway adds.
type OverheadLoad struct {
	// Rates are the request rates, per second, each run in turn. At least
	// one, each positive.
	Rates []int
	// Requests is the number of requests of each measured leg. Must be
	// positive.
	Requests int
	// Warmup requests go to a leg's target at the same rate right before
	// the leg, unmeasured, to open connections. Must not be negative.
	Warmup int
	// MaxTokens is each chat's max_tokens. Must be positive.
	MaxTokens int
	// Seed draws the Poisson schedule.
	Seed uint64
	// Timeout bounds each request. Zero means 10 s.
	Timeout time.Duration
}

// Validate reports every setting that cannot run.
func (l OverheadLoad) Validate() error {
	return errors.Join(append(validateRates(l.Rates), validateLegs(l.Requests, l.Warmup, l.MaxTokens, l.Timeout)...)...)
}

// validateRates checks the rates of an overhead comparison: at least one,
// each positive.
func validateRates(rates []int) []error {
	var errs []error
	if len(rates) == 0 {
		errs = append(errs, errors.New("rates: at least one is required"))
	}
	for i, r := range rates {
		errs = append(errs, stress.Positive(fmt.Sprintf("rates[%d]", i), r))
	}
	return errs
}

// validateLegs checks the settings of an overhead comparison's legs.
func validateLegs(requests, warmup, maxTokens int, timeout time.Duration) []error {
	return []error{stress.Positive("requests", requests), stress.NotNegative("warmup", warmup),
		stress.Positive("max_tokens", maxTokens), stress.NotNegative("timeout", timeout)}
}

// OverheadRate is gw-overhead at one rate: four legs of the same schedule,
// direct, gateway, gateway, direct, and both targets pooled.
type OverheadRate struct {
	Rate     int           `json:"rate"`
	Requests int           `json:"requests_per_leg"`
	Legs     []OverheadLeg `json:"legs"`
	Direct   OverheadLeg   `json:"direct"`  // both direct legs pooled
	Gateway  OverheadLeg   `json:"gateway"` // both gateway legs pooled
	// Added* are the gateway's latency percentiles minus the direct ones.
	AddedP50  float64 `json:"added_p50_seconds"`
	AddedP90  float64 `json:"added_p90_seconds"`
	AddedP99  float64 `json:"added_p99_seconds"`
	AddedMean float64 `json:"added_mean_seconds"`
}

// OverheadLeg is one pass of the schedule against one target.
type OverheadLeg struct {
	Target   string `json:"target"` // direct or gateway
	Requests int    `json:"requests"`
	stress.Failures
	// Latency runs from each request's scheduled send time to the end of
	// its response, successful requests only.
	Latency measure.Percentiles `json:"latency"`
	// SendLag is the actual send time minus the scheduled one.
	SendLag measure.Percentiles `json:"send_lag"`
	// AchievedRate is requests over the time from the first scheduled send
	// to the last send.
	AchievedRate float64 `json:"achieved_rate"`
	// CPUPerRequest is the CPU time (user and system, 10 ms resolution
	// over the leg) the target process used per request: the gateway's own
	// on gateway legs, the simulator's on direct legs.
	CPUPerRequest float64 `json:"cpu_per_request_seconds"`
	// ClientCPUPerRequest is the harness process's CPU per request: the
	// load generator's, and any in-process work of the scenario.
	ClientCPUPerRequest float64 `json:"client_cpu_per_request_seconds"`
	// EnginesCPUPerRequest is the simulator children's CPU per request,
	// all of them together.
	EnginesCPUPerRequest float64 `json:"engines_cpu_per_request_seconds"`
	// OthersCPUShare is the CPU that processes other than the harness, the
	// gateway and the simulators used during the leg, as a share of the
	// machine (every CPU over the leg's wall time).
	OthersCPUShare float64 `json:"others_cpu_share"`

	lat, lag []time.Duration // for pooling
}

func runGWOverhead(ctx context.Context, r *gwRun) error {
	l := r.c.Overhead
	pair := newOverheadPair(r.gw, r.sims, l.Timeout, l.MaxTokens)
	defer pair.close()
	body := gwChatBody(procs.SimModel, 0, l.MaxTokens)
	same := func(int) []byte { return body }
	for _, rate := range l.Rates {
		res, err := pair.rate(ctx, r.log, overheadSpec{Rate: rate, Requests: l.Requests, Warmup: l.Warmup, Seed: l.Seed,
			Bodies: func(int) (warm, measured func(int) []byte) { return same, same }})
		if err != nil {
			return err
		}
		r.res.Overhead = append(r.res.Overhead, res)
		r.check(fmt.Sprintf("%d req/s: latency the gateway adds at p99", rate), "under 0.3 ms",
			fmt.Sprintf("%s (p50 %s)", ms(res.AddedP99), ms(res.AddedP50)), res.AddedP99 < 0.0003)
		r.check(fmt.Sprintf("%d req/s: errors", rate), "0",
			fmt.Sprintf("direct %d, gateway %d", res.Direct.Errors, res.Gateway.Errors), res.Direct.Errors == 0 && res.Gateway.Errors == 0)
	}
	r.note("The direct target is one simulator taking the whole rate; through the gateway each of three simulators takes a third, " +
		"so the difference slightly favours the gateway at the engine and includes the extra hop, the gateway's own work and its share of the two CPUs.")
	return nil
}

// overheadSimArgs are the simulator children's flags in the overhead
// scenarios: answers as fast as the engine can give them, and room for
// every request of the open loop.
var overheadSimArgs = []string{"--max-num-seqs", "1024", "--zero-latency"}

// overheadLegOrder is the order of an overhead comparison's legs at one
// rate; each target runs twice, so that drift over the four legs falls on
// both alike.
var overheadLegOrder = [...]string{"direct", "gateway", "gateway", "direct"}

// overheadPair is the two targets of an overhead comparison: the first
// simulator straight (direct) and the gateway in front of all of them
// (gateway). It is used by one goroutine at a time.
type overheadPair struct {
	targets   map[string]overheadTarget
	pids      []int // the gateway's and every simulator's
	engines   []int // every simulator's
	timeout   time.Duration
	maxTokens int
}

// overheadTarget is where one target's chats go.
type overheadTarget struct {
	url    string
	client *http.Client
	pid    int // whose CPU counts as the target's
}

// newOverheadPair sends direct legs to sims[0] and gateway legs to gw,
// each request bounded by timeout and asking for maxTokens.
func newOverheadPair(gw *procs.Gateway, sims []*gwReplica, timeout time.Duration, maxTokens int) *overheadPair {
	p := &overheadPair{
		targets: map[string]overheadTarget{
			"direct":  {sims[0].URL + "/v1/chat/completions", gwClient(2048), sims[0].proc.Pid},
			"gateway": {gw.URL + "/v1/chat/completions", gwClient(2048), gw.Pid},
		},
		pids:      []int{gw.Pid},
		timeout:   timeout,
		maxTokens: maxTokens,
	}
	for _, s := range sims {
		p.pids = append(p.pids, s.proc.Pid)
		p.engines = append(p.engines, s.proc.Pid)
	}
	return p
}

// close drops the clients' idle connections.
func (p *overheadPair) close() {
	for _, t := range p.targets {
		t.client.CloseIdleConnections()
	}
}

// leg sends request i of sched to target with body(i) and summarises the
// leg.
func (p *overheadPair) leg(ctx context.Context, target string, sched []time.Duration, body func(i int) []byte) OverheadLeg {
	t := p.targets[target]
	m0 := procs.ReadCPUTimes(p.pids...)
	cpu0, _ := procs.ProcessCPU(t.pid)
	client0, _ := procs.ProcessCPU(os.Getpid())
	engines0 := cpuOf(p.engines)
	shots := stress.OpenLoop(ctx, time.Now().Add(5*time.Millisecond), sched, p.timeout, func(ctx context.Context, i int) (int, string, error) {
		return postChat(ctx, t.client, t.url, body(i), "", p.maxTokens)
	})
	engines1 := cpuOf(p.engines)
	client1, _ := procs.ProcessCPU(os.Getpid())
	cpu1, _ := procs.ProcessCPU(t.pid)
	m1 := procs.ReadCPUTimes(p.pids...)
	lg := overheadLeg(target, shots)
	if n := float64(len(shots)); n > 0 {
		lg.CPUPerRequest = (cpu1 - cpu0).Seconds() / n
		lg.ClientCPUPerRequest = (client1 - client0).Seconds() / n
		lg.EnginesCPUPerRequest = (engines1 - engines0).Seconds() / n
	}
	lg.OthersCPUShare = othersShare(m0, m1)
	return lg
}

// overheadSpec is one rate of an overhead comparison.
type overheadSpec struct {
	Rate, Requests, Warmup int
	Seed                   uint64
	// Bodies returns the bodies, by request index, of the warmup and the
	// measured requests of leg (an index into the order of the legs). It is
	// called before the leg starts.
	Bodies func(leg int) (warm, measured func(i int) []byte)
	// GatewayLeg, if not nil, is called right before each measured
	// gateway leg, after its warmup, and the function it returns right
	// after the leg.
	GatewayLeg func() (done func())
}

// rate runs the four legs of s (overheadLegOrder) on the same Poisson
// schedule, each after its warmup, and pools each target's two legs.
func (p *overheadPair) rate(ctx context.Context, log *slog.Logger, s overheadSpec) (OverheadRate, error) {
	res := OverheadRate{Rate: s.Rate, Requests: s.Requests}
	legs, err := p.legs(ctx, log, overheadLegOrder[:], s)
	if err != nil {
		return res, err
	}
	res.Legs = legs
	res.Direct = poolTarget("direct", legs)
	res.Gateway = poolTarget("gateway", legs)
	res.AddedP50 = res.Gateway.Latency.P50 - res.Direct.Latency.P50
	res.AddedP90 = res.Gateway.Latency.P90 - res.Direct.Latency.P90
	res.AddedP99 = res.Gateway.Latency.P99 - res.Direct.Latency.P99
	res.AddedMean = res.Gateway.Latency.Mean - res.Direct.Latency.Mean
	return res, nil
}

// legs runs a leg against each target of order, in turn, on the same
// Poisson schedule of s, each after its warmup, and returns them in order.
func (p *overheadPair) legs(ctx context.Context, log *slog.Logger, order []string, s overheadSpec) ([]OverheadLeg, error) {
	sched := stress.PoissonSchedule(s.Rate, s.Requests, s.Seed+uint64(s.Rate))
	warm := stress.PoissonSchedule(s.Rate, s.Warmup, s.Seed)
	var legs []OverheadLeg
	for i, target := range order {
		warmBody, body := s.Bodies(i)
		if len(warm) > 0 {
			p.leg(ctx, target, warm, warmBody)
		}
		var done func()
		if target == "gateway" && s.GatewayLeg != nil {
			done = s.GatewayLeg()
		}
		lg := p.leg(ctx, target, sched, body)
		if done != nil {
			done()
		}
		if ctx.Err() != nil {
			return legs, ctx.Err()
		}
		legs = append(legs, lg)
		log.Info("overhead leg", "rate", s.Rate, "target", target, "errors", lg.Errors,
			"p50_ms", lg.Latency.P50*1e3, "p99_ms", lg.Latency.P99*1e3, "send_lag_p99_ms", lg.SendLag.P99*1e3,
			"target_cpu_us", lg.CPUPerRequest*1e6, "client_cpu_us", lg.ClientCPUPerRequest*1e6, "engines_cpu_us", lg.EnginesCPUPerRequest*1e6)
	}
	return legs, nil
}

// poolTarget pools the legs of legs against target.
func poolTarget(target string, legs []OverheadLeg) OverheadLeg {
	var same []OverheadLeg
	for _, lg := range legs {
		if lg.Target == target {
			same = append(same, lg)
		}
	}
	return poolLegs(target, same)
}

// overheadLeg summarises one leg.
func overheadLeg(target string, shots []stress.Shot) OverheadLeg {
	lg := OverheadLeg{Target: target, Requests: len(shots)}
	lg.Errors, lg.ErrorKinds, lg.ErrorSamples = stress.TallyShots(shots)
	var lat, lag []time.Duration
	var lastSent time.Duration
	for _, s := range shots {
		lag = append(lag, s.Sent-s.Sched)
		lastSent = max(lastSent, s.Sent)
		if s.Err == nil {
			lat = append(lat, s.Done-s.Sched)
		}
	}
	lg.lat, lg.lag = lat, lag
	lg.Latency, lg.SendLag = measure.Summarize(slices.Clone(lat)), measure.Summarize(slices.Clone(lag))
	if lastSent > 0 {
		lg.AchievedRate = float64(len(shots)) / lastSent.Seconds()
	}
	return lg
}

// poolLegs merges legs against the same target.
func poolLegs(target string, legs []OverheadLeg) OverheadLeg {
	p := OverheadLeg{Target: target}
	var lat, lag []time.Duration
	var seconds float64
	for _, lg := range legs {
		p.Requests += lg.Requests
		lat = append(lat, lg.lat...)
		p.CPUPerRequest += lg.CPUPerRequest * float64(lg.Requests)
		p.ClientCPUPerRequest += lg.ClientCPUPerRequest * float64(lg.Requests)
		p.EnginesCPUPerRequest += lg.EnginesCPUPerRequest * float64(lg.Requests)
		p.OthersCPUShare += lg.OthersCPUShare * float64(lg.Requests)
		lag = append(lag, lg.lag...)
		if lg.AchievedRate > 0 {
			seconds += float64(lg.Requests) / lg.AchievedRate
		}
		for k, n := range lg.ErrorKinds {
			if p.ErrorKinds == nil {
				p.ErrorKinds = map[string]int{}
			}
			p.ErrorKinds[k] += n
			p.Errors += n
		}
		p.ErrorSamples = append(p.ErrorSamples, lg.ErrorSamples...)
	}
	p.ErrorSamples = p.ErrorSamples[:min(len(p.ErrorSamples), measure.MaxErrorSamples)]
	p.Latency, p.SendLag = measure.Summarize(lat), measure.Summarize(lag)
	if p.Requests > 0 {
		p.CPUPerRequest /= float64(p.Requests)
		p.ClientCPUPerRequest /= float64(p.Requests)
		p.EnginesCPUPerRequest /= float64(p.Requests)
		p.OthersCPUShare /= float64(p.Requests)
	}
	if seconds > 0 {
		p.AchievedRate = float64(p.Requests) / seconds
	}
	return p
}

// cpuOf is the CPU time the processes pids have used, together; a process
// that cannot be read counts as none.
func cpuOf(pids []int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		d, _ := procs.ProcessCPU(pid)
		sum += d
	}
	return sum
}

// othersShare is the share of the machine that processes other than ours
// used between two readings of procs.ReadCPUTimes over the same processes.
func othersShare(a, b procs.CPUTimes) float64 {
	return procs.MachineShareBetween(a, b, runtime.NumCPU()).Others
}
