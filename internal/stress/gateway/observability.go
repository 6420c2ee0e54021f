package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/porthold"
	"github.com/inferrail/inferrail/internal/procs"
)

// ObservabilityLoad is gw-observability: gw-overhead's open-loop schedule
// through two gateways over the same simulators, one observing nothing and
// one exporting traces of every request to an unreachable collector and
// logging every routing decision, and straight to a simulator; what
// observing costs is the second gateway's latency against the first's.
//
// Its settings are gw-overhead's, meaning the same and validated alike.
type ObservabilityLoad OverheadLoad

// Validate reports every setting that cannot run.
func (l ObservabilityLoad) Validate() error { return OverheadLoad(l).Validate() }

// observabilityLegOrder runs each target twice, mirrored, so that drift
// over the legs falls on all of them alike.
var observabilityLegOrder = [...]string{"direct", "off", "on", "on", "off", "direct"}

// ObservabilityRate is gw-observability at one rate.
type ObservabilityRate struct {
	Rate     int           `json:"rate"`
	Requests int           `json:"requests_per_leg"`
	Legs     []OverheadLeg `json:"legs"`
	// Direct, Off and On are each target's two legs pooled: the simulator
	// straight, the gateway observing nothing, the gateway tracing and
	// logging decisions.
	Direct OverheadLeg `json:"direct"`
	Off    OverheadLeg `json:"off"`
	On     OverheadLeg `json:"on"`
	// Added* are each gateway's percentile minus the direct one;
	// Observing* the observing gateway's minus the other's.
	OffAddedP50    float64 `json:"off_added_p50_seconds"`
	OffAddedP99    float64 `json:"off_added_p99_seconds"`
	OnAddedP50     float64 `json:"on_added_p50_seconds"`
	OnAddedP99     float64 `json:"on_added_p99_seconds"`
	ObservingP50   float64 `json:"observing_p50_seconds"`
	ObservingP99   float64 `json:"observing_p99_seconds"`
	ObservingMean  float64 `json:"observing_mean_seconds"`
	ObservingCPU   float64 `json:"observing_cpu_per_request_seconds"`
	ObservedCounts `json:"counts"`
}

// ObservedCounts are what the observing gateway's metrics counted over the
// rate, warmups included.
type ObservedCounts struct {
	DecisionsWritten float64 `json:"decisions_written"`
	DecisionsDropped float64 `json:"decisions_dropped"`
	DecisionsFailed  float64 `json:"decisions_failed"`
	SpansExported    float64 `json:"spans_exported"`
	SpansFailed      float64 `json:"spans_failed"`
	SpansDropped     float64 `json:"spans_dropped"`
	MetricsError     string  `json:"metrics_error,omitempty"`
}

func runGWObservability(ctx context.Context, r *gwRun) error {
	l := r.c.Observe
	off, on := r.gw, r.fleet.Gateways[len(r.fleet.Gateways)-1]
	pair := newOverheadPair(off, r.sims, l.Timeout, l.MaxTokens)
	defer pair.close()
	pair.targets["off"] = pair.targets["gateway"]
	pair.targets["on"] = overheadTarget{on.URL + "/v1/chat/completions", gwClient(2048), on.Pid}
	pair.pids = append(pair.pids, on.Pid)
	admin := procs.AdminClient()
	defer admin.CloseIdleConnections()
	body := gwChatBody(procs.SimModel, 0, l.MaxTokens)
	same := func(int) []byte { return body }
	for _, rate := range l.Rates {
		before, err1 := on.Metrics(ctx, admin)
		legs, err := pair.legs(ctx, r.log, observabilityLegOrder[:], overheadSpec{Rate: rate, Requests: l.Requests, Warmup: l.Warmup, Seed: l.Seed,
			Bodies: func(int) (warm, measured func(int) []byte) { return same, same }})
		if err != nil {
			return err
		}
		after, err2 := on.Metrics(ctx, admin)
		res := observabilityRate(rate, l.Requests, legs)
		if err := errors.Join(err1, err2); err != nil {
			res.MetricsError = err.Error()
		} else {
			res.ObservedCounts = observedCounts(before, after)
		}
		r.res.Observability = append(r.res.Observability, res)
		r.log.Info("observability rate", "rate", rate, "observing_p50_ms", res.ObservingP50*1e3, "observing_p99_ms", res.ObservingP99*1e3,
			"decisions_written", res.DecisionsWritten, "decisions_dropped", res.DecisionsDropped, "spans_dropped", res.SpansDropped)
		r.check(fmt.Sprintf("%d req/s: latency observing adds (on minus off) at p50 and p99", rate), "under 0.1 ms",
			fmt.Sprintf("p50 %s, p99 %s", ms(res.ObservingP50), ms(res.ObservingP99)), res.ObservingP50 < 0.0001 && res.ObservingP99 < 0.0001)
		r.check(fmt.Sprintf("%d req/s: decisions dropped from the decision log", rate), "0",
			fmt.Sprintf("%.0f of %.0f", res.DecisionsDropped, res.DecisionsWritten+res.DecisionsDropped+res.DecisionsFailed),
			res.MetricsError == "" && res.DecisionsDropped == 0 && res.DecisionsFailed == 0 && res.DecisionsWritten > 0)
		r.check(fmt.Sprintf("%d req/s: errors", rate), "0", fmt.Sprintf("direct %d, off %d, on %d", res.Direct.Errors, res.Off.Errors, res.On.Errors),
			res.Direct.Errors+res.Off.Errors+res.On.Errors == 0)
	}
	r.res.Setup.Gateway = "two inferrail-gateway child processes (" + r.c.GatewayBinary + ") over the same simulators, configs as gw-overhead's; the on one adds its observability section"
	r.note("With the collector unreachable every export fails: after a failure, batches are given up unsent for a backoff " +
		"(counted in inferrail_trace_spans_failed_total) and spans that find the export queue full are dropped (inferrail_trace_spans_dropped_total). " +
		"That is what an unreachable collector should cost: nothing on the request path, a bounded queue in memory, no encoding of spans nobody takes.")
	return nil
}

