package fleet

import (
	"math"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferrail/inferrail/internal/clock"
	"github.com/inferrail/inferrail/internal/pace"
)

// Replica is one engine the gateway can send requests to. Its identity
// (ID, URL, Models) never changes; its caps may (SetCaps); its counters and health are atomics
// that any goroutine may read and that survive fleet changes, so a replica
// that stays in the fleet keeps them. A replica that replaces one of its
// ID and URL (the same engine, with other settings) counts its load on the
// one it replaced (see load). Must not be copied.
type Replica struct {
	// What every routing decision reads of every replica comes first, in
	// the first cache line (TestReplicaLayout): a decision reads them for
	// every replica, and one line each instead of three took a fifth of
	// the L1 misses off a 64-replica decision (cachegrind).
	maxConcurrency atomic.Int64 // 0: no cap
	maxPending     atomic.Int64 // 0: no cap
	inFlight       atomic.Int64 // requests holding a lease
	pending        atomic.Int64 // leases still waiting for a response head, but AnswersWhole ones
	ejectedUntil   atomic.Int64 // a clock.Instant; notEjected when not ejected
	probeUp        atomic.Bool  // the last probes passed
	removed        atomic.Bool  // left the fleet
	// load is the replica whose load counters (inFlight, pending,
	// promptTokens, prefill and pace) this one counts on, nil for itself:
	// the first of the replicas of its ID and URL it replaced, whose leases
	// may still run on the same engine, so that theirs and its own count
	// against one cap (see counts). Set before the replica is published;
	// never changes.
	load    *Replica
	prefill prefillQueue // estimated prefill ahead of a new request; its drainedAt is in the first line

	ID     string
	URL    *url.URL
	Models []string
	Group  string // DNS group it came from, "" for static replicas
	// KVCapacityBlocks is its KV cache size in blocks as the config sets
	// it; 0 leaves it to what the engine reports.
	KVCapacityBlocks int
	// KVEvents is where its engine publishes KV events, as the config
	// names it; zero for DNS members and replicas left to the defaults.
	KVEvents KVEvents

	promptTokens atomic.Int64 // prompt tokens of queued leases in flight

	// Passive ejection's state besides ejectedUntil.
	failStreak   atomic.Int32 // consecutive failed requests
	ejections    atomic.Int32 // ejections in a row, for the backoff exponent
	ejectedTotal atomic.Int64

	mu   sync.Mutex
	down chan struct{} // closed when the replica stops being usable; guarded by mu

	card atomic.Pointer[ModelCards]

	pace *pace.Meter // how its engine's times to first token compare with the estimates
	// probeNow asks its prober to probe at once (Health.Suspect); buffered,
	// one request at a time.
	probeNow chan struct{}
	// leases counts the leases taken on this replica itself and not yet
	// released, whichever replica's counters they count on: one that left
	// the fleet is probed until its own end, not until those of the
	// replica that replaced it on the same engine, which share its
	// counters and under steady traffic never all end.
	leases atomic.Int64

	_ [16]byte // to 320 bytes, five whole lines
}

// KVEvents names an engine's KV event sockets as configured: its PUB
// endpoint, its replay endpoint and the topic to subscribe to; empty
// fields take the gateway's defaults.
type KVEvents struct {
	Endpoint, ReplayEndpoint, Topic string
}

// ModelCards is what an engine last published on /v1/models, by model id.
type ModelCards struct {
	Fetched time.Time
	Cards   map[string][]byte // raw JSON card as the engine sent it
}

// NewReplica returns a replica that is presumed healthy until probed.
func NewReplica(id string, u *url.URL, models []string, maxConcurrency, maxPending int64) *Replica {
	r := &Replica{ID: id, URL: u, Models: slices.Clone(models)}
	r.SetCaps(maxConcurrency, maxPending)
	r.probeUp.Store(true)
	r.prefill.drainedAt.Store(neverQueued)
	r.ejectedUntil.Store(notEjected)
	r.down = make(chan struct{})
	r.pace = new(pace.Meter)
	r.probeNow = make(chan struct{}, 1)
	return r
}

// counts is the replica whose load counters r counts on: see load.
func (r *Replica) counts() *Replica {
	if r.load != nil {
		return r.load
	}
	return r
}

// carryLoad makes r, which replaces old on the same engine, count its
// load on old's counters. Call it before r is published.
func (r *Replica) carryLoad(old *Replica) { r.load = old.counts() }

// Pace is the meter of how the replica's engine has lately delivered first
// tokens against the estimates (pace.Meter); Lease.FirstToken feeds it.
func (r *Replica) Pace() *pace.Meter { return r.counts().pace }

// Serves reports whether the replica serves model.
func (r *Replica) Serves(model string) bool { return slices.Contains(r.Models, model) }

// InFlight is the number of requests holding a lease on the replica.
func (r *Replica) InFlight() int64 { return r.counts().inFlight.Load() }

// Pending is the number of leases still waiting for a response head, not
// counting those marked AnswersWhole.
func (r *Replica) Pending() int64 { return r.counts().pending.Load() }

// Healthy reports whether the last probes passed.
func (r *Replica) Healthy() bool { return r.probeUp.Load() }

