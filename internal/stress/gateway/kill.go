package gateway

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/stress"
)

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

// killTimes are when gw-kill killed and restarted its victim: offsets from
// the load's start, and wall clock times to compare with the gateway's log.
type killTimes struct {
	killAt, restartAt     time.Duration
	killWall, restartWall time.Time
	restartErr            error
	samples               []adminSample // admin polls around the kill
}

func runGWKill(ctx context.Context, r *gwRun) error {
	l := r.c.Kill
	total := l.Before + l.Down + l.After
	n := int(total.Seconds() * float64(l.Rate))
	fl, err := r.startFaultLoad(ctx, "")
	if err != nil {
		return err
	}
	defer fl.close()
	var t killTimes
	ctrl := make(chan struct{})
	go func() {
		defer close(ctrl)
		t = killAndRestart(ctx, r, fl, l)
	}()
	retries0, ejections0 := fl.counters(ctx)
	shots := fl.send(ctx, l.Rate, n, nil)
	<-ctrl
	if err := ctx.Err(); err != nil {
		return err
	}
	f := &KillFigures{Requests: n, Replica: fl.victim.ID}
	if t.restartErr != nil {
		f.RestartError = t.restartErr.Error()
	}
	retries1, ejections1 := fl.counters(ctx)
	f.Retries, f.Ejections = retries1-retries0, ejections1-ejections0
	f.KillAtSeconds, f.RestartAtSeconds = t.killAt.Seconds(), t.restartAt.Seconds()
	f.tallyShots(shots, t, fl.victim.ID)
	f.readPolls(t.samples, t.killAt)
	f.readEvents(fl.gw.Events(), t, fl.victim.ID)
	r.res.Kill = f
	killChecks(r, f, l.Rate)
	return nil
}

// killAndRestart kills the victim l.Before into the load, polling the
// gateway's admin page from 100 ms before the kill to a second after it,
// and restarts it l.Down later.
func killAndRestart(ctx context.Context, r *gwRun, fl *faultLoad, l KillLoad) killTimes {
	var t killTimes
	if !measure.SleepUntil(ctx, fl.start.Add(l.Before-100*time.Millisecond)) {
		return t
	}
	t.samples = fl.poll(ctx, 0, func() {
		measure.SleepUntil(ctx, fl.start.Add(l.Before))
		t.killAt, t.killWall = time.Since(fl.start), time.Now()
		fl.victim.local.Kill()
		r.log.Info("gw-kill: killed", "replica", fl.victim.ID)
		measure.SleepUntil(ctx, fl.start.Add(l.Before+min(l.Down, time.Second)))
	})
	measure.SleepUntil(ctx, fl.start.Add(l.Before+l.Down))
	t.restartAt, t.restartWall = time.Since(fl.start), time.Now()
	t.restartErr = fl.victim.local.Restart()
	r.log.Info("gw-kill: restarted", "replica", fl.victim.ID)
	return t
}

