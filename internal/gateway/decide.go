package gateway

import (
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/clock"
	"github.com/inferrail/inferrail/internal/fairshare"
	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/load"
	"github.com/inferrail/inferrail/internal/policy"
)

// Why a replica serving the model was not offered to the policy, as
// /admin/explain names it.
const (
	notOfferedRemoved   = "removed"
	notOfferedUnhealthy = "unhealthy"
	notOfferedEjected   = "ejected"
	notOfferedFull      = "at_capacity"
	// The request's key is paced and has a prompt there awaiting its first
	// token (pacing.go).
	notOfferedPaced = "prefill_paced"
)

// choose decides where the request's next attempt goes and takes a lease
// there: the policy picks among what offer gives it. It returns the lease
// and the prompt tokens predicted cached on the replica (-1 without a
// prediction), or errNoReplica or errFleetFull.
func (g *Gateway) choose(ex *exchange, tried map[*fleet.Replica]bool) (*fleet.Lease, int, error) {
	return g.chooseFrom(ex, tried, g.routes(ex.gen))
}

// staleRetries bounds how many times a decision that found no usable
// replica in a fleet that has changed since is made again on the new one.
const staleRetries = 3

// chooseFrom is choose on the route table t, taken at the start of the
// decision. When no route of t is usable and the fleet has changed since t
// was taken (its replicas left and others joined, as a DNS group's may
// between two lookups), it decides again on the current table rather than
// answer that no replica serves the model.
func (g *Gateway) chooseFrom(ex *exchange, tried map[*fleet.Replica]bool, t *routeTable) (*fleet.Lease, int, error) {
	start := time.Now()
	sc := decisionScratches.Get().(*decisionScratch)
	defer sc.release()
	mr := t.model(ex.model)
	err := g.offer(sc, ex, mr, start, tried, ex.obs.whyNotOffered(len(mr.routes)))
	for k := 0; errors.Is(err, errNoReplica) && k < staleRetries && g.fleet.Snapshot() != t.snap; k++ {
		t = g.routes(ex.gen)
		mr = t.model(ex.model)
		err = g.offer(sc, ex, mr, start, tried, ex.obs.whyNotOffered(len(mr.routes)))
	}
	if err != nil {
		return nil, -1, err
	}
	ex.route.At = start
	if a := ex.adm; a != nil && a.target > 0 && len(tried) == 0 {
		if err := a.judge(ex.gen.cost[ex.model], &ex.route, sc.cands, ex.arrived, start); err != nil && len(sc.cands) > 0 {
			return nil, -1, err
		}
	}
	offered, cands := sc.offered, sc.cands
	for len(offered) > 0 {
		d, x := g.pick(ex, cands)
		i := d.Index
		rt := &mr.routes[offered[i]]
		if lease, ok := rt.TryAcquire(); ok {
			lease.Queue(start, d.PrefillSecs, cands[i].Pace, ex.route.PromptTokens)
			lease.Expect(start, d.EstimatedTTFT, cands[i].Pace)
			as := &mr.arms[ex.arm]
			g.metrics.decided(&as.series, as.chosen[offered[i]], d, time.Since(start))
			if ex.shadowed && len(tried) == 0 {
				g.shadows.submit(ex, cands, d)
			}
			g.observeDecision(ex, mr, offered, cands, i, &d, x, start)
			return lease, cands[i].Cached, nil
		}
		// Lost the race for its last slot: offer the others as they were.
		// The record says it had no room; without a reason it would read
		// as tried by an earlier attempt, which it never was.
		ex.obs.notOffered(offered[i], notOfferedFull)
		offered, cands = slices.Delete(offered, i, i+1), slices.Delete(cands, i, i+1)
	}
	return nil, -1, errFleetFull
}

