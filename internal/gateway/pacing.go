package gateway

// Prefill pacing (flow.pace_prefills). Fair sharing caps how many slots a
// flooding key holds, but not how its requests start: slots free in
// cohorts (requests of one length end in the same engine step), and the
// flooder's waiters then start together, so several of its prompts are
// prefilled in one step and every other key's prompt in that step, or
// arriving during it, waits for all of them. So while other keys are
// active, a backlogged key (more of its requests wait in the queue) may
// have one prompt awaiting its first token per replica: a replica where
// it has one is not offered to its next request, which waits in the
// queue until that prompt's first byte (a streamed answer) or its
// estimated time to first token (any other) has passed. A key whose
// requests start as they come (none of its others wait), a key alone,
// and a retry are never paced.

import (
	"slices"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/fairshare"
	"github.com/inferrail/inferrail/internal/fleet"
)

// holdKey is one flow on one replica.
type holdKey struct {
	flow fairshare.Flow
	rep  *fleet.Replica
}

// hold is what a flow has awaiting its first token on a replica: streams
// counts its streamed attempts without a first byte yet, and untils holds
// the estimated first token of each of its other attempts in flight.
type hold struct {
	streams int
	untils  []time.Time
}

// awaiting reports whether anything of the hold awaits its first token at
// now, dropping the estimates that have passed.
func (h *hold) awaiting(now time.Time) bool {
	h.untils = slices.DeleteFunc(h.untils, func(u time.Time) bool { return !now.Before(u) })
	return h.streams > 0 || len(h.untils) > 0
}

// prefillHolds are a model's holds. A hold goes once nothing of it awaits
// a first token; a sweep as the map doubles forgets those only time
// released, so memory follows the attempts in flight.
type prefillHolds struct {
	mu    sync.Mutex
	m     map[holdKey]*hold
	sweep int // the map's size that triggers the next sweep
}

// held reports whether flow f has a prompt awaiting its first token on rep
// at now.
func (p *prefillHolds) held(f fairshare.Flow, rep *fleet.Replica, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.m[holdKey{f, rep}]
	return h != nil && h.awaiting(now)
}

// take records an attempt of f on rep as awaiting its first token: a
// streamed one until drop, any other until drop or its estimated first
// token at until, whichever comes first.
func (p *prefillHolds) take(f fairshare.Flow, rep *fleet.Replica, stream bool, until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := holdKey{f, rep}
	h := p.m[k]
	if h == nil {
		if p.m == nil {
			p.m = map[holdKey]*hold{}
		}
		if len(p.m) >= p.sweep {
			p.forget(time.Now())
		}
		h = &hold{}
		p.m[k] = h
	}
	if stream {
		h.streams++
	} else {
		h.untils = append(h.untils, until)
	}
}

// drop ends what take recorded with the same arguments: the attempt's
// first byte came, or it ended.
func (p *prefillHolds) drop(f fairshare.Flow, rep *fleet.Replica, stream bool, until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := holdKey{f, rep}
	h := p.m[k]
	if h == nil {
		return
	}
	switch i := slices.IndexFunc(h.untils, until.Equal); {
	case stream && h.streams > 0:
		h.streams--
	case !stream && i >= 0:
		h.untils = slices.Delete(h.untils, i, i+1)
	}
	if !h.awaiting(time.Now()) {
		delete(p.m, k)
	}
}

// forget deletes the holds nothing keeps at now and sets the next sweep at
// twice what is left; called under mu.
func (p *prefillHolds) forget(now time.Time) {
	for k, h := range p.m {
		if !h.awaiting(now) {
			delete(p.m, k)
		}
	}
	p.sweep = max(64, 2*len(p.m))
}

// len is how many holds are kept.
func (p *prefillHolds) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}

// pacedLocked reports whether flow f's prefills are paced at now with
// slots slots under gen's flow config: pacing is on, other keys count
// against f, and f is backlogged: more of its requests wait in the queue
// than self (1 for a request asking from the queue, else 0). Call it
// under mq.mu.
func (mq *modelQueue) pacedLocked(gen *generation, f fairshare.Flow, slots, self int, now time.Time) bool {
	return gen.cfg.Flow.Paced() && slots > 0 && mq.fair.Counted(f, now) >= 2 && mq.q.KeyLen(f.Class, f.Key) > self
}

// holdPrefill records an attempt's prompt as awaiting its first token on
// its replica, for pacing its key's next requests; a request fair sharing
// does not know holds nothing. The attempt then holds it until
// letGoPrefill.
func (a *attempt) holdPrefill() {
	ex := a.ex
	if a.mq == nil || !ex.fair || !ex.gen.cfg.Flow.Paced() {
		return
	}
	est := a.lease.Expected()
	if !(est >= 0) || est > maxHoldSecs {
		est = maxHoldSecs
	}
	a.holdUntil = time.Now().Add(time.Duration(est * float64(time.Second)))
	a.mq.holds.take(flowOf(ex.adm), a.lease.Replica(), ex.stream, a.holdUntil)
	a.holding = true
}

// maxHoldSecs bounds the estimate a non-streamed prompt is held for.
const maxHoldSecs = 60

// letGoPrefill drops the attempt's hold, once, and wakes the dispatcher:
// a paced waiter of its key may have a replica again.
func (a *attempt) letGoPrefill() {
	if !a.holding {
		return
	}
	a.holding = false
	a.mq.holds.drop(flowOf(a.ex.adm), a.lease.Replica(), a.ex.stream, a.holdUntil)
	a.mq.kick()
}

// countPaced counts a request whose last decision found room only where
// pacing held it, once per request.
func (g *Gateway) countPaced(ex *exchange) {
	if ex.pacedOut && !ex.pacedCounted {
		ex.pacedCounted = true
		g.flow.metrics.paced.WithLabelValues(ex.model, ex.adm.class.String()).Inc()
	}
}

// pacedNow is pacedLocked for ex's key at now, taking the queue's lock;
// false for a request with no key's admission.
func (g *Gateway) pacedNow(ex *exchange, now time.Time) bool {
	if ex.adm == nil || !ex.gen.cfg.Flow.Paced() {
		return false
	}
	mq := g.flow.queues[ex.model]
	slots := g.slots(ex.gen, ex.model, now)
	mq.mu.Lock()
	defer mq.mu.Unlock()
	return mq.pacedLocked(ex.gen, flowOf(ex.adm), slots, 0, now)
}
