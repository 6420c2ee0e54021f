package calibrate

import (
	"math"
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"
)

// repeatedDesign is DefaultDesign's shapes, each repeated three times under
// one Repeat, every repetition a few tokens off the plan as real prompts
// are, with Gaussian measurement noise of sigma seconds; delay(i, rep)
// seconds are added to repetition rep of shape i.
func repeatedDesign(truth Params, rng *rand.Rand, sigma float64, delay func(shape, rep int) float64) []Point {
	var points []Point
	d := DefaultDesign()
	shape := 0
	for _, c := range d.Cached {
		for _, u := range d.Uncached {
			shape++
			for rep := range 3 {
				uu := float64(u + rng.IntN(5) - 2)
				points = append(points, Point{Uncached: uu, Cached: float64(c), Repeat: shape,
					TTFT: truth.Prefill(uu, float64(c)) + rng.NormFloat64()*sigma + delay(shape, rep)})
			}
		}
	}
	return points
}

// nearTruth reports whether got is within ten standard errors of the design at
// 10 µs of noise, plus 0.1%, of truth in every parameter, and if not the
// first that is not.
func nearTruth(got, truth Params) (string, bool) {
	for _, c := range []struct {
		name          string
		got, want, se float64
	}{
		{"a", got.TokenSecs, truth.TokenSecs, 2e-9},
		{"b", got.PairSecs, truth.PairSecs, 3e-13},
		{"d", got.FixedSecs, truth.FixedSecs, 2e-6},
	} {
		if math.Abs(c.got-c.want) > 10*c.se+1e-3*c.want {
			return c.name, false
		}
	}
	return "", true
}

// TestFitFastestIgnoresDelays: a busy host delays any number of a shape's
// repetitions by any amount, as long as one of them ran undisturbed; the
// fit is the truth's, and no repetition delayed past the noise is fitted.
func TestFitFastestIgnoresDelays(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		truth := Params{
			TokenSecs: rapid.Float64Range(1e-6, 1e-3).Draw(t, "a"),
			PairSecs:  rapid.Float64Range(1e-11, 2e-8).Draw(t, "b"),
			FixedSecs: rapid.Float64Range(1e-3, 5e-2).Draw(t, "d"),
		}
		const sigma = 10e-6
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 2))
		delays := map[[2]int]float64{}
		for shape := 1; shape <= 9; shape++ {
			calm := rapid.IntRange(0, 2).Draw(t, "undisturbed")
			for rep := range 3 {
				if rep != calm && rapid.Bool().Draw(t, "delayed") {
					// From a scheduler's tick to a stall of 40 ms.
					delays[[2]int{shape, rep}] = rapid.Float64Range(1e-3, 40e-3).Draw(t, "delay")
				}
			}
		}
		var delayed []bool
		points := repeatedDesign(truth, rng, sigma, func(shape, rep int) float64 {
			dl := delays[[2]int{shape, rep}]
			delayed = append(delayed, dl > 0)
			return dl
		})
		got, fates, err := FitFastest(points)
		if err != nil {
			t.Fatalf("FitFastest: %v", err)
		}
		for i, f := range fates {
			if delayed[i] && f == Fitted {
				t.Errorf("point %d (%+v) was delayed but fitted", i, points[i])
			}
		}
		if name, ok := nearTruth(got, truth); !ok {
			t.Fatalf("FitFastest %s off: fit %+v, truth %+v", name, got, truth)
		}
	})
}

// TestFitFastestWhereFitRobustFails: two of three repetitions of most
// shapes delayed by a few milliseconds, as on a machine whose every core is
// busy, pull FitRobust off (to it the delayed ones are the majority) but
// not FitFastest.
func TestFitFastestWhereFitRobustFails(t *testing.T) {
	truth := Params{TokenSecs: 100e-6, PairSecs: 3.3e-9, FixedSecs: 5e-3}
	rng := rand.New(rand.NewPCG(3, 4))
	points := repeatedDesign(truth, rng, 10e-6, func(shape, rep int) float64 {
		if rep == shape%3 || shape%4 == 0 {
			return 0
		}
		return 2e-3 + 4e-3*rng.Float64()
	})
	robust, _, err := FitRobust(points)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := nearTruth(robust, truth); ok {
		t.Fatalf("FitRobust = %+v, close to the truth %+v: the delays do not tell the fits apart", robust, truth)
	}
	got, fates, err := FitFastest(points)
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := nearTruth(got, truth); !ok {
		t.Errorf("FitFastest %s off: fit %+v, truth %+v (FitRobust %+v)", name, got, truth, robust)
	}
	fitted := 0
	for _, f := range fates {
		if f == Fitted {
			fitted++
		}
	}
	if fitted != 9 {
		t.Errorf("%d points fitted, want one of each of the 9 shapes", fitted)
	}
}

// TestFitFastestWithoutRepeats: points of no Repeat are fitted as
// FitRobust fits them.
func TestFitFastestWithoutRepeats(t *testing.T) {
	truth := Params{TokenSecs: 50e-6, PairSecs: 8e-9, FixedSecs: 2e-3}
	rng := rand.New(rand.NewPCG(5, 6))
	points := repeatedDesign(truth, rng, 10e-6, func(int, int) float64 { return 0 })
	points[4].TTFT += 0.05 // a stall FitRobust sets aside
	for i := range points {
		points[i].Repeat = 0
	}
	want, kept, err := FitRobust(points)
	if err != nil {
		t.Fatal(err)
	}
	got, fates, err := FitFastest(points)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("FitFastest = %+v, FitRobust = %+v", got, want)
	}
	for i, f := range fates {
		if (f == Fitted) != kept[i] || f == Slower {
			t.Errorf("point %d: fate %d, FitRobust kept %v", i, f, kept[i])
		}
	}
}
