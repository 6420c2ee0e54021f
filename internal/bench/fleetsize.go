package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// sizingPoints names the points that ran on fleets of more than one size:
// a sweep point with several replicas.
func sizingPoints(keys []pointKey) map[string]bool {
	sizes := map[string]map[int]bool{}
	for _, k := range keys {
		if sizes[k.Point] == nil {
			sizes[k.Point] = map[int]bool{}
		}
		sizes[k.Point][k.Replicas] = true
	}
	out := map[string]bool{}
	for p, s := range sizes {
		if len(s) > 1 {
			out[p] = true
		}
	}
	return out
}

// fleetSize is one policy's needs at one load of a sizing point.
type fleetSize struct {
	policy string
	// p99 is the policy's p99 TTFT on each fleet size that ran, seconds.
	p99 map[int]float64
	// smallest is the smallest fleet whose p99 TTFT was within the SLO;
	// 0 when none was.
	smallest int
}

// sizingLoad is a sizing point at one rate: the fleet sizes that ran and
// what each policy needed.
type sizingLoad struct {
	point, workload string
	rate            float64
	slo             time.Duration
	sizes           []int
	policies        []fleetSize
}

// fleetSizes finds, for each sizing point and rate, each policy's smallest
// fleet whose p99 TTFT (median over repetitions) is within the runs' TTFT
// SLO.
func fleetSizes(keys []pointKey, groups map[pointKey][]*RunResult) []sizingLoad {
	sizing := sizingPoints(keys)
	var out []sizingLoad
	for _, k := range keys {
		if !sizing[k.Point] {
			continue
		}
		if n := len(out); n == 0 || out[n-1].point != k.Point || out[n-1].rate != k.Rate {
			out = append(out, sizingLoad{point: k.Point, workload: k.Workload, rate: k.Rate, slo: groups[k][0].Spec.SLO.TTFT})
		}
		load := &out[len(out)-1]
		load.sizes = append(load.sizes, k.Replicas)
		for _, row := range pointRows(groups[k]) {
			i := slices.IndexFunc(load.policies, func(f fleetSize) bool { return f.policy == row.Policy })
			if i < 0 {
				load.policies = append(load.policies, fleetSize{policy: row.Policy, p99: map[int]float64{}})
				i = len(load.policies) - 1
			}
			load.policies[i].p99[k.Replicas] = row.TTFTP99
		}
	}
	for i := range out {
		load := &out[i]
		for j := range load.policies {
			f := &load.policies[j]
			for _, n := range load.sizes { // ascending, as groupResults sorts them
				if p, ok := f.p99[n]; ok && p <= load.slo.Seconds() {
					f.smallest = n
					break
				}
			}
		}
	}
	return out
}

// writeFleetSizes writes the report's "Fleet size" section: for each
// sizing point and rate, the p99 TTFT of every policy on every fleet size
// and the smallest fleet within the SLO, with the replicas each policy
// saves against round robin (the number an operator budgets with).
func writeFleetSizes(w *strings.Builder, keys []pointKey, groups map[pointKey][]*RunResult) {
	loads := fleetSizes(keys, groups)
	if len(loads) == 0 {
		return
	}
	fmt.Fprintf(w, "## Fleet size\n\nThe smallest fleet that serves each load with its p99 TTFT within the SLO, and the p99 TTFT (ms, "+
		"medians over repetitions) on every fleet size that ran; *saved* is replicas saved against round_robin's "+
		"smallest fleet, as a share of it.\n\n")
	for _, l := range loads {
		rate := pointKey{Workload: l.workload, Rate: l.rate}.rateText()
		fmt.Fprintf(w, "### %s at %s (SLO: p99 TTFT within %s)\n\n| policy | smallest fleet | saved |", l.point, rate, l.slo)
		for _, n := range l.sizes {
			fmt.Fprintf(w, " %d replicas |", n)
		}
		fmt.Fprintf(w, "\n|---|--:|--:|%s\n", strings.Repeat("--:|", len(l.sizes)))
		base := 0
		if i := slices.IndexFunc(l.policies, func(f fleetSize) bool { return f.policy == "round_robin" }); i >= 0 {
			base = l.policies[i].smallest
		}
		for _, f := range l.policies {
			fmt.Fprintf(w, "| %s | %s | %s |", f.policy, sizeText(f.smallest, l.sizes), savedText(f.smallest, base))
			for _, n := range l.sizes {
				if p, ok := f.p99[n]; ok {
					fmt.Fprintf(w, " %s |", msecText(p))
				} else {
					fmt.Fprint(w, " – |")
				}
			}
			fmt.Fprint(w, "\n")
		}
		fmt.Fprint(w, "\n")
	}
}

// sizeText is a smallest fleet, or that none of sizes sufficed.
func sizeText(n int, sizes []int) string {
	if n == 0 {
		return "more than " + strconv.Itoa(slices.Max(sizes))
	}
	return strconv.Itoa(n)
}

// savedText is the replicas n saves against base and their share of it;
// "–" when either is unknown.
func savedText(n, base int) string {
	if n == 0 || base == 0 {
		return "–"
	}
	return fmt.Sprintf("%d (%.0f%%)", base-n, math.Round(100*float64(base-n)/float64(base)))
}
