package gateway

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/inferrail/inferrail/internal/stress"

	"github.com/inferrail/inferrail/internal/procs"
)

// GWSoakFigures is what gw-soak measured: the simulator soak's workload
// sent through the gateway, following the gateway's memory.
type GWSoakFigures struct {
	// Soak's Memory follows the gateway process; its Sim is unset (see
	// Sims).
	Soak stress.SoakFigures `json:"soak"`
	// Sims sums the simulators' gauges and counters after the load.
	Sims *stress.SimGauges `json:"sims,omitempty"`
	// IdleAfter is what was in flight once the load was over, and
	// ClientConnsAfter the client connections the gateway still held
	// after the client closed its own.
	IdleAfter        idleState `json:"idle_after"`
	ClientConnsAfter int       `json:"client_conns_after"`
}

func runGWSoak(ctx context.Context, r *gwRun) error {
	l := r.c.Soak
	sims, gw := r.sims, r.gw
	r.log.Info("gw-soak", "requests", l.Requests, "concurrency", l.Concurrency, "gateway_pid", gw.Pid)
	sf, err := stress.RunSoak(ctx, gw.URL, l, gw.Pid)
	if err != nil {
		return err
	}
	// RunSoak reads the simulator gauges from its target's /metrics, which
	// the gateway's client port does not serve: drop that and read the
	// simulators themselves.
	var samples []string
	for _, s := range sf.ErrorSamples {
		if !strings.HasPrefix(s, "scrape /metrics after the soak") {
			samples = append(samples, s)
		}
	}
	sf.ErrorSamples, sf.Sim = samples, nil
	f := &GWSoakFigures{Soak: sf}
	admin := procs.AdminClient()
	defer admin.CloseIdleConnections()
	sum := &stress.SimGauges{RequestSuccess: map[string]float64{}}
	for _, s := range sims {
		g, err := stress.ScrapeGauges(ctx, admin, s.URL)
		if err != nil {
			return err
		}
		sum.Running += g.Running
		sum.Waiting += g.Waiting
		sum.KVUsage = max(sum.KVUsage, g.KVUsage)
		sum.Preemptions += g.Preemptions
		for k, v := range g.RequestSuccess {
			sum.RequestSuccess[k] += v
		}
	}
	f.Sims = sum
	_, f.IdleAfter = waitIdle(ctx, admin, gw, sims, 10*time.Second)
	f.ClientConnsAfter, _ = gw.ClientConns()
	r.res.Soak = f

	r.check("errors", "0", fmt.Sprintf("%d (completed %d, left by the client %d)", sf.Errors, sf.Completed, sf.Cancelled), sf.Errors == 0)
	if m := sf.Memory; m != nil {
		r.check("gateway resident memory growth, idle to idle after the warmup", "under 10 MB",
			fmt.Sprintf("%s (%d bytes: %s → %s, peak %s)", stress.MiB(m.GrowthBytes), m.GrowthBytes, stress.MiB(m.WarmupRSSBytes), stress.MiB(m.EndRSSBytes), stress.MiB(m.PeakRSSBytes)),
			m.GrowthBytes < 10_000_000)
	}
	r.check("nothing left in flight; client connections released", "gateway in flight 0, engines idle, 0 connections held",
		fmt.Sprintf("in flight %.0f, engines running %.0f, waiting %.0f, connections held %d", f.IdleAfter.GatewayInFlight,
			f.IdleAfter.SimRunning, f.IdleAfter.SimWaiting, f.ClientConnsAfter), f.IdleAfter.idle() && f.ClientConnsAfter == 0)
	return nil
}
