package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/inferrail/inferrail/internal/measure"
)

// A report compares policies by their p99 TTFT, and failing must never
// win that comparison: a run that refuses most of its requests quickly
// has a low p99 over the few it serves. So reports rank and judge by the
// p99 over every measured request, a failed one counted as slower than
// any success; where more than 1% failed the p99 is a failure, +Inf. A
// run in which no request succeeded has no latency to report at all (its
// percentiles are zeros, and a row's median of nothing was NaN, which
// cmp.Compare ranks below every number): +Inf too.

// runP99 is a run's p99 TTFT as reports rank and judge it, in seconds:
// over every measured request, a failed one slower than any success.
// Results written before Measurements.TTFTP99WithFailures have only their
// error counts: at most 1% failed, the successes' p99 stands in for it.
func runP99(m *Measurements) float64 {
	failed := 0
	for _, n := range m.Errors {
		failed += n
	}
	switch {
	case m.noneSucceeded():
		return math.Inf(1)
	case failed == 0:
		return m.TTFT.P99
	case measure.Rank(m.Measured, 0.99) >= m.Measured-failed:
		return math.Inf(1) // the p99 is a failed request
	case m.TTFTP99WithFailures != nil:
		return *m.TTFTP99WithFailures
	}
	return m.TTFT.P99
}

// unreachable reports whether a p99 (a run's, or a row's median) is one no
// served request set.
func unreachable(p99 float64) bool { return math.IsInf(p99, 1) }

// unreachableText is how reports show such a p99.
const unreachableText = "unreachable"

// lowestP99 is the row with the lowest p99 TTFT, the first of equals, and
// whether it has one at all (false when every row's is unreachable).
func lowestP99(rows []PolicyRow) (PolicyRow, bool) {
	best := slices.MinFunc(rows, func(a, b PolicyRow) int { return cmp.Compare(a.TTFTP99, b.TTFTP99) })
	return best, !unreachable(best.TTFTP99)
}

// headline says which policy had the lowest p99 TTFT at a point and how it
// compares with the cache-blind baselines there.
func headline(rows []PolicyRow) string {
	if len(rows) < 2 {
		return ""
	}
	var none []string
	for _, r := range rows {
		if unreachable(r.TTFTP99) {
			none = append(none, r.Policy)
		}
	}
	best, ok := lowestP99(rows)
	if !ok {
		return "No policy has a p99 TTFT here: every one's is " + unreachableText + "."
	}
	parts := []string{fmt.Sprintf("**%s** has the lowest p99 TTFT (%s ms, goodput %s req/s)", best.Policy, msecText(best.TTFTP99), num2(best.Goodput))}
	for _, base := range []string{"round_robin", "least_request"} {
		i := slices.IndexFunc(rows, func(r PolicyRow) bool { return r.Policy == base })
		if i < 0 || rows[i].Policy == best.Policy || rows[i].TTFTP99 <= 0 {
			continue
		}
		b := rows[i]
		if unreachable(b.TTFTP99) {
			parts = append(parts, fmt.Sprintf("%s's is %s (goodput %s)", base, unreachableText, num2(b.Goodput)))
			none = slices.DeleteFunc(none, func(p string) bool { return p == base }) // said
			continue
		}
		parts = append(parts, fmt.Sprintf("%.0f%% below %s's %s ms (goodput %s)", 100*(1-best.TTFTP99/b.TTFTP99), base, msecText(b.TTFTP99), num2(b.Goodput)))
	}
	worst := slices.MaxFunc(rows, func(a, b PolicyRow) int { return cmp.Compare(a.TTFTP99, b.TTFTP99) })
	switch {
	case len(none) > 0:
		parts = append(parts, fmt.Sprintf("%s for %s", unreachableText, joinAnd(none)))
	case !unreachable(worst.TTFTP99):
		parts = append(parts, fmt.Sprintf("the highest is %s's %s ms", worst.Policy, msecText(worst.TTFTP99)))
	}
	return strings.Join(parts, "; ") + "."
}

// behindText is how far ours is above theirs, as "+7%".
func behindText(ours, theirs float64) string {
	if unreachable(ours) {
		return unreachableText
	}
	return fmt.Sprintf("+%.0f%%", 100*(ours/theirs-1))
}
