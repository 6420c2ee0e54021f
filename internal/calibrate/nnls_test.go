package calibrate

import (
	"math"
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"
)

func TestNNLS(t *testing.T) {
	tests := []struct {
		name string
		a    [][]float64
		b    []float64
		want []float64
	}{
		{
			name: "exact_square",
			a:    [][]float64{{2, 0}, {0, 4}},
			b:    []float64{1, 2},
			want: []float64{0.5, 0.5},
		},
		{
			name: "one_column",
			a:    [][]float64{{1}, {2}, {3}},
			b:    []float64{2, 4, 6},
			want: []float64{2},
		},
		{
			name: "one_column_negative_slope_clamped",
			a:    [][]float64{{1}, {2}, {3}},
			b:    []float64{-1, -2, -3},
			want: []float64{0},
		},
		{
			// The second unknown would be -1 unconstrained; at 0 the first
			// keeps its own fit.
			name: "one_of_two_clamped",
			a:    [][]float64{{1, 0}, {0, 1}},
			b:    []float64{1, -1},
			want: []float64{1, 0},
		},
		{
			// Intercept and slope: the line through (1,3) (2,2) (3,1) has
			// slope -1. Clamped to 0, the intercept is the mean, 2.
			name: "slope_clamped_intercept_is_mean",
			a:    [][]float64{{1, 1}, {1, 2}, {1, 3}},
			b:    []float64{3, 2, 1},
			want: []float64{2, 0},
		},
		{
			// The line through (1,0) (2,2) (3,4) has intercept -2. Clamped
			// to 0, the slope is Σxy/Σx² = 16/14.
			name: "intercept_clamped_slope_through_origin",
			a:    [][]float64{{1, 1}, {1, 2}, {1, 3}},
			b:    []float64{0, 2, 4},
			want: []float64{0, 8.0 / 7},
		},
		{
			// Both would be negative: min (x1+1)² + (x1+x2+1)² over x ≥ 0
			// is at the origin.
			name: "all_clamped",
			a:    [][]float64{{1, 0}, {1, 1}},
			b:    []float64{-1, -1},
			want: []float64{0, 0},
		},
		{
			// Unconstrained, the normal equations [[3,1,1],[1,2,1],[1,1,3]]·x
			// = (3,0,3) give x = (1, −1, 1). With x2 = 0 they shrink to
			// [[3,1],[1,3]]·(x1,x3) = (3,3), so x1 = x3 = 3/4, where x2's
			// gradient, the residuals of the first two rows, is −3/2 < 0.
			name: "middle_clamped_three_unknowns",
			a:    [][]float64{{1, 1, 0}, {0, 1, 1}, {1, 0, 1}, {1, 0, 0}, {0, 0, 1}},
			b:    []float64{0, 0, 2, 1, 1},
			want: []float64{0.75, 0, 0.75},
		},
		{
			name: "zero_column",
			a:    [][]float64{{1, 0}, {2, 0}},
			b:    []float64{1, 2},
			want: []float64{1, 0},
		},
		{
			name: "zero_target",
			a:    [][]float64{{1, 2}, {3, 4}, {5, 6}},
			b:    []float64{0, 0, 0},
			want: []float64{0, 0},
		},
		{
			// Columns of very different scale, like u, u·(c+u/2) and 1.
			name: "cost_model_exact",
			a: [][]float64{
				{64, 64 * 32, 1}, {512, 512 * 256, 1}, {2048, 2048 * 1024, 1},
				{64, 64 * (4096 + 32), 1}, {2048, 2048 * (16384 + 1024), 1},
			},
			b: []float64{
				1e-4*64 + 3.3e-9*64*32 + 5e-3, 1e-4*512 + 3.3e-9*512*256 + 5e-3, 1e-4*2048 + 3.3e-9*2048*1024 + 5e-3,
				1e-4*64 + 3.3e-9*64*(4096+32) + 5e-3, 1e-4*2048 + 3.3e-9*2048*(16384+1024) + 5e-3,
			},
			want: []float64{1e-4, 3.3e-9, 5e-3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := nnls(tt.a, tt.b)
			if err != nil {
				t.Fatalf("nnls: %v", err)
			}
			for j := range tt.want {
				if !closeTo(got[j], tt.want[j], 1e-9) {
					t.Errorf("nnls(%s) = %v, want %v", tt.name, got, tt.want)
					break
				}
			}
			checkKKT(t, tt.a, tt.b, got)
		})
	}
}

