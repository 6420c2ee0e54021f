package gateway

// Flow control. With flow.max_queued, a request that finds every replica
// serving its model at its guards (or, with a TTFT target, none whose
// estimate meets it) waits in its model's queue instead of getting 503:
// the queue (package flowqueue) orders waiters by priority class and,
// within a class, fairly between keys, and bounds them per model, class
// and key. While a model's queue holds anyone, new requests join it, so
// none overtakes its turn (under fair sharing, one whose key is under its
// share and would be served first anyway starts at once; see startNow).
// A dispatcher goroutine per model, running only while its queue is not
// empty, routes the head as soon as a replica frees (an attempt lets its
// lease go or gets its response head) or every flowTick, deciding with
// the load of that moment. A waiter whose
// deadline passes (the request's timeout, flow.max_wait, or the last
// moment an idle replica could still meet its TTFT target) is shed with
// 429; a client that leaves takes its place out at once.

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferrail/inferrail/internal/auth"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/fairshare"
	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/flowqueue"
)

// flowTick is how often a dispatcher looks at its queue without being
// woken: for a replica that joined, an estimate that fell as queued
// prefill drained, or a deadline.
const flowTick = 10 * time.Millisecond

// errQueueLeft is a queued request whose client left.
var errQueueLeft = errors.New("the client left while its request waited")

// flowControl holds every model's queue.
type flowControl struct {
	queues  map[string]*modelQueue // by model name; fixed at start, as the models are
	metrics *flowMetrics
}

// modelQueue is one model's waiting requests and its dispatcher.
type modelQueue struct {
	model string
	kickc chan struct{} // a wake-up for the dispatcher; holds at most one
	// waiting is the queue's length, readable without mu: the request path
	// reads it on every request of a model with flow control.
	waiting atomic.Int64

	mu      sync.Mutex
	q       *flowqueue.Queue[*waiter] // guarded by mu
	fair    *fairshare.Table          // the keys sharing the slots; guarded by mu
	running bool                      // a dispatcher runs; guarded by mu

	holds prefillHolds // the keys' prompts awaiting their first token, for pacing
}

// waiter is one queued request. The dispatcher decides it under the
// queue's lock (sets lease and cached, or err) and closes done.
type waiter struct {
	ex     *exchange
	tried  map[*fleet.Replica]bool // a retry's replicas tried already, offered last; nil on a first attempt
	entry  flowqueue.Entry[*waiter]
	sloEnd bool // its deadline is its TTFT target's, not its timeout's
	done   chan struct{}
	lease  *fleet.Lease
	cached int
	err    error
}

func newFlowControl(cfg *config.Config, reg prometheus.Registerer) *flowControl {
	fc := &flowControl{queues: map[string]*modelQueue{}, metrics: newFlowMetrics(reg)}
	for _, m := range cfg.Models {
		mq := &modelQueue{model: m.Name, kickc: make(chan struct{}, 1)}
		mq.q = flowqueue.New[*waiter](len(auth.Classes), queueLimits(&cfg.Flow))
		mq.fair = fairshare.New(len(auth.Classes), time.Duration(cfg.Flow.FairShareWindow))
		fc.queues[m.Name] = mq
	}
	return fc
}

// queueLimits are the queue's bounds under a flow config.
func queueLimits(f *config.Flow) flowqueue.Limits {
	return flowqueue.Limits{Max: f.MaxQueued, Class: f.ClassMaxQueued.List(), Key: f.KeyMaxQueued}
}

// apply sets every queue's bounds to a new generation's. What waits
// stays, even past smaller bounds; only later requests are refused.
func (fc *flowControl) apply(gen *generation) {
	lim := queueLimits(&gen.cfg.Flow)
	for _, mq := range fc.queues {
		mq.mu.Lock()
		mq.q.SetLimits(lim)
		mq.fair.SetWindow(time.Duration(gen.cfg.Flow.FairShareWindow))
		mq.mu.Unlock()
	}
}

// kick wakes the model's dispatcher if anyone waits. Cheap enough for
// every lease let go.
func (mq *modelQueue) kick() {
	if mq == nil || mq.waiting.Load() == 0 {
		return
	}
	select {
	case mq.kickc <- struct{}{}:
	default:
	}
}

