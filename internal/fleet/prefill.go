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
	// waitingNanos is the estimated prefill of the requests still waiting,
	// whole: what drainedAt would say if none of them had started. Beside
	// drainedAt, in the replica's first cache line, as decisions read both.
	waitingNanos atomic.Int64
	waiting      atomic.Int64 // requests still waiting for their first byte
	tokens       atomic.Int64 // their prompt tokens
	mu           sync.Mutex   // serializes writers
	// queuedTotal counts every request ever queued. With waiting, read
	// before and after a scrape, it bounds how many of the requests an
	// engine reports waiting the gateway sent (Unanswered).
	queuedTotal atomic.Int64
	meanSecs    atomic.Uint64 // float64 bits: queued requests' prefill, averaged with meanWeight
}

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

// add queues a request's estimated prefill and returns the nanoseconds it
// added to waitingNanos, which its firstByte takes away again.
func (q *prefillQueue) add(now time.Time, secs float64, tokens int64) (waitingNanos int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	// The queue resumes from now once it has drained.
	from := max(q.drainedAt.Load(), int64(clock.Of(now)))
	n := queuedNanos(secs)
	q.drainedAt.Store(min(from+n, queueLimit))
	// Bounded like drainedAt, so that the sum never wraps; what a request
	// added is what it takes away, so the sum stays exact below the bound.
	waitingNanos = min(n, queueLimit-q.waitingNanos.Load())
	q.waitingNanos.Add(waitingNanos)
	q.waiting.Add(1)
	q.tokens.Add(tokens)
	mean := secs
	if q.queuedTotal.Add(1) > 1 {
		mean = math.Float64frombits(q.meanSecs.Load())
		mean += meanWeight * (max(secs, 0) - mean)
	}
	q.meanSecs.Store(math.Float64bits(max(mean, 0)))
	return waitingNanos
}

// firstByte records that a request queued with add got its first byte (or
// ended without one): its prompt tokens and the nanoseconds add returned
// for it no longer wait.
func (q *prefillQueue) firstByte(now time.Time, tokens, waitingNanos int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.waiting.Add(-1) > 0 {
		q.tokens.Add(-tokens)
		q.waitingNanos.Add(-waitingNanos)
		return
	}
	// Nothing waits: the queue is empty from now on.
	q.drainedAt.Store(min(q.drainedAt.Load(), int64(clock.Of(now))))
	q.waiting.Store(0)
	q.tokens.Store(0)
	q.waitingNanos.Store(0)
}

// queued is the prefill, in seconds, still queued at now.
func (q *prefillQueue) queued(now clock.Instant) float64 {
	return float64(max(q.drainedAt.Load()-int64(now), 0)) * 1e-9 // a multiply: Duration.Seconds divides
}

// QueuedPrefill is the estimated prefill, in seconds, still ahead of a new
// request on the replica.
func (r *Replica) QueuedPrefill(now time.Time) float64 { return r.QueuedPrefillAt(clock.Of(now)) }

// QueuedPrefillAt is QueuedPrefill at an instant.
func (r *Replica) QueuedPrefillAt(now clock.Instant) float64 { return r.prefill.queued(now) }

// WaitingPrefill is the estimated prefill, in seconds, of the requests the
// gateway queued on the replica that still wait for their first byte, each
// counted whole. QueuedPrefill drains in real time at the estimates' speed;
// an engine slower than estimated (one past its KV cache's edge, where
// requests wait for blocks rather than for compute) is left with requests
// waiting after its queue reads empty, and this still counts them.
func (r *Replica) WaitingPrefill() float64 { return float64(r.prefill.waitingNanos.Load()) * 1e-9 }

// Unanswered reports how many requests the gateway queued on the replica
// still wait for their first byte, and how many it has queued in all. Read
// before and after an engine's page, they bound how many of the requests
// the engine reports waiting are the gateway's own: at most the first
// waiting count plus the requests queued in between.
func (r *Replica) Unanswered() (waiting, queued int64) {
	return r.prefill.waiting.Load(), r.prefill.queuedTotal.Load()
}

// MeanPrefill is the estimated prefill, in seconds, of the requests lately
// queued on the replica, on average; 0 before the first.
func (r *Replica) MeanPrefill() float64 { return math.Float64frombits(r.prefill.meanSecs.Load()) }

// PromptLoad reports the prompt tokens of requests in flight on the replica
// and of those among them still waiting for their first byte.
func (r *Replica) PromptLoad() (inFlight, waiting int64) {
	return r.promptTokens.Load(), r.prefill.tokens.Load()
}

// Queue adds the lease's request to its replica's prefill queue: secs of
// estimated prefill for a prompt of tokens tokens. Call it at most once,
// before FirstByte and Release.
func (l *Lease) Queue(now time.Time, secs float64, tokens int) {
	if l.queued || l.done {
		return
	}
	l.queued, l.tokens = true, int64(tokens)
	l.r.promptTokens.Add(l.tokens)
	l.waitingNanos = l.r.prefill.add(now, secs, l.tokens)
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
	l.r.pace.Observe(base, now.Sub(l.routedAt).Seconds(), now)
}

// FirstByte records that the response's first byte arrived: the request
// no longer holds up the replica's prefill queue.
func (l *Lease) FirstByte(now time.Time) {
	if !l.queued || l.firstByte {
		return
	}
	l.firstByte = true
	l.r.prefill.firstByte(now, l.tokens, l.waitingNanos)
}
