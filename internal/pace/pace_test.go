package pace

import (
	"math"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/clock"
	"pgregory.net/rapid"
)

var t0 = time.Unix(1_700_000_000, 0)

func TestMeter(t *testing.T) {
	for _, tt := range []struct {
		name    string
		samples [][2]float64 // estimated, measured; one a second
		want    float64
		within  float64
	}{
		{"no samples: 1", nil, 1, 0},
		{"as estimated: 1", repeat(100, 0.2, 0.2), 1, 1e-9},
		{"twice as slow, after enough traffic", repeat(200, 0.2, 0.4), 2, 0.05},
		{"half as long", repeat(200, 0.2, 0.1), 0.5, 0.02},
		{"one sample moves it an eighth of the way", [][2]float64{{0.1, 0.3}}, (0.3 + 0.7) / 0.8, 1e-9},
		{"a sample's ratio is clamped", [][2]float64{{1, 1000}}, (4 + 7) / 8.0, 1e-9},
		{"never past the bounds", repeat(500, 1, 100), Max, 1e-9},
		{"nonsense is ignored", [][2]float64{{0, 1}, {1, 0}, {-1, 1}, {math.NaN(), 1}, {1, math.Inf(1)}, {math.Inf(1), 1}}, 1, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var m Meter
			for i, s := range tt.samples {
				m.Observe(s[0], s[1], t0.Add(time.Duration(i)*time.Second))
			}
			if got := m.Pace(); math.Abs(got-tt.want) > tt.within {
				t.Errorf("pace %v, want %v ± %v", got, tt.want, tt.within)
			}
		})
	}
}

func repeat(n int, estimated, measured float64) [][2]float64 {
	out := make([][2]float64, n)
	for i := range out {
		out[i] = [2]float64{estimated, measured}
	}
	return out
}

// TestMeterForgets: an engine that slows down is priced slower within a
// few half-lives, and back when it recovers.
func TestMeterForgets(t *testing.T) {
	var m Meter
	at := t0
	feed := func(secs int, ratio float64) {
		for range secs * 10 {
			at = at.Add(100 * time.Millisecond)
			m.Observe(0.1, 0.1*ratio, at)
		}
	}
	feed(120, 1)
	if p := m.Pace(); math.Abs(p-1) > 0.01 {
		t.Fatalf("steady: pace %v", p)
	}
	feed(int(4*HalfLife/time.Second), 3)
	if p := m.Pace(); p < 2.8 {
		t.Fatalf("after four half-lives three times slower: pace %v", p)
	}
	feed(int(4*HalfLife/time.Second), 1)
	if p := m.Pace(); p > 1.2 {
		t.Fatalf("recovered for four half-lives: pace %v", p)
	}
}

// TestMeterAgainstNaive holds the meter to a naive model: every sample
// kept with its time, weighted by 2^(-age/HalfLife) at the last one.
func TestMeterAgainstNaive(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var m Meter
		type sample struct {
			at       time.Time
			est, mea float64
		}
		var kept []sample
		at := t0
		for range rapid.IntRange(1, 50).Draw(t, "n") {
			at = at.Add(time.Duration(rapid.IntRange(0, 20_000).Draw(t, "gap_ms")) * time.Millisecond)
			est := rapid.Float64Range(0.001, 5).Draw(t, "estimated")
			mea := rapid.Float64Range(0.0001, 30).Draw(t, "measured")
			m.Observe(est, mea, at)
			kept = append(kept, sample{at, est, min(max(mea, est*Min), est*Max)})
		}
		var sm, se, n float64
		for _, s := range kept {
			w := math.Exp2(-at.Sub(s.at).Seconds() / HalfLife.Seconds())
			sm += w * s.mea
			se += w * s.est
			n += w
		}
		fill := max(priorSamples-n, 0) * se / n
		want := min(max((sm+fill)/(se+fill), Min), Max)
		if got := m.Pace(); math.Abs(got-want) > 1e-9*want {
			t.Fatalf("pace %v, naive %v", got, want)
		}
	})
}

