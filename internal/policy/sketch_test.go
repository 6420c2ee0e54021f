package policy

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"pgregory.net/rapid"

	"github.com/inferrail/inferrail/internal/blockhash"
)

// exactCount is one key's decayed total, counted alone: the reference the
// sketch's estimates are checked against.
type exactCount struct {
	v uint64
	t int64 // the tick v is as of
}

// add counts q at tick t, or at the count's own tick if t is before it.
func (c exactCount) add(q uint64, t int64) exactCount {
	t = max(t, c.t)
	return exactCount{v: exactDecay(c.v, t-c.t) + q, t: t}
}

func (c exactCount) at(t int64) uint64 { return exactDecay(c.v, t-c.t) }

// exactDecay is v after n ticks, each keeping ⌊15v/16⌋ (in 128 bits).
func exactDecay(v uint64, n int64) uint64 {
	for ; n > 0 && v > 0; n-- {
		hi, lo := bits.Mul64(v, sketchTicks-1)
		v = hi<<60 | lo>>4
	}
	return v
}

// TestSketchNeverUnderestimates checks the sketch against an exact count
// per key, decayed the same way, over streams of thousands of keys (so
// that counters collide) at random times, some counted a little late (as
// when decisions take the policy's lock out of order).
func TestSketchNeverUnderestimates(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		clk := newFakeClock()
		window := time.Duration(rapid.Int64Range(int64(time.Millisecond), int64(time.Minute)).Draw(t, "window"))
		s := newSketch(window, clk.now())
		exact := map[uint64]exactCount{}
		keys := rapid.IntRange(1, 60000).Draw(t, "keys")
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
			at := clk.now()
			if r.IntN(4) == 0 {
				at = at.Add(-time.Duration(r.ExpFloat64() * float64(window) / 20))
			}
			s.add(k, secs, at)
			exact[k] = exact[k].add(nanos(secs), s.ticks(at))
			check(k)
			check(mix64(uint64(r.IntN(keys))))
			clk.add(time.Duration(r.ExpFloat64() * float64(window) / 200))
		}
		for k := range exact {
			check(k)
		}
	})
}

// TestSketchColdUnderLoad: under the traffic of a large fleet, keys that
// were never counted read far below any utilization worth replicating
// for. 120 requests a second, each 0.25 s of prefill (30 s of prefill a
// second, a 64-replica fleet half busy with prefill), each counted at 17
// keys: 8 prefixes of one of 16 shared system prompts and 9 of its own.
func TestSketchColdUnderLoad(t *testing.T) {
	clk := newFakeClock()
	s := newSketch(10*time.Second, clk.now())
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 30 * 120 { // 30 s
		sys := uint64(r.IntN(16))
		for k := range uint64(17) {
			key := mix64(uint64(i)<<8 | k)
			if k < 8 {
				key = mix64(1<<60 | sys<<8 | k)
			}
			s.add(key, 0.25, clk.now())
		}
		clk.add(time.Second / 120)
	}
	var rates []float64
	for j := range uint64(20000) {
		rates = append(rates, s.rate(mix64(1<<62|j), clk.now()))
	}
	slices.Sort(rates)
	// A quarter of the default utilization at p99: a 1,024-wide sketch
	// with a row per counter read 0.30 s/s here, and 0.80 s/s with a key
	// every 16 blocks of the prompt.
	limit := DefaultSettings().HotPrefix.Utilization / 4
	if p50, p99 := rates[len(rates)/2], rates[len(rates)*99/100]; p50 > limit/4 || p99 > limit {
		t.Errorf("keys never counted read %.3f s/s at the median and %.3f at p99", p50, p99)
	}
	if got := s.rate(mix64(1<<60|3<<8), clk.now()); math.Abs(got-30.0/16) > 0.25 {
		t.Errorf("a shared prefix reads %.3f s/s, want about %.3f", got, 30.0/16)
	}
}

// TestBucketIsACacheLine: the layout the sketch's speed rests on.
func TestBucketIsACacheLine(t *testing.T) {
	if n := unsafe.Sizeof(bucket{}); n != 64 {
		t.Errorf("a bucket is %d bytes", n)
	}
	seen := map[[keySlots]uint8]bool{}
	for _, set := range slotSets {
		if seen[set] || set[0] >= set[1] || set[1] >= set[2] || set[2] >= bucketSlots {
			t.Errorf("slot set %v repeated or out of order", set)
		}
		seen[set] = true
	}
}

