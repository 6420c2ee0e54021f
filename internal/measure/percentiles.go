package measure

import (
	"math"
	"slices"
	"time"
)

// Percentiles summarises durations in seconds, nearest rank.
type Percentiles struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_seconds"`
	P50  float64 `json:"p50_seconds"`
	P90  float64 `json:"p90_seconds"`
	P99  float64 `json:"p99_seconds"`
	P999 float64 `json:"p999_seconds"`
	Max  float64 `json:"max_seconds"`
}

// Summarize sorts ds and summarises them. An empty ds gives the zero
// value.
func Summarize(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return Percentiles{
		N:    len(ds),
		Mean: (sum / time.Duration(len(ds))).Seconds(),
		P50:  Percentile(ds, 0.50),
		P90:  Percentile(ds, 0.90),
		P99:  Percentile(ds, 0.99),
		P999: Percentile(ds, 0.999),
		Max:  ds[len(ds)-1].Seconds(),
	}
}

// Percentile is the nearest-rank percentile p (0.99, say) of sorted ds, in
// seconds.
func Percentile(sorted []time.Duration, p float64) float64 {
	return sorted[Rank(len(sorted), p)].Seconds()
}

// Rank is the index, among n values sorted ascending, of their
// nearest-rank percentile p: ⌈p·n⌉ − 1, kept within [0, n−1]. The n −
// Rank(n, p) values from it on are those at or above the percentile.
func Rank(n int, p float64) int {
	i := int(math.Ceil(p*float64(n))) - 1
	return max(0, min(i, n-1))
}
