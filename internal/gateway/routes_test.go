package gateway

import (
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/clock"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/policy"
)

// TestRouteTableFollowsTheFleet: decisions read replicas through a table
// built per fleet snapshot. It lists a model's replicas in fleet order with
// the scraper's feed of each, through which candidates see their engines'
// reports; it is rebuilt when members join and leave; and a feed the
// scraper retired under it gives way to the replica's live one.
func TestRouteTableFollowsTheFleet(t *testing.T) {
	sims := fleetOf(t, 2, true)
	_, port, _ := net.SplitHostPort(sims[1].Addr())
	res := &fakeResolver{}
	res.set("127.0.0.1")
	cfg := testConfig(t, sims[:1])
	cfg.Discovery.DNS = []config.DNSGroup{{Name: "pool", URL: "http://pool.test:" + port, Models: []string{testModel},
		Refresh: config.Duration(20 * time.Millisecond), MaxConcurrency: 8, MaxPending: 8}}
	g := startResolvingGateway(t, cfg, res).g

	ids := func() []string {
		var out []string
		for _, rt := range g.routes(g.current()).model(testModel).routes {
			if rt.feed != g.scraper.Feed(rt.ID) {
				t.Errorf("%s is routed with a feed the scraper does not fill", rt.ID)
			}
			out = append(out, rt.ID)
		}
		return out
	}
	first := fleet.MemberID("pool", "127.0.0.1", port)
	second := fleet.MemberID("pool", "127.0.0.2", port)
	waitFor(t, "the first member", 2*time.Second, func() bool { return slices.Equal(ids(), []string{"sim-1", first}) })
	// Both answer scrapes: their candidates carry their engines' reports.
	waitFor(t, "both engines' reports", 2*time.Second, func() bool {
		for _, rt := range g.routes(g.current()).model(testModel).routes {
			var c policy.Candidate
			now := time.Now()
			g.candidate(&c, &rt, clock.Of(now))
			if c.Running < 0 || c.KVUsage < 0 || c.KVCapacityBlocks <= 0 {
				return false
			}
		}
		return true
	})
	before := g.routes(g.current())
	res.set("127.0.0.1", "127.0.0.2")
	waitFor(t, "the second member", 2*time.Second, func() bool { return slices.Equal(ids(), []string{"sim-1", first, second}) })
	if g.routes(g.current()) == before {
		t.Error("a member joined and the table stayed")
	}
	res.set("127.0.0.2")
	waitFor(t, "the first member to leave", 2*time.Second, func() bool { return slices.Equal(ids(), []string{"sim-1", second}) })

	// A feed the scraper retires (its replica left its targets and came
	// back before the table was rebuilt) gives way to the live one, and a
	// table built before the retirement is rebuilt at the next decision.
	built := g.routes(g.current())
	ghost := g.scraper.Feed("ghost")
	waitFor(t, "the scraper to retire a feed nobody scrapes", 2*time.Second, ghost.Retired)
	rt := built.model(testModel).routes[0]
	rt.feed = ghost
	var c policy.Candidate
	g.candidate(&c, &rt, clock.Of(time.Now()))
	if live, fresh := g.scraper.Feed("sim-1").Fresh(time.Now()); !fresh || c.KVUsage < 0 || c.Running < 0 {
		t.Errorf("a retired feed hid sim-1's fresh report (got %+v)", c)
	} else if c.KVCapacityBlocks != live.CapacityBlocks-1 || c.KVUsage != live.KVUsage {
		t.Errorf("a retired feed gave %+v, sim-1's live report is %+v", c, live)
	}
	if g.routes(g.current()) == built {
		t.Error("a table built before a feed retired stayed in place")
	}
}

// TestRetiredFeedRebuildsOnlyItsTable: a decision of a request of an older
// generation (still retrying after a reload) that finds a retired feed
// leaves the current generation's table alone; each generation's table is
// rebuilt once after the retirement, at its own next decision. The
// decision dropped the current generation's table, so the current one was
// rebuilt at every such decision and the old one's kept the retired feed
// (found by a review).
func TestRetiredFeedRebuildsOnlyItsTable(t *testing.T) {
	sims := fleetOf(t, 1, true)
	gw := startGateway(t, testConfig(t, sims))
	g := gw.g
	old := g.current()
	if code, _, problems := patch(t, gw.admin, `{"routing":{"epsilon":0.5}}`); code != http.StatusOK || g.current() == old {
		t.Fatalf("patch: %d %v", code, problems)
	}
	oldTable := g.routes(old)
	ghost := g.scraper.Feed("ghost")
	waitFor(t, "the scraper to retire a feed nobody scrapes", 2*time.Second, ghost.Retired)
	cur := g.routes(g.current())
	rt := g.routes(old).model(testModel).routes[0]
	rt.feed = ghost // as if retired after the old generation's table was built
	var c policy.Candidate
	g.candidate(&c, &rt, clock.Of(time.Now()))
	if g.current().table.Load() != cur || g.routes(g.current()) != cur {
		t.Error("an old generation's decision dropped the current generation's table")
	}
	if g.routes(old) == oldTable {
		t.Error("the old generation's table, built before a feed retired, stayed in place")
	}
}
