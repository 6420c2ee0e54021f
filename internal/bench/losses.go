package bench

import (
	"fmt"
	"slices"
	"strings"
)

// lossTolerance is how far above the lowest p99 TTFT cost_model's may be at
// a point and rate and still count as level with the best.
const lossTolerance = 0.05

// A loss is a point and rate where cost_model does not hold its own: its
// p99 TTFT is more than lossTolerance above the lowest there, whatever the
// rate and whoever the winner; or, at a workload's highest rate (of
// several), it is within that of the lowest but above least_request's (it
// collapses past the knee where a cache-blind balancer holds).
type loss struct {
	key      pointKey
	place    string  // the rate's place among its point's rates: ratePlace
	collapse bool    // judged at the highest rate against least_request
	winner   string  // the policy it lost to
	theirs   float64 // the winner's p99 TTFT, seconds
	ours     float64 // cost_model's
	ourHit   float64 // hit rates, to tell a cache loss from a balance one
	theirHit float64
	// behind and paired count the repetitions run by both policies (the
	// same Rep, so the same requests) and those in which cost_model's p99
	// was the higher: a loss in every pair is the data's; in some, the
	// machine's noise may be all of it.
	behind, paired int
}

// losses finds every loss among the points, in the points' order. Every
// rate is judged: judging only the median rate against the lowest and the
// highest against least_request hid losses at the lowest rate and to
// kv_aware or a peer past the knee. A point without cost_model, or with
// cost_model alone, is not judged.
func losses(keys []pointKey, groups map[pointKey][]*RunResult) []loss {
	var out []loss
	for _, k := range keys {
		rows := pointRows(groups[k])
		ours, ok := findRow(rows, "cost_model")
		if !ok || len(rows) < 2 {
			continue
		}
		place := ratePlace(keys, k)
		// Unreachable is above every finite p99, so a failed cost_model
		// loses and a failed rival is never the lowest.
		rival, _ := lowestP99(rows)
		collapse := false
		switch lr, ok := findRow(rows, "least_request"); {
		case ours.TTFTP99 > rival.TTFTP99*(1+lossTolerance):
		case place == "highest" && ok && ours.TTFTP99 > lr.TTFTP99:
			rival, collapse = lr, true
		default:
			continue
		}
		l := loss{key: k, place: place, collapse: collapse, winner: rival.Policy,
			theirs: rival.TTFTP99, ours: ours.TTFTP99, ourHit: ours.HitRate, theirHit: rival.HitRate}
		l.behind, l.paired = pairedBehind(groups[k], "cost_model", rival.Policy)
		out = append(out, l)
	}
	return out
}

// ratePlace is where k's rate stands among its point's rates (keys are in
// groupResults' order): "median" for medianRate's (a point's only rate
// too), else "lowest", "highest" or "other".
func ratePlace(keys []pointKey, k pointKey) string {
	var ks []pointKey
	for _, o := range keys {
		if o.Point == k.Point && o.Workload == k.Workload {
			ks = append(ks, o)
		}
	}
	switch i := slices.Index(ks, k); {
	case i == (len(ks)-1)/2:
		return "median"
	case i == 0:
		return "lowest"
	case i == len(ks)-1:
		return "highest"
	}
	return "other"
}

// pairedBehind counts the repetitions that both policies ran, and those
// in which ours had the higher p99 TTFT.
func pairedBehind(results []*RunResult, ours, theirs string) (behind, paired int) {
	p99 := func(policy string) map[int]float64 {
		m := map[int]float64{}
		for _, r := range results {
			if policyLabel(&r.Spec) == policy {
				m[r.Spec.Rep] = runP99(&r.Measurements) // a failed run is behind any that served
			}
		}
		return m
	}
	o, t := p99(ours), p99(theirs)
	for rep, v := range o {
		if w, ok := t[rep]; ok {
			paired++
			if v > w {
				behind++
			}
		}
	}
	return behind, paired
}

// writeLosses writes the report's "Where we lose" section from the data, so
// it stays true after every rerun: each point and rate where cost_model is
// not within lossTolerance of the lowest p99, and each highest rate where
// it is above least_request.
func writeLosses(w *strings.Builder, keys []pointKey, groups map[pointKey][]*RunResult) {
	if !slices.ContainsFunc(keys, func(k pointKey) bool { _, ok := findRow(pointRows(groups[k]), "cost_model"); return ok }) {
		return
	}
	ls := losses(keys, groups)
	fmt.Fprintf(w, "## Where we lose\n\n")
	fmt.Fprintf(w, "Written from the results: every point and rate with cost_model and another router where cost_model's p99 TTFT "+
		"(the median of its repetitions) is more than %.0f%% above the lowest there, judged against that lowest whatever the "+
		"rate's place among the point's rates (lowest, median, highest or other; a point's only rate is its median); and each "+
		"highest of several rates where it is within %.0f%% of the lowest but above least_request's (a collapse past the knee "+
		"where a cache-blind balancer holds). *Repetitions behind* pairs the runs of the same requests: a loss in every pair is "+
		"in the data; one in some pairs may be the machine's noise.",
		100*lossTolerance, 100*lossTolerance)
	if len(ls) == 0 {
		fmt.Fprintf(w, " There are none.\n\n")
		return
	}
	fmt.Fprintf(w, "\n\n| point | rate | place | judged against | their p99, ms | cost_model's, ms | behind | repetitions behind | their hit | our hit |\n|---|---|---|---|--:|--:|--:|--:|--:|--:|\n")
	for _, l := range ls {
		against := "the lowest: " + l.winner
		if l.collapse {
			against = "least_request, at the highest rate"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %d of %d | %s | %s |\n", l.key.Point, l.key.rateText(), l.place, against,
			msecText(l.theirs), msecText(l.ours), behindText(l.ours, l.theirs), l.behind, l.paired, num2(l.theirHit), num2(l.ourHit))
	}
	fmt.Fprintf(w, "\n")
}
