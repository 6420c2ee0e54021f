package policy

import (
	"math"
	"time"
)

// A sketch counts, per key, seconds of prefill that decay with time, in
// fixed memory: a count-min sketch whose counters all shrink by 1/16 every
// window/16 (about e⁻¹ per window). A key's estimate is the least of its
// counters, one per row; every counter of a key holds at least the key's
// own decayed total, so the estimate never falls below the true count.
// Integer counters keep that exact: rounding down a decayed sum never gives
// less than the sum of the rounded-down parts.
//
// A steady demand of r seconds of prefill per second adds up to between
// 15·r·tick (just after a tick) and 16·r·tick (just before), so rate
// divides by 15.5 ticks and reads within about 3% of r. Not safe for concurrent
// use.
type sketch struct {
	start time.Time     // tick 0
	tick  time.Duration // window/sketchTicks
	span  float64       // seconds that a steady demand's total stands for: 15.5 ticks
	rows  [sketchRows][sketchWidth]counter
}

const (
	sketchRows  = 4
	sketchWidth = 1 << columnBits
	columnBits  = 10 // sketchRows·columnBits ≤ 64: the rows share one hash
	sketchTicks = 16 // ticks per window; each keeps 15/16 of a counter
	// decayTicks is enough ticks to bring any uint64 to 0:
	// (15/16)^700·2^64 < 1.
	decayTicks = 700
)

// counter is nanoseconds of prefill as of tick t.
type counter struct {
	v uint64
	t int64
}

func newSketch(window time.Duration, now time.Time) *sketch {
	tick := max(window/sketchTicks, 1)
	return &sketch{start: now, tick: tick, span: tick.Seconds() * (sketchTicks - 0.5)}
}

// ticks is the tick now falls in; a clock before the sketch's start reads
// as tick 0.
func (s *sketch) ticks(now time.Time) int64 { return max(int64(now.Sub(s.start)/s.tick), 0) }

// decayed is v after n ticks: each keeps ⌊15v/16⌋.
func decayed(v uint64, n int64) uint64 {
	if n >= decayTicks {
		return 0
	}
	for ; n > 0 && v > 0; n-- {
		v -= (v + sketchTicks - 1) / sketchTicks
	}
	return v
}

// at is c's value at tick t (never before its last update).
func (c counter) at(t int64) uint64 { return decayed(c.v, t-c.t) }

// add counts secs of prefill for key at now.
func (s *sketch) add(key uint64, secs float64, now time.Time) {
	if q := nanos(secs); q > 0 {
		s.addAt(key, q, s.ticks(now))
	}
}

// addAt counts q > 0 nanoseconds of prefill for key at tick t: add with
// the conversions done once for the many keys of a decision.
func (s *sketch) addAt(key, q uint64, t int64) {
	h := keyHash(key)
	for r := range s.rows {
		s.rows[r][column(h, r)].add(q, t)
	}
}

// add counts q nanoseconds of prefill at tick t (never before its last
// update).
func (c *counter) add(q uint64, t int64) {
	v := c.v
	if c.t != t { // usually it was updated in this tick already
		v = c.at(t)
	}
	c.v, c.t = v+q, t
	if c.v < v { // saturate rather than wrap
		c.v = math.MaxUint64
	}
}

// count is key's decayed total at now in nanoseconds of prefill, never
// below the true one.
func (s *sketch) count(key uint64, now time.Time) uint64 { return s.countAt(key, s.ticks(now)) }

// countAt is count at tick t.
func (s *sketch) countAt(key uint64, t int64) uint64 {
	least := uint64(math.MaxUint64)
	h := keyHash(key)
	for r := range s.rows {
		least = min(least, s.rows[r][column(h, r)].at(t))
	}
	return least
}

// rate is key's prefill demand at now in seconds of prefill per second.
func (s *sketch) rate(key uint64, now time.Time) float64 { return s.rateAt(key, s.ticks(now)) }

// rateAt is rate at tick t.
func (s *sketch) rateAt(key uint64, t int64) float64 {
	return float64(s.countAt(key, t)) / 1e9 / s.span
}

// keyHash is the hash whose disjoint high bits give key's column in each
// row. Keys are block hashes, already well mixed, so one multiply
// (Fibonacci hashing) is enough to spread even keys that are not: a
// decision counts some 30 keys, and a full mix per key was a fifth of
// counting them.
func keyHash(key uint64) uint64 { return key * 0x9e3779b97f4a7c15 }

// column is the column in row r of the key whose keyHash is h.
func column(h uint64, r int) uint64 { return h >> (64 - (r+1)*columnBits) & (sketchWidth - 1) }

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
