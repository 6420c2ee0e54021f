package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/policy"
	dto "github.com/prometheus/client_model/go"
)

// scriptedEngine is a stand-in vLLM engine whose load report a test sets:
// its /metrics page shows the running requests, KV cache use and prefix
// cache counters of the test's choosing. It answers every generation with a
// small completion at once, or holds it while the test keeps it gated.
type scriptedEngine struct {
	srv *httptest.Server

	mu       sync.Mutex
	running  int
	kvUsage  float64
	queries  int           // prefix cache queries; lowering them reads as a restart
	down     bool          // /health answers 503
	noReport bool          // /metrics answers 404
	gate     chan struct{} // while non-nil, generations wait for it to close
	received int           // generations received
}

func newScriptedEngine(t testing.TB) *scriptedEngine {
	t.Helper()
	e := &scriptedEngine{kvUsage: 0.1}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *scriptedEngine) serve(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	running, kv, queries, down, noReport, gate := e.running, e.kvUsage, e.queries, e.down, e.noReport, e.gate
	e.mu.Unlock()
	switch r.URL.Path {
	case "/health":
		if down {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	case "/v1/models":
		_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
	case "/metrics":
		if noReport {
			http.NotFound(w, r)
			return
		}
		l := `{engine="0",model_name="` + testModel + `"}`
		fmt.Fprintf(w, "vllm:num_requests_running%s %d\nvllm:num_requests_waiting%s 0\nvllm:kv_cache_usage_perc%s %g\n"+
			"vllm:prefix_cache_queries_total%s %d\nvllm:prefix_cache_hits_total%s %d\n",
			l, running, l, l, kv, l, queries, l, queries/2)
	case "/v1/chat/completions", "/v1/completions":
		_, _ = io.Copy(io.Discard, r.Body)
		e.mu.Lock()
		e.received++
		e.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	default:
		http.NotFound(w, r)
	}
}

// set changes the engine's state under its lock.
func (e *scriptedEngine) set(f func(e *scriptedEngine)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f(e)
}

func (e *scriptedEngine) receivedCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.received
}

// hold makes generations wait until the returned release is called.
func (e *scriptedEngine) hold() (release func()) {
	gate := make(chan struct{})
	e.set(func(e *scriptedEngine) { e.gate = gate })
	var once sync.Once
	return func() {
		once.Do(func() {
			e.set(func(e *scriptedEngine) { e.gate = nil })
			close(gate)
		})
	}
}

// scriptedConfig is a gateway config routing testModel with cost_model and
// session affinity over engines e0, e1, ... Engine reports stay fresh for a
// minute, so that a report a test waited for is still the one a decision
// reads on a slow machine, and probes are slow enough that only an engine
// a test takes down fails them.
func scriptedConfig(engines ...*scriptedEngine) *config.Config {
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: testModel, Aliases: []string{"sim"}, Tokenizer: "builtin:sim", Policy: policy.CostModel}}
	for i, e := range engines {
		cfg.Replicas = append(cfg.Replicas, config.Replica{ID: fmt.Sprintf("e%d", i), URL: e.srv.URL, Models: []string{testModel}, MaxConcurrency: 64, MaxPending: 64})
	}
	cfg.Routing.SessionAffinity = true
	cfg.Routing.Seed = 1
	cfg.Health.Interval = config.Duration(200 * time.Millisecond)
	cfg.Health.Timeout = config.Duration(200 * time.Millisecond)
	cfg.Load.ScrapeInterval = config.Duration(50 * time.Millisecond)
	cfg.Load.ScrapeTimeout = config.Duration(time.Second)
	cfg.Load.MaxAge = config.Duration(time.Minute)
	cfg.Server.RequestTimeout = config.Duration(20 * time.Second)
	cfg.Server.ShutdownTimeout = config.Duration(5 * time.Second)
	return &cfg
}

