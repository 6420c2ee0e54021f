package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/inferrail/inferrail/internal/procs"
)

// A run may put several gateways, with the same config, in front of the
// same simulators (RunSpec.Gateways), the client sending its requests to
// each in turn. In index mode exact every gateway follows every engine's
// KV events, so their mirrors should agree: the run reads each gateway's
// /admin/index at the end and compares them (IndexAgreement). Each
// gateway only knows its own requests in flight, though, so gateways that
// see the same best replica may all send to it at once (herding): the
// figures per gateway and per replica say where the load went.

// GatewayFigures are the measured requests one of several gateways routed.
type GatewayFigures struct {
	URL       string  `json:"url"`
	Measured  int     `json:"measured"`
	Succeeded int     `json:"succeeded"`
	TTFTP99   float64 `json:"ttft_p99"`
	HitRate   float64 `json:"hit_rate"`
	// Replicas counts its measured successes by the replica that served
	// them.
	Replicas map[string]int `json:"replicas,omitempty"`
	// PredExact is the share of its predictions that equalled usage; nil
	// without predictions.
	PredExact *float64 `json:"prediction_exact,omitempty"`
}

// setGateways breaks the measured outcomes (those after the first warm)
// down by the gateway they went to, when there are n > 1 of them at urls
// (nil: unnamed).
func (m *Measurements) setGateways(outs []Outcome, warm, n int, urls ...string) {
	if n <= 1 {
		return
	}
	by := make([][]Outcome, n)
	for _, o := range outs[min(warm, len(outs)):] {
		if o.Target >= 0 && o.Target < n {
			by[o.Target] = append(by[o.Target], o)
		}
	}
	m.Gateways = make([]GatewayFigures, n)
	for i, os := range by {
		sub := measureOutcomes(os, 0, m.SLO)
		g := GatewayFigures{Measured: sub.Measured, Succeeded: sub.Succeeded, TTFTP99: sub.TTFT.P99,
			HitRate: sub.HitRate, Replicas: sub.Replicas}
		if i < len(urls) {
			g.URL = urls[i]
		}
		if sub.Prediction != nil {
			g.PredExact = &sub.Prediction.Exact
		}
		m.Gateways[i] = g
	}
}

// replicaTTFTP99 is the p99 TTFT of the successes each replica served,
// nil when no outcome names its replica.
func replicaTTFTP99(outs []Outcome) map[string]float64 {
	by := map[string][]time.Duration{}
	for i := range outs {
		if o := &outs[i]; o.OK() && o.Replica != "" {
			by[o.Replica] = append(by[o.Replica], o.TTFT)
		}
	}
	if len(by) == 0 {
		return nil
	}
	out := make(map[string]float64, len(by))
	for r, ds := range by {
		out[r] = distOf(ds).P99
	}
	return out
}

// IndexAgreement compares the KV event streams of several gateways'
// /admin/index at the end of a run: for every engine, the blocks mirrored,
// the last sequence applied, the blocks stored and removed, and the digest
// of the mirrored gateway hashes must be the same.
type IndexAgreement struct {
	// Agree is set when every gateway's streams matched the first's.
	Agree bool `json:"agree"`
	// Replicas is how many engines' streams were compared.
	Replicas int `json:"replicas"`
	// Reads is how many times the indexes were read before they agreed,
	// or before the time to wait for that ran out; WaitedSeconds how long
	// that took (events still in flight at the first read).
	Reads         int     `json:"reads"`
	WaitedSeconds float64 `json:"waited_seconds"`
	// Differences say what differed at the last read.
	Differences []string `json:"differences,omitempty"`
}

// streamKey is what gateways following the same engine agree on.
func streamKey(k *procs.KVStream) string {
	seq := "none"
	if k.LastSeq != nil {
		seq = fmt.Sprint(*k.LastSeq)
	}
	return fmt.Sprintf("source %s, %d blocks mirrored, last seq %s, %d stored, %d removed, digest %s",
		k.Source, k.Mirrored, seq, k.Mirror.Stored, k.Mirror.Removed, k.Digest)
}