// tallyShots counts the requests sent before and after the kill, their
// failures and latencies, and when the restarted victim served again.
func (f *KillFigures) tallyShots(shots []stress.Shot, t killTimes, victim string) {
	var tally stress.ErrorTally
	var lat, latAfter []time.Duration
	f.PerReplica = map[string]int{}
	f.ServingAgainAfter = -1
	for _, s := range shots {
		before := s.Sent < t.killAt
		if before {
			f.SentBeforeKill++
			if s.Done > t.killAt {
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
		if !before && s.Sent < t.killAt+time.Second {
			latAfter = append(latAfter, s.Done-s.Sched)
		}
		if s.Replica == victim && s.Sent >= t.restartAt {
			f.ServedAfterRestart++
			if d := (s.Done - t.restartAt).Seconds(); f.ServingAgainAfter < 0 || d < f.ServingAgainAfter {
				f.ServingAgainAfter = d
			}
		}
	}
	_, f.ErrorKinds, f.ErrorSamples = tally.Result()
	f.Latency, f.LatencyAfterKill = measure.Summarize(lat), measure.Summarize(latAfter)
}

// readPolls finds in the admin polls when the gateway showed the victim
// out of rotation and when it last routed to it.
func (f *KillFigures) readPolls(samples []adminSample, killAt time.Duration) {
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
}

// readEvents finds in the gateway's log when it ejected the victim, when
// its probes marked it down and up again, and its last failed attempt.
func (f *KillFigures) readEvents(events []procs.Event, t killTimes, victim string) {
	// The log truncates times to the millisecond: compare from the
	// millisecond the kill fell in.
	from := t.killWall.Truncate(time.Millisecond)
	since := func(at time.Time) float64 { return at.Sub(t.killWall).Seconds() }
	f.EjectedAfter, f.LastAttemptAfter, f.ProbesDownAfter, f.ProbesUpAfterRestart = -1, -1, -1, -1
	if e, ok := procs.FirstEvent(events, procs.MsgEjected, victim, from); ok {
		f.EjectedAfter = since(e.At)
	}
	if e, ok := procs.FirstEvent(events, procs.MsgProbesFail, victim, from); ok {
		f.ProbesDownAfter = since(e.At)
	}
	if e, ok := procs.FirstEvent(events, procs.MsgProbesPass, victim, t.restartWall.Truncate(time.Millisecond)); ok {
		f.ProbesUpAfterRestart = e.At.Sub(t.restartWall).Seconds()
	}
	for _, e := range events {
		if e.Msg == procs.MsgAttemptFailed && e.Replica == victim && !e.At.Before(from) && e.At.Before(t.restartWall) {
			f.LastAttemptAfter = since(e.At)
		}
	}
}

func killChecks(r *gwRun, f *KillFigures, rate int) {
	r.check("errors for requests sent after the kill", "0", strconv.Itoa(f.FailedSentAfterKill), f.FailedSentAfterKill == 0)
	r.check("requests in flight at the kill that failed (allowed)", "counted", fmt.Sprintf("%d of %d in flight", f.FailedSentBeforeKill, f.InFlightAtKill), true)
	out := f.EjectedAfter
	if f.ProbesDownAfter >= -0.001 && (out < -0.001 || f.ProbesDownAfter < out) {
		out = f.ProbesDownAfter
	}
	r.check("killed replica out of rotation: last attempt routed to it, and ejection or probes marking it down, after the kill (gateway log, to the ms)", "within 10 ms",
		fmt.Sprintf("last attempt %s; out of rotation %s (ejected %s, probes down %s; %.0f attempts failed on it); admin polls saw it out after %s, polling every %s",
			ms(f.LastAttemptAfter), ms(out), ms(f.EjectedAfter), ms(f.ProbesDownAfter), f.AttemptsAfterKill, ms(f.OutOfRotationAfter), ms(f.PollSeconds)),
		f.LastAttemptAfter >= -0.001 && f.LastAttemptAfter <= 0.010 && out >= -0.001 && out <= 0.010)
	r.check("restarted replica serving again", "reported", fmt.Sprintf("%s after Restart (%d responses after it)", ms(f.ServingAgainAfter), f.ServedAfterRestart),
		f.ServingAgainAfter >= 0)
	r.note("Passive ejection needs 3 failed requests in a row on the replica, but a refused connection counts as all three: at %d req/s "+
		"spread over three replicas, the first request sent to the killed port after the kill, about 3 ms after it, ejects it "+
		"(Health.Refused), and has the gateway probe it at once, and again at once while the probes fail, so probes mark it down a "+
		"millisecond or two later. Requests in flight at the kill fail on closed connections, which count one each. Fast probes (every 100 ms, timeout 80 ms, 3 failures to go down, 1 pass to come back) and a 1 s first ejection: the "+
		"time to serve again is bounded by the next passing probe, up to an interval after the restart, and the end of the ejection.", rate)
}
