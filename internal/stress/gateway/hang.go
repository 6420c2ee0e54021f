package gateway

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/sim"
	"github.com/inferrail/inferrail/internal/stress"
)

// HangFigures is what gw-hang measured with one routing policy.
type HangFigures struct {
	Policy        string  `json:"policy"`
	Requests      int     `json:"requests"`
	Replica       string  `json:"hung_replica"`
	HangAtSeconds float64 `json:"hang_at_seconds"`
	HealAtSeconds float64 `json:"heal_at_seconds"`
	stress.Failures
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

// hangOnce runs gw-hang with one routing policy over a fresh fleet.
func hangOnce(ctx context.Context, r *gwRun, policy string, n int) (*HangFigures, error) {
	l := r.c.Hang
	fl, err := r.startFaultLoad(ctx, policy)
	if err != nil {
		return nil, err
	}
	defer r.stopReplicas()
	defer r.stopGateway(fl.gw)
	defer fl.close()
	f := &HangFigures{Policy: policy, Requests: n, Replica: fl.victim.ID}
	var hangAt, healAt time.Duration
	var hangWall time.Time
	var samples []adminSample
	ctrl := make(chan struct{})
	go func() {
		defer close(ctrl)
		if !measure.SleepUntil(ctx, fl.start.Add(l.Before-100*time.Millisecond)) {
			return
		}
		samples = fl.poll(ctx, time.Millisecond, func() {
			measure.SleepUntil(ctx, fl.start.Add(l.Before))
			hangAt, hangWall = time.Since(fl.start), time.Now()
			fl.victim.local.SetFault(sim.Fault{Kind: sim.FaultHang})
			measure.SleepUntil(ctx, fl.start.Add(l.Before+l.Hang))
		})
		healAt = time.Since(fl.start)
		fl.victim.local.SetFault(sim.Fault{})
	}()
	retries0, _ := fl.counters(ctx)
	shots := fl.send(ctx, l.Rate, n, func(i int) string { return "gwhang-" + strconv.Itoa(i) })
	<-ctrl
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	retries1, _ := fl.counters(ctx)
	f.Retries = retries1 - retries0
	f.HangAtSeconds, f.HealAtSeconds = hangAt.Seconds(), healAt.Seconds()
	events := fl.gw.Events()
	hung := f.readAttempts(events, fl.victim.ID)
	f.tallyShots(shots, hung, fl.victim.ID, healAt)
	f.PollSeconds = pollResolution(samples)
	f.DownAfter, f.PollDownAfter = -1, -1
	for _, s := range samples {
		if s.At >= hangAt && s.Healthy == 0 {
			f.PollDownAfter = (s.At - hangAt).Seconds()
			break
		}
	}
	if e, ok := procs.FirstEvent(events, procs.MsgProbesFail, fl.victim.ID, hangWall.Truncate(time.Millisecond)); ok {
		f.DownAfter = e.At.Sub(hangWall).Seconds()
	}
	return f, nil
}

// readAttempts counts the failed attempts the gateway logged on the hung
// replica by error, and returns the requests (by index) they belonged to.
func (f *HangFigures) readAttempts(events []procs.Event, victim string) map[int]bool {
	hung := map[int]bool{}
	f.AttemptErrors = map[string]int{}
	for _, a := range events {
		if a.Msg != procs.MsgAttemptFailed || a.Replica != victim {
			continue
		}
		f.AttemptErrors[a.Error]++
		if i, err := strconv.Atoi(strings.TrimPrefix(a.RequestID, "gwhang-")); err == nil {
			hung[i] = true
		}
	}
	return hung
}

// tallyShots counts the failures and latencies of the requests sent to
// the hung replica and of the others, and when it served again.
func (f *HangFigures) tallyShots(shots []stress.Shot, hung map[int]bool, victim string, healAt time.Duration) {
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
		if s.Replica == victim && s.Sent >= healAt {
			if d := (s.Done - healAt).Seconds(); f.BackAfter < 0 || d < f.BackAfter {
				f.BackAfter = d
			}
		}
	}
	f.Errors, f.ErrorKinds, f.ErrorSamples = tally.Result()
	f.SentToHungLatency, f.OthersLatency = measure.Summarize(toHung), measure.Summarize(others)
}
