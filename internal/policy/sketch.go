package policy

import (
	"math"
	"time"
)

// A sketch counts, per key, seconds of prefill that decay with time, in
// fixed memory: a count-min sketch whose counters all shrink by 1/16 every
// window/16 (about e⁻¹ per window). A key's estimate is the least of its
// counters; every counter of a key holds at least the key's own decayed
// total, so the estimate never falls below the true count. Integer
// counters keep that exact: rounding down a decayed sum never gives less
// than the sum of the rounded-down parts, and a decay over many ticks at
// once rounds up (see decayed).
//
// The sketch is blocked: a key's keySlots counters all lie in one bucket,
// a cache line of bucketSlots counters that decay together, so counting or
// reading a key touches one line where a row per counter touched four. A
// decision counts and reads a dozen or more keys, and with a row per
// counter their lines were a quarter of its L1 misses (cachegrind, 64
// replicas). Two keys in one bucket share all their counters in
// one case out of 35, and there are 4,096 buckets: a key nobody counted
// still reads cold when a fleet prefills 30 seconds of prompts every second
// (TestSketchColdUnderLoad), where a 1,024-wide sketch with a row per
// counter read nearly every such key hot.
//
// A steady demand of r seconds of prefill per second adds up to between
// 15·r·tick (just after a tick) and 16·r·tick (just before), so rate
// divides by 15.5 ticks and reads within about 3% of r. Not safe for
// concurrent use.
type sketch struct {
	start   time.Time     // tick 0
	tick    time.Duration // window/sketchTicks
	span    float64       // seconds that a steady demand's total stands for: 15.5 ticks
	buckets []bucket      // sketchBuckets of them
}

// bucket is one cache line of counters: 64 bytes, and the buckets are one
// allocation too large for a size class, so it starts on a page.
type bucket struct {
	t int64               // the tick its counters were last brought to
	c [bucketSlots]uint64 // nanoseconds of prefill as of tick t
}

const (
	bucketBits    = 12
	sketchBuckets = 1 << bucketBits
	bucketSlots   = 7  // with the tick, 64 bytes
	keySlots      = 3  // a key's counters: slotSets has every choice of them
	sketchTicks   = 16 // ticks per window; each keeps 15/16 of a counter
	// decayTicks is enough ticks to bring any uint64 to 0:
	// (15/16)^700·2^64 < 1.
	decayTicks = 700
)

// slotSets are the ways of choosing keySlots of a bucket's counters for a
// key: every 3 of the 7.
var slotSets = func() (sets [35][keySlots]uint8) {
	n := 0
	for a := range uint8(bucketSlots) {
		for b := a + 1; b < bucketSlots; b++ {
			for c := b + 1; c < bucketSlots; c++ {
				sets[n] = [keySlots]uint8{a, b, c}
				n++
			}
		}
	}
	return sets
}()

func newSketch(window time.Duration, now time.Time) *sketch {
	tick := max(window/sketchTicks, 1)
	return &sketch{start: now, tick: tick, span: tick.Seconds() * (sketchTicks - 0.5), buckets: make([]bucket, sketchBuckets)}
}

// ticks is the tick now falls in; a clock before the sketch's start reads
// as tick 0.
func (s *sketch) ticks(now time.Time) int64 { return max(int64(now.Sub(s.start)/s.tick), 0) }

