package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/clock"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/load"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/policy"
	"github.com/inferrail/inferrail/internal/sim"
)

// systemChat is a chat whose long system prompt replicas can cache.
func systemChat(system, question string) string {
	return `{"model":"sim","max_tokens":2,"messages":[{"role":"system","content":` + strconv.Quote(system) +
		`},{"role":"user","content":` + strconv.Quote(question) + `}]}`
}

// TestCostModelFollowsTheCache: on an idle fleet, requests sharing a long
// system prompt all go where the first one left it, find it cached, and
// name their policy.
func TestCostModelFollowsTheCache(t *testing.T) {
	sims := fleetOf(t, 3, true)
	cfg := testConfig(t, sims)
	cfg.Routing.DefaultPolicy = policy.CostModel
	gw := startGateway(t, cfg)
	system := strings.Repeat("You answer questions about the fleet. ", 60)
	resp, _ := chat(t, gw.url, systemChat(system, "first"))
	home := resp.Header.Get(openai.HeaderReplica)
	if got := resp.Header.Get(openai.HeaderPolicy); got != policy.CostModel {
		t.Fatalf("%s = %q, want %q", openai.HeaderPolicy, got, policy.CostModel)
	}
	for i := range 10 {
		resp, body := chat(t, gw.url, systemChat(system, fmt.Sprintf("question %d", i)))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		if got := resp.Header.Get(openai.HeaderReplica); got != home {
			t.Errorf("request %d went to %s, away from %s which holds its system prompt", i, got, home)
		}
		cached, _ := strconv.Atoi(resp.Header.Get(openai.HeaderCachedTokens))
		if cached < 300 {
			t.Errorf("request %d: predicted %d cached tokens, want the system prompt's", i, cached)
		}
	}
	page := scrape(t, gw.admin)
	if !strings.Contains(page, `inferrail_estimated_ttft_seconds_count{model="`+testModel+`",policy="cost_model"} 11`) {
		t.Errorf("estimated TTFT not recorded for every decision:\n%s", grep(page, "inferrail_estimated_ttft_seconds_count"))
	}
	// The system prompt was tokenized once; ten requests found it cached.
	hits := regexp.MustCompile(`inferrail_tokenize_cache_lookups_total\{model="` + regexp.QuoteMeta(testModel) + `",result="hit"\} (\d+)`).FindStringSubmatch(page)
	if hits == nil || hits[1] != "10" {
		t.Errorf("piece cache hits %v, want 10:\n%s", hits, grep(page, "inferrail_tokenize_cache_lookups_total"))
	}
}

// explainAt asks the admin port what routing would do with body.
func explainAt(t *testing.T, admin, path, body string) explainAnswer {
	t.Helper()
	resp, err := http.Post(admin+"/admin/explain"+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("explain: %d %s", resp.StatusCode, b)
	}
	var ans explainAnswer
	if err := json.Unmarshal(b, &ans); err != nil {
		t.Fatalf("explain answer %s: %v", b, err)
	}
	return ans
}

// stateLines are the metric lines an explanation must leave alone.
var stateLines = regexp.MustCompile(`(?m)^inferrail_(routing_decisions_total|tokenized_requests_total|prompt_tokens_total|predicted_cached_tokens_total|estimated_ttft_seconds_count|replica_in_flight|replica_index_blocks|index_entries)\b.*$`)

