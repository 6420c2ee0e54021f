package gateway

// Fair sharing of slots (flow.fair_share_window). A model's in-flight
// slots are its usable replicas' max_concurrency, summed. While several
// keys are active (package fairshare), a request whose key (in its class)
// already holds its share of them in flight waits in the queue even while
// a slot is free, and the dispatcher passes over such keys' waiters: a key
// that floods is held to its share, and the room it leaves lets any other
// active key start at once instead of waiting for a flooder's request to
// end. Queue order alone cannot give that: it decides who takes the next
// free slot, but the next slot frees only when some request ends, and a
// fleet full of one key's requests frees them as they end, often all at
// once. Shares are kept over time too: a key that used less than its
// share lately is served first, and keeps room for the bursts it made
// (fairshare's Credit).

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferrail/inferrail/internal/auth"
	"github.com/inferrail/inferrail/internal/clock"
	"github.com/inferrail/inferrail/internal/fairshare"
)

// flowOf is who a request is fair-shared as.
func flowOf(a *admission) fairshare.Flow {
	return fairshare.Flow{Class: a.class.Index(), Key: a.key}
}

// slots returns the model's in-flight slots in generation gen at now: the
// max_concurrency of its usable replicas, summed; 0 when one of them has
// no bound, or none is usable (nothing is then held back for fairness).
// The requests still running on replicas that are not usable (ejected,
// failing probes) or that left the fleet count as slots too: the fair
// share table counts them in flight, and without them a key's request
// waited for a share of slots those requests do not hold (found by a
// review: a 429 while a usable replica sat idle).
func (g *Gateway) slots(gen *generation, model string, now time.Time) int {
	at := clock.Of(now)
	n := int64(0)
	table := g.routes(gen)
	routes := table.model(model).routes
	usable := false
	for _, r := range table.snap.Departed(model) {
		n += r.InFlight()
	}
	for i := range routes {
		rt := &routes[i]
		if !rt.Usable(at) {
			n += rt.InFlight()
			continue
		}
		usable = true
		c := rt.MaxConcurrency()
		if c <= 0 {
			return 0
		}
		n += c
	}
	if !usable {
		return 0
	}
	return int(n)
}

// arrive records a request entering flow control under fair sharing.
// Without fair sharing it does nothing.
func (g *Gateway) arrive(ex *exchange, mq *modelQueue) {
	if !ex.gen.cfg.Flow.FairShare() {
		return
	}
	now := time.Now()
	mq.mu.Lock()
	mq.fair.Arrive(flowOf(ex.adm), now)
	ex.fair = true
	mq.mu.Unlock()
}

// heldByShare counts a request that waits because of fair sharing in
// inferrail_flow_over_share_total: a slot was free and its key could not
// have it (fairshare.Table.Held; on a full fleet it waits for room, not
// for its share). It is counted where its start is refused, under the
// lock that decides it: checked at arrival, requests of one key arriving
// together all saw the slots their siblings were about to take as free.
func (g *Gateway) heldByShare(ex *exchange) {
	g.flow.metrics.overShare.WithLabelValues(ex.model, ex.adm.class.String()).Inc()
}

// take takes one of the request's key's share of slots if it may have
// one now, and reports whether it did; checking and taking under one lock,
// so that requests of one key arriving together cannot all pass. A request
// fair sharing does not know always may.
func (g *Gateway) take(ex *exchange, mq *modelQueue) bool {
	if !ex.fair {
		return true
	}
	now := time.Now()
	slots := g.slots(ex.gen, ex.model, now)
	mq.mu.Lock()
	defer mq.mu.Unlock()
	f := flowOf(ex.adm)
	return g.settleStart(ex, mq, f, slots, now, mq.fair.Allowed(f, slots, now))
}

