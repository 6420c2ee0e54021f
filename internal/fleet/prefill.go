package fleet

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferrail/inferrail/internal/clock"
)

// prefillQueue is the gateway's own estimate of the prefill work waiting on
// a replica: every routed request adds its estimated prefill, the total
// drains in real time (an engine prefills one thing after another), and
// the queue counts as empty once every request on the replica has had its
// first byte, whatever the estimate says.
//
// Every decision reads the queue of every candidate, so the queue is kept
// as the instant it will have drained by: one word that a reader loads
// without a lock, and turns into seconds with a subtraction. Writers, one
// at a time under mu, keep the counts of waiting requests beside it.
type prefillQueue struct {
	drainedAt atomic.Int64 // a clock.Instant; a queue that never held anything drains by neverQueued
	waiting   atomic.Int64 // requests still waiting for their first byte
	tokens    atomic.Int64 // their prompt tokens
	mu        sync.Mutex   // serializes writers
	// queuedTotal counts every request ever queued. With waiting, read
	// before and after a scrape, it bounds how many of the requests an
	// engine reports waiting the gateway sent (Unanswered).
	queuedTotal atomic.Int64
	meanSecs    atomic.Uint64 // float64 bits: queued requests' prefill, averaged with meanWeight
	// waitingNanos is the estimated prefill of the requests still waiting
	// for their first byte, summed in whole nanoseconds (each request's
	// capped by maxWaitingNanos): integers, so no rounding drifts and no
	// infinite estimate poisons the sum.
	waitingNanos atomic.Int64
}

// maxWaitingNanos caps one request's part of waitingNanos: an hour of
// prefill is past any real one, and a million of them still fit.
const maxWaitingNanos = int64(time.Hour)

// meanWeight is the weight of each new request in meanSecs: the mean
// follows about the last 16 requests.
const meanWeight = 1.0 / 16

// A queue drains by an instant within ±queueLimit: an instant plus a queued
// duration, each within ±clock.Limit, stays within it, and subtracting an
// instant from it never overflows.
const (
	queueLimit  = 2 * clock.Limit
	neverQueued = -queueLimit // before any instant
)

// queuedNanos is secs of prefill in whole nanoseconds, at most clock.Limit.
func queuedNanos(secs float64) int64 {
	if !(secs > 0) {
		return 0
	}
	return int64(min(math.Round(secs*1e9), clock.Limit))
}

// add queues a request's estimated prefill, secs, which holds the engine
// for occupy seconds of real time.
func (q *prefillQueue) add(now time.Time, secs, occupy float64, tokens int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	// The queue resumes from now once it has drained.
	from := max(q.drainedAt.Load(), int64(clock.Of(now)))
	q.drainedAt.Store(min(from+queuedNanos(occupy), queueLimit))
	q.waiting.Add(1)
	q.tokens.Add(tokens)
	// Averages and sums take the estimate capped, so that an infinite
	// or NaN one cannot turn them NaN for good.
	nanos := min(queuedNanos(secs), maxWaitingNanos)
	q.waitingNanos.Add(nanos)
	mean := float64(nanos) * 1e-9
	if q.queuedTotal.Add(1) > 1 {
		prev := math.Float64frombits(q.meanSecs.Load())
		mean = prev + meanWeight*(mean-prev)
	}
	q.meanSecs.Store(math.Float64bits(max(mean, 0)))
}

// firstByte records that a request queued with add got its first byte (or
// ended without one).
func (q *prefillQueue) firstByte(now time.Time, tokens int64, secs float64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.waiting.Add(-1) > 0 {
		q.tokens.Add(-tokens)
		q.waitingNanos.Add(-min(queuedNanos(secs), maxWaitingNanos))
		return
	}
	// Nothing waits: the queue is empty from now on.
	q.drainedAt.Store(min(q.drainedAt.Load(), int64(clock.Of(now))))
	q.waiting.Store(0)
	q.tokens.Store(0)
	q.waitingNanos.Store(0)
}

// queued is the prefill, in real seconds, still queued at now.
func (q *prefillQueue) queued(now clock.Instant) float64 {
	return float64(max(q.drainedAt.Load()-int64(now), 0)) * 1e-9 // a multiply: Duration.Seconds divides
}

