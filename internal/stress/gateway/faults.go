package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/stress"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/measure"
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
	return errors.Join(positiveInt("rate", l.Rate), positiveDuration("before", l.Before),
		positiveDuration("down", l.Down), positiveDuration("after", l.After))
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
	return errors.Join(positiveInt("rate", l.Rate), positiveDuration("before", l.Before),
		positiveDuration("hang", l.Hang), positiveDuration("after", l.After))
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
	return errors.Join(positiveInt("rate", l.Rate), positiveDuration("duration", l.Duration), positiveDuration("toggle", l.Toggle))
}

func positiveInt(path string, v int) error {
	if v <= 0 {
		return fmt.Errorf("%s: must be positive, got %d", path, v)
	}
	return nil
}

func positiveDuration(path string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%s: must be positive, got %v", path, d)
	}
	return nil
}

// faultRequestTimeout bounds each request of the fault scenarios.
const faultRequestTimeout = 20 * time.Second

// KillFigures is what gw-kill measured. Times are seconds; "after the
// kill" means from the moment Kill was called.
type KillFigures struct {
	Requests int    `json:"requests"`
	Replica  string `json:"killed_replica"`
	// KillAtSeconds and RestartAtSeconds are offsets from the load's start.
	KillAtSeconds    float64 `json:"kill_at_seconds"`
	RestartAtSeconds float64 `json:"restart_at_seconds"`
	SentBeforeKill   int     `json:"sent_before_kill"`
	// InFlightAtKill were sent before the kill and ended after it.
	InFlightAtKill       int            `json:"in_flight_at_kill"`
	FailedSentBeforeKill int            `json:"failed_sent_before_kill"`
	SentAfterKill        int            `json:"sent_after_kill"`
	FailedSentAfterKill  int            `json:"failed_sent_after_kill"`
	ErrorKinds           map[string]int `json:"error_kinds,omitempty"`
	ErrorSamples         []string       `json:"error_samples,omitempty"`
	// EjectedAfter and LastAttemptAfter come from the gateway's log (its
	// clock, read to the millisecond it writes): when it ejected the
	// replica, and when it last routed an attempt to it, after the kill.
	// ProbesDownAfter is when its probes marked it down; -1 when not seen.
	EjectedAfter     float64 `json:"ejected_after_seconds"`
	LastAttemptAfter float64 `json:"last_attempt_after_seconds"`
	ProbesDownAfter  float64 `json:"probes_down_after_seconds"`
	// ProbesUpAfterRestart is when probes passed again after Restart.
	ProbesUpAfterRestart float64 `json:"probes_up_after_restart_seconds"`
	// OutOfRotationAfter is when the first admin poll after the kill showed
	// the replica ejected (inferrail_replica_ejected 1) or failing probes
	// (inferrail_replica_healthy 0), and which; PollSeconds is the mean
	// time between polls, the resolution of that figure.
	OutOfRotationAfter float64 `json:"out_of_rotation_after_seconds"`
	OutOfRotationBy    string  `json:"out_of_rotation_by"`
	PollSeconds        float64 `json:"poll_seconds"`
	// LastRoutedAfter is the last poll after the kill that saw
	// inferrail_routing_decisions_total of the replica grow: an upper bound
	// of the last attempt sent to it. AttemptsAfterKill counts those
	// attempts (each failed and was retried elsewhere, or failed the
	// request).
	LastRoutedAfter   float64 `json:"last_routed_after_seconds"`
	AttemptsAfterKill float64 `json:"attempts_after_kill"`
	// ServingAgainAfter runs from Restart to the end of the first response
	// the replica served; ServedAfterRestart counts its responses.
	ServingAgainAfter  float64 `json:"serving_again_after_seconds"`
	ServedAfterRestart int     `json:"served_after_restart"`
	RestartError       string  `json:"restart_error,omitempty"`
	// Latency covers every successful request; LatencyAfterKill those sent
	// in the second after the kill.
	Latency          measure.Percentiles `json:"latency"`
	LatencyAfterKill measure.Percentiles `json:"latency_after_kill"`
	PerReplica       map[string]int      `json:"per_replica"`
	Retries          float64             `json:"gateway_retries"`
	Ejections        float64             `json:"gateway_ejections"`
}

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