// TestNNLSMiddleUnconstrainedIsNegative pins the unconstrained optimum of
// middle_clamped_three_unknowns, so that case keeps testing a constraint.
func TestNNLSMiddleUnconstrainedIsNegative(t *testing.T) {
	a := [][]float64{{1, 1, 0}, {0, 1, 1}, {1, 0, 1}, {1, 0, 0}, {0, 0, 1}}
	b := []float64{0, 0, 2, 1, 1}
	x := lstsq(a, b, []bool{true, true, true})
	if x[1] >= 0 {
		t.Fatalf("unconstrained x2 = %v, want < 0 (else the case tests no constraint)", x[1])
	}
}

func TestNNLSErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		a [][]float64
		b []float64
	}{
		"empty":     {nil, nil},
		"mismatch":  {[][]float64{{1}, {2}}, []float64{1}},
		"ragged":    {[][]float64{{1, 2}, {2}}, []float64{1, 2}},
		"nan_value": {[][]float64{{1}, {math.NaN()}}, []float64{1, 2}},
	} {
		t.Run(name, func(t *testing.T) {
			if x, err := nnls(tc.a, tc.b); err == nil {
				t.Errorf("nnls = %v, want an error", x)
			}
		})
	}
}

// checkKKT checks x is the constrained optimum: x ≥ 0, and the gradient of
// the residual is zero where x > 0 and points into x < 0 where x = 0.
func checkKKT(t *testing.T, a [][]float64, b, x []float64) {
	t.Helper()
	w := make([]float64, len(x))
	gradient(a, b, x, w)
	for j := range x {
		var colNorm, bNorm float64
		for i := range a {
			colNorm += a[i][j] * a[i][j]
			bNorm += b[i] * b[i]
		}
		tol := 1e-8 * math.Sqrt(colNorm) * (math.Sqrt(bNorm) + 1e-300)
		switch {
		case x[j] < 0:
			t.Errorf("x[%d] = %v < 0", j, x[j])
		case x[j] > 0 && math.Abs(w[j]) > tol:
			t.Errorf("x[%d] = %v > 0 but the gradient there is %v", j, x[j], w[j])
		case x[j] == 0 && w[j] > tol:
			t.Errorf("x[%d] = 0 but raising it would lower the residual (gradient %v)", j, w[j])
		}
	}
}

func closeTo(got, want, rel float64) bool {
	return math.Abs(got-want) <= rel*math.Max(math.Abs(want), 1e-300) || got == want
}

// TestFitRecoversParams: for random non-negative a, b and d (each possibly
// 0) and TTFTs with Gaussian noise of 10 µs, the fit lands within ten
// standard errors of the truth and never goes negative.
func TestFitRecoversParams(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		zeroOr := func(name string, lo, hi float64) float64 {
			if rapid.IntRange(0, 4).Draw(t, name+"_zero") == 0 {
				return 0
			}
			return rapid.Float64Range(lo, hi).Draw(t, name)
		}
		truth := Params{
			TokenSecs: zeroOr("a", 1e-6, 1e-3),
			PairSecs:  zeroOr("b", 1e-11, 2e-8),
			FixedSecs: zeroOr("d", 1e-4, 5e-2),
		}
		// Noise from a seeded generator rather than from draws, so that
		// shrinking cannot line it up against the fit: the bounds below
		// are for random noise, not the worst case.
		const sigma = 10e-6
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 1))
		var points []Point
		d := DefaultDesign()
		for _, c := range d.Cached {
			for _, u := range d.Uncached {
				for range d.Reps {
					noise := rng.NormFloat64() * sigma
					points = append(points, Point{Uncached: float64(u), Cached: float64(c),
						TTFT: truth.Prefill(float64(u), float64(c)) + noise})
				}
			}
		}
		got, err := Fit(points)
		if err != nil {
			t.Fatalf("Fit: %v", err)
		}
		if got.TokenSecs < 0 || got.PairSecs < 0 || got.FixedSecs < 0 {
			t.Fatalf("Fit = %+v, a term is negative", got)
		}
		// Tolerances: ten times the standard errors this design gives at
		// this noise, plus 0.1%.
		for _, c := range []struct {
			name          string
			got, want, se float64
		}{
			{"a", got.TokenSecs, truth.TokenSecs, 2e-9},
			{"b", got.PairSecs, truth.PairSecs, 3e-13},
			{"d", got.FixedSecs, truth.FixedSecs, 2e-6},
		} {
			if math.Abs(c.got-c.want) > 10*c.se+1e-3*c.want {
				t.Fatalf("Fit %s = %g, want %g (fit %+v, truth %+v)", c.name, c.got, c.want, got, truth)
			}
		}
	})
}