// startNow reports whether a request entering flow control may try the
// replicas at once rather than join the queue, and if so takes its slot in
// the fair share: when nobody waits and its key may have a slot, or, while
// others wait, when its key is owed a slot (fairshare.Table.Owed) or under
// its share and no waiter's key comes as early in the dispatcher's order
// (owed keys, then keys under their share, then the rest). The dispatcher
// would serve such a request before them all anyway; queueing it would
// only add the dispatcher's turn to its wait.
func (g *Gateway) startNow(ex *exchange, mq *modelQueue) bool {
	if mq.waiting.Load() == 0 || !ex.gen.cfg.Flow.Enabled() {
		// With flow control off (a request with a TTFT target comes here
		// too) there is no queue to join, even while requests queued
		// before it was turned off still wait.
		return g.take(ex, mq)
	}
	if !ex.fair {
		return false
	}
	now := time.Now()
	slots := g.slots(ex.gen, ex.model, now)
	owed, under := mq.preferred(slots, now)
	f := flowOf(ex.adm)
	mq.mu.Lock()
	defer mq.mu.Unlock()
	return g.settleStart(ex, mq, f, slots, now, mq.servedFirst(f, owed, under))
}

// servedFirst reports whether the dispatcher would serve a request of flow
// f before every waiter (owed and under are preferred's tests): its key is
// owed a slot and no waiter's is, or under its share and no waiter's key
// is owed or under. A key neither owed nor under its share waits. Call it
// under mq.mu.
func (mq *modelQueue) servedFirst(f fairshare.Flow, owed, under func(c int, key string) bool) bool {
	switch {
	case owed(f.Class, f.Key):
		return mq.q.PeekFunc(owed) == nil
	case under(f.Class, f.Key):
		return mq.q.PeekFunc(func(c int, key string) bool { return owed(c, key) || under(c, key) }) == nil
	}
	return false
}

// startsAhead reports whether a request of a's key for model would start
// at once though others wait, as startNow decides, taking nothing: such a
// request never joins the queue, so a full queue is no reason to shed it.
// False without fair sharing.
func (g *Gateway) startsAhead(gen *generation, model string, a *admission) bool {
	if !gen.cfg.Flow.FairShare() {
		return false
	}
	mq := g.flow.queues[model]
	now := time.Now()
	slots := g.slots(gen, model, now)
	owed, under := mq.preferred(slots, now)
	mq.mu.Lock()
	defer mq.mu.Unlock()
	return mq.servedFirst(flowOf(a), owed, under)
}

// settleStart carries out a start decision made under mq.mu (held): a
// request that starts takes its key's slot and its pace; one that does not
// is counted as held by fair sharing when that is why it waits, queued
// behind others or not: a slot is free and its key may not have it (over
// its share, or the free ones kept for quieter keys).
func (g *Gateway) settleStart(ex *exchange, mq *modelQueue, f fairshare.Flow, slots int, now time.Time, start bool) bool {
	if !start {
		if mq.fair.Held(f, slots, now) {
			g.heldByShare(ex)
		}
		return false
	}
	mq.acquired(ex)
	ex.pace = mq.pacedLocked(ex.gen, f, slots, 0, now)
	return true
}

// preferred are the tests, for the queue's PeekFunc, of the flows the
// dispatcher serves first at now: owed a slot for the share they left
// unused over time, and under their share of slots now (and allowed one:
// not where it would take the burst room kept for a quiet key). Call them
// under mq.mu.
func (mq *modelQueue) preferred(slots int, now time.Time) (owed, under func(c int, key string) bool) {
	owed = func(c int, key string) bool { return mq.fair.Owed(fairshare.Flow{Class: c, Key: key}, slots, now) }
	under = func(c int, key string) bool {
		f := fairshare.Flow{Class: c, Key: key}
		return mq.fair.Under(f, slots, now) && mq.fair.Allowed(f, slots, now)
	}
	return owed, under
}

// acquired records that the request took a slot; called under mq.mu.
func (mq *modelQueue) acquired(ex *exchange) {
	if ex.fair && !ex.slot {
		mq.fair.Acquire(flowOf(ex.adm), time.Now())
		ex.slot = true
	}
}