func runGWKill(ctx context.Context, r *gwRun) error {
	l := r.c.Kill
	total := l.Before + l.Down + l.After
	n := int(total.Seconds() * float64(l.Rate))
	r.res.Description = fmt.Sprintf("Non-streamed chats (max_tokens 1) at a fixed %d req/s through the gateway over three in-process "+
		"--zero-latency simulators; after %v sim-2 is killed (sim.Local.Kill: its port stops accepting and open connections drop), "+
		"%v later it is restarted on the same port, and the load goes on %v more. The admin /metrics page is polled back to back "+
		"around the kill to see when the gateway takes sim-2 out of rotation.", l.Rate, l.Before, l.Down, l.After)
	r.res.Parameters = map[string]any{"rate": l.Rate, "requests": n, "before": l.Before.String(), "down": l.Down.String(),
		"after": l.After.String(), "max_tokens": 1, "schedule": "fixed interval", "per_request_timeout": faultRequestTimeout.String()}
	sims, gw, err := faultFleet(ctx, r, "")
	if err != nil {
		return err
	}
	victim := sims[1]
	admin := procs.AdminClient()
	defer admin.CloseIdleConnections()
	client := gwClient(1024)
	defer client.CloseIdleConnections()
	url := gw.URL + "/v1/chat/completions"
	body := gwChatBody(procs.SimModel, 0, 1)

	f := &KillFigures{Requests: n, Replica: victim.ID}
	start := time.Now().Add(20 * time.Millisecond)
	var killAt, restartAt time.Duration
	var killWall, restartWall time.Time
	var samples []adminSample
	ctrl := make(chan struct{})
	go func() {
		defer close(ctrl)
		if !measure.SleepUntil(ctx, start.Add(l.Before-100*time.Millisecond)) {
			return
		}
		poller := startAdminPoller(ctx, admin, gw, victim.ID, start, 0)
		measure.SleepUntil(ctx, start.Add(l.Before))
		killAt, killWall = time.Since(start), time.Now()
		victim.local.Kill()
		r.log.Info("gw-kill: killed", "replica", victim.ID)
		measure.SleepUntil(ctx, start.Add(l.Before+min(l.Down, time.Second)))
		samples = poller.stop()
		measure.SleepUntil(ctx, start.Add(l.Before+l.Down))
		restartAt, restartWall = time.Since(start), time.Now()
		if err := victim.local.Restart(); err != nil {
			f.RestartError = err.Error()
		}
		r.log.Info("gw-kill: restarted", "replica", victim.ID)
	}()
	retries0, ejections0 := gatewayCounters(ctx, admin, gw)
	shots := stress.OpenLoop(ctx, start, stress.FixedSchedule(l.Rate, n), faultRequestTimeout, func(ctx context.Context, _ int) (int, string, error) {
		return postChat(ctx, client, url, body, "", 1)
	})
	<-ctrl
	if err := ctx.Err(); err != nil {
		return err
	}
	retries1, ejections1 := gatewayCounters(ctx, admin, gw)
	f.Retries, f.Ejections = retries1-retries0, ejections1-ejections0
	f.KillAtSeconds, f.RestartAtSeconds = killAt.Seconds(), restartAt.Seconds()

	var tally stress.ErrorTally
	var lat, latAfter []time.Duration
	f.PerReplica = map[string]int{}
	f.ServingAgainAfter = -1
	for _, s := range shots {
		before := s.Sent < killAt
		if before {
			f.SentBeforeKill++
			if s.Done > killAt {
				f.InFlightAtKill++
			}
		} else {
			f.SentAfterKill++
		}
		if s.Err != nil {
			tally.Add(s.Err)
			if before {
				f.FailedSentBeforeKill++
			} else {
				f.FailedSentAfterKill++
			}
			continue
		}
		f.PerReplica[s.Replica]++
		lat = append(lat, s.Done-s.Sched)
		if !before && s.Sent < killAt+time.Second {
			latAfter = append(latAfter, s.Done-s.Sched)
		}
		if s.Replica == victim.ID && s.Sent >= restartAt {
			f.ServedAfterRestart++
			if d := (s.Done - restartAt).Seconds(); f.ServingAgainAfter < 0 || d < f.ServingAgainAfter {
				f.ServingAgainAfter = d
			}
		}
	}
	_, f.ErrorKinds, f.ErrorSamples = tally.Result()
	f.Latency, f.LatencyAfterKill = measure.Summarize(lat), measure.Summarize(latAfter)

	f.PollSeconds = pollResolution(samples)
	f.OutOfRotationAfter, f.LastRoutedAfter = -1, -1
	var decisionsAtKill float64
	var prev *adminSample
	for i := range samples {
		s := &samples[i]
		if s.At < killAt {
			decisionsAtKill = s.Decisions
			prev = s
			continue
		}
		if f.OutOfRotationAfter < 0 && (s.Ejected == 1 || s.Healthy == 0) {
			f.OutOfRotationAfter = (s.At - killAt).Seconds()
			f.OutOfRotationBy = "passive ejection"
			if s.Ejected != 1 {
				f.OutOfRotationBy = "probes"
			}
		}
		if prev != nil && s.Decisions > prev.Decisions {
			f.LastRoutedAfter = (s.At - killAt).Seconds()
		}
		f.AttemptsAfterKill = s.Decisions - decisionsAtKill
		prev = s
	}
	// The log truncates times to the millisecond: compare from the
	// millisecond the kill fell in.
	events := gw.Events()
	from := killWall.Truncate(time.Millisecond)
	since := func(t time.Time) float64 { return t.Sub(killWall).Seconds() }
	f.EjectedAfter, f.LastAttemptAfter, f.ProbesDownAfter, f.ProbesUpAfterRestart = -1, -1, -1, -1
	if e, ok := procs.FirstEvent(events, procs.MsgEjected, victim.ID, from); ok {
		f.EjectedAfter = since(e.At)
	}
	if e, ok := procs.FirstEvent(events, procs.MsgProbesFail, victim.ID, from); ok {
		f.ProbesDownAfter = since(e.At)
	}
	if e, ok := procs.FirstEvent(events, procs.MsgProbesPass, victim.ID, restartWall.Truncate(time.Millisecond)); ok {
		f.ProbesUpAfterRestart = e.At.Sub(restartWall).Seconds()
	}
	for _, e := range events {
		if e.Msg == procs.MsgAttemptFailed && e.Replica == victim.ID && !e.At.Before(from) && e.At.Before(restartWall) {
			f.LastAttemptAfter = since(e.At)
		}
	}
	r.res.Kill = f

	r.check("errors for requests sent after the kill", "0", strconv.Itoa(f.FailedSentAfterKill), f.FailedSentAfterKill == 0)
	r.check("requests in flight at the kill that failed (allowed)", "counted", fmt.Sprintf("%d of %d in flight", f.FailedSentBeforeKill, f.InFlightAtKill), true)
	r.check("killed replica out of rotation: last attempt routed to it after the kill (gateway log, to the ms)", "within 10 ms",
		fmt.Sprintf("last attempt %s, ejected %s after the kill (%.0f attempts failed on it); admin polls saw it out after %s, polling every %s",
			ms(f.LastAttemptAfter), ms(f.EjectedAfter), f.AttemptsAfterKill, ms(f.OutOfRotationAfter), ms(f.PollSeconds)),
		f.LastAttemptAfter >= -0.001 && f.LastAttemptAfter <= 0.010 && f.EjectedAfter >= -0.001 && f.EjectedAfter <= 0.010)
	r.check("restarted replica serving again", "reported", fmt.Sprintf("%s after Restart (%d responses after it)", ms(f.ServingAgainAfter), f.ServedAfterRestart),
		f.ServingAgainAfter >= 0)
	r.note("Passive ejection needs 3 failed requests in a row on the replica; at %d req/s spread over three replicas, the third arrives "+
		"about 3 × 3 ms after the kill, which sets the ejection time more than the gateway's own reaction does. Fast probes (every 100 ms, "+
		"timeout 80 ms, 3 failures to go down, 1 pass to come back) and a 1 s first ejection: the time to serve again is bounded by the "+
		"next passing probe and the end of the ejection.", l.Rate)
	return nil
}

