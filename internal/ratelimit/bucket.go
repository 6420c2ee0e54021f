package ratelimit

import (
	"fmt"
	"sync"
	"time"
)

// Rate is a limit of Limit units (requests or tokens) per Period. A bucket
// of this rate holds up to Limit units and refills at Limit per Period.
type Rate struct {
	Limit  int64
	Period time.Duration
}

// PerMinute is a rate of n per minute.
func PerMinute(n int64) Rate { return Rate{Limit: n, Period: time.Minute} }

// MaxPerMinute is the largest limit of a per-minute rate: ten billion.
const MaxPerMinute = 10_000_000_000

// maxUnits bounds a bucket's capacity in units, so that no sum of a level
// and a take overflows an int64.
const maxUnits = 1 << 61

// Check reports why r cannot make a bucket, or nil: the period must be
// 1µs to 1h, the limit at least 1 and, with the period, within what the
// fixed point can hold (MaxPerMinute for a minute).
func (r Rate) Check() error {
	switch {
	case r.Period < time.Microsecond || r.Period > time.Hour:
		return fmt.Errorf("period %v: must be between 1µs and 1h", r.Period)
	case r.Limit < 1:
		return fmt.Errorf("limit %d: must be at least 1", r.Limit)
	case r.Limit > maxUnits/int64(r.Period/time.Microsecond):
		return fmt.Errorf("limit %d: must be at most %d per %v", r.Limit, maxUnits/int64(r.Period/time.Microsecond), r.Period)
	}
	return nil
}

// Bucket is a token bucket of one Rate. It starts full. Safe for
// concurrent use.
type Bucket struct {
	rate Rate
	unit int64 // units per token: the period in microseconds
	full int64 // units in a full bucket: rate.Limit·unit
	maxN int64 // the most tokens one call moves; larger counts are clamped

	mu    sync.Mutex
	level int64     // units, from -full (one full bucket in debt) to full; guarded by mu
	last  time.Time // the instant level is up to date for, on a whole microsecond from the start; guarded by mu
}

// NewBucket returns a full bucket of rate r as of now. It panics when r
// fails Check.
func NewBucket(r Rate, now time.Time) *Bucket {
	if err := r.Check(); err != nil {
		panic("ratelimit: " + err.Error())
	}
	unit := int64(r.Period / time.Microsecond)
	b := &Bucket{rate: r, unit: unit, full: r.Limit * unit, maxN: maxUnits / unit, last: now}
	b.level = b.full
	return b
}

// Rate returns the bucket's rate.
func (b *Bucket) Rate() Rate { return b.rate }

// refill brings the level up to date for now, a whole number of
// microseconds after the last update. Time that goes backwards is ignored.
func (b *Bucket) refill(now time.Time) {
	e := int64(now.Sub(b.last) / time.Microsecond)
	if e <= 0 {
		return
	}
	b.last = b.last.Add(time.Duration(e) * time.Microsecond)
	room := b.full - b.level // at most 2·maxUnits: no overflow
	if e >= room/b.rate.Limit+1 {
		b.level = b.full
		return
	}
	b.level = min(b.level+e*b.rate.Limit, b.full)
}

func (b *Bucket) clamp(n int64) int64 { return max(0, min(n, b.maxN)) }

// Fits reports whether n tokens can ever be admitted: whether a full
// bucket holds them.
func (b *Bucket) Fits(n int64) bool { return n <= b.rate.Limit }

// Admit takes n tokens when the bucket holds max(n, 1) of them: a count of
// 0 (an output budget checked before the output exists) still needs the
// bucket out of debt. Otherwise it takes nothing and says how long until
// it would admit n. A count over what the bucket holds when full is never
// admitted (see Fits); its wait is until the bucket is full.
func (b *Bucket) Admit(now time.Time, n int64) (ok bool, wait time.Duration) {
	ok, wait, _, _ = b.admit(now, n)
	return ok, wait
}

// admit is Admit that also returns State's answer after it, under one
// lock.
func (b *Bucket) admit(now time.Time, n int64) (ok bool, wait time.Duration, remaining int64, reset time.Duration) {
	n = b.clamp(n)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	if wait, ok = b.shortfall(now, n); ok {
		b.level -= n * b.unit
	}
	return ok, wait, max(b.level, 0) / b.unit, b.until(now, b.full)
}

// Wait returns how long until Admit(n) would succeed, 0 if it would now,
// without taking anything.
func (b *Bucket) Wait(now time.Time, n int64) time.Duration {
	n = b.clamp(n)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	wait, _ := b.shortfall(now, n)
	return wait
}

// shortfall reports whether n tokens (clamped) fit the bucket now and,
// when they do not, how long until they would. Fitting needs max(n, 1)
// tokens' worth, so that a count of 0 still needs the bucket out of debt.
// The caller holds mu and has refilled.
func (b *Bucket) shortfall(now time.Time, n int64) (wait time.Duration, ok bool) {
	need := max(n, 1) * b.unit
	if n <= b.rate.Limit && b.level >= need {
		return 0, true
	}
	return b.until(now, min(need, b.full)), false
}

// until is the time from now until the level reaches target units; a now
// before the last update counts as that update's time. Guarded by mu; the
// level is up to date.
func (b *Bucket) until(now time.Time, target int64) time.Duration {
	deficit := target - b.level
	if deficit <= 0 {
		return 0
	}
	// At most two full buckets below full (Charge bounds the debt): two
	// periods of at most an hour, far within a Duration.
	micros := (deficit + b.rate.Limit - 1) / b.rate.Limit
	if now.Before(b.last) {
		now = b.last
	}
	return b.last.Add(time.Duration(micros) * time.Microsecond).Sub(now)
}

// Charge takes n tokens whether or not the bucket holds them, going into
// debt if it must, but never deeper than one full bucket: what a charge
// would take past that is forgiven. So a bucket in debt admits again
// within two periods, however many requests settled into it at once.
func (b *Bucket) Charge(now time.Time, n int64) {
	n = b.clamp(n)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	b.level = max(b.level-n*b.unit, -b.full)
}

// Refund gives n tokens back, up to a full bucket.
func (b *Bucket) Refund(now time.Time, n int64) {
	n = b.clamp(n)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	b.level = min(b.level+n*b.unit, b.full)
}

// State returns the whole tokens the bucket holds (0 in debt) and how
// long until it is full again.
func (b *Bucket) State(now time.Time) (remaining int64, reset time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	return max(b.level, 0) / b.unit, b.until(now, b.full)
}

// used returns the units taken from a full bucket, as of now.
func (b *Bucket) used(now time.Time) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	return b.full - b.level
}

// isFull reports whether the bucket is full as of now, when it says
// nothing a new bucket would not.
func (b *Bucket) isFull(now time.Time) bool { return b.used(now) == 0 }
