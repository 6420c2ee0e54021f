package ratelimit

import (
	"context"
	"sync"
	"time"
)

// Kind is what a bucket counts.
type Kind uint8

// Kinds of buckets.
const (
	Requests     Kind = iota // requests
	PromptTokens             // prompt tokens, taken when a request is admitted
	OutputTokens             // generated tokens, charged when the response ends
)

func (k Kind) String() string {
	switch k {
	case Requests:
		return "requests"
	case PromptTokens:
		return "prompt_tokens"
	case OutputTokens:
		return "output_tokens"
	}
	return "unknown"
}

// Scope is whose budget a bucket holds.
type Scope uint8

// Scopes of buckets.
const (
	ScopeKey   Scope = iota // one API key's, across models
	ScopeModel              // one model's, across keys
)

func (s Scope) String() string {
	if s == ScopeModel {
		return "model"
	}
	return "key"
}

// ID names a bucket. It is comparable, so it keys a map without building
// a string per request; a shared store would write it as
// "<scope>/<name>/<kind>".
type ID struct {
	Scope Scope
	Name  string // the key's or the model's name
	Kind  Kind
}

func (id ID) String() string { return id.Scope.String() + "/" + id.Name + "/" + id.Kind.String() }

// Limit names the bucket's kind within its scope, as metrics label it:
// "key_requests", "model_prompt_tokens" and so on.
func (id ID) Limit() string { return id.Scope.String() + "_" + id.Kind.String() }

// Cost is what one request takes from one bucket.
type Cost struct {
	ID   ID
	Rate Rate
	N    int64

	// Remaining and Reset are the bucket's state after the call (whole
	// tokens left, time until full), set by Admit, Charge and Refund.
	Remaining int64
	Reset     time.Duration
}

// Verdict is Admit's answer.
type Verdict struct {
	// OK is true when every cost was taken.
	OK bool
	// Denied is the index of the cost that keeps the request out longest;
	// -1 when OK.
	Denied int
	// Wait is how long until every cost could be taken; 0 when OK.
	Wait time.Duration
	// Never is true when Denied's N is more than its bucket holds when
	// full, so that waiting cannot help.
	Never bool
}

// Limiter keeps named buckets and takes costs from them. Local keeps them
// in this process. A limiter shared by several gateways implements the same
// three calls against a shared store (Redis, with one script per call that
// runs GCRA or a token bucket over every ID it is given, atomically), and
// may fail: the gateway then admits the request and counts the error.
//
// Only Admit sets a bucket's rate. Charge and Refund settle a request
// after the fact with the rate it was admitted under, which a reload may
// have changed since: they keep the bucket's rate, and a cost's Rate only
// makes a bucket that is gone.
type Limiter interface {
	// Admit takes every cost or none: each bucket must hold max(N, 1).
	Admit(ctx context.Context, now time.Time, costs []Cost) (Verdict, error)
	// Charge takes every cost, into debt if need be, but no bucket
	// deeper than one full bucket.
	Charge(ctx context.Context, now time.Time, costs []Cost) error
	// Refund gives every cost back, each bucket up to full.
	Refund(ctx context.Context, now time.Time, costs []Cost) error
}

// Local is a Limiter in process memory: limits hold per gateway instance.
// A bucket is made on first use, full. When an admission names a bucket
// with another rate (a limit was changed), the bucket takes the new rate
// and keeps the tokens used. Buckets that are full, and so say nothing, are
// swept when the map has doubled since the last sweep, so buckets of keys
// no longer configured do not pile up. Safe for concurrent use.
type Local struct {
	mu      sync.RWMutex
	buckets map[ID]*Bucket // guarded by mu
	swept   int            // len(buckets) after the last sweep; guarded by mu
}

// NewLocal returns an empty Local.
func NewLocal() *Local { return &Local{buckets: map[ID]*Bucket{}} }

var _ Limiter = (*Local)(nil)

// minSweep is the map size below which Local never sweeps.
const minSweep = 1024