// HangFigures is what gw-hang measured with one routing policy.
type HangFigures struct {
	Policy        string         `json:"policy"`
	Requests      int            `json:"requests"`
	Replica       string         `json:"hung_replica"`
	HangAtSeconds float64        `json:"hang_at_seconds"`
	HealAtSeconds float64        `json:"heal_at_seconds"`
	Errors        int            `json:"errors"`
	ErrorKinds    map[string]int `json:"error_kinds,omitempty"`
	ErrorSamples  []string       `json:"error_samples,omitempty"`
	// DownAfter is when the gateway logged that probes marked the replica
	// down (to the millisecond); PollDownAfter when the first admin poll
	// after the hang showed it, PollSeconds the mean time between polls.
	DownAfter     float64 `json:"down_after_seconds"`
	PollDownAfter float64 `json:"poll_down_after_seconds"`
	PollSeconds   float64 `json:"poll_seconds"`
	// SentToHung counts requests with an attempt on the hung replica (the
	// gateway's debug log "attempt failed", matched by X-Request-Id);
	// SentToHungErrors those that failed for the client, and
	// SentToHungLatency their latency from the scheduled send.
	SentToHung        int                 `json:"sent_to_hung"`
	SentToHungErrors  int                 `json:"sent_to_hung_errors"`
	SentToHungLatency measure.Percentiles `json:"sent_to_hung_latency"`
	// OthersLatency covers the successful requests never sent to it.
	OthersLatency measure.Percentiles `json:"others_latency"`
	// AttemptErrors counts the logged failed attempts on the hung replica
	// by error.
	AttemptErrors map[string]int `json:"attempt_errors,omitempty"`
	// BackAfter runs from the heal to the end of the first response the
	// replica served.
	BackAfter  float64        `json:"back_after_seconds"`
	PerReplica map[string]int `json:"per_replica"`
	Retries    float64        `json:"gateway_retries"`
}

