package fleet

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// prefillQueue is the gateway's own estimate of the prefill work waiting on
// a replica: every routed request adds its estimated prefill, the total
// drains in real time (an engine prefills one thing after another), and
// the queue counts as empty once every request on the replica has had its
// first byte, whatever the estimate says.
//
// Every decision reads the queue of every candidate, so reads take no
// lock: writers, one at a time under mu, make seq odd while they change the
// fields, and a reader retries until it saw the same even seq before and
// after reading them (a sequence lock).
type prefillQueue struct {
	mu      sync.Mutex    // serializes writers
	seq     atomic.Uint64 // odd while a writer changes the fields below
	secs    atomic.Uint64 // float64 bits: queued prefill as of at
	at      atomic.Int64  // nanoseconds since epoch
	waiting atomic.Int64  // requests still waiting for their first byte
	tokens  atomic.Int64  // their prompt tokens
}

// epoch is the origin of the queue's clock; a time with a monotonic reading
// keeps differences from it monotonic.
var epoch = time.Now()

func sinceEpoch(t time.Time) int64 { return int64(t.Sub(epoch)) }

// An Instant is a time on the prefill queues' clock. A decision reads the
// queue of every candidate at one time, and converting it once instead of
// once per replica saves a tenth of reading them.
type Instant int64

// InstantOf is t on the queues' clock.
func InstantOf(t time.Time) Instant { return Instant(sinceEpoch(t)) }

// queueState is one consistent reading of a prefillQueue.
type queueState struct {
	secs    float64
	at      int64
	waiting int64
	tokens  int64
}

// load reads the queue's fields as one writer left them.
func (q *prefillQueue) load() queueState {
	for spins := 0; ; spins++ {
		s := q.seq.Load()
		if s&1 == 0 {
			st := queueState{math.Float64frombits(q.secs.Load()), q.at.Load(), q.waiting.Load(), q.tokens.Load()}
			if q.seq.Load() == s {
				return st
			}
		}
		if spins >= 16 {
			runtime.Gosched() // the writer may have been descheduled mid-write
		}
	}
}

// store publishes st; called with mu held.
func (q *prefillQueue) store(st queueState) {
	q.seq.Add(1)
	q.secs.Store(math.Float64bits(st.secs))
	q.at.Store(st.at)
	q.waiting.Store(st.waiting)
	q.tokens.Store(st.tokens)
	q.seq.Add(1)
}

// drained is secs less the time from at to now, never below zero. Writers
// keep secs at 0 while no request waits, so that needs no test here: every
// decision drains every candidate's queue, and a branch that goes either
// way from replica to replica is mispredicted often.
func (st queueState) drained(now int64) float64 {
	return max(0, st.secs-float64(max(now-st.at, 0))*1e-9) // a multiply: Duration.Seconds divides
}

// add queues a request's estimated prefill.
func (q *prefillQueue) add(now time.Time, secs float64, tokens int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	st, t := q.load(), sinceEpoch(now)
	st.secs, st.at = st.drained(t)+secs, t
	st.waiting++
	st.tokens += tokens
	q.store(st)
}

// firstByte records that a request queued with add got its first byte (or
// ended without one).
func (q *prefillQueue) firstByte(now time.Time, tokens int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	st, t := q.load(), sinceEpoch(now)
	st.waiting--
	st.tokens -= tokens
	if st.waiting <= 0 {
		q.store(queueState{at: t})
		return
	}
	st.secs, st.at = st.drained(t), t
	q.store(st)
}

// read returns the queued prefill at now and the requests waiting with
// their tokens. Its first try at reading the fields, which almost always
// succeeds, is load's without the call: every decision reads every
// candidate's queue.
func (q *prefillQueue) read(now Instant) (secs float64, waiting, tokens int64) {
	s := q.seq.Load()
	st := queueState{math.Float64frombits(q.secs.Load()), q.at.Load(), q.waiting.Load(), q.tokens.Load()}
	if s&1 != 0 || q.seq.Load() != s {
		st = q.load()
	}
	return st.drained(int64(now)), st.waiting, st.tokens
}

// QueuedPrefill is the estimated prefill, in seconds, still ahead of a new
// request on the replica.
func (r *Replica) QueuedPrefill(now time.Time) float64 { return r.QueuedPrefillAt(InstantOf(now)) }

// QueuedPrefillAt is QueuedPrefill at an instant.
func (r *Replica) QueuedPrefillAt(now Instant) float64 {
	s, _, _ := r.prefill.read(now)
	return s
}

// PromptLoad reports the prompt tokens of requests in flight on the replica
// and of those among them still waiting for their first byte.
func (r *Replica) PromptLoad() (inFlight, waiting int64) {
	_, _, waiting = r.prefill.read(InstantOf(time.Now()))
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