// observabilityRate pools the legs of one rate and takes the differences.
func observabilityRate(rate, requests int, legs []OverheadLeg) ObservabilityRate {
	res := ObservabilityRate{Rate: rate, Requests: requests, Legs: legs,
		Direct: poolTarget("direct", legs), Off: poolTarget("off", legs), On: poolTarget("on", legs)}
	res.OffAddedP50 = res.Off.Latency.P50 - res.Direct.Latency.P50
	res.OffAddedP99 = res.Off.Latency.P99 - res.Direct.Latency.P99
	res.OnAddedP50 = res.On.Latency.P50 - res.Direct.Latency.P50
	res.OnAddedP99 = res.On.Latency.P99 - res.Direct.Latency.P99
	res.ObservingP50 = res.On.Latency.P50 - res.Off.Latency.P50
	res.ObservingP99 = res.On.Latency.P99 - res.Off.Latency.P99
	res.ObservingMean = res.On.Latency.Mean - res.Off.Latency.Mean
	res.ObservingCPU = res.On.CPUPerRequest - res.Off.CPUPerRequest
	return res
}

// observedCounts are the differences of the observing gateway's counters
// between two scrapes.
func observedCounts(before, after procs.PromPage) ObservedCounts {
	d := func(name string) float64 { return after.Sum(name) - before.Sum(name) }
	return ObservedCounts{
		DecisionsWritten: d("inferrail_decision_log_written_total"), DecisionsDropped: d("inferrail_decision_log_dropped_total"),
		DecisionsFailed: d("inferrail_decision_log_failed_total"), SpansExported: d("inferrail_trace_spans_exported_total"),
		SpansFailed: d("inferrail_trace_spans_failed_total"), SpansDropped: d("inferrail_trace_spans_dropped_total"),
	}
}

// observabilitySetup starts the simulators, the gateway observing nothing
// (r.gw) and the one observing everything (the fleet's last gateway).
func observabilitySetup(ctx context.Context, r *gwRun) error {
	var err error
	if r.sims, r.gw, err = r.simFleet(ctx, 3, overheadSimArgs, nil); err != nil {
		return err
	}
	// The unreachable collector: a port held without listening for the
	// run, so that no child started after it can be given it.
	hold, port := porthold.Free()
	if port == 0 {
		if port, err = procs.FreePort(); err != nil {
			return err
		}
	}
	r.holds = append(r.holds, hold)
	dir, err := os.MkdirTemp("", "inferrail-gwstress-decisions-")
	if err != nil {
		return err
	}
	r.dirs = append(r.dirs, dir)
	cfg := gwConfig(r.sims, healthDefault)
	cfg.Observability = observingConfig(cfg.Observability, "http://127.0.0.1:"+strconv.Itoa(port), filepath.Join(dir, "decisions.jsonl"))
	_, err = r.gateway(ctx, cfg)
	return err
}

// observingConfig is o with traces of every request exported to
// collector and every decision logged to path.
func observingConfig(o config.Observability, collector, path string) config.Observability {
	o.OTLPEndpoint, o.TraceSampleRatio = collector, 1
	o.DecisionLog.Path, o.DecisionLog.SampleRate = path, 1
	return o
}