// TestExplainNamesTheNextPickAndChangesNothing: for every policy, an
// explanation changes no counter, index entry or policy state, and names
// the replica the same request is then routed to.
func TestExplainNamesTheNextPickAndChangesNothing(t *testing.T) {
	for _, name := range policy.Names() {
		t.Run(name, func(t *testing.T) {
			sims := fleetOf(t, 3, true)
			cfg := testConfig(t, sims)
			cfg.Routing.DefaultPolicy = name
			gw := startGateway(t, cfg)
			waitFor(t, "capacities learned from the engines", 3*time.Second, func() bool {
				return len(gw.g.index.Stats().Replicas) == 3
			})
			system := strings.Repeat("Shared instructions for every user. ", 40)
			for i := range 4 {
				chat(t, gw.url, systemChat(system, fmt.Sprintf("warm-up %d", i)))
			}
			body := systemChat(system, "the question explained")
			idle(t, gw)
			before := stateLines.FindAllString(scrape(t, gw.admin), -1)
			entries := gw.g.index.Stats().Entries
			ans := explainAt(t, gw.admin, "/v1/chat/completions", body)
			ans2 := explainAt(t, gw.admin, "/v1/chat/completions", body)
			if after := stateLines.FindAllString(scrape(t, gw.admin), -1); strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Errorf("explaining changed metrics:\n%s\n---\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
			}
			if gw.g.index.Stats().Entries != entries {
				t.Error("explaining changed the index")
			}
			if ans.Winner != ans2.Winner {
				t.Errorf("two explanations disagree: %s then %s", ans.Winner, ans2.Winner)
			}
			if ans.Policy != name || ans.Model != testModel || ans.Tokenized != tokOK || ans.PromptTokens == 0 || ans.Blocks == 0 {
				t.Errorf("explanation header %+v", ans.Explanation)
			}
			if len(ans.Replicas) != 3 {
				t.Fatalf("%d replicas explained, want 3", len(ans.Replicas))
			}
			for _, r := range ans.Replicas {
				if !r.Offered || r.Estimate.TTFTSecs <= 0 {
					t.Errorf("replica %+v: want offered with an estimate", r)
				}
			}
			resp, _ := chat(t, gw.url, body)
			if got := resp.Header.Get(openai.HeaderReplica); got != ans.Winner {
				t.Errorf("explain named %s, routing picked %s", ans.Winner, got)
			}
		})
	}
}

// TestExplainShowsWhatIsNotOffered: replicas out of rotation are listed
// with the reason, and only the others are priced.
func TestExplainShowsWhatIsNotOffered(t *testing.T) {
	sims := fleetOf(t, 2, true)
	cfg := testConfig(t, sims)
	cfg.Routing.DefaultPolicy = policy.CostModel
	gw := startGateway(t, cfg)
	sims[1].Kill()
	waitFor(t, "probes to take sim-2 out", 2*time.Second, func() bool {
		return !gw.g.fleet.Snapshot().Replicas[1].Healthy()
	})
	ans := explainAt(t, gw.admin, "/v1/completions", `{"model":"sim","prompt":"hello there","max_tokens":1}`)
	if ans.Winner != "sim-1" || ans.Replicas[1].Offered || ans.Replicas[1].NotOffered != notOfferedUnhealthy {
		t.Errorf("explanation %+v", ans)
	}
	// Bad bodies get the client port's errors.
	for _, tc := range []struct {
		body string
		code int
	}{{`{"model":`, 400}, {`{"model":"nope","prompt":"x"}`, 404}, {`[1]`, 400}} {
		resp, err := http.Post(gw.admin+"/admin/explain/v1/completions", "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("explain %s: status %d, want %d", tc.body, resp.StatusCode, tc.code)
		}
	}
}

// TestQueuedPrefill: a request waiting for its first byte holds its
// estimated prefill and prompt tokens on its replica; both are gone once
// it is answered.
func TestQueuedPrefill(t *testing.T) {
	sims := fleetOf(t, 1, true)
	cfg := testConfig(t, sims)
	cfg.Routing.DefaultPolicy = policy.CostModel
	gw := startGateway(t, cfg)
	sims[0].SetFault(sim.Fault{Kind: sim.FaultDelay, Delay: 600 * time.Millisecond, SparesHealth: true})
	done := make(chan struct{})
	go func() {
		defer close(done)
		chat(t, gw.url, systemChat(strings.Repeat("queued prompt ", 200), "q"))
	}()
	var view replicaView
	read := func() replicaView { return adminReplicas(t, gw.admin)["sim-1"] }
	waitFor(t, "the request to queue its prefill", 2*time.Second, func() bool {
		view = read()
		return view.QueuedPrefill > 0
	})
	if view.PromptWaiting < 500 || view.PromptTokens != view.PromptWaiting {
		t.Errorf("while waiting: %+v", view)
	}
	<-done
	// The client has its answer a moment before the lease is let go.
	waitFor(t, "the answered request to leave the queue", time.Second, func() bool {
		view = read()
		return view.InFlight == 0
	})
	if view.QueuedPrefill != 0 || view.PromptTokens != 0 || view.PromptWaiting != 0 {
		t.Errorf("after the answer: %+v", view)
	}
}