func runGWHang(ctx context.Context, r *gwRun) error {
	l := r.c.Hang
	n := int((l.Before + l.Hang + l.After).Seconds() * float64(l.Rate))
	r.res.Description = fmt.Sprintf("Non-streamed chats (max_tokens 1) at a fixed %d req/s through the gateway over three in-process "+
		"--zero-latency simulators; after %v sim-2 starts hanging (sim.FaultHang: requests and /health get no answer), %v later it heals. "+
		"Requests waiting on it must move to another replica once probes mark it down. Run twice: with the default policy, least_request, "+
		"which stops choosing the hung replica as soon as its requests pile up, and with round_robin, which keeps sending it a third of the "+
		"traffic until probes take it out.", l.Rate, l.Before, l.Hang)
	r.res.Parameters = map[string]any{"rate": l.Rate, "requests": n, "before": l.Before.String(), "hang": l.Hang.String(),
		"after": l.After.String(), "max_tokens": 1, "schedule": "fixed interval", "per_request_timeout": faultRequestTimeout.String(),
		"policies": []string{"least_request", "round_robin"}}
	for _, policy := range []string{"least_request", "round_robin"} {
		f, err := hangOnce(ctx, r, policy, n)
		if err != nil {
			return fmt.Errorf("%s: %w", policy, err)
		}
		r.res.Hang = append(r.res.Hang, *f)
		r.check(policy+": client errors", "0", strconv.Itoa(f.Errors), f.Errors == 0)
		r.check(policy+": requests that had been sent to the hung replica", "moved to another replica once probes mark it down",
			fmt.Sprintf("%d sent to it, %d failed, p99 %s (probes marked it down after %s)", f.SentToHung, f.SentToHungErrors,
				ms(f.SentToHungLatency.P99), ms(f.DownAfter)), f.SentToHungErrors == 0 && f.DownAfter >= 0)
	}
	r.note("Probes every 100 ms with an 80 ms timeout and 3 failures to go down: a hung replica is out after roughly 3 × 100 ms, " +
		"and that bounds how long a request waiting on it waits before its retry.")
	return nil
}

