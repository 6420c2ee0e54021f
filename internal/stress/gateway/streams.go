package gateway

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/inferrail/inferrail/internal/stress"

	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/procs"
)

// GWStreamsLoad is gw-streams: a burst of concurrent streamed chats through
// the gateway over three simulator children.
type GWStreamsLoad struct {
	stress.StreamsLoad // the burst itself, as sim-streams sends it
	// MaxNumSeqs is the simulators' --max-num-seqs. Must be positive.
	MaxNumSeqs int
	// DefaultLatency also runs the burst against simulators with the
	// default latency model, after the --zero-latency run.
	DefaultLatency bool
}

// Validate reports every setting that cannot run.
func (l GWStreamsLoad) Validate() error {
	return errors.Join(l.StreamsLoad.Validate(), stress.Positive("max_num_seqs", l.MaxNumSeqs))
}

// GWStreamsRun is one simulator configuration of gw-streams.
type GWStreamsRun struct {
	Variant   string   `json:"variant"`
	SimArgs   []string `json:"sim_args"`
	Streams   int      `json:"streams"`
	Completed int      `json:"completed"`
	stress.Failures
	// WallSeconds runs from the first request sent to the last [DONE] read.
	WallSeconds float64             `json:"wall_seconds"`
	Stream      measure.Percentiles `json:"stream"`
	TTFT        measure.Percentiles `json:"ttft"`
	// PerReplica counts completed streams by the X-Inferrail-Replica
	// header; SimFinished counts the requests each simulator finished, from
	// its vllm:request_success_total.
	PerReplica  map[string]int     `json:"per_replica"`
	SimFinished map[string]float64 `json:"sim_finished"`
	// SpreadPercent is the largest distance of a replica's count from an
	// even share, in percent of that share.
	SpreadPercent       float64   `json:"spread_percent"`
	GatewayPeakRSSBytes int64     `json:"gateway_peak_rss_bytes"`
	IdleAfter           idleState `json:"idle_after"`
}

func runGWStreams(ctx context.Context, r *gwRun) error {
	l := r.c.Streams
	variants := []struct {
		name string
		args []string
	}{{"zero-latency", []string{"--zero-latency"}}}
	if l.DefaultLatency {
		variants = append(variants, struct {
			name string
			args []string
		}{"default-latency", nil})
	}
	for _, v := range variants {
		args := append([]string{"--max-num-seqs", fmt.Sprint(l.MaxNumSeqs)}, v.args...)
		run, err := gwStreamsVariant(ctx, r, l, v.name, args)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		r.res.Streams = append(r.res.Streams, run)
		r.check(fmt.Sprintf("%s: streams completed", v.name), fmt.Sprintf("%d of %d, 0 errors", l.Streams, l.Streams),
			fmt.Sprintf("%d, %d errors", run.Completed, run.Errors), run.Completed == l.Streams && run.Errors == 0)
		r.check(fmt.Sprintf("%s: even spread over 3 replicas", v.name), "every replica within 10% of an even share",
			fmt.Sprintf("%s (largest distance %.1f%%)", formatCounts(run.PerReplica), run.SpreadPercent), run.SpreadPercent <= 10)
	}
	return nil
}

func gwStreamsVariant(ctx context.Context, r *gwRun, l GWStreamsLoad, variant string, args []string) (GWStreamsRun, error) {
	run := GWStreamsRun{Variant: variant, SimArgs: args, Streams: l.Streams}
	sims, gw, err := r.simFleet(ctx, 3, args, nil)
	defer r.stopReplicas()
	defer r.stopGateway(gw)
	if err != nil {
		return run, err
	}
	r.log.Info("gw-streams", "variant", variant, "streams", l.Streams, "gateway_pid", gw.Pid)

	client := gwClient(l.Streams)
	defer client.CloseIdleConnections()
	url := gw.URL + "/v1/chat/completions"
	sampler := startRSSSampler(ctx, gw.Pid, 100*time.Millisecond)
	out := stress.StreamBurst(ctx, client, url, l.Streams, l.MaxTokens, l.Timeout, func(i int) []byte {
		return gwStreamBody(procs.SimModel, i, l.MaxTokens, false)
	})
	run.GatewayPeakRSSBytes = peak(sampler.stop())

	t := stress.TallyStreams(out)
	run.Completed, run.WallSeconds, run.PerReplica = t.Completed, t.WallSeconds, t.PerReplica
	run.Errors, run.ErrorKinds, run.ErrorSamples = t.Errors.Result()
	run.Stream, run.TTFT = measure.Summarize(t.StreamTimes), measure.Summarize(t.TTFTs)
	run.SpreadPercent = spreadPercent(run.PerReplica, []string{"sim-1", "sim-2", "sim-3"})

	admin := procs.AdminClient()
	defer admin.CloseIdleConnections()
	run.SimFinished = map[string]float64{}
	for _, s := range sims {
		if p, err := procs.ScrapePage(ctx, admin, s.URL+"/metrics"); err == nil {
			run.SimFinished[s.ID] = p.Sum("vllm:request_success_total")
		}
	}
	client.CloseIdleConnections()
	_, run.IdleAfter = waitIdle(ctx, admin, gw, sims, 10*time.Second)
	r.log.Info("gw-streams done", "variant", variant, "completed", run.Completed, "errors", run.Errors,
		"wall_seconds", run.WallSeconds, "per_replica", formatCounts(run.PerReplica))
	return run, ctx.Err()
}

// spreadPercent is the largest distance of a replica's count from an even
// share over ids, in percent of that share; 100 when nothing was counted.
func spreadPercent(counts map[string]int, ids []string) float64 {
	total := 0
	for _, n := range counts {
		total += n
	}
	if total == 0 || len(ids) == 0 {
		return 100
	}
	even := float64(total) / float64(len(ids))
	var worst float64
	for _, id := range ids {
		worst = max(worst, math.Abs(float64(counts[id])-even)/even*100)
	}
	return worst
}

// formatCounts writes counts as "a 1, b 2" in key order, float counts (as
// read from metrics) as whole numbers, leaving out zeros.
func formatCounts[N int | float64](counts map[string]N) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		if counts[k] == 0 {
			continue // the gateway exports its counters from 0
		}
		name := k
		if name == "" {
			name = "(none)"
		}
		parts = append(parts, fmt.Sprintf("%s %d", name, int(counts[k])))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