// compareIndexes lists how every index's KV event streams differ from the
// first's, replica by replica, and how many replicas the first follows.
func compareIndexes(sts []*procs.IndexStatus) (replicas int, diffs []string) {
	if len(sts) == 0 {
		return 0, nil
	}
	first := map[string]string{}
	for i := range sts[0].KVEvents {
		k := &sts[0].KVEvents[i]
		first[k.ID] = streamKey(k)
	}
	for g, st := range sts[1:] {
		seen := 0
		for i := range st.KVEvents {
			k := &st.KVEvents[i]
			want, ok := first[k.ID]
			switch got := streamKey(k); {
			case !ok:
				diffs = append(diffs, fmt.Sprintf("%s: followed by gateway %d, not gateway 1", k.ID, g+2))
			case got != want:
				seen++
				diffs = append(diffs, fmt.Sprintf("%s: gateway 1 %s; gateway %d %s", k.ID, want, g+2, got))
			default:
				seen++
			}
		}
		if seen != len(first) {
			diffs = append(diffs, fmt.Sprintf("gateway %d follows %d engines, gateway 1 %d", g+2, seen, len(first)))
		}
	}
	return len(first), diffs
}

// readIndexes reads every gateway's /admin/index.
func readIndexes(ctx context.Context, admin *http.Client, gws []*procs.Gateway) ([]*procs.IndexStatus, error) {
	out := make([]*procs.IndexStatus, len(gws))
	for i, gw := range gws {
		st, err := gw.Index(ctx, admin)
		if err != nil {
			return nil, fmt.Errorf("gateway %d: %w", i+1, err)
		}
		out[i] = st
	}
	return out, nil
}

