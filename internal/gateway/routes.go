package gateway

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferrail/inferrail/internal/clock"
	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/index"
	"github.com/inferrail/inferrail/internal/load"
	"github.com/inferrail/inferrail/internal/pace"
)

// routeTable is the fleet as decisions read it: each model's replicas in
// fleet order, each with its engine's load feed, and the series decisions
// update. A decision reads every candidate's engine report, so the table
// keeps the feeds and series at hand instead of looking each replica up by
// ID. It is built for one fleet snapshot and one generation, and rebuilt
// when membership changes or the scraper retires a feed.
type routeTable struct {
	snap        *fleet.Snapshot
	retirements uint64 // the scraper's Retirements before the feeds were taken
	models      map[string]*modelRoutes
}

// modelRoutes are the replicas serving a model, in fleet order.
type modelRoutes struct {
	routes []route
	// arms are the series of each of the model's arms, in the
	// generation's order.
	arms []armSeries
	// handles are the routes' replicas as the KV index names them,
	// resolved again when replicas join or leave the index.
	handles atomic.Pointer[index.Handles]
}

// armSeries are the series one arm's decisions update.
type armSeries struct {
	// chosen[i] counts the arm's decisions that chose routes[i]: only the
	// winner's is read, so it stays out of the routes every decision reads.
	chosen []prometheus.Counter
	series decisionSeries
}

// route is a replica as a decision for one model reads it: every
// decision reads every route, so it holds only what a candidate is built
// from.
type route struct {
	*fleet.Replica
	feed *load.Feed
	// The replica's ID and configured KV capacity, which never change,
	// copied so that a decision reads only the replica's first cache line.
	id         string
	kvCapacity int
	// pace is the replica's pace meter when the generation prices by
	// pace (routing.pace), nil when not.
	pace *pace.Meter
	// engineQueue prices the requests the engine reports waiting that
	// the gateway did not send (routing.engine_queue).
	engineQueue bool
	// queueFloor keeps the queue priced at no less than the requests the
	// engine reports waiting (routing.queue_floor).
	queueFloor bool
}

// routes returns the table of the fleet's current snapshot for a
// generation. Each generation keeps its own, so requests of an old one,
// still retrying after a reload, do not rebuild the new one's.
func (g *Gateway) routes(gen *generation) *routeTable {
	snap, retirements := g.fleet.Snapshot(), g.scraper.Retirements()
	if t := gen.table.Load(); t != nil && t.snap == snap && t.retirements == retirements {
		return t
	}
	t := &routeTable{snap: snap, retirements: retirements, models: make(map[string]*modelRoutes, len(gen.routing))}
	for model, mp := range gen.routing {
		pool := snap.ForModel(model)
		mr := &modelRoutes{routes: make([]route, len(pool)), arms: make([]armSeries, len(mp.arms))}
		for i, r := range pool {
			mr.routes[i] = route{Replica: r, feed: g.scraper.Feed(r.ID), id: r.ID, kvCapacity: r.KVCapacityBlocks,
				engineQueue: gen.cfg.Routing.EngineQueue, queueFloor: gen.cfg.Routing.QueueFloor}
			if gen.cfg.Routing.Pace {
				mr.routes[i].pace = r.Pace()
			}
		}
		for j, a := range mp.arms {
			as := &mr.arms[j]
			as.series = g.metrics.decisionSeries(model, a.policy.Name())
			as.chosen = make([]prometheus.Counter, len(pool))
			for i, r := range pool {
				if r.Removed() {
					// It left after the snapshot: count its last decisions
					// where no page shows them (see member).
					as.chosen[i] = prometheus.NewCounter(prometheus.CounterOpts{Name: "departed"})
					continue
				}
				as.chosen[i] = g.metrics.decisionsFor(&as.series, r.ID)
			}
		}
		t.models[model] = mr
	}
	gen.table.Store(t)
	return t
}

// model returns the routes of a model, none for a model the gateway does
// not route.
func (t *routeTable) model(name string) *modelRoutes {
	if mr := t.models[name]; mr != nil {
		return mr
	}
	return &modelRoutes{}
}

// ids returns the routes' replica IDs, in order, built on demand: only
// resolving the index's handles again and explaining need them, both
// rarely, and each route keeps its own ID.
func (mr *modelRoutes) ids() []string {
	ids := make([]string, len(mr.routes))
	for i := range mr.routes {
		ids[i] = mr.routes[i].id
	}
	return ids
}

// indexHandles returns the routes' handles in the KV index.
func (mr *modelRoutes) indexHandles(ix index.Index) *index.Handles {
	if hd := mr.handles.Load(); hd != nil && ix.Current(hd) {
		return hd
	}
	hd := ix.Resolve(mr.ids())
	mr.handles.Store(hd)
	return hd
}

// reportFromNewFeed is what routing reads of the replica's engine report,
// fresh at now, once the route's feed is retired: the scraper forgot the
// replica between our snapshot and its own (it left and came back), so
// its reports now arrive in a new feed. The table holding the retired feed
// is rebuilt at its generation's next decision (routes). (Dropping the
// current generation's table here rebuilt that one at every decision of a
// request of an older generation, whose own table kept the retired feed.)
func (g *Gateway) reportFromNewFeed(rt *route, now clock.Instant) (load.Routing, bool) {
	return g.scraper.Feed(rt.ID).FreshRouting(now)
}
