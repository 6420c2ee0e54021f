package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/stress"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/sim"
)

// KillLoad is gw-kill: a simulator killed under a steady open-loop load,
// then restarted.
type KillLoad struct {
	// Rate is the request rate, per second. Must be positive.
	Rate int
	// Before is the load before the kill, Down the time the simulator
	// stays dead, After the load after its restart. Each must be positive.
	Before, Down, After time.Duration
}

// Validate reports every setting that cannot run.
func (l KillLoad) Validate() error {
	return errors.Join(stress.Positive("rate", l.Rate), stress.Positive("before", l.Before),
		stress.Positive("down", l.Down), stress.Positive("after", l.After))
}

// HangLoad is gw-hang: a simulator that stops answering (requests and
// probes) under a steady open-loop load, then heals.
type HangLoad struct {
	// Rate is the request rate, per second. Must be positive.
	Rate int
	// Before is the load before the hang, Hang how long the simulator
	// hangs, After the load after it heals. Each must be positive.
	Before, Hang, After time.Duration
}

// Validate reports every setting that cannot run.
func (l HangLoad) Validate() error {
	return errors.Join(stress.Positive("rate", l.Rate), stress.Positive("before", l.Before),
		stress.Positive("hang", l.Hang), stress.Positive("after", l.After))
}

// FlapLoad is gw-flap: a simulator flipping between healthy and failing
// every request (and probe) with 503 under a steady open-loop load.
type FlapLoad struct {
	// Rate is the request rate, per second. Must be positive.
	Rate int
	// Duration is how long the load and the flapping last. Must be
	// positive.
	Duration time.Duration
	// Toggle is the time between two flips. Must be positive.
	Toggle time.Duration
}

// Validate reports every setting that cannot run.
func (l FlapLoad) Validate() error {
	return errors.Join(stress.Positive("rate", l.Rate), stress.Positive("duration", l.Duration), stress.Positive("toggle", l.Toggle))
}

// faultRequestTimeout bounds each request of the fault scenarios.
const faultRequestTimeout = 20 * time.Second

// faultFleet starts three in-process --zero-latency simulators and a
// gateway with fast probes in front of them, routing with policy ("" keeps
// the default).
func faultFleet(ctx context.Context, r *gwRun, policy string) ([]*gwReplica, *procs.Gateway, error) {
	sc := sim.DefaultConfig()
	sc.ZeroLatency = true
	sc.MaxNumSeqs = 1024
	sims, err := r.simLocals(3, sc, []string{"--max-num-seqs", "1024", "--zero-latency"})
	if err != nil {
		return nil, nil, err
	}
	cfg := gwConfig(sims, healthFast)
	if d := r.c.ProbeInterval; d > 0 {
		cfg.Health.Interval, cfg.Health.Timeout = config.Duration(d), config.Duration(d*4/5)
	}
	if policy != "" {
		cfg.Routing.DefaultPolicy = policy
	}
	gw, err := r.gateway(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return sims, gw, nil
}

// adminSample is one poll of the gateway's view of one replica.
type adminSample struct {
	At        time.Duration // since the load's start, when the page arrived
	Ejected   float64
	Healthy   float64
	Decisions float64
}

// adminPoller scrapes the gateway's admin /metrics back to back (with
// pause between scrapes) until stopped, following one replica.
type adminPoller struct {
	cancel  context.CancelFunc
	done    chan struct{}
	samples []adminSample // written by run until done is closed
}

func startAdminPoller(ctx context.Context, client *http.Client, gw *procs.Gateway, replica string, start time.Time, pause time.Duration) *adminPoller {
	ctx, cancel := context.WithCancel(ctx)
	p := &adminPoller{cancel: cancel, done: make(chan struct{})}
	go p.run(ctx, client, gw, replica, start, pause)
	return p
}

func (p *adminPoller) run(ctx context.Context, client *http.Client, gw *procs.Gateway, replica string, start time.Time, pause time.Duration) {
	defer close(p.done)
	rl := procs.Label("replica", replica)
	for ctx.Err() == nil {
		page, err := gw.Metrics(ctx, client)
		if err == nil {
			p.samples = append(p.samples, adminSample{At: time.Since(start),
				Ejected: page.Sum("inferrail_replica_ejected", rl), Healthy: page.Sum("inferrail_replica_healthy", rl),
				Decisions: page.Sum("inferrail_routing_decisions_total", rl)})
		}
		if pause > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
		}
	}
}

func (p *adminPoller) stop() []adminSample {
	p.cancel()
	<-p.done
	return p.samples
}

// pollResolution is the mean time between samples.
func pollResolution(s []adminSample) float64 {
	if len(s) < 2 {
		return 0
	}
	return (s[len(s)-1].At - s[0].At).Seconds() / float64(len(s)-1)
}

// gatewayCounters reads the gateway's retry and ejection counters.
func gatewayCounters(ctx context.Context, client *http.Client, gw *procs.Gateway) (retries, ejections float64) {
	p, err := gw.Metrics(ctx, client)
	if err != nil {
		return 0, 0
	}
	return p.Sum("inferrail_upstream_retries_total"), p.Sum("inferrail_ejections_total")
}

