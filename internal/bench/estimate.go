package bench

import (
	"math"
	"slices"
)

// EstimateError is how far the gateway's estimates of the time to first
// token (X-Inferrail-Estimated-Ttft) were from the time to first token the
// client measured from its sending the request, over the measured
// successes that carried one. Errors are relative: (estimated − measured)
// / measured.
type EstimateError struct {
	Requests int `json:"requests"`
	// MeanAbs and P90Abs are the mean and 90th percentile of the relative
	// error's absolute value; Mean is its mean with its sign (below zero:
	// the estimates are too low).
	MeanAbs float64 `json:"mean_abs"`
	P90Abs  float64 `json:"p90_abs"`
	Mean    float64 `json:"mean"`
}

// estimateTally collects relative estimate errors.
type estimateTally struct {
	errs []float64
}

func (t *estimateTally) add(o *Outcome) {
	if o.Estimated <= 0 || o.Sent <= 0 || o.TTFT <= 0 {
		return
	}
	// TTFT counts from the scheduled send; the estimate from the send.
	measured := o.TTFT - max(o.Sent-o.Sched, 0)
	if measured <= 0 {
		return
	}
	t.errs = append(t.errs, float64(o.Estimated-measured)/float64(measured))
}

func (t *estimateTally) result() *EstimateError {
	if len(t.errs) == 0 {
		return nil
	}
	abs := make([]float64, len(t.errs))
	var sum, sumAbs float64
	for i, e := range t.errs {
		abs[i] = math.Abs(e)
		sum += e
		sumAbs += abs[i]
	}
	slices.Sort(abs)
	n := float64(len(t.errs))
	return &EstimateError{Requests: len(t.errs), MeanAbs: sumAbs / n, P90Abs: nearestRank(abs, 0.9), Mean: sum / n}
}

// nearestRank is the q-quantile of sorted by the nearest-rank method.
func nearestRank(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// estimateText is a row's estimate error for a report: mean and p90 of the
// absolute relative error, "–" without estimates.
func estimateText(mean, p90 float64) string {
	if math.IsNaN(mean) {
		return "–"
	}
	return share(mean) + " / " + share(p90)
}
