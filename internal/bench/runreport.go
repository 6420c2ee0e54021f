package bench

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// pointKey groups the runs of one point at one rate.
type pointKey struct {
	Point    string
	Workload string
	Rate     float64 // a trace's rate multiplier
	Replicas int     // the fleet's size
}

func keyOf(r *RunResult) pointKey {
	s := &r.Spec
	name := s.Point
	if name == "" {
		name = s.Workload.Workload
	}
	rate := s.Workload.Rate
	if s.Workload.Workload == "trace" {
		rate = s.rateMultiplier()
	}
	return pointKey{Point: name, Workload: s.Workload.Workload, Rate: rate, Replicas: s.Replicas}
}

// rateText is the key's rate, and its fleet's size when that is not three.
func (k pointKey) rateText() string {
	t := strconv.FormatFloat(k.Rate, 'f', -1, 64) + " req/s"
	if k.Workload == "trace" {
		t = "×" + strconv.FormatFloat(k.Rate, 'f', -1, 64) + " the trace's rate"
	}
	if k.Replicas > 0 && k.Replicas != 3 {
		t += " on " + strconv.Itoa(k.Replicas) + " replicas"
	}
	return t
}

// PolicyRow is one policy at one point and rate: medians over its
// repetitions.
type PolicyRow struct {
	Policy string
	Reps   int
	// Medians over repetitions, seconds and rates; TTFTP99 is runP99's
	// (+Inf, unreachable, where the median run's p99 is a failure).
	TTFTP50, TTFTP90, TTFTP99, E2EP50, E2EP99, TPOTP50, TPOTP99 float64
	Goodput, GoodFraction, Throughput                           float64
	HitRate                                                     float64
	EngineHitRate                                               float64 // NaN when no run read the engines
	Oracle                                                      float64 // NaN when unknown
	BusiestShare                                                float64
	SendLagP99                                                  float64
	// Errors adds up failed measured requests over every repetition; Requests
	// the measured requests.
	Errors, Requests int
	// PredExact and PredMeanError are medians over repetitions with
	// predictions; NaN without.
	PredExact, PredMeanError float64
	// EstMeanAbs and EstP90Abs are medians over repetitions with the
	// gateway's TTFT estimates of EstimateError's MeanAbs and P90Abs; NaN
	// without.
	EstMeanAbs, EstP90Abs float64
	// TurnsKept is the median over repetitions with sessions of
	// Turns.KeptShare; NaN without.
	TurnsKept float64
}