func hangOnce(ctx context.Context, r *gwRun, policy string, n int) (*HangFigures, error) {
	l := r.c.Hang
	sims, gw, err := faultFleet(ctx, r, policy)
	if err != nil {
		return nil, err
	}
	defer r.stopReplicas()
	defer r.stopGateway(gw)
	victim := sims[1]
	admin := procs.AdminClient()
	defer admin.CloseIdleConnections()
	client := gwClient(1024)
	defer client.CloseIdleConnections()
	url := gw.URL + "/v1/chat/completions"
	body := gwChatBody(procs.SimModel, 0, 1)

	f := &HangFigures{Policy: policy, Requests: n, Replica: victim.ID}
	start := time.Now().Add(20 * time.Millisecond)
	var hangAt, healAt time.Duration
	var hangWall time.Time
	var samples []adminSample
	ctrl := make(chan struct{})
	go func() {
		defer close(ctrl)
		if !measure.SleepUntil(ctx, start.Add(l.Before-100*time.Millisecond)) {
			return
		}
		poller := startAdminPoller(ctx, admin, gw, victim.ID, start, time.Millisecond)
		measure.SleepUntil(ctx, start.Add(l.Before))
		hangAt, hangWall = time.Since(start), time.Now()
		victim.local.SetFault(sim.Fault{Kind: sim.FaultHang})
		measure.SleepUntil(ctx, start.Add(l.Before+l.Hang))
		samples = poller.stop()
		healAt = time.Since(start)
		victim.local.SetFault(sim.Fault{})
	}()
	retries0, _ := gatewayCounters(ctx, admin, gw)
	shots := stress.OpenLoop(ctx, start, stress.FixedSchedule(l.Rate, n), faultRequestTimeout, func(ctx context.Context, i int) (int, string, error) {
		return postChat(ctx, client, url, body, "gwhang-"+strconv.Itoa(i), 1)
	})
	<-ctrl
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	retries1, _ := gatewayCounters(ctx, admin, gw)
	f.Retries = retries1 - retries0
	f.HangAtSeconds, f.HealAtSeconds = hangAt.Seconds(), healAt.Seconds()

	hung := map[int]bool{}
	f.AttemptErrors = map[string]int{}
	events := gw.Events()
	for _, a := range events {
		if a.Msg != procs.MsgAttemptFailed || a.Replica != victim.ID {
			continue
		}
		f.AttemptErrors[a.Error]++
		if i, err := strconv.Atoi(strings.TrimPrefix(a.RequestID, "gwhang-")); err == nil {
			hung[i] = true
		}
	}
	var tally stress.ErrorTally
	var toHung, others []time.Duration
	f.PerReplica = map[string]int{}
	f.BackAfter = -1
	for i, s := range shots {
		if hung[i] {
			f.SentToHung++
		}
		if s.Err != nil {
			tally.Add(s.Err)
			if hung[i] {
				f.SentToHungErrors++
			}
			continue
		}
		f.PerReplica[s.Replica]++
		if hung[i] {
			toHung = append(toHung, s.Done-s.Sched)
		} else {
			others = append(others, s.Done-s.Sched)
		}
		if s.Replica == victim.ID && s.Sent >= healAt {
			if d := (s.Done - healAt).Seconds(); f.BackAfter < 0 || d < f.BackAfter {
				f.BackAfter = d
			}
		}
	}
	f.Errors, f.ErrorKinds, f.ErrorSamples = tally.Result()
	f.SentToHungLatency, f.OthersLatency = measure.Summarize(toHung), measure.Summarize(others)
	f.PollSeconds = pollResolution(samples)
	f.DownAfter, f.PollDownAfter = -1, -1
	for _, s := range samples {
		if s.At >= hangAt && s.Healthy == 0 {
			f.PollDownAfter = (s.At - hangAt).Seconds()
			break
		}
	}
	if e, ok := procs.FirstEvent(events, procs.MsgProbesFail, victim.ID, hangWall.Truncate(time.Millisecond)); ok {
		f.DownAfter = e.At.Sub(hangWall).Seconds()
	}
	return f, nil
}