// QueuedPrefill is the prefill, in real seconds, still ahead of a new
// request on the replica: each queued request's estimate at the pace it was
// routed with.
func (r *Replica) QueuedPrefill(now time.Time) float64 { return r.QueuedPrefillAt(clock.Of(now)) }

// QueuedPrefillAt is QueuedPrefill at an instant.
func (r *Replica) QueuedPrefillAt(now clock.Instant) float64 { return r.counts().prefill.queued(now) }

// Unanswered reports how many requests the gateway queued on the replica
// still wait for their first byte, and how many it has queued in all. Read
// before and after an engine's page, they bound how many of the requests
// the engine reports waiting are the gateway's own: at most the first
// waiting count plus the requests queued in between.
func (r *Replica) Unanswered() (waiting, queued int64) {
	q := &r.counts().prefill
	return q.waiting.Load(), q.queuedTotal.Load()
}

// MeanPrefill is the estimated prefill, in seconds, of the requests lately
// queued on the replica, on average; 0 before the first.
func (r *Replica) MeanPrefill() float64 {
	return math.Float64frombits(r.counts().prefill.meanSecs.Load())
}

// WaitingMeanPrefill is the estimated prefill, in seconds, of the requests
// on the replica still waiting for their first byte, on average; while none
// waits, MeanPrefill. Unlike MeanPrefill it moves when requests are
// answered, not only when new ones come: a replica the gateway stops
// sending to is not priced by the requests it had long ago.
func (r *Replica) WaitingMeanPrefill() float64 {
	// The two words are read apart: a writer between them can make the
	// quotient a request off, which a price can bear.
	q := &r.counts().prefill
	w := q.waiting.Load()
	if w <= 0 {
		return r.MeanPrefill()
	}
	return float64(max(q.waitingNanos.Load(), 0)) * 1e-9 / float64(w)
}

// PromptLoad reports the prompt tokens of requests in flight on the replica
// and of those among them still waiting for their first byte.
func (r *Replica) PromptLoad() (inFlight, waiting int64) {
	c := r.counts()
	return c.promptTokens.Load(), c.prefill.tokens.Load()
}

// Queue adds the lease's request to its replica's prefill queue: secs of
// estimated prefill for a prompt of tokens tokens, on an engine whose pace
// is pace (0 for none). Call it at most once, before FirstByte and Release.
//
// The queue drains in real time, and an engine at pace 3 takes three
// seconds for each one estimated: drained at the estimate's speed, a
// request would stop counting long before its engine is through with it,
// and the next would be sent after it as if the engine were free.
func (l *Lease) Queue(now time.Time, secs, pace float64, tokens int) {
	if l.queued || l.done {
		return
	}
	l.queued, l.tokens, l.secs = true, int64(tokens), secs
	l.r.counts().promptTokens.Add(l.tokens)
	if !(pace > 0) || math.IsInf(pace, 1) {
		pace = 1
	}
	l.r.counts().prefill.add(now, secs, secs*pace, l.tokens)
}

// Expect records the routing decision's estimate, made at now, of the
// request's time to first token on the replica: expected seconds, with the
// replica's pace at pace (0 when the decision used none). Call it at most
// once, before FirstToken.
func (l *Lease) Expect(now time.Time, expected, pace float64) {
	if !(expected > 0) || math.IsInf(expected, 0) {
		return
	}
	l.routedAt, l.expected, l.pace = now, expected, pace
}

// Expected is the estimate Expect recorded; 0 without one.
func (l *Lease) Expected() float64 { return l.expected }

// FirstToken records that the response's first token arrived at now, in a
// streamed response (whose first byte is its first token's, where a whole
// answer's first byte is its last): the replica's pace learns how long it
// took against the estimate without the pace. Only the first call counts.
func (l *Lease) FirstToken(now time.Time) {
	if l.firstToken || l.expected == 0 {
		return
	}
	l.firstToken = true
	base := l.expected
	if l.pace > 0 {
		base /= l.pace
	}
	l.r.counts().pace.Observe(base, now.Sub(l.routedAt).Seconds(), now)
}

// FirstByte records that the response's first byte arrived: the request
// no longer holds up the replica's prefill queue.
func (l *Lease) FirstByte(now time.Time) {
	if !l.queued || l.firstByte {
		return
	}
	l.firstByte = true
	l.r.counts().prefill.firstByte(now, l.tokens, l.secs)
}