// enter decides the first attempt of a request: at once while nobody
// waits and a replica takes it, else through the queue. Without flow
// control and a TTFT target it is choose. While others wait, a request
// joins them, unless fair sharing would serve it before all of them
// (startNow).
func (g *Gateway) enter(ex *exchange) (*fleet.Lease, int, error) {
	fl := &ex.gen.cfg.Flow
	if !fl.Enabled() && ex.adm.target <= 0 {
		return g.choose(ex, nil)
	}
	mq := g.flow.queues[ex.model]
	g.arrive(ex, mq)
	if g.startNow(ex, mq) {
		lease, cached, err := g.choose(ex, nil)
		if err != nil {
			mq.unacquired(ex) // the slot it took in the fair share, given back unused
			g.countPaced(ex)
		}
		switch {
		case err == nil:
			return lease, cached, nil
		case errors.Is(err, errSLOUnreachable):
			return nil, -1, g.shed(ex, shedSLOUnreachable)
		case !fl.Enabled() && errors.Is(err, errSLOWait):
			return nil, -1, g.shed(ex, shedSLOUnmet)
		case !fl.Enabled() || !waits(err):
			return nil, -1, err
		}
	}
	return g.wait(ex, mq, nil)
}

// shedEarly sheds a request whose place in the queue is taken before any
// work is spent on it (tokenizing its prompt, charging its limits): while
// others wait for its model and the queue, its class or its key is full,
// it would be shed when it joined. A flood past its key's bound thus costs
// the gateway little more than reading its body. A request fair sharing
// would start ahead of the waiters (startNow) joins no queue, so it is
// not shed: a flood that fills the queue would otherwise turn away the
// quiet keys whose shares sit free, and the room kept for them stay idle.
func (g *Gateway) shedEarly(ex *exchange) error {
	if !ex.gen.cfg.Flow.Enabled() {
		return nil
	}
	mq := g.flow.queues[ex.model]
	if mq.waiting.Load() == 0 {
		return nil
	}
	mq.mu.Lock()
	err := mq.q.Check(ex.adm.class.Index(), ex.adm.key)
	mq.mu.Unlock()
	if err != nil && !g.startsAhead(ex.gen, ex.model, ex.adm) {
		return g.shed(ex, shedReason(err))
	}
	return nil
}

// shedReason names the bound of the queue that refused a request.
func shedReason(err error) string {
	switch {
	case errors.Is(err, flowqueue.ErrClassFull):
		return shedClassFull
	case errors.Is(err, flowqueue.ErrKeyFull):
		return shedKeyFull
	}
	return shedQueueFull
}

// waits reports whether a request refused for err may wait for room.
func waits(err error) bool { return errors.Is(err, errFleetFull) || errors.Is(err, errSLOWait) }

// shed counts a request flow control turns away and returns its refusal.
func (g *Gateway) shed(ex *exchange, reason string) error {
	g.flow.metrics.shed.WithLabelValues(ex.model, ex.adm.class.String(), reason).Inc()
	return shed(reason, ex.adm, time.Since(ex.arrived))
}

