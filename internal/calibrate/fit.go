package calibrate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// Params are the prefill parameters of the router's cost model: computing
// u prompt tokens after c cached ones takes
//
//	P(u, c) = a·u + b·u·(c + u/2) + d
//
// seconds. They are routing.cost_model's prefill_token_secs, prefill_pair_secs
// and prefill_fixed_secs.
type Params struct {
	TokenSecs float64 // a: seconds per computed token
	PairSecs  float64 // b: seconds per (computed, attended) token pair
	FixedSecs float64 // d: seconds per prefill
}

// Prefill is P(u, c) in seconds.
func (p Params) Prefill(u, c float64) float64 {
	return p.TokenSecs*u + p.PairSecs*u*(c+u/2) + p.FixedSecs
}

// Point is one measured prefill: Uncached tokens computed after Cached ones
// took TTFT seconds.
type Point struct {
	Uncached, Cached float64
	TTFT             float64
	// Repeat, when not 0, names the points that repeat one planned prompt
	// shape, of which FitFastest fits only the fastest. Fit and FitRobust
	// ignore it.
	Repeat int
}

// ErrUnderdetermined means the points cannot tell the three parameters
// apart: fewer than three, or too few distinct prompt shapes.
var ErrUnderdetermined = errors.New("too few distinct probes to fit a, b and d")

// Fit returns the non-negative a, b and d that minimize the squared error
// of P(u, c) against the measured TTFTs.
func Fit(points []Point) (Params, error) {
	shapes := map[[2]float64]bool{}
	rows := make([][]float64, len(points))
	ttft := make([]float64, len(points))
	for i, p := range points {
		if p.Uncached < 0 || p.Cached < 0 || !finite(p.Uncached, p.Cached, p.TTFT) {
			return Params{}, fmt.Errorf("point %d: token counts must be non-negative and every value finite", i)
		}
		shapes[[2]float64{p.Uncached, p.Cached}] = true
		rows[i] = []float64{p.Uncached, p.Uncached * (p.Cached + p.Uncached/2), 1}
		ttft[i] = p.TTFT
	}
	if len(shapes) < 3 {
		return Params{}, fmt.Errorf("%w: %d points of %d shapes", ErrUnderdetermined, len(points), len(shapes))
	}
	x, err := nnls(rows, ttft)
	if err != nil {
		return Params{}, err
	}
	return Params{TokenSecs: x[0], PairSecs: x[1], FixedSecs: x[2]}, nil
}

func finite(vs ...float64) bool {
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}

// Fragment renders p as the routing.cost_model section of a gateway config,
// the values printed in full so they read back exactly.
func (p Params) Fragment() []byte {
	b := []byte("routing:\n  cost_model:\n")
	for _, kv := range [...]struct {
		key string
		v   float64
	}{
		{"prefill_token_secs", p.TokenSecs},
		{"prefill_pair_secs", p.PairSecs},
		{"prefill_fixed_secs", p.FixedSecs},
	} {
		b = append(b, "    "...)
		b = append(b, kv.key...)
		b = append(b, ": "...)
		b = strconv.AppendFloat(b, kv.v, 'g', -1, 64)
		b = append(b, '\n')
	}
	return b
}