// bucket returns the bucket id names at rate r, making it if needed.
func (l *Local) bucket(id ID, r Rate, now time.Time) *Bucket { return l.lookup(id, r, now, true) }

// held returns the bucket id names at whatever rate it has, making it at
// rate r only when there is none: what a settle after the fact uses.
func (l *Local) held(id ID, r Rate, now time.Time) *Bucket { return l.lookup(id, r, now, false) }

// lookup returns the bucket id names, made at rate r when there is none
// and, when setRate, remade at rate r when it has another.
func (l *Local) lookup(id ID, r Rate, now time.Time, setRate bool) *Bucket {
	l.mu.RLock()
	b := l.buckets[id]
	l.mu.RUnlock()
	if b != nil && (b.rate == r || !setRate) {
		return b
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.buckets[id]
	if old != nil && (old.rate == r || !setRate) {
		return old
	}
	if n := len(l.buckets); old == nil && n >= minSweep && n >= 2*l.swept {
		l.sweep(now)
	}
	b = NewBucket(r, now)
	if old != nil && old.unit == b.unit {
		// What was used stays used, but a lowered limit owes no more than
		// a charge could: one full bucket at the new rate.
		b.level = max(b.full-old.used(now), -b.full)
	}
	l.buckets[id] = b
	return b
}

// sweep drops every full bucket. Guarded by mu.
func (l *Local) sweep(now time.Time) {
	for id, b := range l.buckets {
		if b.isFull(now) {
			delete(l.buckets, id)
		}
	}
	l.swept = len(l.buckets)
}

// Len returns the number of buckets held.
func (l *Local) Len() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.buckets)
}

// Admit implements Limiter. Costs are taken in order; when one is refused
// those taken before it are refunded, so a refused request leaves every
// bucket as it found it (but for refill).
func (l *Local) Admit(_ context.Context, now time.Time, costs []Cost) (Verdict, error) {
	for i := range costs {
		c := &costs[i]
		if c.N > c.Rate.Limit {
			v := Verdict{Denied: i, Never: true}
			l.states(now, costs)
			v.Wait = costs[i].Reset
			return v, nil
		}
	}
	for i := range costs {
		c := &costs[i]
		var ok bool
		if ok, _, c.Remaining, c.Reset = l.bucket(c.ID, c.Rate, now).admit(now, c.N); ok {
			continue
		}
		for j := range i {
			l.bucket(costs[j].ID, costs[j].Rate, now).Refund(now, costs[j].N)
		}
		v := Verdict{Denied: -1}
		for j := range costs {
			if w := l.bucket(costs[j].ID, costs[j].Rate, now).Wait(now, costs[j].N); w > v.Wait {
				v.Wait, v.Denied = w, j
			}
		}
		if v.Denied < 0 { // refilled in between: the refused one is the one to name
			v.Denied = i
		}
		l.states(now, costs)
		return v, nil
	}
	return Verdict{OK: true, Denied: -1}, nil
}

// states sets every cost's Remaining and Reset.
func (l *Local) states(now time.Time, costs []Cost) {
	for i := range costs {
		c := &costs[i]
		c.Remaining, c.Reset = l.bucket(c.ID, c.Rate, now).State(now)
	}
}

// Charge implements Limiter.
func (l *Local) Charge(_ context.Context, now time.Time, costs []Cost) error {
	l.each(now, costs, (*Bucket).Charge)
	return nil
}

// Refund implements Limiter.
func (l *Local) Refund(_ context.Context, now time.Time, costs []Cost) error {
	l.each(now, costs, (*Bucket).Refund)
	return nil
}

// each applies op (Charge or Refund) to every cost's bucket and sets the
// cost's Remaining and Reset after it. It never changes a bucket's rate:
// a request admitted before a reload lowered a limit would put the old
// rate back, and with it a fresh budget over the debt the new one holds.
func (l *Local) each(now time.Time, costs []Cost, op func(b *Bucket, now time.Time, n int64)) {
	for i := range costs {
		c := &costs[i]
		b := l.held(c.ID, c.Rate, now)
		op(b, now, c.N)
		c.Remaining, c.Reset = b.State(now)
	}
}
