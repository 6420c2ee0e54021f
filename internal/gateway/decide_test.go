package gateway

import (
	"fmt"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/policy"
)

// recordingPolicy passes decisions to a real policy and records the
// candidates each Pick was offered.
type recordingPolicy struct {
	policy.Policy
	offered [][]string
}

func (p *recordingPolicy) Pick(req *policy.Request, cands []policy.Candidate) policy.Decision {
	ids := make([]string, len(cands))
	for i, c := range cands {
		ids[i] = c.ID
	}
	p.offered = append(p.offered, ids)
	return p.Policy.Pick(req, cands)
}

// mixedFleet is a gateway over eight replicas that are never called: r1
// fails its probes, r2 is ejected, r3 is full, r4 and r5 carry requests in
// flight, and two more, d0 and d1, come from a DNS group. Its leases are
// released when the test ends.
func mixedFleet(t *testing.T, policyName string) *Gateway {
	t.Helper()
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: testModel, Tokenizer: "builtin:sim"}}
	cfg.Routing.DefaultPolicy = policyName
	cfg.Routing.Seed = 7
	for i := range 6 {
		cfg.Replicas = append(cfg.Replicas, config.Replica{ID: fmt.Sprint("r", i), URL: "http://127.0.0.1:1", Models: []string{testModel}, MaxConcurrency: 3})
	}
	g, err := New(&cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	u, _ := url.Parse("http://127.0.0.1:2")
	g.fleet.SetGroup("dns", []*fleet.Replica{
		fleet.NewReplica("d0", u, []string{testModel}, 3, 0),
		fleet.NewReplica("d1", u, []string{testModel}, 3, 0),
	})
	snap := g.fleet.Snapshot()
	fleet.MarkDown(snap.Get("r1"))
	for range cfg.Health.UnhealthyThreshold {
		g.health.Report(snap.Get("r2"), false)
	}
	if !snap.Get("r2").Ejected(time.Now()) {
		t.Fatal("r2 was not ejected")
	}
	hold := func(id string, n int) {
		for range n {
			l, ok := snap.Get(id).TryAcquire()
			if !ok {
				t.Fatalf("no room on %s", id)
			}
			t.Cleanup(l.Release)
		}
	}
	hold("r3", 3)
	hold("r4", 1)
	hold("r5", 2)
	return g
}

// decisionExchange is a parsed completion request for the gateway's model.
func decisionExchange(t *testing.T, g *Gateway, p policy.Policy, prompt string) *exchange {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":1}`, testModel, prompt)
	ex := &exchange{r: httptest.NewRequest("POST", "/v1/completions", nil), id: "req", gen: g.current(), model: testModel, body: []byte(body), policy: p}
	var result string
	if ex.pred, result = tokenizeBody(g.tokenizers[testModel], testModel, ex.body, false, noContext, nil); result != tokOK {
		t.Fatalf("tokenize: %s", result)
	}
	ex.route = g.routeRequest(ex)
	return ex
}

// TestExplainAgreesWithRouting: explain and routing decide from the same
// offer. On a fleet with unhealthy, ejected, full and loaded replicas,
// explain offers exactly the replicas routing offers its policy, says why
// each other one is left out, and names the replica routing then leases;
// for every policy, over a run of prompts that fill the index.
func TestExplainAgreesWithRouting(t *testing.T) {
	wantWhy := map[string]string{"r1": notOfferedUnhealthy, "r2": notOfferedEjected, "r3": notOfferedFull}
	for _, name := range policy.Names() {
		t.Run(name, func(t *testing.T) {
			g := mixedFleet(t, name)
			rec := &recordingPolicy{Policy: g.testPolicy(testModel)}
			for i := range 12 {
				prompt := fmt.Sprintf("%s question %d", strings.Repeat("shared context ", 40*(i%3)), i%4)
				ans := g.explain(decisionExchange(t, g, rec, prompt), tokOK)
				var offered []string
				for _, r := range ans.Replicas {
					if r.Offered {
						offered = append(offered, r.ID)
						if r.NotOffered != "" {
							t.Errorf("offered %s with a reason not to: %q", r.ID, r.NotOffered)
						}
					} else if want := wantWhy[r.ID]; r.NotOffered != want {
						t.Errorf("%s not offered for %q, want %q", r.ID, r.NotOffered, want)
					}
				}
				lease, _, err := g.choose(decisionExchange(t, g, rec, prompt), nil)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if got := rec.offered[len(rec.offered)-1]; !slices.Equal(got, offered) {
					t.Fatalf("request %d: routing offered %v, explain %v", i, got, offered)
				}
				if got := lease.Replica().ID; got != ans.Winner {
					t.Errorf("request %d: explain named %s, routing leased %s", i, ans.Winner, got)
				}
				lease.Release()
			}
		})
	}
}

// TestOfferSkipsRemovedReplicas: a replica that left the fleet while a
// decision held the routes it was in is never offered, and explain says
// it was removed; routing and explaining offer the same rest.
func TestOfferSkipsRemovedReplicas(t *testing.T) {
	g := mixedFleet(t, policy.LeastRequest)
	mr := g.routes(g.current()).model(testModel) // the routes of a fleet with d0 and d1
	g.fleet.SetGroup("dns", []*fleet.Replica{g.fleet.Snapshot().Get("d1")})
	ex := decisionExchange(t, g, g.testPolicy(testModel), "hello")

	offered := func(why []string) []string {
		sc := new(decisionScratch)
		if err := g.offer(sc, ex, mr, time.Now(), nil, why); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range sc.cands {
			ids = append(ids, c.ID)
		}
		return ids
	}
	why := make([]string, len(mr.routes))
	explained, routed := offered(why), offered(nil)
	if !slices.Equal(explained, routed) {
		t.Fatalf("explain offers %v, routing %v", explained, routed)
	}
	if want := []string{"r0", "r4", "r5", "d1"}; !slices.Equal(routed, want) {
		t.Errorf("offered %v, want %v", routed, want)
	}
	for i, rt := range mr.routes {
		if rt.id == "d0" && why[i] != notOfferedRemoved {
			t.Errorf("d0 left out for %q, want %q", why[i], notOfferedRemoved)
		}
	}
}