// FitRobust is Fit with outliers set aside: probes that an unrelated stall
// made slow (a garbage collection, a busy host, a timer that fired late)
// would otherwise pull every parameter, most of all d. It fits, measures the
// residuals' spread robustly (1.4826 times their median absolute deviation,
// the standard deviation for Gaussian noise), sets aside the one point
// farthest from the median residual if it lies more than rejectSigmas
// spreads away, and refits, until no point is that far or a fifth of them
// are set aside. One at a time, because a big outlier bends the fit enough
// to hide a smaller one. kept[i] tells whether points[i] was fitted.
func FitRobust(points []Point) (Params, []bool, error) {
	const rejectSigmas = 5
	kept := make([]bool, len(points))
	for i := range kept {
		kept[i] = true
	}
	p, err := Fit(points)
	if err != nil {
		return Params{}, nil, err
	}
	ttfts := make([]float64, len(points))
	for i, pt := range points {
		ttfts[i] = pt.TTFT
	}
	// A spread below 0.1% of the typical TTFT is too small to call a probe
	// off it an outlier: a simulator's TTFTs are nearly exact.
	floor := 1e-3*math.Abs(median(ttfts)) + 1e-7
	for range len(points) / 5 {
		var resid []float64
		var idx []int
		for i, pt := range points {
			if kept[i] {
				resid = append(resid, pt.TTFT-p.Prefill(pt.Uncached, pt.Cached))
				idx = append(idx, i)
			}
		}
		mid := median(resid)
		dev := make([]float64, len(resid))
		worst := 0
		for k, r := range resid {
			dev[k] = math.Abs(r - mid)
			if dev[k] > dev[worst] {
				worst = k
			}
		}
		limit := rejectSigmas * math.Max(1.4826*median(dev), floor)
		if dev[worst] <= limit {
			break
		}
		kept[idx[worst]] = false
		var sub []Point
		for i, k := range kept {
			if k {
				sub = append(sub, points[i])
			}
		}
		q, err := Fit(sub)
		if err != nil {
			kept[idx[worst]] = true // the rest cannot tell a, b and d apart
			break
		}
		p = q
	}
	return p, kept, nil
}

// median returns the middle value of s (the mean of the two middle ones for
// an even count), 0 for none. It does not modify s.
func median(s []float64) float64 {
	if len(s) == 0 {
		return 0
	}
	s = slices.Clone(s)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Fate is what a fit did with one point.
type Fate uint8

const (
	// Fitted: the point is in the fit.
	Fitted Fate = iota
	// Slower: another repetition of the point's shape came back faster, so
	// this one waited on something besides its prefill.
	Slower
	// Outlier: FitRobust set the point aside.
	Outlier
)

// FitFastest fits the fastest repetition of each shape: Point.Repeat names
// the points that repeat one planned prompt. Whatever else delays a prefill
// (a host whose CPU is busy, a garbage collection, the engine's own
// process losing its core between arrival and the first step) only ever
// adds to its TTFT, so of prompts of one shape the fastest is the one to
// believe; averaging them, or fitting them all, lets a busy machine inflate
// every parameter. Repetitions of one shape may still differ by a few
// tokens (prompts are planned, not exact), so "fastest" means the smallest
// residual against a fit of every point, not the smallest TTFT; FitFastest
// picks again against the fit of its picks until the picks hold still. The
// picks and the points of no Repeat then go through FitRobust. fates[i]
// tells what became of points[i].
func FitFastest(points []Point) (Params, []Fate, error) {
	p, _, err := FitRobust(points)
	if err != nil {
		return Params{}, nil, err
	}
	var picked, kept []bool
	for range 4 {
		again := pickFastest(points, p)
		if slices.Equal(again, picked) {
			break
		}
		picked = again
		var sub []Point
		var idx []int
		for i, ok := range picked {
			if ok {
				sub = append(sub, points[i])
				idx = append(idx, i)
			}
		}
		q, k, err := FitRobust(sub)
		if err != nil {
			return Params{}, nil, err
		}
		p, kept = q, make([]bool, len(points))
		for j, i := range idx {
			kept[i] = k[j]
		}
	}
	fates := make([]Fate, len(points))
	for i := range fates {
		switch {
		case !picked[i]:
			fates[i] = Slower
		case !kept[i]:
			fates[i] = Outlier
		}
	}
	return p, fates, nil
}

// pickFastest marks, of each Repeat, the point of the smallest residual
// against p, and every point of no Repeat.
func pickFastest(points []Point, p Params) []bool {
	picked := make([]bool, len(points))
	best := map[int]int{} // Repeat → index of its fastest point so far
	for i, pt := range points {
		if pt.Repeat == 0 {
			picked[i] = true
			continue
		}
		j, ok := best[pt.Repeat]
		if !ok || residual(pt, p) < residual(points[j], p) {
			best[pt.Repeat] = i
		}
	}
	for _, i := range best {
		picked[i] = true
	}
	return picked
}

func residual(pt Point, p Params) float64 { return pt.TTFT - p.Prefill(pt.Uncached, pt.Cached) }