// faultLoad is the steady load of a fault scenario: non-streamed chats
// (max_tokens 1) at a fixed rate through the gateway over three in-process
// simulators, the second of which, the victim, the scenario breaks.
type faultLoad struct {
	gw            *procs.Gateway
	victim        *gwReplica
	admin, client *http.Client
	// start is when the load starts; the scenario's faults are timed from it.
	start time.Time
}

// startFaultLoad starts the fleet of a fault scenario, routing with policy
// ("" keeps the default); the load starts 20 ms later.
func (r *gwRun) startFaultLoad(ctx context.Context, policy string) (*faultLoad, error) {
	sims, gw, err := faultFleet(ctx, r, policy)
	if err != nil {
		return nil, err
	}
	return &faultLoad{gw: gw, victim: sims[1], admin: procs.AdminClient(), client: gwClient(1024),
		start: time.Now().Add(20 * time.Millisecond)}, nil
}

func (f *faultLoad) close() {
	f.admin.CloseIdleConnections()
	f.client.CloseIdleConnections()
}

// send sends n chats at rate per second from f.start, request i with the
// request id id(i) when id is not nil, and returns them once all have
// ended.
func (f *faultLoad) send(ctx context.Context, rate, n int, id func(i int) string) []stress.Shot {
	url := f.gw.URL + "/v1/chat/completions"
	body := gwChatBody(procs.SimModel, 0, 1)
	return stress.OpenLoop(ctx, f.start, stress.FixedSchedule(rate, n), faultRequestTimeout, func(ctx context.Context, i int) (int, string, error) {
		rid := ""
		if id != nil {
			rid = id(i)
		}
		return postChat(ctx, f.client, url, body, rid, 1)
	})
}

// counters reads the gateway's retry and ejection counters.
func (f *faultLoad) counters(ctx context.Context) (retries, ejections float64) {
	return gatewayCounters(ctx, f.admin, f.gw)
}

// poll follows the victim on the gateway's admin page from at until
// until, scraping back to back with pause between scrapes, and returns
// the samples.
func (f *faultLoad) poll(ctx context.Context, pause time.Duration, until func()) []adminSample {
	p := startAdminPoller(ctx, f.admin, f.gw, f.victim.ID, f.start, pause)
	until()
	return p.stop()
}

// FlapFigures is what gw-flap measured.
type FlapFigures struct {
	Requests int    `json:"requests"`
	Replica  string `json:"flapping_replica"`
	Toggles  int    `json:"toggles"`
	stress.Failures
	Latency measure.Percentiles `json:"latency"`
	// PerReplica counts successful responses by replica; the flapping one
	// still serves while healthy and not ejected.
	PerReplica map[string]int `json:"per_replica"`
	Retries    float64        `json:"gateway_retries"`
	Ejections  float64        `json:"gateway_ejections"`
}

func runGWFlap(ctx context.Context, r *gwRun) error {
	l := r.c.Flap
	n := int(l.Duration.Seconds() * float64(l.Rate))
	fl, err := r.startFaultLoad(ctx, "")
	if err != nil {
		return err
	}
	defer fl.close()
	f := &FlapFigures{Requests: n, Replica: fl.victim.ID}
	ctrl := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { f.Toggles = flap(ctx, fl, l.Toggle, ctrl) })
	retries0, ejections0 := fl.counters(ctx)
	shots := fl.send(ctx, l.Rate, n, nil)
	close(ctrl)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	retries1, ejections1 := fl.counters(ctx)
	f.Retries, f.Ejections = retries1-retries0, ejections1-ejections0
	f.Errors, f.ErrorKinds, f.ErrorSamples = stress.TallyShots(shots)
	var lat []time.Duration
	f.PerReplica = map[string]int{}
	for _, s := range shots {
		if s.Err == nil {
			f.PerReplica[s.Replica]++
			lat = append(lat, s.Done-s.Sched)
		}
	}
	f.Latency = measure.Summarize(lat)
	r.res.Flap = f
	r.check("client errors", "0", fmt.Sprintf("%d of %d", f.Errors, f.Requests), f.Errors == 0)
	return nil
}

// flap flips the victim between healthy and failing every toggle from the
// load's start until done is closed, leaves it healthy, and returns how
// many flips it made.
func flap(ctx context.Context, fl *faultLoad, toggle time.Duration, done <-chan struct{}) int {
	failing, toggles := false, 0
	for k := 0; ; k++ {
		if !measure.SleepUntil(ctx, fl.start.Add(time.Duration(k)*toggle)) {
			return toggles
		}
		select {
		case <-done:
			fl.victim.local.SetFault(sim.Fault{})
			return toggles
		default:
		}
		failing = !failing
		if failing {
			fl.victim.local.SetFault(sim.Fault{Kind: sim.FaultFail, Status: http.StatusServiceUnavailable})
		} else {
			fl.victim.local.SetFault(sim.Fault{})
		}
		toggles++
	}
}