// TestFitNeverNegative: whatever the measurements, even nonsense, every
// term comes out non-negative and optimal under the constraint.
func TestFitNeverNegative(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(3, 40).Draw(t, "n")
		var points []Point
		for i := range n {
			points = append(points, Point{
				Uncached: float64(rapid.IntRange(0, 40000).Draw(t, "u")),
				Cached:   float64(rapid.IntRange(0, 40000).Draw(t, "c")),
				TTFT:     rapid.Float64Range(-10, 10).Draw(t, "ttft"),
			})
			points[i].Uncached += float64(i * 40001) // distinct shapes
		}
		got, err := Fit(points)
		if err != nil {
			t.Fatalf("Fit: %v", err)
		}
		if got.TokenSecs < 0 || got.PairSecs < 0 || got.FixedSecs < 0 {
			t.Fatalf("Fit = %+v, a term is negative", got)
		}
	})
}

func TestFitUnderdetermined(t *testing.T) {
	_, err := Fit([]Point{{Uncached: 10, TTFT: 1}, {Uncached: 10, TTFT: 1.1}, {Uncached: 20, TTFT: 2}})
	if err == nil {
		t.Fatal("Fit of two shapes succeeded, want ErrUnderdetermined")
	}
}

// TestFitRobustIgnoresStalls: a few probes delayed by a stall many times
// the noise do not move the fit, and are the ones set aside.
func TestFitRobustIgnoresStalls(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		truth := Params{
			TokenSecs: rapid.Float64Range(1e-6, 1e-3).Draw(t, "a"),
			PairSecs:  rapid.Float64Range(1e-11, 2e-8).Draw(t, "b"),
			FixedSecs: rapid.Float64Range(1e-3, 5e-2).Draw(t, "d"),
		}
		const sigma = 10e-6
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 1))
		var points []Point
		d := DefaultDesign()
		for _, c := range d.Cached {
			for _, u := range d.Uncached {
				for range 3 {
					points = append(points, Point{Uncached: float64(u), Cached: float64(c),
						TTFT: truth.Prefill(float64(u), float64(c)) + rng.NormFloat64()*sigma})
				}
			}
		}
		// Stalls of 1 ms and more, and well past the 0.1% of the median
		// TTFT below which FitRobust calls nothing an outlier.
		ttfts := make([]float64, len(points))
		for i, p := range points {
			ttfts[i] = p.TTFT
		}
		typical := median(ttfts)
		// At most one of each shape's three repetitions stalls: with two
		// of three, which is the truth is anyone's guess.
		stalled := map[int]bool{}
		shapes := map[int]bool{}
		for range rapid.IntRange(0, len(points)/10).Draw(t, "stalls") {
			i := rapid.IntRange(0, len(points)-1).Draw(t, "stalled")
			if !shapes[i/3] {
				stalled[i], shapes[i/3] = true, true
				points[i].TTFT += 1e-3 + rapid.Float64Range(0.01, 0.1).Draw(t, "stall")*typical
			}
		}
		got, kept, err := FitRobust(points)
		if err != nil {
			t.Fatalf("FitRobust: %v", err)
		}
		for i := range points {
			if stalled[i] && kept[i] {
				t.Errorf("point %d stalled but was fitted", i)
			}
		}
		for _, c := range []struct {
			name          string
			got, want, se float64
		}{
			{"a", got.TokenSecs, truth.TokenSecs, 2e-9},
			{"b", got.PairSecs, truth.PairSecs, 3e-13},
			{"d", got.FixedSecs, truth.FixedSecs, 2e-6},
		} {
			if math.Abs(c.got-c.want) > 10*c.se+1e-3*c.want {
				t.Fatalf("FitRobust %s = %g, want %g (fit %+v, truth %+v)", c.name, c.got, c.want, got, truth)
			}
		}
	})
}
