package policy

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestSketchNeverUnderestimates checks the sketch against an exact count
// per key, decayed the same way, over streams of thousands of keys (so
// that counters collide) at random times.
func TestSketchNeverUnderestimates(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		clk := newFakeClock()
		window := time.Duration(rapid.Int64Range(int64(time.Millisecond), int64(time.Minute)).Draw(t, "window"))
		s := newSketch(window, clk.now())
		exact := map[uint64]counter{}
		keys := rapid.IntRange(1, 6000).Draw(t, "keys")
		r := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "stream"), 1))
		check := func(k uint64) {
			want := exact[k].at(s.ticks(clk.now()))
			if got := s.count(k, clk.now()); got < want {
				t.Fatalf("key %d: sketch counts %d, exactly %d", k, got, want)
			}
		}
		for range rapid.IntRange(1, 3000).Draw(t, "adds") {
			k := mix64(uint64(r.IntN(keys)))
			secs := r.ExpFloat64() * 0.05
			s.add(k, secs, clk.now())
			tick := s.ticks(clk.now())
			c := exact[k]
			exact[k] = counter{v: c.at(tick) + nanos(secs), t: tick}
			check(k)
			check(mix64(uint64(r.IntN(keys))))
			clk.add(time.Duration(r.ExpFloat64() * float64(window) / 200))
		}
		for k := range exact {
			check(k)
		}
	})
}

// TestDecaySuperadditive: decaying a sum never gives less than the decayed
// parts, which is why a shared counter never falls below its keys' counts.
func TestDecaySuperadditive(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := rapid.Uint64Range(0, math.MaxUint64/2).Draw(t, "a")
		b := rapid.Uint64Range(0, math.MaxUint64/2).Draw(t, "b")
		n := rapid.Int64Range(0, 800).Draw(t, "ticks")
		if got, parts := decayed(a+b, n), decayed(a, n)+decayed(b, n); got < parts {
			t.Fatalf("decayed(%d+%d, %d) = %d < %d", a, b, n, got, parts)
		}
		if decayed(a, n) > a || (n > 0 && a > 0 && decayed(a, n) >= a) {
			t.Fatalf("decayed(%d, %d) = %d", a, n, decayed(a, n))
		}
	})
	if got := decayed(math.MaxUint64, decayTicks-1); got == 0 {
		t.Errorf("decayed to 0 before decayTicks")
	}
}

// TestSketchRate: a steady demand reads as itself after a few windows, and
// fades once it stops.
func TestSketchRate(t *testing.T) {
	clk := newFakeClock()
	s := newSketch(10*time.Second, clk.now())
	const key = 42
	for range 3000 { // 60 s of 0.02 s of prefill every 20 ms: 1 s/s
		s.add(key, 0.02, clk.now())
		clk.add(20 * time.Millisecond)
	}
	if got := s.rate(key, clk.now()); math.Abs(got-1) > 0.05 {
		t.Errorf("steady 1 s/s reads as %.3f", got)
	}
	if got := s.rate(key+1, clk.now()); got > 0.01 {
		t.Errorf("a key never added reads as %.3f", got)
	}
	clk.add(30 * time.Second)
	if got := s.rate(key, clk.now()); got > 0.06 {
		t.Errorf("three windows after it stopped, reads as %.3f", got)
	}
	clk.add(time.Hour)
	if got := s.rate(key, clk.now()); got != 0 {
		t.Errorf("an hour after it stopped, reads as %v", got)
	}
}

func TestSessionsLRU(t *testing.T) {
	s := newSessions(2)
	s.put("a", "r1")
	s.put("b", "r2")
	if r, ok := s.peek("a"); !ok || r != "r1" {
		t.Fatalf("peek(a) = %q, %v", r, ok)
	}
	// Peeking is not routing: a is still the least recently routed.
	s.put("c", "r3")
	if _, ok := s.peek("a"); ok {
		t.Error("a outlived its place")
	}
	s.put("b", "r4") // b moves to r4 and becomes the most recent
	s.put("d", "r1")
	if _, ok := s.peek("c"); ok {
		t.Error("c outlived its place")
	}
	if r, _ := s.peek("b"); r != "r4" {
		t.Errorf("b on %q, want r4", r)
	}
	if s.len() != 2 {
		t.Errorf("%d sessions kept, limit 2", s.len())
	}
}
