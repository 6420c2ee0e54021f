// Package pace learns how an engine's times to first token compare with
// what the cost model estimated for them: its pace, measured over
// estimated. Engines drift (a slower GPU, a noisy neighbour, a model
// served with other settings), and a cost model fitted once prices them
// all alike; the router multiplies each engine's estimates by its pace, so
// one that has been delivering slower than estimated is priced slower.
//
// A Meter keeps exponentially decayed sums of the two times, so its pace
// is a ratio of sums (long requests weigh more than short ones, whose
// times are mostly fixed overheads) over the last HalfLife or so. Until
// the samples' decayed count reaches priorSamples, samples of their mean
// estimate at pace 1 fill the rest, so a few requests cannot swing a fresh
// or long idle meter, whatever the engine's speed; samples age between
// requests too, when the pace is read for a decision. Each sample's
// measured time is clamped to [Min, Max] times its estimate, so one
// request stuck behind a preemption cannot swing it. Reading the pace is
// mostly one atomic load: a routing decision reads every candidate's.
package pace

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferrail/inferrail/internal/clock"
)

const (
	// HalfLife is how long a sample takes to count half as much.
	HalfLife = 30 * time.Second
	// Min and Max bound a pace, and each sample's measured over estimated.
	Min, Max = 0.25, 4.0
	// priorSamples is the decayed count of samples below which pace 1
	// makes up the rest of the weight.
	priorSamples = 8.0
)

// staleAfter is how long a pace read for a decision may go without being
// aged: an engine that gets no requests has its samples age all the same,
// back toward pace 1, so one slow answer does not price it out of every
// later decision (it would get no request to correct it with).
const staleAfter = time.Second

// A Meter learns one engine's pace. The zero value is ready: pace 1.
type Meter struct {
	pace atomic.Uint64 // math.Float64bits of the pace; 0 until the first sample
	// noise is math.Float64bits of the pace's standard error; 0 while the
	// samples' decayed count is under two.
	noise atomic.Uint64
	aged  atomic.Int64 // the clock.Instant the sums were last decayed to

	mu                  sync.Mutex // guards the sums
	measured, estimated float64    // decayed sums of seconds
	count               float64    // decayed count of samples
	ratios, squares     float64    // decayed sums of each sample's measured over estimated, and of its square
	at                  clock.Instant
	seen                bool // a sample came: at holds
}

// Pace returns the engine's pace as of its last sample or ageing: 1 until
// a sample says otherwise.
func (m *Meter) Pace() float64 {
	if b := m.pace.Load(); b != 0 {
		return math.Float64frombits(b)
	}
	return 1
}

// PaceAt returns the engine's pace at the instant at, its samples aged to
// it when they were last aged more than staleAfter before (its noise
// too): one atomic load and a comparison otherwise.
func (m *Meter) PaceAt(at clock.Instant) float64 {
	b := m.pace.Load()
	if b == 0 {
		return 1
	}
	if at-clock.Instant(m.aged.Load()) > clock.Instant(staleAfter) {
		m.mu.Lock()
		m.decay(at)
		m.update()
		m.mu.Unlock()
		if b = m.pace.Load(); b == 0 {
			return 1 // its samples were forgotten
		}
	}
	return math.Float64frombits(b)
}

// Noise returns the standard error of the pace: how far apart two
// engines' paces may be by chance alone. Infinite while the meter has
// fewer than two samples' worth.
func (m *Meter) Noise() float64 {
	if b := m.noise.Load(); b != 0 {
		return math.Float64frombits(b)
	}
	return math.Inf(1)
}

// Observe adds a request whose first token was estimated to take estimated
// seconds and took measured, seen at now. Samples that are not positive
// finite times are ignored.
func (m *Meter) Observe(estimated, measured float64, now time.Time) {
	if !(estimated > 0 && measured > 0) || math.IsInf(estimated, 0) || math.IsInf(measured, 0) {
		return
	}
	measured = min(max(measured, estimated*Min), estimated*Max)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.decay(clock.Of(now))
	m.measured += measured
	m.estimated += estimated
	m.count++
	r := measured / estimated
	m.ratios += r
	m.squares += r * r
	m.update()
}

// decay ages the sums to at; an earlier instant than the last changes
// nothing. m.mu is held.
func (m *Meter) decay(at clock.Instant) {
	if m.seen && at > m.at {
		f := math.Exp2(-time.Duration(at-m.at).Seconds() / HalfLife.Seconds())
		m.measured, m.estimated, m.count = m.measured*f, m.estimated*f, m.count*f
		m.ratios, m.squares = m.ratios*f, m.squares*f
	}
	if !m.seen || at > m.at {
		m.at, m.seen = at, true
	}
	m.aged.Store(int64(m.at))
}

// forgotten is the decayed count below which a meter's samples are dropped:
// aged on reads alone, the sums of an engine unread for 9 hours underflowed
// to 0, and the pace to 0/0, NaN, which every later decision then read.
const forgotten = 1e-6

// update stores the pace and its noise from the sums. m.mu is held.
func (m *Meter) update() {
	if !(m.count >= forgotten && m.estimated > 0) {
		m.measured, m.estimated, m.count, m.ratios, m.squares = 0, 0, 0, 0, 0
		m.noise.Store(0)
		m.pace.Store(0) // pace 1, as before any sample
		return
	}
	if m.count >= 2 {
		mean := m.ratios / m.count
		// The spread of the samples' ratios over the root of their
		// count; a spread rounded below zero is none. Stored never 0,
		// which means no estimate yet.
		se := math.Sqrt(max(m.squares/m.count-mean*mean, 0) / m.count)
		m.noise.Store(math.Float64bits(max(se, math.SmallestNonzeroFloat64)))
	} else {
		m.noise.Store(0)
	}
	fill := max(priorSamples-m.count, 0) * m.estimated / m.count
	p := (m.measured + fill) / (m.estimated + fill)
	m.pace.Store(math.Float64bits(min(max(p, Min), Max)))
}