// TestDecaySuperadditive: decaying a sum never gives less than the decayed
// parts, which is why a shared counter never falls below its keys' counts.
func TestDecaySuperadditive(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := rapid.Uint64Range(0, math.MaxUint64/2).Draw(t, "a")
		b := rapid.Uint64Range(0, math.MaxUint64/2).Draw(t, "b")
		n := rapid.Int64Range(0, 800).Draw(t, "ticks")
		if got, parts := exactDecay(a+b, n), exactDecay(a, n)+exactDecay(b, n); got < parts {
			t.Fatalf("exactDecay(%d+%d, %d) = %d < %d", a, b, n, got, parts)
		}
		if exactDecay(a, n) > a || (n > 0 && a > 0 && exactDecay(a, n) >= a) {
			t.Fatalf("exactDecay(%d, %d) = %d", a, n, exactDecay(a, n))
		}
	})
	// decayTicks is enough, and not much more than enough.
	if got := exactDecay(math.MaxUint64, decayTicks); got != 0 {
		t.Errorf("decayTicks leave %d", got)
	}
	if got := exactDecay(math.MaxUint64, decayTicks-100); got == 0 {
		t.Errorf("decayed to 0 100 ticks before decayTicks")
	}
}

// TestDecayedBounds: the sketch's decay is the exact one over a few ticks,
// never below it over more, never above the value, and above the exact
// decay by at most 10⁻¹¹ of it and 18 ns; larger values never decay to
// less.
func TestDecayedBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := rapid.OneOf(rapid.Uint64(), rapid.Uint64Range(0, 1<<40), rapid.Uint64Range(0, 100)).Draw(t, "v")
		w := rapid.Uint64Range(v, math.MaxUint64).Draw(t, "w")
		n := rapid.Int64Range(-2, decayTicks+10).Draw(t, "ticks")
		got, exact := decayed(v, n), exactDecay(v, n)
		switch {
		case n <= fewTicks && got != exact:
			t.Fatalf("decayed(%d, %d) = %d, exactly %d", v, n, got, exact)
		case got < exact || got > v:
			t.Fatalf("decayed(%d, %d) = %d, outside [%d, %d]", v, n, got, exact, v)
		case float64(got-exact) > float64(exact)*1e-11+18:
			t.Fatalf("decayed(%d, %d) = %d, %d above the exact decay", v, n, got, got-exact)
		case decayed(w, n) < got:
			t.Fatalf("decayed(%d, %d) = %d < decayed(%d, %d) = %d", w, n, decayed(w, n), v, n, got)
		}
	})
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

// TestLastReplicasModel checks the table against a naive LRU list under
// random puts and peeks.
func TestLastReplicasModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.IntRange(1, 5).Draw(t, "limit")
		tab := newLastReplicas[int](limit)
		type entry struct{ key, replica int }
		var model []entry // most recently put first
		for range rapid.IntRange(0, 60).Draw(t, "ops") {
			key := rapid.IntRange(0, 8).Draw(t, "key")
			if rapid.Bool().Draw(t, "put") {
				rep := rapid.IntRange(0, 3).Draw(t, "replica")
				tab.put(key, fmt.Sprint("r", rep))
				model = slices.DeleteFunc(model, func(e entry) bool { return e.key == key })
				model = append([]entry{{key, rep}}, model...)
				model = model[:min(len(model), limit)]
			}
			got, ok := tab.peek(key)
			i := slices.IndexFunc(model, func(e entry) bool { return e.key == key })
			if ok != (i >= 0) || (ok && got != fmt.Sprint("r", model[i].replica)) {
				t.Fatalf("peek(%d) = %q, %v; the model holds %v", key, got, ok, model)
			}
			if tab.len() != len(model) {
				t.Fatalf("%d keys kept, the model %d", tab.len(), len(model))
			}
		}
	})
}

// TestLastReplicasFullAllocatesNothing: once full, a new key takes the
// oldest one's place without allocating.
func TestLastReplicasFullAllocatesNothing(t *testing.T) {
	tab := newHistories(64)
	for i := range 64 {
		tab.put(blockhash.Hash{Lo: uint64(i)}, "r0")
	}
	next := uint64(64)
	if n := testing.AllocsPerRun(1000, func() {
		tab.put(blockhash.Hash{Lo: next}, "r1")
		next++
	}); n != 0 {
		t.Errorf("a put into a full table allocates %.1f times", n)
	}
	if tab.len() != 64 {
		t.Errorf("%d kept, limit 64", tab.len())
	}
}