// FlapFigures is what gw-flap measured.
type FlapFigures struct {
	Requests     int                 `json:"requests"`
	Replica      string              `json:"flapping_replica"`
	Toggles      int                 `json:"toggles"`
	Errors       int                 `json:"errors"`
	ErrorKinds   map[string]int      `json:"error_kinds,omitempty"`
	ErrorSamples []string            `json:"error_samples,omitempty"`
	Latency      measure.Percentiles `json:"latency"`
	// PerReplica counts successful responses by replica; the flapping one
	// still serves while healthy and not ejected.
	PerReplica map[string]int `json:"per_replica"`
	Retries    float64        `json:"gateway_retries"`
	Ejections  float64        `json:"gateway_ejections"`
}

func runGWFlap(ctx context.Context, r *gwRun) error {
	l := r.c.Flap
	n := int(l.Duration.Seconds() * float64(l.Rate))
	r.res.Description = fmt.Sprintf("Non-streamed chats (max_tokens 1) at a fixed %d req/s for %v through the gateway over three in-process "+
		"--zero-latency simulators, while sim-2 flips every %v between healthy and answering every request and probe with 503 (sim.FaultFail). "+
		"A 503 is retryable: the gateway must move the request to another replica, so the client sees no error.", l.Rate, l.Duration, l.Toggle)
	r.res.Parameters = map[string]any{"rate": l.Rate, "requests": n, "duration": l.Duration.String(), "toggle": l.Toggle.String(),
		"max_tokens": 1, "schedule": "fixed interval", "per_request_timeout": faultRequestTimeout.String()}
	sims, gw, err := faultFleet(ctx, r, "")
	if err != nil {
		return err
	}
	victim := sims[1]
	admin := procs.AdminClient()
	defer admin.CloseIdleConnections()
	client := gwClient(1024)
	defer client.CloseIdleConnections()
	url := gw.URL + "/v1/chat/completions"
	body := gwChatBody(procs.SimModel, 0, 1)

	f := &FlapFigures{Requests: n, Replica: victim.ID}
	start := time.Now().Add(20 * time.Millisecond)
	ctrl := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		failing := false
		for k := 0; ; k++ {
			if !measure.SleepUntil(ctx, start.Add(time.Duration(k)*l.Toggle)) {
				return
			}
			select {
			case <-ctrl:
				victim.local.SetFault(sim.Fault{})
				return
			default:
			}
			failing = !failing
			if failing {
				victim.local.SetFault(sim.Fault{Kind: sim.FaultFail, Status: http.StatusServiceUnavailable})
			} else {
				victim.local.SetFault(sim.Fault{})
			}
			f.Toggles++
		}
	})
	retries0, ejections0 := gatewayCounters(ctx, admin, gw)
	shots := stress.OpenLoop(ctx, start, stress.FixedSchedule(l.Rate, n), faultRequestTimeout, func(ctx context.Context, _ int) (int, string, error) {
		return postChat(ctx, client, url, body, "", 1)
	})
	close(ctrl)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	retries1, ejections1 := gatewayCounters(ctx, admin, gw)
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
