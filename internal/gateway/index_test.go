package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/sim"
)

// Tests of what the gateway's KV index holds as attempts fail and engines
// restart, seen through the admin port and the index itself.

// patientProbes gives health probes time to answer, so that a loaded
// machine does not take a replica out of rotation and change which replica
// a test's round_robin picks.
func patientProbes(cfg *config.Config) *config.Config {
	cfg.Health.Interval = config.Duration(200 * time.Millisecond)
	cfg.Health.Timeout = config.Duration(200 * time.Millisecond)
	return cfg
}

// getAdmin decodes the JSON answer to GET path on the admin port into v.
func getAdmin(t testing.TB, admin, path string, v any) {
	t.Helper()
	resp, err := http.Get(admin + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d", path, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// indexHeld is each replica's predicted blocks as GET /admin/index shows
// them; a replica the index never heard of is absent, which reads as 0.
func indexHeld(t testing.TB, admin string) map[string]int {
	t.Helper()
	var v indexSummary
	getAdmin(t, admin, "/admin/index", &v)
	held := map[string]int{}
	for _, r := range v.Replicas {
		held[r.ID] = r.Held
	}
	return held
}

// promptCached is how many of a chat body's prompt tokens the index
// predicts each of ids holds, as routing would predict them now.
func promptCached(t testing.TB, gw *running, body string, ids ...string) map[string]int {
	t.Helper()
	pred, result := tokenizeBody(gw.g.tokenizers[testModel], testModel, []byte(body), true, noContext, nil)
	if pred == nil {
		t.Fatalf("tokenizing the test prompt: %s", result)
	}
	cached := gw.g.cachedTokens(nil, ids, testModel, pred)
	out := map[string]int{}
	for i, id := range ids {
		out[id] = cached[i]
	}
	return out
}

// sampleOf is the value of the sample of name on a metrics page whose
// labels include each of labels (written key="value"); 0 when there is
// none, as for a counter never incremented.
func sampleOf(t testing.TB, page, name string, labels ...string) float64 {
	t.Helper()
	for _, line := range strings.Split(page, "\n") {
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		series := line[:i]
		if series != name && !strings.HasPrefix(series, name+"{") {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(series, l)
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		return v
	}
	return 0
}

// TestFailedAttemptTakesBackItsRecord: an attempt whose replica answers a
// retryable status, or closes the connection before any response head, is
// retried on another replica, and the first replica's index keeps none of
// the prompt's blocks while the one that served it holds them.
func TestFailedAttemptTakesBackItsRecord(t *testing.T) {
	for _, tt := range []struct {
		name  string
		fault sim.Fault
	}{
		{"retryable_status", sim.Fault{Kind: sim.FaultFail, Status: http.StatusServiceUnavailable, SparesHealth: true}},
		{"closed_before_head", sim.Fault{Kind: sim.FaultClose, SparesHealth: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sims := fleetOf(t, 2, true)
			// round_robin in a fresh gateway offers sim-1 first; probes
			// pass, so nothing takes it out before the request.
			gw := startGateway(t, patientProbes(testConfig(t, sims)))
			sims[0].SetFault(tt.fault)
			body := chatBody(strings.Repeat("a prompt the first replica never computes ", 20), "")
			resp, out := chat(t, gw.url, body)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Inferrail-Replica") != "sim-2" {
				t.Fatalf("%d from %q, want 200 from sim-2: %s", resp.StatusCode, resp.Header.Get("X-Inferrail-Replica"), out)
			}
			// One retry with sim-2 serving means sim-1 had the first attempt.
			page := scrape(t, gw.admin)
			if n := sampleOf(t, page, "inferrail_upstream_retries_total", `model="`+testModel+`"`); n != 1 {
				t.Fatalf("%v retries, want 1: sim-1 was not tried first\n%s", n, grep(page, "retries"))
			}

			held := indexHeld(t, gw.admin)
			if held["sim-1"] != 0 || held["sim-2"] == 0 {
				t.Errorf("index blocks %v, want none on sim-1 and the prompt's on sim-2", held)
			}
			cached := promptCached(t, gw, body, "sim-1", "sim-2")
			if cached["sim-1"] != 0 || cached["sim-2"] == 0 {
				t.Errorf("predicted cached tokens of the prompt %v, want 0 on sim-1 and the prompt's on sim-2", cached)
			}
		})
	}
}

// TestEngineRestartResetsItsIndexEntries restarts a simulator for real: once
// the scraper sees its prefix-cache counters go backwards, the index holds
// nothing for it, the next identical request predicts no cached tokens
// there, inferrail_index_resets_total counts one reset for it, and the
// other replica keeps what it held.
func TestEngineRestartResetsItsIndexEntries(t *testing.T) {
	sims := fleetOf(t, 2, true)
	gw := startGateway(t, patientProbes(testConfig(t, sims))) // round_robin: sim-1, sim-2, sim-1, ...
	body := chatBody(strings.Repeat("a prompt both replicas compute ", 20), "")
	for _, want := range []string{"sim-1", "sim-2"} {
		if _, _, _, rep := send(t, gw.url, "/v1/chat/completions", body); rep != want {
			t.Fatalf("served by %s, want %s in turn", rep, want)
		}
	}
	cached := promptCached(t, gw, body, "sim-1", "sim-2")
	if cached["sim-1"] == 0 || cached["sim-1"] != cached["sim-2"] {
		t.Fatalf("predicted cached tokens %v, want the prompt's on both", cached)
	}
	held := indexHeld(t, gw.admin)

	type replicas struct {
		Replicas []struct {
			ID      string `json:"id"`
			Healthy bool   `json:"healthy"`
			Ejected bool   `json:"ejected"`
			Engine  *struct {
				PrefixQueries float64 `json:"prefix_cache_queries"`
			} `json:"engine"`
		} `json:"replicas"`
	}
	sim1 := func() (healthy, ejected bool, queries float64) {
		var v replicas
		getAdmin(t, gw.admin, "/admin/replicas", &v)
		for _, r := range v.Replicas {
			if r.ID == "sim-1" && r.Engine != nil {
				return r.Healthy, r.Ejected, r.Engine.PrefixQueries
			}
		}
		return false, false, 0
	}
	// Counters can only go backwards from a value the scraper has read.
	waitFor(t, "the scraper to read sim-1's prefix-cache counters after the request", 10*time.Second, func() bool {
		_, _, q := sim1()
		return q > 0
	})
	resets := func() float64 {
		return sampleOf(t, scrape(t, gw.admin), "inferrail_index_resets_total", `replica="sim-1"`)
	}
	before := resets()

	sims[0].Kill()
	if err := sims[0].Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the scraper to count sim-1's reset", 10*time.Second, func() bool { return resets() >= before+1 })
	if got := indexHeld(t, gw.admin); got["sim-1"] != 0 || got["sim-2"] != held["sim-2"] {
		t.Errorf("index blocks after sim-1 restarted %v, want none on sim-1 and sim-2's %d", got, held["sim-2"])
	}
	if got := promptCached(t, gw, body, "sim-1", "sim-2"); got["sim-1"] != 0 || got["sim-2"] != cached["sim-2"] {
		t.Errorf("predicted cached tokens after sim-1 restarted %v, want 0 on sim-1 and %d on sim-2", got, cached["sim-2"])
	}

	waitFor(t, "sim-1 back in rotation", 10*time.Second, func() bool {
		h, e, _ := sim1()
		return h && !e
	})
	_, predCached, got, rep := send(t, gw.url, "/v1/chat/completions", body)
	if rep != "sim-1" {
		t.Fatalf("the identical request went to %s, want sim-1 in turn", rep)
	}
	if predCached != 0 {
		t.Errorf("the identical request predicted %d cached tokens on restarted sim-1, want 0", predCached)
	}
	if got.Cached != 0 {
		t.Errorf("restarted sim-1 reports %d cached tokens: it did not restart empty", got.Cached)
	}
	if n := resets(); n != before+1 {
		t.Errorf("inferrail_index_resets_total{replica=\"sim-1\"} went from %v to %v, want one reset", before, n)
	}
}

// TestRemovedReplicaStaysOutOfTheIndex: a request decided on a replica that
// a config change removes before the request records its prompt (between
// choose and begin) records nothing. The record made the departed replica
// anew in the index, after the fleet watcher had forgotten it, and it
// stayed on /admin/index and inferrail_replica_index_* for good (found by
// a review).
func TestRemovedReplicaStaysOutOfTheIndex(t *testing.T) {
	sims := fleetOf(t, 2, true)
	gw := startGateway(t, testConfig(t, sims))
	g := gw.g
	ex := &exchange{r: httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil), id: "req-1", model: testModel,
		body: []byte(chatBody(strings.Repeat("a long shared prompt ", 40), "")), gen: g.current(), policy: g.testPolicy(testModel)}
	var result string
	if ex.pred, result = tokenizeBody(g.tokenizers[testModel], testModel, ex.body, true, noContext, nil); result != tokOK {
		t.Fatal(result)
	}
	ex.route = g.routeRequest(ex)
	var a *attempt
	for range 4 { // round robin: until sim-2 is chosen
		lease, cached, err := g.choose(ex, nil)
		if err != nil {
			t.Fatal(err)
		}
		if lease.Replica().ID != "sim-2" {
			lease.Release()
			continue
		}
		one := fmt.Sprintf(`{"replicas":[{"id":"sim-1","url":%q,"models":[%q],"max_concurrency":256,"max_pending":64}]}`, sims[0].URL(), testModel)
		if code, _, problems := patch(t, gw.admin, one); code != http.StatusOK {
			t.Fatalf("patch: %d %v", code, problems)
		}
		a = g.begin(ex, lease, cached)
		break
	}
	if a == nil {
		t.Fatal("sim-2 never chosen")
	}
	a.letGoPrefill()
	a.freeSlot() // served: the record stays, as a 2xx relay keeps it
	if _, ok := indexHeld(t, gw.admin)["sim-2"]; ok {
		t.Error("/admin/index lists the departed sim-2")
	}
	for line := range strings.SplitSeq(scrape(t, gw.admin), "\n") {
		if strings.HasPrefix(line, "inferrail_replica_index_") && strings.Contains(line, `replica="sim-2"`) {
			t.Errorf("the departed sim-2 on the metrics page: %s", line)
		}
	}
}