// idle waits until no request holds a lease: a client has its whole
// response a moment before the gateway lets go of it.
func idle(t *testing.T, gw *running) {
	t.Helper()
	waitFor(t, "every lease to be released", 2*time.Second, func() bool {
		for _, r := range gw.g.fleet.Snapshot().Replicas {
			if r.InFlight() != 0 {
				return false
			}
		}
		return true
	})
}

// TestRouteRequestSession: the conversation key is x-session-id, else the
// body's user field; without a tokenizer the prompt is estimated at four
// bytes of body a token.
func TestRouteRequestSession(t *testing.T) {
	g := &Gateway{}
	for _, tc := range []struct {
		header, body, want string
	}{
		{"conv-1", `{"model":"m","user":"alice"}`, "conv-1"},
		{"", `{"model":"m","user":"alice"}`, "alice"},
		{"", `{"model":"m","user":7}`, ""},
		{"", `{"model":"m"}`, ""},
		// Longer than maxSessionKey: named by its digest, the same one
		// from the header or the body, and another for another name.
		{strings.Repeat("h", maxSessionKey), `{"model":"m"}`, strings.Repeat("h", maxSessionKey)},
		{strings.Repeat("s", maxSessionKey+1), `{"model":"m"}`, "xxh3:556fc05e53f00299424b7ccea7b9cbc1"},
		{"", `{"model":"m","user":"` + strings.Repeat("s", maxSessionKey+1) + `"}`, "xxh3:556fc05e53f00299424b7ccea7b9cbc1"},
		{strings.Repeat("t", maxSessionKey+1), `{"model":"m"}`, "xxh3:5a7f290da9d9c1c4f60883cab5c4a7ed"},
	} {
		r, _ := http.NewRequest(http.MethodPost, "/v1/completions", nil)
		if tc.header != "" {
			r.Header.Set(openai.HeaderSession, tc.header)
		}
		mf, err := openai.FindModel([]byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		ex := &exchange{r: r, id: "req", model: "m", body: []byte(tc.body), sessionKey: sessionKey(tc.header, mf.User)}
		req := g.routeRequest(ex)
		if req.Session != tc.want || req.PromptTokens != len(tc.body)/bytesPerToken || req.ID != "req" || req.Blocks != nil {
			t.Errorf("header %q body %s: %+v, want session %q", tc.header, tc.body, req, tc.want)
		}
	}
}

// TestEngineQueuePriced: requests an engine holds waiting that the gateway
// did not send (here a client's, sent straight to the engine; in production
// most often another gateway's) are priced on that replica as queued
// prefill, each at the gateway's mean prefill there, less what the engine
// ran since its report, unless routing.engine_queue is off;
// routing.queue_floor prices every request the engine reports waiting so,
// whoever sent it, and never twice. The other replica is untouched.
func TestEngineQueuePriced(t *testing.T) {
	const meanSecs = 1.0
	for _, c := range []struct{ engineQueue, floor bool }{{true, false}, {false, false}, {false, true}, {true, true}} {
		t.Run(fmt.Sprintf("engine_queue=%v,queue_floor=%v", c.engineQueue, c.floor), func(t *testing.T) {
			sims := simsWith(t, 2, func(_ int, sc *sim.Config) {
				sc.MaxNumSeqs = 1 // one runs, the rest wait
				sc.MaxModelLen = 4096
			})
			cfg := testConfig(t, sims)
			cfg.Routing.DefaultPolicy = policy.CostModel
			cfg.Routing.EngineQueue, cfg.Routing.QueueFloor = c.engineQueue, c.floor
			maxAge := time.Duration(cfg.Load.MaxAge)
			gw := startGateway(t, cfg)
			var busy *fleet.Replica
			for _, r := range gw.g.fleet.Snapshot().Replicas {
				if r.ID == "sim-1" {
					busy = r
				}
			}
			// The gateway's own mean prefill on sim-1, from a request it
			// queued and saw answered.
			lease, ok := busy.TryAcquire()
			if !ok {
				t.Fatal("no lease on sim-1")
			}
			lease.Queue(time.Now(), meanSecs, 0, 100)
			lease.FirstByte(time.Now())
			lease.Release()

			// Four long chats straight to sim-1: one runs, three wait.
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer func() { cancel(); wg.Wait() }()
			for range 4 {
				wg.Go(func() {
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, sims[0].URL()+"/v1/chat/completions",
						strings.NewReader(`{"model":"`+testModel+`","max_tokens":400,"messages":[{"role":"user","content":"long answer"}]}`))
					req.Header.Set("Content-Type", "application/json")
					if resp, err := http.DefaultClient.Do(req); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				})
			}
			var read load.Routing
			waitFor(t, "the gateway to read sim-1's waiting requests as not its own", 5*time.Second, func() bool {
				r, ok := gw.g.scraper.Feed("sim-1").FreshRouting(clock.Of(time.Now()))
				read = r
				return ok && r.Foreign >= 2 && r.Waiting >= 2
			})
			// Candidates carry the engine's waiting count (backlog_cost
			// charges by it), from the report the feed holds.
			for _, rt := range gw.g.routes(gw.g.current()).model(testModel).routes {
				var cand policy.Candidate
				now := clock.Of(time.Now())
				gw.g.candidate(&cand, &rt, now)
				if r, ok := rt.feed.FreshRouting(now); rt.ID == "sim-1" && (!ok || cand.Waiting != r.Waiting || cand.Waiting < 2) {
					t.Errorf("sim-1's candidate has %v waiting, its fresh report (%v) %v", cand.Waiting, ok, r.Waiting)
				}
			}
			views := adminReplicas(t, gw.admin)
			if v := views["sim-1"]; v.Engine == nil || v.Engine.ForeignWaiting < 2 || v.MeanPrefill != meanSecs {
				t.Errorf("/admin/replicas shows sim-1 as %+v (engine %+v): want 2 or more foreign waiting and a mean prefill of %v s",
					v, v.Engine, meanSecs)
			}
			ans := explainAt(t, gw.admin, "/v1/chat/completions", systemChat("a system prompt", "where to?"))
			for _, r := range ans.Replicas {
				switch {
				case r.ID == "sim-2" && r.QueuedSecs != 0:
					t.Errorf("sim-2, with nothing waiting, priced %v s queued", r.QueuedSecs)
				case r.ID != "sim-1":
				case !c.engineQueue && !c.floor && r.QueuedSecs != 0:
					t.Errorf("sim-1 priced %v s queued with engine_queue and queue_floor off", r.QueuedSecs)
				case c.floor && r.QueuedSecs < 2*meanSecs-1e-9:
					t.Errorf("sim-1 priced %v s queued, want the %v waiting there (last read) at %v s each", r.QueuedSecs, read.Waiting, meanSecs)
				case c.engineQueue && r.QueuedSecs < 2*meanSecs-maxAge.Seconds()-1e-9:
					// What the engine has worked off since its report was
					// read, at most the report's age, is not priced.
					t.Errorf("sim-1 priced %v s queued, want the %v waiting there (last read) at %v s each, less at most %v run since", r.QueuedSecs, read.Waiting, meanSecs, maxAge)
				case r.QueuedSecs > 3*meanSecs+1e-9:
					// At most three wait: counted twice, two would be four.
					t.Errorf("sim-1 priced %v s queued, more than the requests it holds (last read %+v)", r.QueuedSecs, read)
				}
			}
		})
	}
}