// wait queues the request and waits until the dispatcher decides it or
// its client leaves. A retry passes the replicas it tried, which the
// dispatcher offers last, as choose does.
func (g *Gateway) wait(ex *exchange, mq *modelQueue, tried map[*fleet.Replica]bool) (*fleet.Lease, int, error) {
	if a := ex.adm; a.target > 0 && !a.priced {
		// It joins others without having been priced: its deadline needs
		// the idle floor, priced without a cache prediction.
		if err := a.judge(ex.gen.cost[ex.model], &ex.route, nil, ex.arrived, time.Now()); errors.Is(err, errSLOUnreachable) {
			return nil, -1, g.shed(ex, shedSLOUnreachable)
		}
	}
	w := &waiter{ex: ex, tried: tried, done: make(chan struct{})}
	w.entry = flowqueue.Entry[*waiter]{Value: w, Class: ex.adm.class.Index(), Key: ex.adm.key, Deadline: ex.deadline}
	// flow.max_wait bounds the time spent queued, over all of a request's
	// waits (a retry may queue again), not the time since arrival.
	if mw := time.Duration(ex.gen.cfg.Flow.MaxWait); mw > 0 && time.Now().Add(mw-ex.queuedFor).Before(w.entry.Deadline) {
		w.entry.Deadline = time.Now().Add(mw - ex.queuedFor)
	}
	if by := ex.adm.latestStart(ex.arrived); !by.IsZero() && by.Before(w.entry.Deadline) {
		if !by.After(time.Now()) { // even an idle replica freed now is too late
			return nil, -1, g.shed(ex, shedSLOUnreachable)
		}
		w.entry.Deadline, w.sloEnd = by, true
	}
	class := ex.adm.class.String()
	mq.mu.Lock()
	if err := mq.q.Push(&w.entry); err != nil {
		mq.mu.Unlock()
		return nil, -1, g.shed(ex, shedReason(err))
	}
	mq.waiting.Store(int64(mq.q.Len()))
	g.flow.metrics.queued.WithLabelValues(ex.model, class).Inc()
	g.flow.metrics.waiting.WithLabelValues(ex.model, class).Inc()
	if !mq.running {
		mq.running = true
		go mq.dispatch(g)
	}
	mq.mu.Unlock()
	mq.kick() // room may have freed since choose found none
	since := time.Now()
	outcome := "admitted"
	leave := func(why error) {
		mq.mu.Lock()
		if mq.q.Remove(&w.entry) {
			mq.waiting.Store(int64(mq.q.Len()))
			w.err = why
			close(w.done)
		}
		mq.mu.Unlock()
		<-w.done // decided by now: under the lock, by the dispatcher or here
	}
	select {
	case <-w.done:
	case <-ex.r.Context().Done():
		leave(errQueueLeft)
	case <-g.stopping:
		leave(refusedShutdown)
	}
	switch {
	case errors.Is(w.err, errQueueLeft):
		outcome = "cancelled"
	case w.err != nil:
		outcome = "shed"
	}
	ex.queuedFor += time.Since(since)
	g.flow.metrics.waiting.WithLabelValues(ex.model, class).Dec()
	g.flow.metrics.wait.WithLabelValues(ex.model, class, outcome).Observe(time.Since(since).Seconds())
	return w.lease, w.cached, w.err
}

// dispatch is a model's dispatcher: it decides the queue's head whenever
// woken or every flowTick, and ends once the queue is empty.
func (mq *modelQueue) dispatch(g *Gateway) {
	t := time.NewTicker(flowTick)
	defer t.Stop()
	for {
		select {
		case <-mq.kickc:
		case <-t.C:
		}
		if !g.dispatchOnce(mq) {
			return
		}
	}
}

// dispatchOnce sheds the waiters whose deadline passed, then routes
// waiters in queue order while a replica takes the head: those of keys
// owed a slot first (fairshare.Table.Owed), then those of keys under their
// fair share of slots, then those of keys that may borrow one
// (fairshare.Table.Allowed). A waiter whose key is paced, or whose TTFT
// target no replica with room meets yet, is passed over, and its key's
// later waiters with it, until the next pass. It reports
// whether anyone still waits; when not, the dispatcher is marked stopped
// under the same lock a new waiter checks it under.
func (g *Gateway) dispatchOnce(mq *modelQueue) bool {
	mq.mu.Lock()
	defer mq.mu.Unlock()
	for _, e := range mq.q.Expire(time.Now()) {
		w := e.Value
		reason := shedQueueTimeout
		if w.sloEnd {
			reason = shedSLOUnreachable
		}
		w.err = g.shed(w.ex, reason)
		close(w.done)
	}
	gen, now := g.current(), time.Now()
	slots := 0
	if gen.cfg.Flow.FairShare() {
		slots = g.slots(gen, mq.model, now)
	}
	// Keys whose waiter waits for something other than a free replica:
	// every replica with room held by its key's pacing, or none whose
	// estimate meets its TTFT target yet. Each is tried once a pass.
	var skip map[fairshare.Flow]bool
	for e := mq.next(slots, now, skip); e != nil; e = mq.next(slots, now, skip) {
		w := e.Value
		f := flowOf(w.ex.adm)
		// A retry (it has tried a replica) is never paced, queued or not:
		// it has waited once already.
		w.ex.pace = len(w.tried) == 0 && mq.pacedLocked(w.ex.gen, f, slots, 1, now)
		lease, cached, err := g.choose(w.ex, w.tried)
		if err != nil && waits(err) {
			if !w.ex.pace && !errors.Is(err, errSLOWait) {
				break // no replica has room: nobody behind it goes either
			}
			g.countPaced(w.ex)
			// Its key may be paced where others are not, and others'
			// requests may have no target or a looser one: they go on.
			if skip == nil {
				skip = map[fairshare.Flow]bool{}
			}
			skip[f] = true
			continue
		}
		mq.q.Take(e)
		switch {
		case err == nil:
			w.lease, w.cached = lease, cached
			mq.acquired(w.ex)
		case errors.Is(err, errSLOUnreachable):
			w.err = g.shed(w.ex, shedSLOUnreachable)
		default:
			w.err = err
		}
		close(w.done)
	}
	n := mq.q.Len()
	mq.waiting.Store(int64(n))
	if n == 0 {
		mq.running = false
	}
	return n > 0
}