// retook records that a request retrying on another replica took a slot
// again.
func (mq *modelQueue) retook(ex *exchange) {
	if ex.fair {
		mq.mu.Lock()
		mq.acquired(ex)
		mq.mu.Unlock()
	}
}

// freed records that the request let its slot go (its attempt ended), as
// its lease frees room: the dispatcher woken next finds its key under its
// share again.
func (mq *modelQueue) freed(ex *exchange) { mq.dropSlot(ex, (*fairshare.Table).Release) }

// unacquired gives back the slot startNow took for a request no replica
// took after all, leaving no usage behind: the key has not been served.
func (mq *modelQueue) unacquired(ex *exchange) { mq.dropSlot(ex, (*fairshare.Table).Unacquire) }

// dropSlot lets go of the fair-share slot the request holds, if any, by
// let (Release or Unacquire).
func (mq *modelQueue) dropSlot(ex *exchange, let func(*fairshare.Table, fairshare.Flow, time.Time)) {
	if !ex.fair {
		return
	}
	mq.mu.Lock()
	if ex.slot {
		let(mq.fair, flowOf(ex.adm), time.Now())
		ex.slot = false
	}
	mq.mu.Unlock()
}

// leave records that a request fair sharing knew ended, and wakes the
// dispatcher: its key may be under its share again.
func (g *Gateway) leave(ex *exchange) {
	if !ex.fair {
		return
	}
	mq := g.flow.queues[ex.model]
	mq.mu.Lock()
	mq.fair.Leave(flowOf(ex.adm), ex.slot, time.Now())
	ex.fair, ex.slot = false, false
	mq.mu.Unlock()
	mq.kick()
}

// fairMetrics are the families of fair sharing; fairCollector reports its
// gauges.
type fairMetrics struct {
	overShare *prometheus.CounterVec
	paced     *prometheus.CounterVec
}

func newFairMetrics() fairMetrics {
	return fairMetrics{
		overShare: counterVec("inferrail_flow_over_share_total", "Requests that waited because of fair sharing: their key already held its share of the model's in-flight slots, or the free ones were kept for other keys, by model and priority class.", "model", "class"),
		paced:     counterVec("inferrail_flow_prefill_paced_total", "Requests that waited because their key's prompts awaiting a first token held every replica with room (flow.pace_prefills), once each, by model and priority class.", "model", "class"),
	}
}

// fairCollector reports fair sharing as it counts when read: gauges set
// as requests came and went kept their last values once traffic stopped
// or fair sharing was turned off.
type fairCollector struct{ g *Gateway }

var (
	descFairActive = prometheus.NewDesc("inferrail_flow_active_keys",
		"Keys counted against a key of the class when the model's slots are shared (active in the class or a more important one), by model and priority class.",
		[]string{"model", "class"}, nil)
	descFairShare = prometheus.NewDesc("inferrail_flow_fair_share_slots",
		"In-flight slots each active key of the class may hold before it waits, by model and priority class; 0 when the slots have no bound.",
		[]string{"model", "class"}, nil)
)

func (c *fairCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descFairActive
	ch <- descFairShare
}

func (c *fairCollector) Collect(ch chan<- prometheus.Metric) {
	gen := c.g.current()
	on := gen.cfg.Flow.FairShare()
	now := time.Now()
	for model, mq := range c.g.flow.queues {
		slots := 0
		if on {
			slots = c.g.slots(gen, model, now)
		}
		mq.mu.Lock()
		for _, cl := range auth.Classes {
			active := mq.fair.Active(cl.Index(), now)
			share := 0
			if slots > 0 {
				share = max(1, slots/max(1, active))
			}
			ch <- prometheus.MustNewConstMetric(descFairActive, prometheus.GaugeValue, float64(active), model, cl.String())
			ch <- prometheus.MustNewConstMetric(descFairShare, prometheus.GaugeValue, float64(share), model, cl.String())
		}
		mq.mu.Unlock()
	}
}