// TestMeterNoise: the pace's standard error is unknown (infinite) before
// two samples, zero for samples that agree, and for samples that spread
// it is their spread over the root of their count: it falls as samples
// add up, and a sample's clamp bounds its share of it.
func TestMeterNoise(t *testing.T) {
	var m Meter
	if n := m.Noise(); !math.IsInf(n, 1) {
		t.Fatalf("noise %v before any sample, want +Inf", n)
	}
	m.Observe(0.1, 0.2, t0)
	if n := m.Noise(); !math.IsInf(n, 1) {
		t.Fatalf("noise %v after one sample, want +Inf", n)
	}
	m.Observe(0.1, 0.2, t0)
	if n := m.Noise(); n > 1e-9 {
		t.Fatalf("noise %v of two equal samples, want 0", n)
	}

	// Ratios alternating 1 and 3 at one instant: mean 2, spread 1.
	var a Meter
	for range 4 {
		a.Observe(1, 1, t0)
		a.Observe(1, 3, t0)
	}
	if n, want := a.Noise(), 1/math.Sqrt(8); math.Abs(n-want) > 1e-9 {
		t.Errorf("noise %v over 8 samples, want %v", n, want)
	}
	for range 46 {
		a.Observe(1, 1, t0)
		a.Observe(1, 3, t0)
	}
	if n, want := a.Noise(), 1/math.Sqrt(100); math.Abs(n-want) > 1e-9 {
		t.Errorf("noise %v over 100 samples, want %v", n, want)
	}
	// A sample a thousand times its estimate counts as Max times it.
	var c Meter
	c.Observe(1, 1, t0)
	c.Observe(1, 1000, t0)
	if n, want := c.Noise(), (Max-1)/2/math.Sqrt(2); math.Abs(n-want) > 1e-9 {
		t.Errorf("noise %v with a clamped sample, want %v", n, want)
	}
}

// TestMeterAgesWhenRead: a pace read for a decision has its samples aged
// to the reading, so an engine that gets no requests after one slow answer
// drifts back toward 1 (it was priced 1.375 for good: it drew no request
// that could correct it). A reading within staleAfter of the last ageing
// is the stored pace.
func TestMeterAgesWhenRead(t *testing.T) {
	var m Meter
	m.Observe(0.1, 0.4, t0) // four times the estimate: an eighth of the way to 4
	if p := m.PaceAt(clock.Of(t0.Add(staleAfter / 2))); math.Abs(p-(8+3)/8.0) > 1e-9 {
		t.Errorf("pace %v within staleAfter, want the stored 1.375", p)
	}
	for _, tt := range []struct {
		after time.Duration
		want  float64 // 1 + 3f/8, f the sample's weight left
	}{{HalfLife, 1 + 3*0.5/8}, {3 * HalfLife, 1 + 3*0.125/8}, {10 * HalfLife, 1 + 3*math.Exp2(-10)/8}} {
		if p := m.PaceAt(clock.Of(t0.Add(tt.after))); math.Abs(p-tt.want) > 1e-9 {
			t.Errorf("pace %v after %v without samples, want %v", p, tt.after, tt.want)
		}
	}
	if n := m.Noise(); !math.IsInf(n, 1) {
		t.Errorf("noise %v of one aged sample, want +Inf", n)
	}
	// Two samples aged below two samples' worth are no longer judged.
	var two Meter
	two.Observe(1, 1, t0)
	two.Observe(1, 1, t0)
	two.PaceAt(clock.Of(t0.Add(HalfLife)))
	if n := two.Noise(); !math.IsInf(n, 1) {
		t.Errorf("noise %v of two samples aged to one, want +Inf", n)
	}
}

// TestMeterForgetsIdleSamples: a meter read after a day without samples
// holds none (pace 1, noise unknown), never the NaN its sums aged to zero
// gave (0/0 past 1,074 half-lives, about 9 hours), and learns again.
func TestMeterForgetsIdleSamples(t *testing.T) {
	var m Meter
	for range 20 {
		m.Observe(0.1, 0.3, t0)
	}
	for _, idle := range []time.Duration{9 * time.Hour, 24 * time.Hour, 1000 * time.Hour} {
		if p := m.PaceAt(clock.Of(t0.Add(idle))); p != 1 || !math.IsInf(m.Noise(), 1) {
			t.Errorf("after %v without samples: pace %v, noise %v; want 1 and +Inf", idle, p, m.Noise())
		}
	}
	m.Observe(0.1, 0.4, t0.Add(1001*time.Hour))
	if p := m.Pace(); math.Abs(p-(8+3)/8.0) > 1e-9 {
		t.Errorf("one sample after the meter forgot: pace %v, want 1.375", p)
	}
}