func TestForeignLeft(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		secs float64
		age  time.Duration
		pace float64
		want float64
	}{
		{0.6, 0, 0, 0.6},          // read just now: all of it ahead
		{0.6, 250 * ms, 0, 0.35},  // a quarter second run since
		{0.6, 250 * ms, 1, 0.35},  // at the estimate's pace
		{0.6, 250 * ms, 2.5, 0.5}, // a slow engine ran a tenth of a second of estimate
		{0.6, time.Second, 0, 0},  // all of it run, and more
		{0, 100 * ms, 0, 0},
	}
	for _, tt := range tests {
		if got := foreignLeft(tt.secs, tt.age, tt.pace); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("foreignLeft(%v, %v, %v) = %v, want %v", tt.secs, tt.age, tt.pace, got, tt.want)
		}
	}
}

// adminReplicas reads /admin/replicas, by replica ID.
func adminReplicas(t *testing.T, admin string) map[string]replicaView {
	t.Helper()
	resp, err := http.Get(admin + "/admin/replicas")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Replicas []replicaView }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	views := map[string]replicaView{}
	for _, v := range out.Replicas {
		views[v.ID] = v
	}
	return views
}

// TestQueueFloorForgetsStartedRequests: routing.queue_floor prices the
// requests an engine reported waiting only while they can still be waiting.
// Requests the gateway sent wait on a one-slot engine and are priced; once
// they have ended, the engine's report from before (still fresh, scrapes
// being seconds apart here) prices nothing, since neither the gateway's own
// requests without a first byte nor anyone else's remain.
func TestQueueFloorForgetsStartedRequests(t *testing.T) {
	sims := simsWith(t, 1, func(_ int, sc *sim.Config) {
		sc.MaxNumSeqs = 1 // one runs, the rest wait
		sc.MaxModelLen = 4096
	})
	cfg := testConfig(t, sims)
	cfg.Routing.DefaultPolicy = policy.CostModel
	cfg.Routing.QueueFloor = true
	cfg.Load.ScrapeInterval, cfg.Load.MaxAge = config.Duration(3*time.Second), config.Duration(time.Minute)
	gw := startGateway(t, cfg)
	rep := gw.g.fleet.Snapshot().Get("sim-1")
	feed := gw.g.scraper.Feed("sim-1")
	sim1Queued := func() float64 {
		for _, r := range explainAt(t, gw.admin, "/v1/chat/completions", systemChat("a system prompt", "where to?")).Replicas {
			if r.ID == "sim-1" {
				return r.QueuedSecs
			}
		}
		t.Fatal("explain left sim-1 out")
		return 0
	}
	// A scrape can land between the requests ending and the explanation;
	// then the engine's new count is the truth and the round tells
	// nothing, so it is tried again.
	for round := range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.url+"/v1/chat/completions",
					strings.NewReader(`{"model":"sim","max_tokens":2000,"ignore_eos":true,"stream":true,"messages":[{"role":"user","content":"long answer"}]}`))
				req.Header.Set("Content-Type", "application/json")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		waitFor(t, "a report of the gateway's requests waiting on sim-1", 10*time.Second, func() bool {
			r, ok := feed.FreshRouting(clock.Of(time.Now()))
			own, _ := rep.Unanswered()
			return ok && r.Waiting >= 2 && own >= 2
		})
		if q := sim1Queued(); q <= 0 {
			t.Errorf("round %d: sim-1 priced nothing queued with requests waiting there", round)
		}
		seen := feed.Last()
		cancel()
		wg.Wait()
		waitFor(t, "the gateway's requests on sim-1 to end", 5*time.Second, func() bool {
			own, _ := rep.Unanswered()
			return own == 0
		})
		q := sim1Queued()
		if feed.Last() != seen {
			continue
		}
		if r, _ := feed.FreshRouting(clock.Of(time.Now())); r.Foreign != 0 {
			t.Fatalf("the report counts %v requests as another's; the test sent them all through the gateway", r.Foreign)
		}
		if q != 0 {
			t.Errorf("sim-1 priced %v s queued for requests that have ended (its report, still fresh, says %v waiting)", q, seen.Report.Waiting)
		}
		return
	}
	t.Fatal("every round was cut by a scrape")
}

// TestSessionKeyNotUTF8: a conversation name that is not UTF-8 is named by
// its digest. Logs write strings as UTF-8, a bad byte as U+FFFD, so kept as
// sent two such names would be one name in the shadow log, and its replay
// would disagree with the live picks.
func TestSessionKeyNotUTF8(t *testing.T) {
	a, b := sessionKey("s\x80\x80", ""), sessionKey("s\x81\x81", "")
	if !strings.HasPrefix(a, "xxh3:") || !strings.HasPrefix(b, "xxh3:") || a == b {
		t.Errorf("names not UTF-8 keyed %q and %q, want two distinct digests", a, b)
	}
	if got := sessionKey("", "s\x80\x80"); got != a {
		t.Errorf("the same name from the body keyed %q, from the header %q", got, a)
	}
	if got := sessionKey("café-1", ""); got != "café-1" {
		t.Errorf("a UTF-8 name keyed %q, want it as sent", got)
	}
}