// pointRows builds a row per policy from the results of one point and rate:
// the known policies in policyOrder, then others by name.
func pointRows(results []*RunResult) []PolicyRow {
	byPolicy := map[string][]*RunResult{}
	var order []string
	for _, r := range results {
		p := policyLabel(&r.Spec)
		if _, ok := byPolicy[p]; !ok {
			order = append(order, p)
		}
		byPolicy[p] = append(byPolicy[p], r)
	}
	slices.SortFunc(order, func(a, b string) int { return cmp.Or(cmp.Compare(policyRank(a), policyRank(b)), cmp.Compare(a, b)) })
	rows := make([]PolicyRow, 0, len(order))
	for _, p := range order {
		rs := byPolicy[p]
		med := func(f func(m *Measurements) (float64, bool)) float64 {
			var vs []float64
			for _, r := range rs {
				if v, ok := f(&r.Measurements); ok {
					vs = append(vs, v)
				}
			}
			return median(vs)
		}
		all := func(f func(m *Measurements) float64) float64 {
			return med(func(m *Measurements) (float64, bool) { return f(m), true })
		}
		// A run of no success has no latency: its zeros would pull the
		// median down.
		lat := func(f func(m *Measurements) float64) float64 {
			return med(func(m *Measurements) (float64, bool) { return f(m), !m.noneSucceeded() })
		}
		row := PolicyRow{
			Policy:        p,
			Reps:          len(rs),
			TTFTP50:       lat(func(m *Measurements) float64 { return m.TTFT.P50 }),
			TTFTP90:       lat(func(m *Measurements) float64 { return m.TTFT.P90 }),
			TTFTP99:       all(runP99), // a failed run is the worst, not left out
			E2EP50:        lat(func(m *Measurements) float64 { return m.E2E.P50 }),
			E2EP99:        lat(func(m *Measurements) float64 { return m.E2E.P99 }),
			TPOTP50:       lat(func(m *Measurements) float64 { return m.TPOT.P50 }),
			TPOTP99:       lat(func(m *Measurements) float64 { return m.TPOT.P99 }),
			Goodput:       all(func(m *Measurements) float64 { return m.GoodputRPS }),
			GoodFraction:  all(func(m *Measurements) float64 { return m.GoodFraction }),
			Throughput:    all(func(m *Measurements) float64 { return m.ThroughputRPS }),
			HitRate:       all(func(m *Measurements) float64 { return m.HitRate }),
			BusiestShare:  all(func(m *Measurements) float64 { return m.BusiestShare }),
			SendLagP99:    all(func(m *Measurements) float64 { return m.SendLag.P99 }),
			EngineHitRate: med(ifSet(func(m *Measurements) *EngineHits { return m.Engine }, func(e *EngineHits) float64 { return e.HitRate })),
			Oracle:        med(ifSet(func(m *Measurements) *float64 { return m.OracleHitRate }, func(v *float64) float64 { return *v })),
			PredExact:     med(ifSet(prediction, func(p *Prediction) float64 { return p.Exact })),
			PredMeanError: med(ifSet(prediction, func(p *Prediction) float64 { return p.MeanError })),
			EstMeanAbs:    med(ifSet(estimate, func(e *EstimateError) float64 { return e.MeanAbs })),
			EstP90Abs:     med(ifSet(estimate, func(e *EstimateError) float64 { return e.P90Abs })),
			TurnsKept:     med(ifSet(func(m *Measurements) *Turns { return m.Turns }, func(t *Turns) float64 { return t.KeptShare })),
		}
		for _, r := range rs {
			row.Requests += r.Measurements.Measured
			for _, n := range r.Measurements.Errors {
				row.Errors += n
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// ifSet reads f of the part of a run's measurements that part returns,
// false when the run has no such part (nil): a figure only some runs have.
func ifSet[T any](part func(*Measurements) *T, f func(*T) float64) func(*Measurements) (float64, bool) {
	return func(m *Measurements) (float64, bool) {
		p := part(m)
		if p == nil {
			return 0, false
		}
		return f(p), true
	}
}

func prediction(m *Measurements) *Prediction { return m.Prediction }

func estimate(m *Measurements) *EstimateError { return m.Estimate }

// policyLabel names a run's row: its policy (or URL), the gateway's index
// mode unless approximate and how many gateways when more than one, as in
// "cost_model (exact)" or "cost_model (exact, 2 gateways)".
func policyLabel(s *RunSpec) string {
	p := s.Policy
	if p == "" {
		p = s.URL
	}
	var more []string
	if s.Variant != "" {
		more = append(more, s.Variant)
	}
	if s.Index != "" {
		more = append(more, s.Index)
	}
	if s.Gateways > 1 {
		more = append(more, strconv.Itoa(s.Gateways)+" gateways")
	}
	if len(more) > 0 {
		p += " (" + strings.Join(more, ", ") + ")"
	}
	return p
}

// policyOrder is the order of the report's rows: the cache-blind
// baselines, then the cache-aware policies.
var policyOrder = []string{"round_robin", "random", "least_request", "p2c", "prefix_hash", "kv_aware", "cost_model"}

func policyRank(p string) int {
	p, _, _ = strings.Cut(p, " ")
	if i := slices.Index(policyOrder, p); i >= 0 {
		return i
	}
	return len(policyOrder)
}

// median of vs, NaN when empty. vs is sorted in place.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

// groupResults groups results by point and rate: points by workload (in
// workloadNames' order) and name, rates ascending within a point. The order
// depends on the results alone, not on the order they come in.
func groupResults(results []*RunResult) ([]pointKey, map[pointKey][]*RunResult) {
	groups := map[pointKey][]*RunResult{}
	for _, r := range results {
		k := keyOf(r)
		groups[k] = append(groups[k], r)
	}
	rank := func(w string) int {
		if i := slices.Index(workloadNames(), w); i >= 0 {
			return i
		}
		return len(workloadNames())
	}
	keys := slices.Collect(maps.Keys(groups))
	slices.SortFunc(keys, func(a, b pointKey) int {
		return cmp.Or(cmp.Compare(rank(a.Workload), rank(b.Workload)), cmp.Compare(a.Workload, b.Workload),
			cmp.Compare(a.Point, b.Point), cmp.Compare(a.Rate, b.Rate), cmp.Compare(a.Replicas, b.Replicas))
	})
	return keys, groups
}

// RenderRunReport writes the Markdown report of a set of run results: the
// milestone verdict and the targets, links to each point's charts
// (RenderRunCharts), and a headline and a table per point and rate,
// medians over repetitions. It depends on the results alone, so the same
// files give the same report.
func RenderRunReport(results []*RunResult) string {
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }
	p("# Benchmark report\n\n")
	if len(results) == 0 {
		p("No results.\n")
		return w.String()
	}
	p("Generated by `inferrail-bench report` from %d result files alone.\n\n", len(results))
	writeSetup(&w, results)
	keys, groups := groupResults(results)
	// Sizing points are judged by the fleet they need, not beside the
	// others at a rate.
	judged := slices.DeleteFunc(slices.Clone(keys), func(k pointKey) bool { return sizingPoints(keys)[k.Point] })
	writeVerdict(&w, judged, groups)
	writeHeadline(&w, judged, groups)
	writeLosses(&w, judged, groups)
	writeFleetSizes(&w, keys, groups)
	writeChartLinks(&w, results)
	p("## Points\n\n")
	p("Every figure is the median over repetitions (each with its own workload seed; every policy of a repetition " +
		"got the same requests at the same times, on a cold gateway and cold simulators). Latencies are in ms and count from the " +
		"scheduled send time. *Hit* is cached over prompt tokens from usage; *engine* the engines' own counters over " +
		"the same window; *of oracle* divides the usage hit rate by the workload's oracle hit rate (unlimited cache, " +
		"every earlier prompt seen). *Busiest* is the busiest replica's share of requests. *Exact* is the share of " +
		"requests whose predicted cached tokens equalled usage's, *err* the mean predicted − actual cached tokens. " +
		"*Est. error* is how far the gateway's estimate of the time to first token was from the one measured from the send: " +
		"the mean and 90th percentile of |estimated − measured| / measured. *Kept* is the share of follow-up turns sent to " +
		"the replica of their conversation's previous turn (workloads with conversations, gateways that name the replica). " +
		"The *TTFT p99*, by which policies are ranked and judged, is over every measured request, a failed one counted as " +
		"slower than any success: where more than 1%% of a run's failed, its p99 is a failure, *unreachable*, never the lowest nor within an SLO. " +
		"A run in which no request succeeded has no latencies: it is left out of the other latency medians (– when every repetition was such a run), " +
		"its failures still counted under *errors*. *Goodput* is the measured requests that succeeded within the SLO per second of the run's " +
		"window, which runs from the scheduled send of the first measured request to the end of the last measured response, failed ones " +
		"included: the drain after the last send is in it, so goodput stays below the offered rate even when every request meets the SLO, " +
		"and one request that times out stretches the window to its timeout.\n\n")
	for _, k := range keys {
		rows := pointRows(groups[k])
		p("### %s at %s\n\n", k.Point, k.rateText())
		if h := headline(rows); h != "" {
			p("%s\n\n", h)
		}
		p("| policy | reps | TTFT p50 | TTFT p99 | e2e p50 | e2e p99 | TPOT p50 | TPOT p99 | goodput req/s | good | hit | engine | of oracle | busiest | errors | exact | err | est. error | kept |\n")
		p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, r := range rows {
			p("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
				mdCell(r.Policy), r.Reps, msecText(r.TTFTP50), msecText(r.TTFTP99), msecText(r.E2EP50), msecText(r.E2EP99),
				msecText(r.TPOTP50), msecText(r.TPOTP99), num2(r.Goodput), share(r.GoodFraction), num2(r.HitRate),
				num2(r.EngineHitRate), share(r.HitRate/r.Oracle), num2(r.BusiestShare),
				fmt.Sprintf("%d/%d", r.Errors, r.Requests), share(r.PredExact), signed1(r.PredMeanError), estimateText(r.EstMeanAbs, r.EstP90Abs),
				share(r.TurnsKept))
		}
		p("\n")
	}
	writeGatewayRuns(&w, results)
	writeArms(&w, results)
	return w.String()
}

// writeArms tabulates, for every run whose requests more than one policy
// routed (an A/B split), each arm's requests, latencies and hit rate.
func writeArms(w *strings.Builder, results []*RunResult) {
	var split []*RunResult
	for _, r := range results {
		if len(r.Measurements.Arms) > 1 {
			split = append(split, r)
		}
	}
	if len(split) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Split arms\n\nRuns whose requests were routed by more than one policy (an A/B split), by the policy each " +
		"response named in x-inferrail-policy. Latencies in ms from the scheduled send time.\n\n")
	p("| run | arm | measured | succeeded | TTFT p50 | TTFT p99 | e2e p99 | hit |\n|---|---|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range split {
		k := keyOf(r)
		name := fmt.Sprintf("%s at %s, %s, rep %d", k.Point, k.rateText(), policyLabel(&r.Spec), r.Spec.Rep)
		for _, arm := range slices.Sorted(maps.Keys(r.Measurements.Arms)) {
			f := r.Measurements.Arms[arm]
			p("| %s | %s | %d | %d | %s | %s | %s | %s |\n", name, arm, f.Measured, f.Succeeded,
				msecText(f.TTFT.P50), msecText(f.TTFT.P99), msecText(f.E2E.P99), num2(f.HitRate))
		}
	}
	p("\n")
}

// writeHeadline tabulates every policy's p99 TTFT, hit rate and goodput at
// each point's median rate.
func writeHeadline(w *strings.Builder, keys []pointKey, groups map[pointKey][]*RunResult) {
	var cols []pointKey
	for _, k := range keys {
		if m, ok := medianRate(keys, k.Point, k.Workload); ok && m == k {
			cols = append(cols, k)
		}
	}
	if len(cols) < 2 {
		return // one point: its own table says it all
	}
	rows := make([][]PolicyRow, len(cols))
	var policies []string
	for i, k := range cols {
		rows[i] = pointRows(groups[k])
		for _, r := range rows[i] {
			if !slices.Contains(policies, r.Policy) {
				policies = append(policies, r.Policy)
			}
		}
	}
	slices.SortStableFunc(policies, func(a, b string) int { return cmp.Compare(policyRank(a), policyRank(b)) })
	fmt.Fprintf(w, "## Headline\n\nAt each point's median rate, medians over repetitions; the lowest p99 in each column in bold.\n\n")
	table := func(title string, cell func(PolicyRow, []PolicyRow) string) {
		fmt.Fprintf(w, "| %s |", title)
		for _, k := range cols {
			fmt.Fprintf(w, " %s at %s |", k.Point, k.rateText())
		}
		fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("--:|", len(cols)))
		for _, pol := range policies {
			fmt.Fprintf(w, "| %s |", mdCell(pol))
			for i := range cols {
				if r, ok := findRow(rows[i], pol); ok {
					fmt.Fprintf(w, " %s |", cell(r, rows[i]))
				} else {
					fmt.Fprint(w, " – |")
				}
			}
			fmt.Fprint(w, "\n")
		}
		fmt.Fprint(w, "\n")
	}
	table("p99 TTFT, ms", func(r PolicyRow, all []PolicyRow) string {
		if best, ok := lowestP99(all); ok && r.TTFTP99 == best.TTFTP99 {
			return "**" + msecText(r.TTFTP99) + "**"
		}
		return msecText(r.TTFTP99)
	})
	table("hit rate", func(r PolicyRow, _ []PolicyRow) string { return num2(r.HitRate) })
	table("goodput, req/s", func(r PolicyRow, _ []PolicyRow) string { return num2(r.Goodput) })
}

// writeSetup describes the runs' common setup from the first result.
func writeSetup(w *strings.Builder, results []*RunResult) {
	r := results[0]
	e := r.Environment
	fmt.Fprintf(w, "**Setup:** %d simulators", r.Spec.Replicas)
	if len(r.Spec.SimArgs) > 0 {
		fmt.Fprintf(w, " (extra flags `%s`)", strings.Join(r.Spec.SimArgs, " "))
	}
	behind := "one gateway,"
	if slices.ContainsFunc(results, func(r *RunResult) bool { return r.Spec.Gateways > 1 }) {
		behind = "one gateway, or in rows marked \"N gateways\" N of them with the same config, the client sending the requests to each in turn,"
	}
	fmt.Fprintf(w, " behind %s all child processes on loopback; SLO TTFT ≤ %v, TPOT ≤ %v; %s.\n\n",
		behind, r.Spec.SLO.TTFT, r.Spec.SLO.TPOT, warmupText(r.Spec.Warmup))
	if c := r.Spec.clock(); c > 1 {
		fmt.Fprintf(w, "**Clock:** every fleet ran %v times faster than the latency model (simulator `--speedup %v`; the schedule, the gateway's cost model, scrape interval, report age and hot-prefix window shrunk alike; peer routers unchanged). Every rate, duration and latency here is on the model's clock, scaled back from the wall clock.\n\n", c, c)
	}
	commits := map[string]bool{}
	dirty := false
	for _, r := range results {
		commits[r.Environment.GitCommit] = true
		dirty = dirty || r.Environment.GitDirty
	}
	fmt.Fprintf(w, "**Machine:** %s, nproc %d, %s/%s, %s; shared with other work, with the load generator, the gateway and the simulators on the same CPUs. ",
		cmp.Or(e.CPUModel, "unknown CPU"), e.NumCPU, e.GOOS, e.GOARCH, e.GoVersion)
	switch {
	case len(commits) == 1:
		fmt.Fprintf(w, "Every run on commit %s", cmp.Or(e.GitCommit, "unknown"))
	default:
		fmt.Fprintf(w, "Runs on %d commits", len(commits))
	}
	if dirty {
		fmt.Fprint(w, " (some with uncommitted changes)")
	}
	fmt.Fprint(w, ".\n\n")
	if slices.ContainsFunc(results, func(r *RunResult) bool { return r.Spec.Index != "" }) {
		fmt.Fprint(w, "**Index:** a row marked (exact) or (auto) had the gateway's `index.mode` so, following every simulator's KV events "+
			"(published on loopback ports); the other gateway rows predicted from its own routing decisions (approximate).\n\n")
	}
	writeCalibration(w, results)
	writePeers(w, results)
}

// writePeers names the peer routers among the results, with their
// versions, and what their rows lack.
func writePeers(w *strings.Builder, results []*RunResult) {
	versions := map[string][]string{}
	for _, r := range results {
		if p := r.Setup.Peer; p != nil && !slices.Contains(versions[p.Router], p.Version) {
			versions[p.Router] = append(versions[p.Router], p.Version)
		}
	}
	if len(versions) == 0 {
		return
	}
	var names []string
	for _, router := range slices.Sorted(maps.Keys(versions)) {
		vs := versions[router]
		slices.Sort(vs)
		names = append(names, router+" "+strings.Join(vs, " and "))
	}
	fmt.Fprintf(w, "**Peers:** rows named peer:<router>:<policy> ran %s from PyPI in place of the gateway, "+
		"in front of the same simulators, with the router's own policy of that name. They send no x-inferrail-* headers: "+
		"their rows have no predictions, and *busiest* counts the requests each simulator finished by its own counters.\n\n",
		strings.Join(names, ", "))
}

// medianRate is the key of a point's median rate among keys (the lower of
// the two middle rates when there is an even number): where the milestone
// and the targets are judged. keys are in groupResults' order.
func medianRate(keys []pointKey, point, workload string) (pointKey, bool) {
	var ks []pointKey
	for _, k := range keys {
		if k.Point == point && k.Workload == workload {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 {
		return pointKey{}, false
	}
	return ks[(len(ks)-1)/2], true
}

func findRow(rows []PolicyRow, policy string) (PolicyRow, bool) {
	i := slices.IndexFunc(rows, func(r PolicyRow) bool { return r.Policy == policy })
	if i < 0 {
		return PolicyRow{}, false
	}
	return rows[i], true
}

// milestoneWorkloads are the workloads the milestone is judged on.
var milestoneWorkloads = []string{"w1", "w2", "w3"}

// writeVerdict checks the milestone on W1–W3 and the benchmark plan's
// targets on W1, each at a point's median rate, from the points that have
// the policies they compare; it says what could not be judged.
func writeVerdict(w *strings.Builder, keys []pointKey, groups map[pointKey][]*RunResult) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	var lines, failed []string
	judged := map[string]bool{}
	for _, k := range keys {
		if !slices.Contains(milestoneWorkloads, k.Workload) {
			continue
		}
		rows := pointRows(groups[k])
		cm, ok1 := findRow(rows, "cost_model")
		lr, ok2 := findRow(rows, "least_request")
		if !ok1 || !ok2 {
			continue
		}
		met := cm.TTFTP99 < lr.TTFTP99 && cm.Goodput >= 0.99*lr.Goodput
		name := k.Point + " at " + k.rateText()
		role := "other rate"
		if m, _ := medianRate(keys, k.Point, k.Workload); m == k {
			role = "**median rate**"
			judged[k.Workload] = true
			if !met {
				failed = append(failed, name)
			}
		}
		lines = append(lines, fmt.Sprintf("| %s | %s | %s vs %s | %s vs %s | %s |", name, role,
			msecText(cm.TTFTP99), msecText(lr.TTFTP99), num2(cm.Goodput), num2(lr.Goodput), yesNo(met)))
	}
	if len(lines) > 0 {
		p("## Milestone\n\n")
		p("cost_model's p99 TTFT below least_request's on W1–W3 without losing goodput (at least 99%% of least_request's), " +
			"judged at each point's median rate; the other rates are shown for reference.\n\n")
		var missing []string
		for _, wl := range milestoneWorkloads {
			if !judged[wl] {
				missing = append(missing, wl)
			}
		}
		switch {
		case len(failed) > 0:
			p("**Not met** at %s.", joinAnd(failed))
		case len(missing) > 0:
			p("**Not judged**: met where measured, but no results compare cost_model with least_request on %s.", joinAnd(missing))
		default:
			p("**Met** on W1, W2 and W3.")
		}
		if len(failed) > 0 && len(missing) > 0 {
			p(" Nothing compares cost_model with least_request on %s.", joinAnd(missing))
		}
		p("\n\n| point | | p99 TTFT ms, cost_model vs least_request | goodput req/s | met |\n|---|---|--:|--:|---|\n")
		p("%s\n\n", strings.Join(lines, "\n"))
	}
	writeTargets(w, keys, groups)
}

// writeTargets checks the benchmark plan's targets at W1's median rate: the
// point named w1, else the first W1 point.
func writeTargets(w *strings.Builder, keys []pointKey, groups map[pointKey][]*RunResult) {
	point := ""
	for _, k := range keys {
		if k.Workload == "w1" && (point == "" || k.Point == "w1") {
			point = k.Point
		}
	}
	if point == "" {
		return
	}
	k, _ := medianRate(keys, point, "w1")
	rows := pointRows(groups[k])
	cm, ok := findRow(rows, "cost_model")
	if !ok {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Targets\n\nThe benchmark plan's targets for cost_model, on %s at %s (its median rate):\n\n", k.Point, k.rateText())
	hit, source := cm.EngineHitRate, "the engines' counters"
	if math.IsNaN(hit) {
		hit, source = cm.HitRate, "usage"
	}
	p("- hit rate ≥ 80%%: %s from %s (%s)\n", share(hit), source, metText(hit >= 0.8))
	if rr, ok := findRow(rows, "round_robin"); ok && rr.TTFTP99 > 0 {
		switch cut := 1 - cm.TTFTP99/rr.TTFTP99; {
		case unreachable(cm.TTFTP99):
			p("- p99 TTFT ≥ 40%% below round_robin's: %s against %s ms (%s)\n", unreachableText, msecText(rr.TTFTP99), metText(false))
		case unreachable(rr.TTFTP99):
			p("- p99 TTFT ≥ 40%% below round_robin's: %s ms against %s (%s)\n", msecText(cm.TTFTP99), unreachableText, metText(true))
		default:
			p("- p99 TTFT ≥ 40%% below round_robin's: %s ms against %s ms, %s (%s)\n", msecText(cm.TTFTP99), msecText(rr.TTFTP99), changeText(-cut, "above", "below"), metText(cut >= 0.4))
		}
	} else {
		p("- p99 TTFT ≥ 40%% below round_robin's: not judged, no round_robin result here\n")
	}
	lr, ok := findRow(rows, "least_request")
	switch {
	case ok && lr.Goodput > 0:
		gain := cm.Goodput/lr.Goodput - 1
		p("- goodput ≥ 30%% above least_request's: %s req/s against %s, %s (%s)\n", num2(cm.Goodput), num2(lr.Goodput), changeText(gain, "above", "below"), metText(gain >= 0.3))
	case ok && lr.Goodput == 0:
		// No request of least_request met the SLO: any goodput is more.
		p("- goodput ≥ 30%% above least_request's: %s req/s against none (%s)\n", num2(cm.Goodput), metText(cm.Goodput > 0))
	default:
		p("- goodput ≥ 30%% above least_request's: not judged, no least_request result here\n")
	}
	p("\n")
}

// joinAnd joins items as "a", "a and b" or "a, b and c".
func joinAnd(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// changeText writes a relative change as "12% above", "12% below" or
// "the same" within half a percent.
func changeText(v float64, up, down string) string {
	if math.Abs(v) < 0.005 {
		return "the same"
	}
	if v < 0 {
		return share(-v) + " " + down
	}
	return share(v) + " " + up
}

// writeChartLinks links each point's charts, which WriteRunReport writes
// next to the report.
func writeChartLinks(w *strings.Builder, results []*RunResult) {
	charts := chartData(results)
	fmt.Fprint(w, "## Charts\n\np99 TTFT (on a log scale) and goodput against the offered rate, a line per policy, medians over repetitions: "+
		"where a policy's p99 turns up is its knee. The dashed line marks goodput equal to the offered rate; goodput falls short of it even "+
		"when every request meets the SLO, its window taking in the drain after the last send (see *Goodput* under Points).")
	if slices.ContainsFunc(charts, func(c pointChart) bool { return c.Sizing }) {
		fmt.Fprint(w, " A sizing point's charts are against the fleet size instead, at its load, the dashed line level at the offered rate.")
	}
	fmt.Fprint(w, "\n\n")
	for _, c := range charts {
		ttft, goodput := chartFileNames(c.Point)
		against := "load"
		if c.Sizing {
			against = "fleet size"
		}
		fmt.Fprintf(w, "### %s\n\n![%s: p99 TTFT against %s](%s)\n![%s: goodput against %s](%s)\n\n", c.Point, c.Point, against, ttft, c.Point, against, goodput)
	}
}

func metText(b bool) string {
	if b {
		return "met"
	}
	return "**not met**"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func msecText(s float64) string {
	switch {
	case math.IsNaN(s):
		return "–"
	case unreachable(s):
		return unreachableText
	}
	switch {
	case s == 0:
		return "0"
	case s < 0.01:
		return strconv.FormatFloat(s*1e3, 'f', 2, 64)
	default:
		return thousands(int64(math.Round(s * 1e3)))
	}
}

// mdCell is s fit for a cell of a Markdown table: a policy or variant
// name is the user's, and a | or a line break in it would break the row.
func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\r\n", " ", "\n", " ", "\r", " ").Replace(s)
}

// thousands writes n with commas between groups of three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func num2(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func share(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return strconv.FormatFloat(100*v, 'f', 0, 64) + "%"
}

func signed1(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%+.1f", v)
}

// WriteRunReport reads every result file in in and writes report.md and
// its charts (PNG) to out. skipped names what in holds that is not a
// regular file, left out (see ReadRunResults).
func WriteRunReport(in, out string) (path string, skipped []string, err error) {
	// A mistyped --in would otherwise be a report of no results.
	if st, err := os.Stat(in); err != nil {
		return "", nil, err
	} else if !st.IsDir() {
		return "", nil, fmt.Errorf("%s: not a directory of result files", in)
	}
	results, skipped, err := ReadRunResults(in)
	if err != nil {
		return "", nil, err
	}
	path, err = WriteReportOf(results, out)
	return path, skipped, err
}

// WriteReportOf writes report.md and the charts (PNG) of results to out.
func WriteReportOf(results []*RunResult, out string) (string, error) {
	charts, err := RenderRunCharts(results)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	for _, name := range slices.Sorted(maps.Keys(charts)) {
		if err := os.WriteFile(filepath.Join(out, name), charts[name], 0o644); err != nil {
			return "", err
		}
	}
	path := filepath.Join(out, "report.md")
	return path, os.WriteFile(path, []byte(RenderRunReport(results)), 0o644)
}

// ComparePlan is a comparison's runs: base repeated reps times with
// workload seeds base.Workload.Seed, +1, …, each repetition running every
// policy in turn on the same requests.
func ComparePlan(base RunSpec, policies []string, reps int) []RunSpec {
	var runs []RunSpec
	for rep := range reps {
		for _, p := range policies {
			s := base
			s.SimArgs = slices.Clone(base.SimArgs)
			s.Policy, s.Rep = p, rep
			s.Workload.Seed = base.Workload.Seed + uint64(rep)
			runs = append(runs, s)
		}
	}
	return runs
}

// RenderCompareTable writes the results of a comparison as a Markdown
// table per point and rate, medians over repetitions.
func RenderCompareTable(results []*RunResult) string {
	var w strings.Builder
	keys, groups := groupResults(results)
	for _, k := range keys {
		fmt.Fprintf(&w, "%s at %s\n\n", k.Point, k.rateText())
		fmt.Fprint(&w, "| policy | reps | TTFT p50 | TTFT p99 | e2e p99 | TPOT p50 | goodput req/s | hit | engine | of oracle | busiest | errors |\n")
		fmt.Fprint(&w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, r := range pointRows(groups[k]) {
			fmt.Fprintf(&w, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d/%d |\n",
				mdCell(r.Policy), r.Reps, msecText(r.TTFTP50), msecText(r.TTFTP99), msecText(r.E2EP99), msecText(r.TPOTP50),
				num2(r.Goodput), num2(r.HitRate), num2(r.EngineHitRate), share(r.HitRate/r.Oracle), num2(r.BusiestShare),
				r.Errors, r.Requests)
		}
		fmt.Fprintln(&w)
	}
	return w.String()
}

// warmupText says what a warmup left out.
func warmupText(s string) string {
	w, err := ParseWarmup(s)
	switch {
	case err != nil:
		return "warmup " + s
	case w.Fraction > 0:
		return fmt.Sprintf("the first %s of each run's requests left out as warmup", share(w.Fraction))
	case w.Duration > 0:
		return fmt.Sprintf("the requests of each run's first %v left out as warmup", w.Duration)
	}
	return "no warmup"
}