// offer fills sc with what a decision for ex at start offers the model's
// policy: every route that is usable and has room, as a candidate with its
// load and predicted cache, those the request has not tried first (tried
// ones only when no other has room). Routing (choose) and explaining
// (explain) both decide from it, so what they offer cannot drift apart.
//
// When why is not nil (explaining, which tries nothing), why[i] is set to
// the reason routes[i] was not offered and left "" for those offered. It
// returns errNoReplica when no route is usable at all; then nothing is
// offered.
func (g *Gateway) offer(sc *decisionScratch, ex *exchange, mr *modelRoutes, start time.Time, tried map[*fleet.Replica]bool, why []string) error {
	at := clock.Of(start)
	// One pass fills the candidates as it finds them: a decision reads
	// every replica, and reading each once is most of it. Routes are named
	// by their place in the model's routes. The slices are grown once and
	// filled by index: appending, or a call that returned them, kept them
	// in memory and cost more per replica than reading it.
	usable := false
	all := len(mr.routes)
	offered, cands, retried := slices.Grow(sc.offered[:0], all)[:all], slices.Grow(sc.cands[:0], all)[:all], sc.retried[:0]
	n, paced := 0, 0
	var holds *prefillHolds
	var flow fairshare.Flow
	if ex.pace {
		holds, flow = &g.flow.queues[ex.model].holds, flowOf(ex.adm)
	}
	for i := range mr.routes {
		rt := &mr.routes[i]
		if !rt.Usable(at) {
			if why != nil {
				why[i] = unusable(rt.Replica)
			}
			continue
		}
		usable = true
		switch {
		case !rt.HasRoom():
			if why != nil {
				why[i] = notOfferedFull
			}
		case holds != nil && holds.held(flow, rt.Replica, start):
			paced++
			if why != nil {
				why[i] = notOfferedPaced
			}
		case len(tried) > 0 && tried[rt.Replica]: // empty on a first attempt
			retried = append(retried, i)
		default:
			g.candidate(&cands[n], rt, at)
			offered[n] = i
			n++
		}
	}
	if n == 0 {
		for _, i := range retried {
			g.candidate(&cands[n], &mr.routes[i], at)
			offered[n] = i
			n++
		}
	}
	offered, cands = offered[:n], cands[:n]
	sc.offered, sc.retried, sc.cands = offered, retried, cands
	ex.pacedOut = n == 0 && paced > 0
	if !usable {
		return errNoReplica
	}
	switch {
	case ex.pred == nil || n == 0:
	case ex.pred.noRead:
		for i := range cands {
			cands[i].Cached = 0
		}
	default:
		bs := ex.route.BlockSize // the model's, as routeRequest set it with pred
		sc.cached = g.index.MatchHandles(sc.cached, mr.indexHandles(g.index), offered, ex.pred.hashes, ex.pred.tokens, bs)
		for i, blocks := range sc.cached {
			cands[i].Cached = pageFloor(blocks*bs, mr.routes[offered[i]].feed.Last())
		}
	}
	poolPaces(mr, offered, cands, at)
	return nil
}

// paceChance is how many standard errors apart two engines' paces must be
// to count as different.
const paceChance = 2

// poolPaces gives every candidate whose pace is within chance of the
// lowest (paceChance standard errors of their difference) the lowest pace.
// A meter with too few samples to judge is not the lowest: a new meter's
// pace is mostly its prior of 1.
//
// On an even fleet the engines' paces differ by their noise alone, and an
// estimate that otherwise differs by nothing, as a new conversation's on
// idle replicas, would send every such request to the one whose noise was
// lowest; pooled, they tie, and ties go to the replica with fewer in
// flight. An engine that really is slower stays apart as its samples add
// up.
//
// While every candidate's engine reports requests waiting, every pace is
// priced as the lowest: past the KV cache's edge a pace also carries the
// wait for free blocks, which the estimate leaves out, and it stays high
// after the pile that raised it has drained, so requests no cache places
// piled onto the replica whose pace was low and follow-ups left their
// context (bench/results/knee-head: W3 at 18 req/s collapsed on seed 2).
// Then paces cannot tell a slower engine from a queue; one engine with
// nothing waiting is enough for them to tell again.
func poolPaces(mr *modelRoutes, offered []int, cands []policy.Candidate, at clock.Instant) {
	lo, allQueued := -1, len(cands) > 0
	for i := range cands {
		allQueued = allQueued && cands[i].Waiting > 0
		if cands[i].Pace > 0 && (lo < 0 || cands[i].Pace < cands[lo].Pace) && !math.IsInf(mr.routes[offered[i]].pace.Noise(), 1) {
			lo = i
		}
	}
	if lo < 0 {
		return
	}
	loNoise := mr.routes[offered[lo]].pace.Noise()
	for i := range cands {
		if i == lo || !(cands[i].Pace > 0) {
			continue
		}
		// A meter too new (or too long idle) to judge, priced above the
		// lowest, is priced as it: kept apart, an engine whose one sample
		// was slow lost every even decision, so drew no request that
		// could correct it. One priced below keeps its pace, and draws the
		// requests that will judge it.
		own := mr.routes[offered[i]].pace.Noise()
		if !allQueued && math.IsInf(own, 1) && cands[i].Pace < cands[lo].Pace {
			continue
		}
		noise := math.Hypot(own, loNoise)
		if c := &cands[i]; allQueued || c.Pace-cands[lo].Pace <= paceChance*noise {
			// candidate offered its queue's real seconds over its own
			// pace; over the pooled one instead, the estimate still
			// prices the real time left. (Where queue_floor's floor
			// set the queue, this overstates it a little.)
			busy := mr.routes[offered[i]].QueuedPrefillAt(at)
			c.QueuedPrefill += busy/cands[lo].Pace - busy/c.Pace
			c.Pace = cands[lo].Pace
		}
	}
}

