// Package clock is the time routing's hot paths compare and subtract with
// integer instructions: an Instant is nanoseconds since the process
// started, taken from a time.Time's monotonic reading when it has one. A
// decision converts its clock reading once, then reads every replica's
// prefill queue and engine report against it: converting a time.Time for
// each of them was a tenth of a decision at 64 replicas.
package clock

import "time"

// An Instant is a time on the clock, within ±Limit.
type Instant int64

// Limit bounds instants and the durations added to them (2^61 ns, 73
// years), so that adding one to the other and subtracting two never
// overflows an int64.
const Limit = 1 << 61

var epoch = time.Now()

// Of is t on the clock.
func Of(t time.Time) Instant { return Instant(clamp(t.Sub(epoch))) }

// Add is i moved by d, d taken within ±Limit.
func (i Instant) Add(d time.Duration) Instant { return i + Instant(clamp(d)) }

func clamp(d time.Duration) time.Duration { return min(max(d, -Limit), Limit) }
