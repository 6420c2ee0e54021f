package workload

import (
	"math"
	"testing"
	"time"
)

// gapStats returns the mean and coefficient of variation of n gaps.
func gapStats(a *arrivals, n int) (mean, cv float64) {
	var sum, sum2, prev float64
	for range n {
		t := a.next()
		g := t - prev
		prev = t
		sum += g
		sum2 += g * g
	}
	mean = sum / float64(n)
	return mean, math.Sqrt(sum2/float64(n)-mean*mean) / mean
}

func TestArrivalGaps(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine drawing and checking thousands of cases, where the race detector has nothing to find; make norace runs it")
	}
	tests := []struct {
		name string
		spec Spec
		cv   float64
	}{
		{"poisson", Spec{Arrivals: Poisson}, 1},
		{"gamma_cv_0.5", Spec{Arrivals: Gamma, CV: 0.5}, 0.5},
		{"gamma_cv_1", Spec{Arrivals: Gamma, CV: 1}, 1},
		{"gamma_cv_2", Spec{Arrivals: Gamma, CV: 2}, 2},
		{"gamma_cv_4", Spec{Arrivals: Gamma, CV: 4}, 4},
	}
	const rate, n = 8.0, 400000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newArrivals(tt.spec, newRand(1, streamArrivals), rate, 0)
			mean, cv := gapStats(a, n)
			if got := 1 / mean; math.Abs(got-rate)/rate > 0.02 {
				t.Errorf("rate %.3f, want %.1f within 2%%", got, rate)
			}
			// The sample CV of heavy-tailed gaps converges slowly.
			if math.Abs(cv-tt.cv)/tt.cv > 0.05 {
				t.Errorf("cv %.3f, want %.2f within 5%%", cv, tt.cv)
			}
		})
	}
}

// TestGammaSample checks the sampler's mean and variance for shapes on
// both sides of 1.
func TestGammaSample(t *testing.T) {
	r := newRand(2, streamArrivals)
	for _, shape := range []float64{0.0625, 0.25, 0.9, 1, 2.5, 10} {
		const n = 200000
		var sum, sum2 float64
		for range n {
			x := gammaSample(r, shape)
			if x < 0 || math.IsNaN(x) {
				t.Fatalf("gammaSample(%v) = %v", shape, x)
			}
			sum += x
			sum2 += x * x
		}
		mean := sum / n
		variance := sum2/n - mean*mean
		if math.Abs(mean-shape)/shape > 0.03 || math.Abs(variance-shape)/shape > 0.1 {
			t.Errorf("Gamma(%v): mean %.4f, variance %.4f, want both %v", shape, mean, variance, shape)
		}
	}
}

// stub makes one small request per start, to test schedules cheaply.
type stub struct{ single }

func (stub) start(at time.Duration, dst []Request) []Request { return append(dst, Request{At: at}) }

// TestRequestRate checks the scheduled request rate over many seeds for
// every arrival process, sessions included.
func TestRequestRate(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine drawing and checking thousands of cases, where the race detector has nothing to find; make norace runs it")
	}
	tests := []struct {
		name      string
		spec      Spec
		seeds     int
		tolerance float64
	}{
		{"poisson", Spec{Arrivals: Poisson}, 40, 0.02},
		{"gamma_cv_2", Spec{Arrivals: Gamma, CV: 2}, 40, 0.04},
		{"diurnal", Spec{Arrivals: Poisson, Ramp: Diurnal, RampAmplitude: 0.5}, 40, 0.02},
		{"w8", Spec{Workload: W8}, 40, 0.06},
		{"w2", Spec{Workload: W2}, 10, 0.06},
		{"w3", Spec{Workload: W3}, 10, 0.06},
	}
	const rate = 4.0
	const duration = 10 * time.Minute
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			total := 0
			for seed := range uint64(tt.seeds) {
				spec := tt.spec
				spec.Model, spec.Rate, spec.Duration, spec.Seed = "m", rate, duration, seed
				var reqs []Request
				if spec.Workload == W2 || spec.Workload == W3 {
					reqs = generate(t, spec)
				} else {
					reqs = schedule(spec.WithDefaults(), stub{})
				}
				if last := reqs[len(reqs)-1].At; last >= duration || reqs[0].At < 0 {
					t.Fatalf("requests from %v to %v, want within [0, %v)", reqs[0].At, last, duration)
				}
				total += len(reqs)
			}
			got := float64(total) / float64(tt.seeds) / duration.Seconds()
			if math.Abs(got-rate)/rate > tt.tolerance {
				t.Errorf("mean rate %.3f, want %.1f within %.0f%%", got, rate, tt.tolerance*100)
			}
		})
	}
}