// decayed is v after n ticks (none when n <= 0). The exact decay keeps
// ⌊15v/16⌋ at each tick. decayed is exact up to fewTicks ticks; beyond, it
// takes v·(15/16)^n rounded up, in one multiply, which is never below the
// exact decay (each of whose steps rounds down) and above it by at most
// 10⁻¹¹ of it and 18 ns (TestDecayedBounds). A bucket a decision touches
// may have lain untouched for hundreds of ticks when traffic is light, and
// stepping through them cost up to half a microsecond a key. Either way
// decayed keeps order (a larger v never decays to less) and reaches 0 by
// decayTicks.
func decayed(v uint64, n int64) uint64 {
	switch {
	case n <= 0 || v == 0:
		return v
	case n >= decayTicks:
		return 0
	case n <= fewTicks:
		for ; n > 0 && v > 0; n-- {
			v -= v/sketchTicks + min(v%sketchTicks, 1) // ⌈v/16⌉, which v+15 would overflow near 2^64
		}
		return v
	}
	// The margin covers float64's rounding of v, of the factor (under
	// 10⁻¹³ after 700 multiplies) and of the product; n > fewTicks keeps
	// the product well below 2^64.
	return min(v, uint64(float64(v)*decayFactors[n]*(1+1e-12))+1)
}

// fewTicks is the most ticks decayed steps through.
const fewTicks = 4

// decayFactors[n] is (15/16)^n.
var decayFactors = func() (f [decayTicks]float64) {
	f[0] = 1
	for n := 1; n < decayTicks; n++ {
		f[n] = f[n-1] * (sketchTicks - 1) / sketchTicks
	}
	return f
}()

// locate returns key's bucket and its counters there. The bucket comes
// from keyHash's top bits, the choice of counters from the 32 below them.
func (s *sketch) locate(key uint64) (*bucket, *[keySlots]uint8) {
	h := keyHash(key)
	return &s.buckets[h>>(64-bucketBits)], &slotSets[(h<<bucketBits>>32)*uint64(len(slotSets))>>32]
}

// add counts secs of prefill for key at now.
func (s *sketch) add(key uint64, secs float64, now time.Time) {
	if q := nanos(secs); q > 0 {
		s.addAt(key, q, s.ticks(now))
	}
}

// addAt counts q > 0 nanoseconds of prefill for key at tick t: add with
// the conversions done once for the many keys of a decision. A tick before
// the bucket's (decisions a moment apart may take the policy's lock out of
// order) counts at the bucket's: the count decays a tick late, never
// early, so it stays at or above the key's own.
func (s *sketch) addAt(key, q uint64, t int64) {
	b, set := s.locate(key)
	if n := t - b.t; n > 0 {
		for i, v := range b.c {
			b.c[i] = decayed(v, n)
		}
		b.t = t
	}
	for _, i := range set {
		v := b.c[i] + q
		if v < q { // saturate rather than wrap
			v = math.MaxUint64
		}
		b.c[i] = v
	}
}

// count is key's decayed total at now in nanoseconds of prefill, never
// below the true one.
func (s *sketch) count(key uint64, now time.Time) uint64 { return s.countAt(key, s.ticks(now)) }

// countAt is count at tick t. Decay keeps order, so the least counter
// decays to the least of the decayed ones.
func (s *sketch) countAt(key uint64, t int64) uint64 {
	b, set := s.locate(key)
	return decayed(min(b.c[set[0]], b.c[set[1]], b.c[set[2]]), t-b.t)
}

// rate is key's prefill demand at now in seconds of prefill per second.
func (s *sketch) rate(key uint64, now time.Time) float64 { return s.rateAt(key, s.ticks(now)) }

// rateAt is rate at tick t.
func (s *sketch) rateAt(key uint64, t int64) float64 {
	return float64(s.countAt(key, t)) / 1e9 / s.span
}

// keyHash is the hash whose top bits place key in the sketch. Keys are
// block hashes, already well mixed, so one multiply (Fibonacci hashing) is
// enough to spread even keys that are not: a decision counts a dozen or
// more keys, and a full mix per key was a fifth of counting them.
func keyHash(key uint64) uint64 { return key * 0x9e3779b97f4a7c15 }

// nanos converts seconds to whole nanoseconds, rounding up so that no
// positive demand counts as nothing.
func nanos(secs float64) uint64 {
	if !(secs > 0) {
		return 0
	}
	if secs >= math.MaxUint64/1e9 {
		return math.MaxUint64
	}
	return uint64(math.Ceil(secs * 1e9))
}