// next returns the waiter the dispatcher serves next with slots slots at
// now, from the most important class with a waiter: of keys owed a slot
// for the share they left unused over time first, then of keys under their
// share now, each in the queue's order; then of keys past it that may
// borrow a slot free beyond the others' headroom; never of a flow in
// skip. Nil when no waiter of that class may take a slot: a less
// important class does not take a slot its betters wait for, or one kept
// for their quiet keys. Call it under mq.mu.
func (mq *modelQueue) next(slots int, now time.Time, skip map[fairshare.Flow]bool) *flowqueue.Entry[*waiter] {
	first := mq.q.Peek()
	if first == nil {
		return nil
	}
	top := first.Class
	owed, under := mq.preferred(slots, now)
	allowed := func(c int, key string) bool {
		return mq.fair.Allowed(fairshare.Flow{Class: c, Key: key}, slots, now)
	}
	for _, ok := range [...]func(int, string) bool{owed, under, allowed} {
		if e := mq.q.PeekFunc(func(c int, key string) bool {
			return c == top && !skip[fairshare.Flow{Class: c, Key: key}] && ok(c, key)
		}); e != nil {
			return e
		}
	}
	return nil
}

// flowMetrics are the families of flow control and SLO admission.
type flowMetrics struct {
	queued  *prometheus.CounterVec
	waiting *prometheus.GaugeVec
	wait    *prometheus.HistogramVec
	shed    *prometheus.CounterVec
	slo     *prometheus.CounterVec
	fairMetrics
}

func newFlowMetrics(reg prometheus.Registerer) *flowMetrics {
	m := &flowMetrics{
		fairMetrics: newFairMetrics(),
		queued:      counterVec("inferrail_flow_queued_total", "Requests that waited in the gateway's queue for a replica, by model and priority class.", "model", "class"),
		waiting:     gaugeVec("inferrail_flow_waiting", "Requests waiting in the gateway's queue now, by model and priority class.", "model", "class"),
		wait:        histogramVec("inferrail_flow_queue_wait_seconds", "Time requests waited in the gateway's queue, by model, priority class and outcome: admitted, shed or cancelled.", []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}, "model", "class", "outcome"),
		shed:        counterVec("inferrail_flow_shed_total", "Requests flow control answered 429, by model, priority class and reason: queue_full, class_full, key_full, queue_timeout, slo_unreachable, slo_unmet.", "model", "class", "reason"),
		slo:         counterVec("inferrail_slo_requests_total", "Admitted requests with a TTFT target whose first byte of a 2xx answer came (an engine's error answer counts in neither result), by model, priority class and result: met when it came within the target (counted from arrival, queueing included), else missed.", "model", "class", "result"),
	}
	reg.MustRegister(m.queued, m.waiting, m.wait, m.shed, m.slo, m.overShare, m.paced)
	return m
}

// firstByte records whether a request with a TTFT target met it, when
// the first byte is of an engine's 2xx answer: an error's is no token, and
// counting it met would let a refused request pass for a served one.
func (fc *flowControl) firstByte(ex *exchange, status int, ttft time.Duration) {
	if ex.adm == nil || ex.adm.target <= 0 || status/100 != 2 {
		return
	}
	result := "met"
	if ttft > ex.adm.target {
		result = "missed"
	}
	fc.metrics.slo.WithLabelValues(ex.model, ex.adm.class.String(), result).Inc()
}
