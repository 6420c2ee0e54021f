package gateway

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/stress"
)

// FloorLoad is gw-floor: one open-loop schedule, at a rate the machine
// carries without queueing, sent straight to a simulator, through the
// gateway, and through a bare net/http reverse proxy over the same
// simulators (inferrail-bench plain-proxy), measuring the CPU every process
// spends per request. It tells the gateway's own work from what any net/http
// proxy hop costs on the machine, and what the rates of gw-overhead ask of
// its cores.
type FloorLoad struct {
	// Rate is the request rate, per second. Must be positive.
	Rate int
	// Requests is the number of requests of each measured leg. Must be
	// positive.
	Requests int
	// Warmup requests go to a leg's target right before the leg,
	// unmeasured. Must not be negative.
	Warmup int
	// MaxTokens is each chat's max_tokens. Must be positive.
	MaxTokens int
	// Seed draws the Poisson schedule.
	Seed uint64
	// Timeout bounds each request. Zero means 10 s.
	Timeout time.Duration
	// ProjectRates are the rates at which the measured CPU per request is
	// turned into cores needed. Each positive.
	ProjectRates []int
}

// Validate reports every setting that cannot run.
func (l FloorLoad) Validate() error {
	errs := append(validateLegs(l.Requests, l.Warmup, l.MaxTokens, l.Timeout), stress.Positive("rate", l.Rate))
	for i, r := range l.ProjectRates {
		errs = append(errs, stress.Positive(fmt.Sprintf("project_rates[%d]", i), r))
	}
	return errors.Join(errs...)
}

// FloorFigures are gw-floor's results.
type FloorFigures struct {
	Rate     int `json:"rate"`
	Requests int `json:"requests_per_leg"`
	// Legs in the order run (floorLegOrder).
	Legs []OverheadLeg `json:"legs"`
	// Targets are each target's legs pooled: direct, gateway, plain.
	Targets []OverheadLeg `json:"targets"`
	// GatewayOverPlain is the gateway's CPU per request over the plain
	// proxy's.
	GatewayOverPlain float64 `json:"gateway_over_plain_cpu"`
	// Projections say how many cores each path would need at other rates
	// if its CPU per request stayed what it was here.
	Projections []FloorProjection `json:"projections"`
	// CPUs is the number of CPUs the machine has.
	CPUs int `json:"cpus"`
}

// FloorProjection is the CPU the client, the engines and the proxy (if
// any) of each path need at Rate: their CPU per request times the rate.
type FloorProjection struct {
	Rate    int     `json:"rate"`
	Direct  float64 `json:"direct_cores"`
	Gateway float64 `json:"gateway_cores"`
	Plain   float64 `json:"plain_cores"`
}

// floorLegOrder runs each target twice, mirrored, so that drift over the
// legs falls on all of them alike.
var floorLegOrder = [...]string{"direct", "gateway", "plain", "plain", "gateway", "direct"}

// pathCPU is the CPU per request of everything a request through leg's
// target uses: the client, the engines and, unless it is direct, the proxy.
func pathCPU(lg OverheadLeg) float64 {
	cpu := lg.ClientCPUPerRequest + lg.EnginesCPUPerRequest
	if lg.Target != "direct" {
		cpu += lg.CPUPerRequest
	}
	return cpu
}

func runGWFloor(ctx context.Context, r *gwRun) error {
	l := r.c.Floor
	sims, gw := r.sims, r.gw
	var upstreams []string
	for _, s := range sims {
		upstreams = append(upstreams, s.URL)
	}
	plain, err := procs.StartPlainProxy(ctx, procs.PlainProxyOptions{Binary: r.c.BenchBinary, Env: r.c.BenchEnv, Upstreams: upstreams, Logger: r.log})
	if err != nil {
		return err
	}
	r.plains = append(r.plains, plain)
	pair := newOverheadPair(gw, sims, l.Timeout, l.MaxTokens)
	defer pair.close()
	pair.targets["plain"] = overheadTarget{plain.URL + "/v1/chat/completions", gwClient(2048), plain.Pid}
	pair.pids = append(pair.pids, plain.Pid)

	body := gwChatBody(procs.SimModel, 0, l.MaxTokens)
	same := func(int) []byte { return body }
	legs, err := pair.legs(ctx, r.log, floorLegOrder[:], overheadSpec{Rate: l.Rate, Requests: l.Requests, Warmup: l.Warmup, Seed: l.Seed,
		Bodies: func(int) (warm, measured func(int) []byte) { return same, same }})
	if err != nil {
		return err
	}
	f := &FloorFigures{Rate: l.Rate, Requests: l.Requests, CPUs: runtime.NumCPU(), Legs: legs}
	pooled := map[string]OverheadLeg{}
	for _, target := range []string{"direct", "gateway", "plain"} {
		pooled[target] = poolTarget(target, legs)
		f.Targets = append(f.Targets, pooled[target])
	}
	gwLeg, plainLeg, direct := pooled["gateway"], pooled["plain"], pooled["direct"]
	if plainLeg.CPUPerRequest > 0 {
		f.GatewayOverPlain = gwLeg.CPUPerRequest / plainLeg.CPUPerRequest
	}
	for _, rate := range l.ProjectRates {
		f.Projections = append(f.Projections, FloorProjection{Rate: rate,
			Direct: pathCPU(direct) * float64(rate), Gateway: pathCPU(gwLeg) * float64(rate), Plain: pathCPU(plainLeg) * float64(rate)})
	}
	r.res.Floor = f

	errs := direct.Errors + gwLeg.Errors + plainLeg.Errors
	r.check("errors", "0", fmt.Sprintf("direct %d, gateway %d, plain %d", direct.Errors, gwLeg.Errors, plainLeg.Errors), errs == 0)
	r.check("gateway's CPU per request against the plain net/http proxy's", "at most 1.5×",
		fmt.Sprintf("%.2f× (gateway %s, plain %s per request)", f.GatewayOverPlain, usec(gwLeg.CPUPerRequest), usec(plainLeg.CPUPerRequest)),
		f.GatewayOverPlain > 0 && f.GatewayOverPlain <= 1.5)
	for _, p := range f.Projections {
		r.check(fmt.Sprintf("cores the gateway path needs at %d req/s (client, gateway, simulators)", p.Rate),
			fmt.Sprintf("under the machine's %d, or gw-overhead at that rate measures a saturated machine", f.CPUs),
			fmt.Sprintf("%.2f (direct path %.2f, plain proxy path %.2f)", p.Gateway, p.Direct, p.Plain), p.Gateway < float64(f.CPUs))
	}
	r.note("Each process's CPU includes its share of the kernel's loopback work, and all of them share the same CPUs, so contention inflates every figure alike. " +
		"The projections assume CPU per request stays constant with rate, which it does not quite: batching in the kernel and the runtime lowers it at higher rates, queueing raises latency long before the cores are all busy.")
	return nil
}