// agreeIndexes reads every gateway's /admin/index until their KV event
// streams agree or wait runs out, and returns the last reading with the
// agreement; the agreement is nil when no gateway follows KV events.
func agreeIndexes(ctx context.Context, admin *http.Client, gws []*procs.Gateway, wait time.Duration) ([]*procs.IndexStatus, *IndexAgreement, error) {
	start := time.Now()
	a := &IndexAgreement{}
	for {
		sts, err := readIndexes(ctx, admin, gws)
		if err != nil {
			return nil, nil, err
		}
		a.Reads++
		a.Replicas, a.Differences = compareIndexes(sts)
		a.Agree = len(a.Differences) == 0
		a.WaitedSeconds = time.Since(start).Seconds()
		if a.Replicas == 0 {
			return sts, nil, nil
		}
		if a.Agree || time.Since(start) >= wait {
			return sts, a, nil
		}
		select {
		case <-ctx.Done():
			return sts, a, nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// writeGateways prints, for a run through several gateways, each one's
// share of the figures, the end state of each one's index, and whether
// their mirrors agreed.
func writeGateways(w io.Writer, r *RunResult) {
	m := &r.Measurements
	if len(m.Gateways) == 0 {
		return
	}
	fmt.Fprintf(w, "  %d gateways, the requests sent to each in turn\n", len(m.Gateways))
	for i, g := range m.Gateways {
		pred := ""
		if g.PredExact != nil {
			pred = fmt.Sprintf(", predictions exact %.0f%%", 100**g.PredExact)
		}
		fmt.Fprintf(w, "  gateway %d: %d measured, %d succeeded, TTFT p99 %s, hit rate %.3f%s; replicas %s\n",
			i+1, g.Measured, g.Succeeded, msec(g.TTFTP99), g.HitRate, pred, countsText(g.Replicas))
	}
	for i, st := range r.GatewayIndexes {
		var parts []string
		for _, rep := range st.Replicas {
			parts = append(parts, fmt.Sprintf("%s %d (%s)", rep.ID, rep.Blocks, rep.Source))
		}
		fmt.Fprintf(w, "  gateway %d's index: blocks %s\n", i+1, strings.Join(parts, ", "))
	}
	if a := r.Agreement; a != nil {
		if a.Agree {
			fmt.Fprintf(w, "  index agreement: the %d gateways' mirrors of %d engines agree (blocks, last seq, stored, removed, digest) after %d reads, %.1fs\n",
				len(m.Gateways), a.Replicas, a.Reads, a.WaitedSeconds)
		} else {
			fmt.Fprintf(w, "  index agreement: DISAGREE after %d reads, %.1fs: %s\n", a.Reads, a.WaitedSeconds, strings.Join(a.Differences, "; "))
		}
	}
}

// countsText lists counts by name, sorted by name.
func countsText(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// writeGatewayRuns tabulates, in a report, every run through several
// gateways and the one-gateway runs of the same point and index mode: the
// requests and p99 TTFT of each replica (where the load went, and the slow
// requests), and whether the gateways' mirrors agreed at the end.
func writeGatewayRuns(w *strings.Builder, results []*RunResult) {
	if !slices.ContainsFunc(results, func(r *RunResult) bool { return r.Spec.Gateways > 1 }) {
		return
	}
	fmt.Fprint(w, "## Gateways side by side\n\n")
	fmt.Fprint(w, "Each run, one gateway or several in front of the same simulators: the measured requests each replica served "+
		"and their p99 TTFT in ms, the busiest replica's share, and for several gateways whether their `/admin/index` "+
		"agreed at the end on every engine (mirrored blocks, last sequence, blocks stored and removed, digest of the "+
		"mirrored gateway hashes; approximate gateways follow no events and have nothing to compare).\n\n")
	fmt.Fprint(w, "*Excess* is the mean, over the measured requests, of the requests in flight on the replica a request went to "+
		"minus the fewest in flight on any replica when it was sent (every gateway's requests counted), *piled* the share "+
		"of requests sent with 3 or more in excess: how much the gateways piled onto a replica; in parentheses the same "+
		"over the requests still waiting for their first token.\n\n")
	fmt.Fprint(w, "| run | gateways | replicas: requests (TTFT p99) | busiest | excess | piled | index agreement |\n|---|--:|---|--:|--:|--:|---|\n")
	rs := slices.Clone(results)
	slices.SortFunc(rs, func(a, b *RunResult) int { return strings.Compare(a.Spec.FileName(), b.Spec.FileName()) })
	for _, r := range rs {
		m := &r.Measurements
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(m.Replicas)) {
			parts = append(parts, fmt.Sprintf("%s %d (%s)", k, m.Replicas[k], msecText(m.ReplicaTTFTP99[k])))
		}
		agree := "–"
		switch a := r.Agreement; {
		case a != nil && a.Agree:
			agree = fmt.Sprintf("agree on %d engines (%d reads)", a.Replicas, a.Reads)
		case a != nil:
			agree = fmt.Sprintf("**differ** after %d reads: %s", a.Reads, strings.Join(a.Differences, "; "))
		}
		excess, piled := "–", "–"
		if h := m.Herding; h != nil {
			excess = num2(h.MeanExcess) + " (" + num2(h.MeanExcessWaiting) + ")"
			piled = share(h.Piled) + " (" + share(h.PiledWaiting) + ")"
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s |\n", strings.TrimSuffix(r.Spec.FileName(), ".json"), r.Spec.GatewayCount(),
			strings.Join(parts, ", "), num2(m.BusiestShare), excess, piled, agree)
	}
	fmt.Fprintln(w)
}

// Herding says how far the replicas each request went to were busier than
// the least busy one when it was sent: gateways that each see the same
// best replica, not knowing what the others send it, pile onto it.
type Herding struct {
	// MeanExcess is the mean, over the measured requests that name their
	// replica, of the requests in flight on that replica minus the fewest
	// in flight on any replica of the fleet (one no request went to
	// included), the moment the request was sent (from the outcomes' send
	// and end times, every gateway's requests counted).
	MeanExcess float64 `json:"mean_excess_in_flight"`
	// Piled is the share of them sent to a replica with at least
	// pileExcess more in flight than the least busy one.
	Piled float64 `json:"piled"`
	// MeanExcessWaiting and PiledWaiting are the same over the requests
	// still waiting for their first token (sent, no TTFT yet): the queue
	// a new request's own first token waits behind.
	MeanExcessWaiting float64 `json:"mean_excess_waiting"`
	PiledWaiting      float64 `json:"piled_waiting"`
	// Sources splits that queue by who sent it.
	Sources *WaitingSources `json:"waiting_sources,omitempty"`
}

// WaitingSources says where the requests waiting for their first token
// came from when each measured request was sent: through the same gateway,
// or through another less than recentWindow before, too recently for any
// engine report the gateway had read to show them (0 with one gateway).
// Each is given on the replica the request went to and on the average
// replica. A gateway steers around its own queue, so its own waiting at the
// chosen replica is below the average. Another gateway's recent requests,
// as many at the chosen replica as on the average one, are not herding
// (that would put more there) but chance, which no price can steer around:
// only seeing them sooner can. The window stays the default's when a run
// patches the scrape interval.
type WaitingSources struct {
	Own                float64 `json:"own"`
	OwnAverage         float64 `json:"own_average"`
	OtherRecent        float64 `json:"other_recent"`
	OtherRecentAverage float64 `json:"other_recent_average"`
}

// recentWindow is the gateway's default scrape interval
// (load.scrape_interval) on the model's clock, in which outcomes are.
const recentWindow = 100 * time.Millisecond

// pileExcess is how many more requests in flight than the least busy
// replica count as piling on.
const pileExcess = 3

// herdingOf measures Herding over the outcomes after the first warm, the
// warmup's requests counted as in flight, on the fleet's replicas (nil
// when unknown, as behind an existing URL) and any other an outcome names:
// a replica no request went to is the least busy, with none in flight.
// Nil when no outcome names its replica.
func herdingOf(outs []Outcome, warm int, replicas []string) *Herding {
	var h Herding
	var ok bool
	h.MeanExcess, h.Piled, ok = excessAtSend(outs, warm, replicas, func(o *Outcome) time.Duration { return o.Sched + o.E2E })
	if !ok {
		return nil
	}
	h.MeanExcessWaiting, h.PiledWaiting, _ = excessAtSend(outs, warm, replicas, waitingEnd)
	h.Sources = waitingSources(outs, warm, replicas, recentWindow)
	return &h
}

// waitingEnd is when an outcome stopped waiting for its first token.
func waitingEnd(o *Outcome) time.Duration {
	if o.TTFT > 0 {
		return o.Sched + o.TTFT
	}
	return o.Sched + o.E2E
}

// waitingSources is Herding.Sources over the outcomes after the first
// warm, another gateway's requests counted as recent when sent less than
// window before; nil when no outcome names its replica.
func waitingSources(outs []Outcome, warm int, replicas []string, window time.Duration) *WaitingSources {
	ids, order := sentToReplicas(outs, replicas)
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(outs[a].Sent, outs[b].Sent) })
	var ws WaitingSources
	var waiting []int // outcomes sent and, as of the last one sent, without a first token
	n := 0
	own, other := make([]int, len(ids)), make([]int, len(ids))
	for _, i := range order {
		x := &outs[i]
		waiting = slices.DeleteFunc(waiting, func(j int) bool { return waitingEnd(&outs[j]) <= x.Sent })
		if i >= warm {
			clear(own)
			clear(other)
			for _, j := range waiting {
				y := &outs[j]
				switch r := ids[y.Replica]; {
				case y.Target == x.Target:
					own[r]++
				case x.Sent-y.Sent < window:
					other[r]++
				}
			}
			r, k := ids[x.Replica], float64(len(ids))
			ws.Own += float64(own[r])
			ws.OtherRecent += float64(other[r])
			ws.OwnAverage += float64(total(own)) / k
			ws.OtherRecentAverage += float64(total(other)) / k
			n++
		}
		waiting = append(waiting, i)
	}
	if n == 0 {
		return nil
	}
	m := float64(n)
	ws.Own, ws.OwnAverage, ws.OtherRecent, ws.OtherRecentAverage = ws.Own/m, ws.OwnAverage/m, ws.OtherRecent/m, ws.OtherRecentAverage/m
	return &ws
}

// sentToReplicas numbers replicas, then those the outcomes name besides,
// in the order they first appear, and lists the outcomes that were sent to
// one.
func sentToReplicas(outs []Outcome, replicas []string) (ids map[string]int, sent []int) {
	ids = map[string]int{}
	for _, r := range replicas {
		if _, ok := ids[r]; !ok {
			ids[r] = len(ids)
		}
	}
	for i := range outs {
		o := &outs[i]
		if o.Replica == "" || o.Sent <= 0 {
			continue
		}
		if _, ok := ids[o.Replica]; !ok {
			ids[o.Replica] = len(ids)
		}
		sent = append(sent, i)
	}
	return ids, sent
}

// total is the sum of xs.
func total(xs []int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}

// excessAtSend is the mean, over the measured outcomes that name their
// replica, of the outcomes busy on that replica (from Sent to end) minus
// the fewest busy on any replica, when each was sent, and the share with
// pileExcess or more; ok is false when no measured outcome names its
// replica.
func excessAtSend(outs []Outcome, warm int, replicas []string, end func(*Outcome) time.Duration) (mean, piled float64, ok bool) {
	type event struct {
		at    time.Duration
		start bool
		i     int // outcome
	}
	var evs []event
	ids, sent := sentToReplicas(outs, replicas)
	for _, i := range sent {
		o := &outs[i]
		evs = append(evs, event{o.Sent, true, i}, event{max(end(o), o.Sent), false, i})
	}
	// Ends before starts at the same instant: a request that ended then is
	// no longer busy.
	slices.SortFunc(evs, func(a, b event) int {
		if a.start != b.start && a.at == b.at {
			if a.start {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.i, b.i))
	})
	busy := make([]int, len(ids))
	n := 0
	for _, e := range evs {
		r := ids[outs[e.i].Replica]
		if !e.start {
			busy[r]--
			continue
		}
		if e.i >= warm {
			excess := busy[r] - slices.Min(busy)
			mean += float64(excess)
			if excess >= pileExcess {
				piled++
			}
			n++
		}
		busy[r]++
	}
	if n == 0 {
		return 0, 0, false
	}
	return mean / float64(n), piled / float64(n), true
}
