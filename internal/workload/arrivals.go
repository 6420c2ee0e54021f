package workload

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// arrivals yields the start times of a run: a renewal process (Poisson or
// Gamma gaps) at a constant rate, optionally time-warped by a diurnal ramp.
type arrivals struct {
	r     *rand.Rand
	rate  float64 // starts per second
	shape float64 // gamma shape; 0 for Poisson
	u     float64 // operational time of the last start, in seconds

	amp    float64 // diurnal amplitude; 0 for none
	period float64 // diurnal period, in seconds
}

func newArrivals(spec Spec, r *rand.Rand, rate, period float64) *arrivals {
	a := &arrivals{r: r, rate: rate}
	if spec.Arrivals == Gamma {
		a.shape = 1 / (spec.CV * spec.CV)
	}
	if spec.Ramp == Diurnal {
		a.amp, a.period = spec.RampAmplitude, period
	}
	return a
}

// next returns the next start time, in seconds from the start of the run.
func (a *arrivals) next() float64 {
	if a.shape > 0 {
		a.u += gammaSample(a.r, a.shape) / (a.shape * a.rate)
	} else {
		a.u += a.r.ExpFloat64() / a.rate
	}
	return warp(a.u, a.amp, a.period)
}

// warp maps operational time u to wall time t, the solution of
//
//	t − A·P/(2π)·sin(2πt/P) = u,
//
// so a process of constant rate λ in u has rate λ·(1 − A·cos(2πt/P)) in t:
// the count by t is λ times the left-hand side. Over a whole period the
// mean rate stays λ. The left-hand side is increasing for A < 1, so Newton
// steps kept inside a bracket converge.
func warp(u, amp, period float64) float64 {
	if amp == 0 {
		return u
	}
	k := 2 * math.Pi / period
	swing := amp / k
	lo, hi := u-swing, u+swing
	t := u
	for range 60 {
		f := t - swing*math.Sin(k*t) - u
		if math.Abs(f) < 1e-9 {
			break
		}
		if f > 0 {
			hi = t
		} else {
			lo = t
		}
		t -= f / (1 - amp*math.Cos(k*t))
		if t <= lo || t >= hi {
			t = (lo + hi) / 2
		}
	}
	return t
}

// gammaSample draws from Gamma(shape, 1) by Marsaglia and Tsang's method
// ("A simple method for generating gamma variables", 2000). For shape < 1
// it draws Gamma(shape+1) and scales by U^(1/shape).
func gammaSample(r *rand.Rand, shape float64) float64 {
	if shape < 1 {
		u := 1 - r.Float64() // (0, 1]
		return gammaSample(r, shape+1) * math.Pow(u, 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := 1 - r.Float64()
		x2 := x * x
		if u < 1-0.0331*x2*x2 || math.Log(u) < 0.5*x2+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// source makes the requests of one start. perStart is the mean number of
// requests a start makes, which sets the start rate; lead is the longest a
// start's requests spread over (0 for single requests).
type source interface {
	start(at time.Duration, dst []Request) []Request
	perStart() float64
	lead() time.Duration
}

// single is embedded by sources whose starts make one request each.
type single struct{}

func (single) perStart() float64   { return 1 }
func (single) lead() time.Duration { return 0 }

// schedule runs the arrival process over src and cuts the result by
// Duration or Requests.
func schedule(spec Spec, src source) []Request {
	period := spec.Duration.Seconds()
	if spec.Requests > 0 {
		period = float64(spec.Requests) / spec.Rate
	}
	arr := newArrivals(spec, newRand(spec.Seed, streamArrivals), spec.Rate/src.perStart(), period)
	// Sessions start before the run too, so it begins with conversations
	// under way and the request rate is Rate from the start.
	arr.u = -src.lead().Seconds()
	var reqs []Request
	for n := 0; ; n++ {
		t := arr.next()
		at := seconds(t)
		if spec.Duration > 0 && at >= spec.Duration {
			break
		}
		// Every later start makes requests at or after at, so once
		// Requests of them leave before at, the first Requests are known.
		if spec.Requests > 0 && len(reqs) >= spec.Requests && n%64 == 0 &&
			countBefore(reqs, at) >= spec.Requests {
			break
		}
		reqs = src.start(at, reqs)
	}
	reqs = slices.DeleteFunc(reqs, func(r Request) bool {
		return r.At < 0 || spec.Duration > 0 && r.At >= spec.Duration
	})
	slices.SortStableFunc(reqs, func(a, b Request) int { return cmp.Compare(a.At, b.At) })
	if spec.Requests > 0 && len(reqs) > spec.Requests {
		clear(reqs[spec.Requests:])
		reqs = reqs[:spec.Requests:spec.Requests]
	}
	return reqs
}

func countBefore(reqs []Request, at time.Duration) int {
	n := 0
	for i := range reqs {
		if reqs[i].At >= 0 && reqs[i].At < at {
			n++
		}
	}
	return n
}

// seconds converts to a Duration, rounding to the nanosecond.
func seconds(s float64) time.Duration {
	return time.Duration(math.Round(s * float64(time.Second)))
}

// Streams of the seeded generators, so that one purpose's draws never
// shift another's.
const (
	streamArrivals = iota + 1
	streamRequests
	streamTexts
	streamShareGPT
)

func newRand(seed uint64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, mix64(stream)))
}

// mix64 is the splitmix64 finalizer.
func mix64(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	return z ^ z>>31
}

// textSeed derives the seed of one text from the spec's seed, a purpose and
// an index, independently of draw order.
func textSeed(seed uint64, purpose, index uint64) uint64 {
	return mix64(mix64(seed^0x9e3779b97f4a7c15) + mix64(purpose<<32|streamTexts) + index*0x9e3779b97f4a7c15)
}