// TestDiurnal checks the ramp's shape: quiet at the ends, busy in the
// middle, the mean kept, with both cuts.
func TestDiurnal(t *testing.T) {
	const rate, amp = 10.0, 0.5
	for _, spec := range []Spec{
		{Rate: rate, Duration: time.Hour, Ramp: Diurnal, Seed: 3},
		{Rate: rate, Requests: 36000, Ramp: Diurnal, Seed: 3},
	} {
		reqs := schedule(spec.WithDefaults(), stub{})
		var quarters [4]int
		for _, r := range reqs {
			quarters[min(int(r.At/(15*time.Minute)), 3)]++
		}
		// rate(t) = rate·(1 − A·cos(2πt/P)): a quarter at the ends holds
		// (1/4 − A/2π)·rate·P, one in the middle (1/4 + A/2π)·rate·P.
		ends := (0.25 - amp/(2*math.Pi)) * rate * 3600
		middle := (0.25 + amp/(2*math.Pi)) * rate * 3600
		for q, want := range []float64{ends, middle, middle, ends} {
			if got := float64(quarters[q]); math.Abs(got-want)/want > 0.05 {
				t.Errorf("requests %d: quarter %d has %v, want about %.0f", spec.Requests, q, got, want)
			}
		}
		if got := float64(len(reqs)) / 3600; math.Abs(got-rate)/rate > 0.02 {
			t.Errorf("mean rate %.3f, want %v", got, rate)
		}
	}
	// w8 ramps by default.
	reqs := generate(t, Spec{Workload: W8, Model: "m", Rate: 2, Duration: 20 * time.Minute, Seed: 1, OutputTokens: 1})
	var quarters [4]int
	for _, r := range reqs {
		quarters[r.At/(5*time.Minute)]++
	}
	if middle, ends := quarters[1]+quarters[2], quarters[0]+quarters[3]; float64(middle) < 1.3*float64(ends) {
		t.Errorf("w8 quarters %v: the middle is not busier", quarters)
	}
}

func TestWarp(t *testing.T) {
	const amp, period = 0.9, 100.0
	prev := -1.0
	for u := -50.0; u <= 250; u += 0.37 {
		got := warp(u, amp, period)
		if back := got - amp*period/(2*math.Pi)*math.Sin(2*math.Pi*got/period); math.Abs(back-u) > 1e-6 {
			t.Fatalf("warp(%v) = %v, which maps back to %v", u, got, back)
		}
		if got <= prev && u > -50 {
			t.Fatalf("warp(%v) = %v not after %v", u, got, prev)
		}
		prev = got
	}
}

func TestRequestsCut(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine drawing and checking thousands of cases, where the race detector has nothing to find; make norace runs it")
	}
	for _, spec := range typicalSpecs(t, 333) {
		reqs := generate(t, spec)
		if len(reqs) != 333 {
			t.Errorf("%s: %d requests, want 333", spec.Workload, len(reqs))
		}
		if spec.WithDefaults().Ramp == Diurnal {
			continue // the ramp's period is the run's length
		}
		// The count cut keeps the earliest requests: a longer run starts
		// with the same ones.
		spec.Requests = 400
		longer := generate(t, spec)
		for i := range reqs {
			if !equalRequest(reqs[i], longer[i]) {
				t.Fatalf("%s: request %d differs when 400 are asked for", spec.Workload, i)
			}
		}
	}
}