// promptOf is a completion body whose prompt is n token ids, starting at
// first: prompts with the same first share their prefix.
func promptOf(model string, first, n int) string {
	var b strings.Builder
	b.WriteString(`{"model":` + strconv.Quote(model) + `,"max_tokens":1,"prompt":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(first + i))
	}
	b.WriteString("]}")
	return b.String()
}

// sent is what a client got back, for requests sent from goroutines.
type sent struct {
	replica string
	status  int
	err     error
	// held is the response's X-Inferrail-Gateway-Ms; took the client's
	// time from sending to the end of the body.
	held, took time.Duration
}

// sendCompletion posts a completion from any goroutine.
func sendCompletion(url, body string, header ...string) sent {
	req, err := http.NewRequest(http.MethodPost, url+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return sent{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return sent{err: err}
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	s := sent{replica: resp.Header.Get(openai.HeaderReplica), status: resp.StatusCode, err: err, took: time.Since(start), held: -1}
	if ms, perr := strconv.ParseFloat(resp.Header.Get(openai.HeaderGatewayMs), 64); perr == nil {
		s.held = time.Duration(ms * float64(time.Millisecond))
	}
	return s
}

// complete sends a completion and fails the test unless it succeeds; it
// returns the replica that served it.
func complete(t *testing.T, url, body string, header ...string) string {
	t.Helper()
	s := sendCompletion(url, body, header...)
	if s.err != nil || s.status != http.StatusOK {
		t.Fatalf("completion: status %d, %v", s.status, s.err)
	}
	return s.replica
}

// counterValue is the value of a counter's series with exactly the given
// label pairs, as the gateway's registry exports it; 0 when absent.
func counterValue(t testing.TB, gw *running, family string, labels ...string) float64 {
	t.Helper()
	return series(t, gw, family, labels).GetCounter().GetValue()
}

// series is the series of a family with exactly the given label pairs, as
// the gateway's registry exports it; nil when absent (whose getters give
// zeros).
func series(t testing.TB, gw *running, family string, labels []string) *dto.Metric {
	t.Helper()
	mfs, err := gw.g.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m.GetLabel(), labels) {
				return m
			}
		}
	}
	return nil
}

func hasLabels(got []*dto.LabelPair, want []string) bool {
	if len(got)*2 != len(want) {
		return false
	}
	for _, lp := range got {
		found := false
		for i := 0; i+1 < len(want); i += 2 {
			found = found || (want[i] == lp.GetName() && want[i+1] == lp.GetValue())
		}
		if !found {
			return false
		}
	}
	return true
}

// waitReport waits until the gateway reads engine id's report as fresh and
// as ok says.
func waitReport(t *testing.T, gw *running, id string, ok func(running, kvUsage, queries float64) bool) {
	t.Helper()
	waitFor(t, "engine "+id+"'s report", 5*time.Second, func() bool {
		rep, fresh := gw.g.scraper.Fresh(id, time.Now())
		return fresh && ok(rep.Running, rep.KVUsage, rep.PrefixQueries)
	})
}

// sessionPastBoundedLoad sends three requests of one conversation to
// cost_model over three engines that hold every generation. The second
// goes back to the first's replica (steered by the session); the third
// would give that replica 3 of 3 requests in flight, over the bounded-load
// cap of ceil(2·3/3) = 2, so the guard sets it aside. It releases the
// engines and checks every request succeeded before it returns, and
// reports what was counted after each step.
func sessionPastBoundedLoad(t *testing.T, gw *running, model string, engines []*scriptedEngine, after func(step int)) {
	t.Helper()
	if len(engines) != 3 {
		t.Fatalf("%d engines, want 3", len(engines))
	}
	var releases []func()
	for _, e := range engines {
		releases = append(releases, e.hold())
	}
	results := make(chan sent, 3)
	defer func() {
		for _, release := range releases {
			release()
		}
	}()
	received := func() int {
		n := 0
		for _, e := range engines {
			n += e.receivedCount()
		}
		return n
	}
	base := received()
	body := promptOf(model, 1000, 40)
	for step := 1; step <= 3; step++ {
		go func() { results <- sendCompletion(gw.url, body, openai.HeaderSession, "conv-bounded") }()
		// An engine receives a request after its decision was counted.
		waitFor(t, fmt.Sprintf("request %d to reach an engine", step), 5*time.Second, func() bool { return received() == base+step })
		after(step)
	}
	for _, release := range releases {
		release()
	}
	for range 3 {
		if s := <-results; s.err != nil || s.status != http.StatusOK {
			t.Errorf("held request: status %d, %v", s.status, s.err)
		}
	}
}

// TestRoutingGuardsAndSteeringCounted creates, through the gateway, each
// situation in which cost_model's load guards act or something steers a
// decision, and checks that inferrail_routing_guards_total and
// inferrail_routing_steered_total count it under the label the spec names,
// and only then.
func TestRoutingGuardsAndSteeringCounted(t *testing.T) {
	guards := func(gw *running, guard string) float64 {
		return counterValue(t, gw, "inferrail_routing_guards_total", "model", testModel, "guard", guard)
	}
	steered := func(gw *running, reason string) float64 {
		return counterValue(t, gw, "inferrail_routing_steered_total", "model", testModel, "reason", reason)
	}

	t.Run("bounded_load_and_session", func(t *testing.T) {
		engines := []*scriptedEngine{newScriptedEngine(t), newScriptedEngine(t), newScriptedEngine(t)}
		gw := startGateway(t, scriptedConfig(engines...))
		inFlight := func() []int64 {
			var out []int64
			for _, r := range gw.g.fleet.Snapshot().Replicas {
				out = append(out, r.InFlight())
			}
			return out
		}
		sessionPastBoundedLoad(t, gw, "sim", engines, func(step int) {
			wantSession, wantBounded := map[int]float64{1: 0, 2: 1, 3: 1}[step], map[int]float64{1: 0, 2: 0, 3: 1}[step]
			if got := steered(gw, policy.SteerSession); got != wantSession {
				t.Errorf("after request %d: steered{reason=session} = %v, want %v", step, got, wantSession)
			}
			if got := guards(gw, policy.GuardBoundedLoad); got != wantBounded {
				t.Errorf("after request %d: guards{guard=bounded_load} = %v, want %v", step, got, wantBounded)
			}
			loads := inFlight()
			busiest := 0
			for _, n := range loads {
				busiest = max(busiest, int(n))
			}
			if want := min(step, 2); busiest != want {
				t.Errorf("after request %d: in flight %v, want the conversation's replica at %d", step, loads, want)
			}
		})
		for _, g := range []string{policy.GuardKVPressure, policy.GuardKVWaived} {
			if got := guards(gw, g); got != 0 {
				t.Errorf("guards{guard=%s} = %v without KV pressure", g, got)
			}
		}
	})

	t.Run("kv_pressure_and_kv_waived", func(t *testing.T) {
		engines := []*scriptedEngine{newScriptedEngine(t), newScriptedEngine(t)}
		gw := startGateway(t, scriptedConfig(engines...))
		long := promptOf("sim", 2000, 700) // 700 tokens to compute, over short_prompt_tokens (256)
		engines[0].set(func(e *scriptedEngine) { e.kvUsage = 0.99 })
		waitReport(t, gw, "e0", func(_, kv, _ float64) bool { return kv == 0.99 })
		waitReport(t, gw, "e1", func(_, kv, _ float64) bool { return kv == 0.1 })
		// A short prompt is not held back by KV pressure.
		complete(t, gw.url, promptOf("sim", 5000, 100))
		if got := guards(gw, policy.GuardKVPressure); got != 0 {
			t.Errorf("guards{guard=kv_pressure} = %v after a short prompt, want 0", got)
		}
		if got := complete(t, gw.url, long); got != "e1" {
			t.Errorf("a long prompt went to %s, whose KV cache is 99%% full", got)
		}
		if got := guards(gw, policy.GuardKVPressure); got != 1 {
			t.Errorf("guards{guard=kv_pressure} = %v, want 1", got)
		}
		engines[1].set(func(e *scriptedEngine) { e.kvUsage = 0.95 })
		waitReport(t, gw, "e1", func(_, kv, _ float64) bool { return kv == 0.95 })
		complete(t, gw.url, promptOf("sim", 3000, 700))
		if got, pressure := guards(gw, policy.GuardKVWaived), guards(gw, policy.GuardKVPressure); got != 1 || pressure != 1 {
			t.Errorf("every replica under pressure: guards{guard=kv_waived} = %v, kv_pressure = %v; want 1 and 1", got, pressure)
		}
		if got := guards(gw, policy.GuardBoundedLoad); got != 0 {
			t.Errorf("guards{guard=bounded_load} = %v with one request at a time", got)
		}
	})

	t.Run("hot_prefix", func(t *testing.T) {
		// A prefill of 40 s makes one request's root prefix hot: about 4 s
		// of prefill per second against a utilization of 0.5, for some 20 s
		// of decay, so both replicas own it, and the one that does not hold
		// the prompt is priced as holding its hot 32-block prefix
		// (multiples of 16 blocks are counted).
		engines := []*scriptedEngine{newScriptedEngine(t), newScriptedEngine(t)}
		cfg := scriptedConfig(engines...)
		fixed := 40.0
		cfg.Models[0].CostModel = &config.CostModelOverride{PrefillFixedSecs: &fixed}
		gw := startGateway(t, cfg)
		prompt := promptOf("sim", 7000, 700) // 43 full blocks and 12 tokens
		home := complete(t, gw.url, prompt)
		if got := steered(gw, policy.SteerHotPrefix); got != 0 {
			t.Fatalf("steered{reason=hot_prefix} = %v before the prefix was hot", got)
		}
		other := map[string]string{"e0": "e1", "e1": "e0"}[home]
		// 60 running requests put 30 ms of decode interference ahead of
		// the prompt at home: less than the 70 ms of prefill the other
		// replica saves only through its credit (it computes 188 tokens
		// instead of 700), more than the 18 ms it computes for real beyond
		// home's 12.
		homeEngine := engines[map[string]int{"e0": 0, "e1": 1}[home]]
		homeEngine.set(func(e *scriptedEngine) { e.running = 60 })
		waitReport(t, gw, home, func(running, _, _ float64) bool { return running == 60 })
		idle(t, gw)
		if got := complete(t, gw.url, prompt); got != other {
			t.Errorf("the hot prompt went to %s, want %s, the other owner", got, other)
		}
		if got := steered(gw, policy.SteerHotPrefix); got != 1 {
			t.Errorf("steered{reason=hot_prefix} = %v, want 1", got)
		}
	})

	t.Run("no_prefix", func(t *testing.T) {
		engines := []*scriptedEngine{newScriptedEngine(t), newScriptedEngine(t)}
		cfg := scriptedConfig(engines...)
		cfg.Models[0].Policy = policy.PrefixHash
		gw := startGateway(t, cfg)
		complete(t, gw.url, promptOf("sim", 1, 64)) // 4 full blocks to hash
		if got := steered(gw, policy.SteerNoPrefix); got != 0 {
			t.Errorf("steered{reason=no_prefix} = %v after a prompt with full blocks, want 0", got)
		}
		complete(t, gw.url, promptOf("sim", 1, 10)) // no full block
		if got := steered(gw, policy.SteerNoPrefix); got != 1 {
			t.Errorf("steered{reason=no_prefix} = %v, want 1", got)
		}
	})
}

// countRestart makes engine e, replica id, look restarted: the gateway
// reads its prefix cache counters higher, then back at zero. It returns once
// inferrail_index_resets_total has counted the restart.
func countRestart(t *testing.T, gw *running, e *scriptedEngine, id string) {
	t.Helper()
	before := counterValue(t, gw, "inferrail_index_resets_total", "replica", id)
	var queries int
	e.set(func(e *scriptedEngine) { e.queries += 100; queries = e.queries })
	waitFor(t, "engine "+id+"'s counters to be read", 5*time.Second, func() bool {
		smp := gw.g.scraper.Last(id)
		return smp != nil && smp.Report.PrefixQueries == float64(queries)
	})
	e.set(func(e *scriptedEngine) { e.queries = 0 })
	waitFor(t, "engine "+id+"'s restart to be counted", 5*time.Second, func() bool {
		return counterValue(t, gw, "inferrail_index_resets_total", "replica", id) == before+1
	})
}

// TestIndexResetCounted: an engine whose prefix cache counters go
// backwards has restarted; the index drops what it predicted there and
// inferrail_index_resets_total counts it for that replica.
func TestIndexResetCounted(t *testing.T) {
	engines := []*scriptedEngine{newScriptedEngine(t), newScriptedEngine(t)}
	for _, e := range engines {
		e.set(func(e *scriptedEngine) { e.queries = 500 })
	}
	gw := startGateway(t, scriptedConfig(engines...))
	held := func(id string) int {
		for _, r := range gw.g.index.Stats().Replicas {
			if r.ID == id {
				return r.Held
			}
		}
		return 0
	}
	victim := complete(t, gw.url, promptOf("sim", 1, 160))
	if held(victim) != 10 {
		t.Fatalf("index holds %d blocks on %s, want the prompt's 10", held(victim), victim)
	}
	if got := counterValue(t, gw, "inferrail_index_resets_total", "replica", victim); got != 0 {
		t.Fatalf("resets{replica=%s} = %v before any restart", victim, got)
	}
	countRestart(t, gw, engines[map[string]int{"e0": 0, "e1": 1}[victim]], victim)
	if held(victim) != 0 {
		t.Errorf("index still holds %d blocks on %s after its engine restarted", held(victim), victim)
	}
	other := map[string]string{"e0": "e1", "e1": "e0"}[victim]
	if got := counterValue(t, gw, "inferrail_index_resets_total", "replica", other); got != 0 {
		t.Errorf("resets{replica=%s} = %v, but only %s restarted", other, got, victim)
	}
}

// TestExplainMarksUnknownAsNull: /admin/explain shows a field it cannot
// know for a replica as null, not as a zero that reads as idle or
// uncached: the engine's running and KV use without a fresh report, the
// prediction of a prompt that was not tokenized, and the policy's pricing
// of a replica it was not offered. What is known of a replica that was not
// offered (its load and predicted cache) is shown.
func TestExplainMarksUnknownAsNull(t *testing.T) {
	engines := []*scriptedEngine{newScriptedEngine(t), newScriptedEngine(t), newScriptedEngine(t)}
	engines[0].set(func(e *scriptedEngine) { e.running, e.kvUsage = 2, 0.25 })
	engines[1].set(func(e *scriptedEngine) { e.noReport = true })
	engines[2].set(func(e *scriptedEngine) { e.running, e.kvUsage = 5, 0.5 })
	gw := startGateway(t, scriptedConfig(engines...))
	body := systemChat(strings.Repeat("Shared instructions. ", 20), "explained")
	// e2 holds the prompt's blocks, as if it had served it before it went
	// down.
	pred, _ := tokenizeBody(gw.g.tokenizers[testModel], testModel, []byte(body), true, noContext, nil)
	gw.g.index.Record("e2", pred.hashes)
	e2Cached := min(len(pred.hashes), (pred.tokens-1)/16) * 16
	if e2Cached == 0 {
		t.Fatal("the prompt has no block to cache")
	}
	waitReport(t, gw, "e0", func(running, _, _ float64) bool { return running == 2 })
	waitReport(t, gw, "e2", func(running, _, _ float64) bool { return running == 5 })
	engines[2].set(func(e *scriptedEngine) { e.down = true })
	waitFor(t, "probes to take e2 out", 5*time.Second, func() bool {
		return !gw.g.fleet.Snapshot().Get("e2").Healthy()
	})

	explainRaw := func(body string) (tokenized string, reps map[string]map[string]json.RawMessage) {
		t.Helper()
		resp, err := http.Post(gw.admin+"/admin/explain/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var ans struct {
			Tokenized string                       `json:"tokenized"`
			Replicas  []map[string]json.RawMessage `json:"replicas"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &ans) != nil {
			t.Fatalf("explain: %d %s", resp.StatusCode, b)
		}
		reps = map[string]map[string]json.RawMessage{}
		for _, r := range ans.Replicas {
			var id string
			_ = json.Unmarshal(r["replica"], &id)
			reps[id] = r
		}
		return ans.Tokenized, reps
	}
	check := func(what string, reps map[string]map[string]json.RawMessage, want map[string]map[string]string) {
		t.Helper()
		for id, fields := range want {
			for field, v := range fields {
				got, ok := reps[id][field]
				switch {
				case !ok:
					t.Errorf("%s: %s has no %s, want %s", what, id, field, v)
				case v == anEstimate && !isEstimate(got):
					t.Errorf("%s: %s.%s = %s, want an estimate", what, id, field, got)
				case v != anEstimate && string(got) != v:
					t.Errorf("%s: %s.%s = %s, want %s", what, id, field, got, v)
				}
			}
		}
	}

	tokenized, reps := explainRaw(body)
	if tokenized != tokOK || len(reps) != 3 {
		t.Fatalf("tokenized %q, %d replicas; want %q and 3", tokenized, len(reps), tokOK)
	}
	check("tokenized prompt", reps, map[string]map[string]string{
		"e0": {"offered": "true", "running": "2", "kv_usage": "0.25", "cached_tokens": "0", "queued_secs": "0", "priced_cached_tokens": "0", "estimate": anEstimate},
		"e1": {"offered": "true", "running": "null", "kv_usage": "null", "cached_tokens": "0", "queued_secs": "0", "priced_cached_tokens": "0", "estimate": anEstimate},
		"e2": {"offered": "false", "not_offered": `"` + notOfferedUnhealthy + `"`, "in_flight": "0", "running": "5", "kv_usage": "0.5",
			"cached_tokens": strconv.Itoa(e2Cached), "queued_secs": "0", "priced_cached_tokens": "null", "estimate": "null"},
	})

	// A prompt the tokenizer cannot follow has no prediction anywhere.
	tokenized, reps = explainRaw(`{"model":"sim","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`)
	if tokenized != tokUnsupported {
		t.Fatalf("tokenized %q, want %q", tokenized, tokUnsupported)
	}
	check("untokenized prompt", reps, map[string]map[string]string{
		"e0": {"cached_tokens": "null", "priced_cached_tokens": "0", "estimate": anEstimate},
		"e2": {"cached_tokens": "null", "priced_cached_tokens": "null", "estimate": "null"},
	})
}

// anEstimate stands for any estimate in TestExplainMarksUnknownAsNull's
// expectations.
const anEstimate = "<estimate>"

// isEstimate reports whether raw is an estimate with a positive TTFT.
func isEstimate(raw json.RawMessage) bool {
	var e policy.Estimate
	return json.Unmarshal(raw, &e) == nil && e.TTFTSecs > 0
}