// notEjected is ejectedUntil of a replica not ejected: before any instant.
const notEjected = math.MinInt64

// Ejected reports whether passive ejection keeps the replica out at now.
func (r *Replica) Ejected(now time.Time) bool { return r.ejectedAt(clock.Of(now)) }

func (r *Replica) ejectedAt(now clock.Instant) bool { return int64(now) < r.ejectedUntil.Load() }

// EjectedTotal counts passive ejections so far.
func (r *Replica) EjectedTotal() int64 { return r.ejectedTotal.Load() }

// Removed reports whether the replica has left the fleet.
func (r *Replica) Removed() bool { return r.removed.Load() }

// Usable reports whether routing may offer the replica at now: in the fleet,
// passing probes and not ejected.
func (r *Replica) Usable(now clock.Instant) bool {
	return !r.removed.Load() && r.probeUp.Load() && !r.ejectedAt(now)
}

// Down returns a channel closed once probes take the replica out (they go
// on after it left the fleet while it holds leases), so a request waiting
// on it can move elsewhere.
func (r *Replica) Down() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.down
}

// markDown closes the current down channel.
func (r *Replica) markDown() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.down:
	default:
		close(r.down)
	}
}

// markUp arms a fresh down channel.
func (r *Replica) markUp() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.down:
		r.down = make(chan struct{})
	default:
	}
}

// Cards returns the model cards the engine last published, or nil.
func (r *Replica) Cards() *ModelCards { return r.card.Load() }

// SetCards records the model cards an engine published.
func (r *Replica) SetCards(c *ModelCards) { r.card.Store(c) }

// Lease is one request's claim on a replica's capacity. Release it exactly
// once; Started marks the moment the response head arrived.
type Lease struct {
	r          *Replica
	pending    bool // counted in the replica's pending leases
	done       bool
	queued     bool    // Queue was called
	firstByte  bool    // FirstByte was called
	firstToken bool    // FirstToken was called
	tokens     int64   // prompt tokens given to Queue
	secs       float64 // estimated prefill given to Queue
	// What Expect was told: when the request was routed, the decision's
	// estimate of its time to first token and the pace it was made at.
	routedAt       time.Time
	expected, pace float64
}

// MaxConcurrency returns the cap on requests holding a lease; 0 for none.
func (r *Replica) MaxConcurrency() int64 { return r.maxConcurrency.Load() }

// MaxPending returns the cap on leases waiting for a response head; 0 for
// none.
func (r *Replica) MaxPending() int64 { return r.maxPending.Load() }

// SetCaps changes the caps. The leases held stay and count against the
// new caps: lowered below them, the replica takes no more until enough
// end. The config changes them live on the replica it keeps, rather than
// replacing it with one whose counts start at zero.
func (r *Replica) SetCaps(maxConcurrency, maxPending int64) {
	r.maxConcurrency.Store(maxConcurrency)
	r.maxPending.Store(maxPending)
}

// TryAcquire takes a lease if the replica has room under both caps. Caps
// are never overshot, even when many goroutines race for the last slot.
func (r *Replica) TryAcquire() (*Lease, bool) {
	ld := r.counts()
	for {
		n := ld.inFlight.Load()
		if c := r.maxConcurrency.Load(); c > 0 && n >= c {
			return nil, false
		}
		if ld.inFlight.CompareAndSwap(n, n+1) {
			break
		}
	}
	for {
		p := ld.pending.Load()
		if c := r.maxPending.Load(); c > 0 && p >= c {
			ld.inFlight.Add(-1)
			return nil, false
		}
		if ld.pending.CompareAndSwap(p, p+1) {
			r.leases.Add(1)
			return &Lease{r: r, pending: true}, true
		}
	}
}

// HasRoom reports whether a lease would currently be granted.
func (r *Replica) HasRoom() bool {
	c, p := r.maxConcurrency.Load(), r.maxPending.Load()
	ld := r.counts()
	return (c <= 0 || ld.inFlight.Load() < c) && (p <= 0 || ld.pending.Load() < p)
}

// Replica returns the leased replica.
func (l *Lease) Replica() *Replica { return l.r }

// Started records that the response head arrived: the request no longer
// counts as pending.
func (l *Lease) Started() { l.unpend() }

// AnswersWhole marks the lease of a request that does not stream, whose
// response head the engine sends only with the whole answer: waiting for
// it is generating, not an engine that stopped answering, so the lease
// stops counting against max_pending. It still counts against
// max_concurrency, and max_pending still keeps it off a replica whose
// streams' heads are not coming.
func (l *Lease) AnswersWhole() { l.unpend() }

func (l *Lease) unpend() {
	if l.pending && !l.done {
		l.pending = false
		l.r.counts().pending.Add(-1)
	}
}

// Release gives the lease back. Calling it again does nothing.
func (l *Lease) Release() {
	if l.done {
		return
	}
	l.unpend()
	if l.queued {
		l.FirstByte(time.Now())
		l.r.counts().promptTokens.Add(-l.tokens)
	}
	l.done = true
	l.r.counts().inFlight.Add(-1)
	l.r.leases.Add(-1)
}
