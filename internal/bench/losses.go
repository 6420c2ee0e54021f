package bench

import (
	"fmt"
	"slices"
	"strings"
)

// lossTolerance is how far above the lowest p99 TTFT cost_model's may be at
// a workload's median rate and still count as level with the best.
const lossTolerance = 0.05

// A loss is a point where cost_model does not hold its own: at a
// workload's median rate its p99 TTFT is more than lossTolerance above the
// lowest; at its highest rate it is above least_request's (it collapses
// past the knee where a cache-blind balancer holds).
type loss struct {
	key      pointKey
	highest  bool    // judged at the highest rate against least_request
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

// losses finds every loss among the points, in the points' order. A point
// without cost_model, or with cost_model alone, is not judged.
func losses(keys []pointKey, groups map[pointKey][]*RunResult) []loss {
	var out []loss
	for _, k := range keys {
		median, _ := medianRate(keys, k.Point, k.Workload)
		highest := highestRate(keys, k.Point, k.Workload)
		if k != median && k != highest {
			continue
		}
		rows := pointRows(groups[k])
		ours, ok := findRow(rows, "cost_model")
		if !ok || len(rows) < 2 {
			continue
		}
		if k == median {
			// Unreachable is above every finite p99, so a failed cost_model
			// loses and a failed rival is never the lowest.
			best, _ := lowestP99(rows)
			if ours.TTFTP99 > best.TTFTP99*(1+lossTolerance) {
				l := loss{key: k, winner: best.Policy, theirs: best.TTFTP99, ours: ours.TTFTP99, ourHit: ours.HitRate, theirHit: best.HitRate}
				l.behind, l.paired = pairedBehind(groups[k], "cost_model", best.Policy)
				out = append(out, l)
			}
		}
		if k == highest && k != median {
			if lr, ok := findRow(rows, "least_request"); ok && ours.TTFTP99 > lr.TTFTP99 {
				l := loss{key: k, highest: true, winner: lr.Policy, theirs: lr.TTFTP99, ours: ours.TTFTP99, ourHit: ours.HitRate, theirHit: lr.HitRate}
				l.behind, l.paired = pairedBehind(groups[k], "cost_model", lr.Policy)
				out = append(out, l)
			}
		}
	}
	return out
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

// highestRate is the key of a point's highest rate among keys, which are
// in groupResults' order (rates ascending within a point).
func highestRate(keys []pointKey, point, workload string) pointKey {
	var last pointKey
	for _, k := range keys {
		if k.Point == point && k.Workload == workload {
			last = k
		}
	}
	return last
}

// writeLosses writes the report's "Where we lose" section from the data, so
// it stays true after every rerun: each point where cost_model is not
// within lossTolerance of the lowest p99 at the median rate, or is above
// least_request at the highest rate.
func writeLosses(w *strings.Builder, keys []pointKey, groups map[pointKey][]*RunResult) {
	if !slices.ContainsFunc(keys, func(k pointKey) bool { _, ok := findRow(pointRows(groups[k]), "cost_model"); return ok }) {
		return
	}
	ls := losses(keys, groups)
	fmt.Fprintf(w, "## Where we lose\n\n")
	fmt.Fprintf(w, "Written from the results: the points where cost_model's p99 TTFT (the median of its repetitions) is more than "+
		"%.0f%% above the lowest at a workload's median rate, or above least_request's at its highest rate. *Repetitions behind* "+
		"pairs the runs of the same requests: a loss in every pair is in the data; one in some pairs may be the machine's noise.",
		100*lossTolerance)
	if len(ls) == 0 {
		fmt.Fprintf(w, " There are none.\n\n")
		return
	}
	fmt.Fprintf(w, "\n\n| point | rate | judged against | their p99, ms | cost_model's, ms | behind | repetitions behind | their hit | our hit |\n|---|---|---|--:|--:|--:|--:|--:|--:|\n")
	for _, l := range ls {
		against := "the lowest: " + l.winner
		if l.highest {
			against = "least_request, at the highest rate"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %d of %d | %s | %s |\n", l.key.Point, l.key.rateText(), against,
			msecText(l.theirs), msecText(l.ours), behindText(l.ours, l.theirs), l.behind, l.paired, num2(l.theirHit), num2(l.ourHit))
	}
	fmt.Fprintf(w, "\n")
}