// unusable says why a replica that is not usable is not: removed from the
// fleet, failing its probes, or else ejected.
func unusable(r *fleet.Replica) string {
	switch {
	case r.Removed():
		return notOfferedRemoved
	case !r.Healthy():
		return notOfferedUnhealthy
	default:
		return notOfferedEjected
	}
}

// decisionScratch holds the slices one decision fills, so that deciding
// allocates nothing once the pool is warm: allocations and the garbage
// collections they bring are most of a decision's tail at many replicas.
type decisionScratch struct {
	offered, retried []int // places in the model's routes
	cands            []policy.Candidate
	cached           []int
}

var decisionScratches = sync.Pool{New: func() any { return new(decisionScratch) }}

// release drops the replica IDs the candidates point at, so that a pooled
// scratch keeps no departed replica's ID alive, and returns it to the pool.
func (sc *decisionScratch) release() {
	clear(sc.cands[:cap(sc.cands)])
	decisionScratches.Put(sc)
}

// candidate fills c with a replica as policies see it at the instant at:
// the gateway's own counts always, the engine's while its report is fresh. It
// writes c in place: a decision fills one per replica, and building each in
// a local and copying it cost more than the reads.
func (g *Gateway) candidate(c *policy.Candidate, rt *route, at clock.Instant) {
	c.ID, c.InFlight, c.Cached, c.QueuedPrefill = rt.id, rt.InFlight(), -1, rt.QueuedPrefillAt(at)
	c.Running, c.Waiting, c.KVUsage, c.KVCapacityBlocks, c.Pace = -1, 0, -1, rt.kvCapacity, 0
	if rt.pace != nil {
		// The queue holds real seconds, each request's prefill at the
		// pace it was routed with; the estimate multiplies what it is
		// offered by the pace, so it is offered in the estimate's seconds.
		c.Pace = rt.pace.PaceAt(at)
		c.QueuedPrefill /= c.Pace
	}
	// A retired feed's last report serves while it is fresh; only then is
	// the new feed looked up, so a decision reads one feed per replica.
	rep, ok := rt.feed.FreshRouting(at)
	if !ok && rt.feed.Retired() {
		rep, ok = g.reportFromNewFeed(rt, at)
	}
	if ok {
		c.Running, c.Waiting, c.KVUsage = int64(rep.Running), rep.Waiting, rep.KVUsage
		if rep.CapacityBlocks > 0 {
			c.KVCapacityBlocks = rep.CapacityBlocks // usable, in the gateway's blocks
		}
		if rep.Foreign > 0 && rt.engineQueue {
			// Requests the gateway did not send wait there: most often
			// another gateway's, whose prefill its own queue never saw.
			c.QueuedPrefill += foreignLeft(rep.Foreign*rt.MeanPrefill(), rep.Age, c.Pace)
		}
		if rt.queueFloor {
			// The gateway's own queue drains as its estimates say; an
			// engine behind them (waiting for free blocks, not for
			// compute) still holds requests it has not even started,
			// priced like the gateway's own that have not started answering.
			c.QueuedPrefill = max(c.QueuedPrefill, floorWaiting(rep, rt.Replica)*rt.WaitingMeanPrefill())
		}
	}
}

// foreignLeft is what is still to run, in the estimate's seconds, of
// secs of prefill the engine held for others when its report was read,
// age ago, on an engine at pace (0 for none). They were in the engine's
// queue before any request the gateway sends now, so the engine has been
// working them off since, at one second of its time per second; priced
// whole until the next report, they would outweigh a cached prompt long
// after they ran.
func foreignLeft(secs float64, age time.Duration, pace float64) float64 {
	done := age.Seconds()
	if pace > 0 {
		done /= pace
	}
	return max(secs-done, 0)
}

// floorWaiting is how many requests the queue floor prices on a replica:
// the engine's waiting count when last read, but no more than can still be
// waiting now, the gateway's own requests there without a first byte and
// the others' that the report counted. A report is up to a scrape interval
// old, longer than an agent's step takes at speed, and its count alone
// would go on pricing requests that have long started.
func floorWaiting(rep load.Routing, r *fleet.Replica) float64 {
	own, _ := r.Unanswered()
	return min(rep.Waiting, float64(own)+rep.Foreign)
}
