package fleet

import (
	"sync"
	"time"
)

// prefillQueue is the gateway's own estimate of the prefill work waiting on
// a replica: every routed request adds its estimated prefill, the total
// drains in real time (an engine prefills one thing after another), and
// the queue counts as empty once every request on the replica has had its
// first byte, whatever the estimate says.
type prefillQueue struct {
	mu      sync.Mutex
	secs    float64   // queued prefill as of at; guarded by mu
	at      time.Time // guarded by mu
	waiting int64     // requests still waiting for their first byte; guarded by mu
	tokens  int64     // their prompt tokens; guarded by mu
}

// add queues a request's estimated prefill.
func (q *prefillQueue) add(now time.Time, secs float64, tokens int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.secs = q.drained(now) + secs
	q.at = now
	q.waiting++
	q.tokens += tokens
}

// firstByte records that a request queued with add got its first byte (or
// ended without one).
func (q *prefillQueue) firstByte(now time.Time, tokens int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.waiting--
	q.tokens -= tokens
	if q.waiting <= 0 {
		q.waiting, q.tokens, q.secs, q.at = 0, 0, 0, now
		return
	}
	q.secs = q.drained(now)
	q.at = now
}

// drained is secs less the time since at, never below zero. Called with mu held.
func (q *prefillQueue) drained(now time.Time) float64 {
	if q.waiting == 0 {
		return 0
	}
	return max(0, q.secs-max(0, now.Sub(q.at).Seconds()))
}

func (q *prefillQueue) read(now time.Time) (secs float64, waiting, tokens int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.drained(now), q.waiting, q.tokens
}

// QueuedPrefill is the estimated prefill, in seconds, still ahead of a new
// request on the replica.
func (r *Replica) QueuedPrefill(now time.Time) float64 {
	s, _, _ := r.prefill.read(now)
	return s
}

// PromptLoad reports the prompt tokens of requests in flight on the replica
// and of those among them still waiting for their first byte.
func (r *Replica) PromptLoad() (inFlight, waiting int64) {
	_, _, waiting = r.prefill.read(time.Now())
	return r.promptTokens.Load(), waiting
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
	l.r.prefill.add(now, secs, l.tokens)
}

// FirstByte records that the response's first byte arrived: the request
// no longer holds up the replica's prefill queue.
func (l *Lease) FirstByte(now time.Time) {
	if !l.queued || l.firstByte {
		return
	}
	l.firstByte = true
	l.r.prefill.firstByte(now, l.tokens)
}
