package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/decisionlog"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/policy"
	"github.com/inferrail/inferrail/internal/sim"
	"github.com/inferrail/inferrail/internal/syncbuf"
	"github.com/inferrail/inferrail/internal/telemetry"
	"github.com/inferrail/inferrail/internal/telemetry/otlptest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// startObserved starts a gateway for cfg whose spans, when exp is not
// nil, go to exp (cfg's own OTLP endpoint is then left unset).
func startObserved(t *testing.T, cfg *config.Config, exp *tracetest.InMemoryExporter) *running {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	g, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	if exp != nil {
		if g.obs.tracer, err = telemetry.New(context.Background(), telemetry.Options{Exporter: exp, SampleRatio: 1, Service: traceService}); err != nil {
			t.Fatal(err)
		}
	}
	return serveGateway(t, g, logs)
}

// stop ends Serve now, before the test's end, and waits for it.
func (rg *running) stop() {
	rg.cancel()
	select {
	case <-rg.done:
	case <-time.After(10 * time.Second):
		panic("gateway did not stop")
	}
}

// spanAttrs are a span's attributes by key.
func spanAttrs(kvs []attribute.KeyValue) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

// tracedSims starts n zero-latency simulators exporting their spans to
// a receiver of their own.
func tracedSims(t *testing.T, n int) ([]*sim.Local, *otlptest.Receiver) {
	t.Helper()
	rcv := otlptest.NewHTTP(t)
	sims := simsWith(t, n, func(_ int, cfg *sim.Config) {
		cfg.ZeroLatency, cfg.MaxModelLen, cfg.NumGPUBlocks, cfg.EnablePromptTokensDetails = true, 4096, 1024, true
		cfg.OTLPTracesEndpoint, cfg.OTLPTracesProtocol = rcv.Endpoint, telemetry.ProtocolHTTP
	})
	return sims, rcv
}

const (
	clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan  = "00f067aa0ba902b7"
)

// TestTraceSpans follows a request from a client that sent a traceparent
// through the gateway into a simulator: the gateway's server, route and
// upstream spans with their attributes, all in the client's trace, and the
// engine's own span, whose parent is the gateway's upstream span.
func TestTraceSpans(t *testing.T) {
	sims, engineSpans := tracedSims(t, 2)
	cfg := testConfig(t, sims)
	cfg.Routing.DefaultPolicy = policy.CostModel
	exp := tracetest.NewInMemoryExporter()
	gw := startObserved(t, cfg, exp)
	resp, _ := chat(t, gw.url, chatBody("trace me", ""), "traceparent", "00-"+clientTrace+"-"+clientSpan+"-01",
		"tracestate", "vendor=abc", openai.HeaderRequestID, "req-traced")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	winner := resp.Header.Get(openai.HeaderReplica)
	if err := gw.g.obs.tracer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	byName := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		byName[s.Name] = s
	}
	server, route, up := byName["POST /v1/chat/completions"], byName[spanRoute], byName[spanUpstream]
	if len(exp.GetSpans()) != 3 || server.Name == "" || route.Name == "" || up.Name == "" {
		t.Fatalf("spans %v: want the server, route and upstream spans", exp.GetSpans().Snapshots())
	}
	for _, s := range []tracetest.SpanStub{server, route, up} {
		if s.SpanContext.TraceID().String() != clientTrace {
			t.Errorf("%s: trace %s, want the client's", s.Name, s.SpanContext.TraceID())
		}
	}
	if server.Parent.SpanID().String() != clientSpan || server.SpanKind != trace.SpanKindServer {
		t.Errorf("server span: parent %s kind %v, want the client's span and server", server.Parent.SpanID(), server.SpanKind)
	}
	if route.Parent.SpanID() != server.SpanContext.SpanID() || up.Parent.SpanID() != server.SpanContext.SpanID() || up.SpanKind != trace.SpanKindClient {
		t.Errorf("route and upstream spans are not the server span's children")
	}
	sa := spanAttrs(server.Attributes)
	if sa["http.response.status_code"].AsInt64() != 200 || sa[string(attrRequestID)].AsString() != "req-traced" ||
		sa[string(attrModel)].AsString() != testModel || sa["http.request.method"].AsString() != "POST" {
		t.Errorf("server attributes %v", sa)
	}
	ra := spanAttrs(route.Attributes)
	for key, ok := range map[attribute.Key]bool{
		attrPolicy:        ra[string(attrPolicy)].AsString() == policy.CostModel,
		attrArm:           ra[string(attrArm)].Type() == attribute.STRING && ra[string(attrArm)].AsString() == "",
		attrAttempt:       ra[string(attrAttempt)].AsInt64() == 1,
		attrWinner:        ra[string(attrWinner)].AsString() == winner,
		attrCandidates:    ra[string(attrCandidates)].AsInt64() == 2,
		attrEstimatedTTFT: ra[string(attrEstimatedTTFT)].AsFloat64() > 0,
		attrPromptTokens:  ra[string(attrPromptTokens)].AsInt64() > 0,
		attrCachedTokens:  ra[string(attrCachedTokens)].Type() == attribute.INT64,
		attrTokenized:     ra[string(attrTokenized)].AsString() == tokOK,
		attrGuards:        ra[string(attrGuards)].Type() == attribute.STRINGSLICE,
		attrInFlight:      ra[string(attrInFlight)].Type() == attribute.INT64,
		attrDecision:      ra[string(attrDecision)].AsFloat64() > 0,
	} {
		if !ok {
			t.Errorf("route span's %s = %v", key, ra[string(key)].String())
		}
	}
	ua := spanAttrs(up.Attributes)
	if ua[string(attrReplica)].AsString() != winner || ua["http.response.status_code"].AsInt64() != 200 ||
		ua[string(attrFirstByte)].AsFloat64() <= 0 || len(up.Events) != 1 || up.Events[0].Name != "first_byte" {
		t.Errorf("upstream attributes %v events %v", ua, up.Events)
	}
	// The engine continued the trace under the upstream span.
	got := engineSpans.WaitFor(t, "the engine's span", 10*time.Second, func(s []otlptest.Span) bool { return len(s) > 0 })
	if len(got) != 1 || got[0].TraceID != clientTrace || got[0].ParentID != up.SpanContext.SpanID().String() ||
		got[0].TraceState != "vendor=abc" || got[0].Attributes["gen_ai.request.id"] != "chatcmpl-req-traced" {
		t.Errorf("engine spans %+v: want one, child of the gateway's upstream span %s", got, up.SpanContext.SpanID())
	}
}

// TestTraceRetriesAndRefusals: a retried request has a route and an
// upstream span per attempt, the failed one marked; a request the
// gateway refuses has only its server span, with the status; a client
// whose trace is not sampled gets no spans.
func TestTraceRetriesAndRefusals(t *testing.T) {
	sims := fleetOf(t, 2, true)
	cfg := testConfig(t, sims) // round_robin: the first attempt goes to sim-1
	exp := tracetest.NewInMemoryExporter()
	gw := startObserved(t, cfg, exp)
	sims[0].SetFault(sim.Fault{Kind: sim.FaultFail, Status: 503, SparesHealth: true})
	if resp, _ := chat(t, gw.url, chatBody("retry me", "")); resp.StatusCode != 200 || resp.Header.Get(openai.HeaderReplica) != "sim-2" {
		t.Fatalf("status %d from %s", resp.StatusCode, resp.Header.Get(openai.HeaderReplica))
	}
	if resp, _ := chat(t, gw.url, `{"model":`); resp.StatusCode != 400 {
		t.Fatalf("status %d for bad JSON", resp.StatusCode)
	}
	if resp, _ := chat(t, gw.url, chatBody("unsampled", ""), "traceparent", "00-"+clientTrace+"-"+clientSpan+"-00"); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// A path no route has: a server span of its own, named by the method.
	resp, _ := get(t, gw.url+"/v1/no-such-route", openai.HeaderRequestID, "req-404")
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d for an unknown path", resp.StatusCode)
	}
	// The model list gets its own, named by the route; /health, which
	// probes call every few seconds, none.
	for _, path := range []string{"/v1/models", "/health"} {
		if resp, _ := get(t, gw.url+path, openai.HeaderRequestID, "req-local"); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d for %s", resp.StatusCode, path)
		}
	}
	if err := gw.g.obs.tracer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var routes, ups []tracetest.SpanStub
	var servers []int64
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID().String() == clientTrace {
			t.Errorf("span %s of the unsampled trace was exported", s.Name)
		}
		switch s.Name {
		case spanRoute:
			routes = append(routes, s)
		case spanUpstream:
			ups = append(ups, s)
		case http.MethodGet:
			if a := spanAttrs(s.Attributes); a["http.response.status_code"].AsInt64() != 404 || a[string(attrRequestID)].AsString() != "req-404" || s.SpanKind != trace.SpanKindServer {
				t.Errorf("the unknown path's span: %v", a)
			}
			servers = append(servers, 404)
		case "GET /v1/models":
			if a := spanAttrs(s.Attributes); a["http.response.status_code"].AsInt64() != 200 || a[string(attrRequestID)].AsString() != "req-local" || s.SpanKind != trace.SpanKindServer {
				t.Errorf("the span of %s: %v", s.Name, a)
			}
			servers = append(servers, 200)
		default:
			servers = append(servers, spanAttrs(s.Attributes)["http.response.status_code"].AsInt64())
		}
	}
	if !slices.Equal(servers, []int64{200, 400, 404, 200}) || len(routes) != 2 || len(ups) != 2 {
		t.Fatalf("server statuses %v, %d route and %d upstream spans; want [200 400 404 200], 2 and 2", servers, len(routes), len(ups))
	}
	for i, want := range []struct {
		replica string
		status  int64
		code    codes.Code
	}{{"sim-1", 503, codes.Error}, {"sim-2", 200, codes.Unset}} {
		ra, ua := spanAttrs(routes[i].Attributes), spanAttrs(ups[i].Attributes)
		if ra[string(attrAttempt)].AsInt64() != int64(i+1) || ra[string(attrWinner)].AsString() != want.replica ||
			ua[string(attrAttempt)].AsInt64() != int64(i+1) || ua["http.response.status_code"].AsInt64() != want.status || ups[i].Status.Code != want.code {
			t.Errorf("attempt %d: route %v, upstream %v status %v", i+1, ra, ua, ups[i].Status)
		}
	}
	// The 503's span ends with its answer, kept or not: open until the
	// retry answered, it showed the failed engine as slow as the request.
	if !ups[0].EndTime.Before(routes[1].StartTime) {
		t.Errorf("the 503's upstream span ended at %v, after the retry was routed at %v", ups[0].EndTime, routes[1].StartTime)
	}
}

// decisionLogConfig is cfg with the decision log at path, sampling rate.
func decisionLogConfig(cfg *config.Config, path string, rate float64) *config.Config {
	cfg.Observability.DecisionLog.Path, cfg.Observability.DecisionLog.SampleRate = path, rate
	return cfg
}

// readDecisions reads a decision log.
func readDecisions(t *testing.T, path string) ([]decisionlog.Record, []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []decisionlog.Record
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r decisionlog.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("a line of the decision log is not a record: %v\n%s", err, sc.Text())
		}
		out = append(out, r)
	}
	return out, data
}

// TestDecisionLog logs every decision of a fleet with an unhealthy
// replica, through a request whose prompt is then cached and one retried
// after its first replica fails: the lines match the golden file (with
// the values that vary from run to run masked), and the prompt, which is
// distinctive, appears nowhere in the log.
func TestDecisionLog(t *testing.T) {
	const prompt = "zebra-quasar-77 tell me about the xylophone marmalade"
	sims := fleetOf(t, 3, true)
	cfg := testConfig(t, sims)
	cfg.Routing.DefaultPolicy = policy.CostModel
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	sims[2].Kill()
	gw := startObserved(t, decisionLogConfig(cfg, path, 1), nil)
	waitFor(t, "sim-3 to be taken out", 5*time.Second, func() bool {
		return strings.Contains(scrape(t, gw.admin), `inferrail_replica_healthy{replica="sim-3"} 0`)
	})
	first, _ := chat(t, gw.url, chatBody(prompt, ""), openai.HeaderRequestID, "req-a")
	cached := first.Header.Get(openai.HeaderReplica)
	if resp, _ := chat(t, gw.url, chatBody(prompt, ""), openai.HeaderRequestID, "req-b"); resp.Header.Get(openai.HeaderReplica) != cached {
		t.Fatalf("req-b went to %s, not to %s where its prompt is cached", resp.Header.Get(openai.HeaderReplica), cached)
	}
	broken := sims[0]
	if cached == "sim-2" {
		broken = sims[1]
	}
	broken.SetFault(sim.Fault{Kind: sim.FaultFail, Status: 503, SparesHealth: true})
	if resp, _ := chat(t, gw.url, chatBody(prompt, ""), openai.HeaderRequestID, "req-c"); resp.StatusCode != 200 {
		t.Fatalf("req-c: status %d", resp.StatusCode)
	}
	gw.stop() // closes the decision log
	recs, data := readDecisions(t, path)
	if strings.Contains(string(data), "zebra") || strings.Contains(string(data), "xylophone") {
		t.Errorf("the decision log holds the prompt:\n%s", data)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, fmt.Sprint(r.RequestID, "/", r.Attempt))
	}
	if want := []string{"req-a/1", "req-b/1", "req-c/1", "req-c/2"}; !slices.Equal(ids, want) {
		t.Fatalf("decisions %v, want %v", ids, want)
	}
	// The replica the prompt went to first is named "cached" in the
	// golden file, the other one "other": which one it is varies.
	names := strings.NewReplacer(`"`+cached+`"`, `"cached"`, `"`+map[string]string{"sim-1": "sim-2", "sim-2": "sim-1"}[cached]+`"`, `"other"`)
	got := names.Replace(maskDecisions(string(data)))
	compareGolden(t, filepath.Join("testdata", "decisionlog.golden"), got)
}

// maskDecisions replaces the values of decision records that vary from
// run to run with what they are: times, engine reports and what depends
// on them.
func maskDecisions(lines string) string {
	for _, m := range []struct{ re, with string }{
		{`"time":"[^"]*"`, `"time":<time>`},
		{`"(decision_secs|estimated_ttft_secs|prefill_secs|queued_prefill_secs)":[-+0-9.e]+`, `"$1":<seconds>`},
		{`"(running|kv_usage|waiting)":([-+0-9.e]+|null)`, `"$1":<engine report or null>`},
		{`"decided_by":"[^"]*"`, `"decided_by":<term>`},
	} {
		lines = regexp.MustCompile(m.re).ReplaceAllString(lines, m.with)
	}
	return lines
}

func compareGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s changed:\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// TestDecisionLogSampling: at half the rate exactly the requests the
// sampler picks by ID are logged, each with every attempt it made, and the
// metrics count what was written.
func TestDecisionLogSampling(t *testing.T) {
	sims := fleetOf(t, 2, true)
	cfg := testConfig(t, sims)
	cfg.Health.EjectionBackoff = config.Duration(time.Millisecond) // sim-1 fails requests, and is back at once
	cfg.Health.MaxEjectionBackoff = config.Duration(time.Millisecond)
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	gw := startObserved(t, decisionLogConfig(cfg, path, 0.5), nil)
	sims[0].SetFault(sim.Fault{Kind: sim.FaultFail, Status: 503, SparesHealth: true})
	s := decisionlog.NewSampler(0.5)
	want := map[string]bool{}
	for i := range 40 {
		id := fmt.Sprintf("sampled-%02d", i)
		if resp, _ := chat(t, gw.url, chatBody("hi", ""), openai.HeaderRequestID, id); resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", id, resp.StatusCode)
		}
		if s.Sampled(id) {
			want[id] = true
		}
	}
	page := scrape(t, gw.admin)
	gw.stop()
	recs, _ := readDecisions(t, path)
	attempts := map[string]int{}
	retried := 0
	for _, r := range recs {
		attempts[r.RequestID]++
		if r.Attempt != attempts[r.RequestID] {
			t.Errorf("%s: attempt %d logged as its decision %d", r.RequestID, r.Attempt, attempts[r.RequestID])
		}
		if r.Attempt == 2 {
			retried++
			if r.Candidates[0].State != decisionlog.StateTried || r.Winner != "sim-2" {
				t.Errorf("%s's retry: %+v", r.RequestID, r)
			}
		}
	}
	got := map[string]bool{}
	for id := range attempts {
		got[id] = true
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(want) < 10 || len(want) > 30 || retried == 0 {
		t.Errorf("logged requests %v (%d retried), want %v and some retried", got, retried, want)
	}
	if !strings.Contains(page, "inferrail_decision_log_dropped_total 0\n") {
		t.Errorf("metrics page without inferrail_decision_log_dropped_total 0:\n%s", page)
	}
}

// TestDecisionLogArms: with the model's traffic split between two
// policies, every decision names the arm that routed it, both in the
// decision log and on its route span; without a split the arm is "".
func TestDecisionLogArms(t *testing.T) {
	sims := fleetOf(t, 2, true)
	cfg := testConfig(t, sims)
	cfg.Models[0].Split = config.Split{{Policy: policy.LeastRequest, Percent: 50}, {Policy: policy.RoundRobin, Percent: 50}}
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	exp := tracetest.NewInMemoryExporter()
	gw := startObserved(t, decisionLogConfig(cfg, path, 1), exp)
	for i := range 20 {
		if resp, _ := chat(t, gw.url, chatBody(fmt.Sprint("arm ", i), "")); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if err := gw.g.obs.tracer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	gw.stop()
	recs, _ := readDecisions(t, path)
	arms := map[string]int{}
	for _, r := range recs {
		if r.Arm != r.Policy {
			t.Errorf("decision of %s: arm %q, policy %q", r.RequestID, r.Arm, r.Policy)
		}
		arms[r.Arm]++
	}
	if len(recs) != 20 || arms[policy.LeastRequest] == 0 || arms[policy.RoundRobin] == 0 {
		t.Errorf("%d decisions by arm %v, want 20 over both arms", len(recs), arms)
	}
	for _, s := range exp.GetSpans() {
		if a := spanAttrs(s.Attributes); s.Name == spanRoute && a[string(attrArm)].AsString() != a[string(attrPolicy)].AsString() {
			t.Errorf("route span's arm %q, policy %q", a[string(attrArm)].AsString(), a[string(attrPolicy)].AsString())
		}
	}
}

// TestObservationOffAllocatesNothing: with traces and the decision log
// off, the hooks on the request path allocate nothing and leave the
// request untouched.
func TestObservationOffAllocatesNothing(t *testing.T) {
	sims := fleetOf(t, 2, true)
	g, err := New(testConfig(t, sims), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	r, _ := http.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody("x", "")))
	ex := &exchange{r: r, id: "req", model: testModel, gen: g.current(), policy: g.testPolicy(testModel)}
	ex.route = g.routeRequest(ex)
	cands := []policy.Candidate{{ID: "sim-1", Cached: -1, Running: -1, KVUsage: -1}, {ID: "sim-2", Cached: -1, Running: -1, KVUsage: -1}}
	mr := g.routes(ex.gen).model(testModel)
	a := &attempt{}
	allocs := testing.AllocsPerRun(1000, func() {
		defer g.observe(ex)()
		why := ex.obs.whyNotOffered(len(mr.routes))
		d, x := g.pick(ex, cands)
		g.observeDecision(ex, mr, []int{0, 1}, cands, d.Index, &d, x, time.Time{})
		a.trace = g.traceUpstream(ex, a, r)
		a.trace.headed(nil, nil, false)
		a.trace.markFirstByte()
		a.trace.end()
		if why != nil || x != nil {
			panic("observed")
		}
	})
	if allocs != 0 || ex.obs != nil || r.Header.Get("traceparent") != "" {
		t.Errorf("%v allocations per request, obs %v, traceparent %q: want none", allocs, ex.obs, r.Header.Get("traceparent"))
	}
}

// TestTraceClientLeaves: a client that leaves is marked cancelled on the
// server span, whether before the head or during a stream (then with the
// status it got), and on the upstream span it cut, never as a failure.
func TestTraceClientLeaves(t *testing.T) {
	cfg := testConfig(t, fleetOf(t, 1, false)) // 20 ms a token
	exp := tracetest.NewInMemoryExporter()
	gw := startObserved(t, cfg, exp)
	leave := func(body string, after func(*http.Response)) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if after == nil {
			time.AfterFunc(200*time.Millisecond, cancel)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.url+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			after(resp)
			cancel()
			resp.Body.Close()
		}
	}
	leave(chatBody("whole", `,"max_tokens":200,"ignore_eos":true`), nil)
	leave(chatBody("stream", `,"max_tokens":200,"ignore_eos":true,"stream":true`), func(resp *http.Response) {
		_, _ = resp.Body.Read(make([]byte, 64))
	})
	waitFor(t, "both requests to end", 5*time.Second, func() bool {
		return metricValue(scrape(t, gw.admin), `inferrail_client_disconnects_total{model="`+testModel+`"}`) == 2
	})
	if err := gw.g.obs.tracer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var servers, ups []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		switch s.Name {
		case "POST /v1/chat/completions":
			servers = append(servers, s)
		case spanUpstream:
			ups = append(ups, s)
		}
	}
	if len(servers) != 2 || len(ups) != 2 {
		t.Fatalf("%d server and %d upstream spans, want 2 each", len(servers), len(ups))
	}
	for i, s := range servers {
		a := spanAttrs(s.Attributes)
		if a[string(attrOutcome)].AsString() != outcomeCancelled || s.Status.Code == codes.Error {
			t.Errorf("server span %d: outcome %q, status %v; want cancelled and no error", i, a[string(attrOutcome)].AsString(), s.Status)
		}
	}
	if a := spanAttrs(servers[1].Attributes); a["http.response.status_code"].AsInt64() != 200 {
		t.Errorf("the stream's server span: status %v, want the 200 it got", a["http.response.status_code"])
	}
	for i, u := range ups {
		if a := spanAttrs(u.Attributes); a[string(attrOutcome)].AsString() != outcomeCancelled || u.Status.Code == codes.Error {
			t.Errorf("upstream span %d: outcome %q, status %v; want cancelled, no error", i, a[string(attrOutcome)].AsString(), u.Status)
		}
	}
}

// TestTraceEngineBreaksAStream: the upstream span of a stream the engine
// broke after its head says so, as the server span does (found by a
// review: it ended unmarked, with the head's 200).
func TestTraceEngineBreaksAStream(t *testing.T) {
	url := rawEngine(t, func(w *bufio.Writer) {
		part := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"
		// One chunk of the body, then the connection closes without the
		// chunked encoding's end.
		fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(part), part)
	})
	cfg := testConfig(t, nil)
	cfg.Replicas = []config.Replica{{ID: "breaks", URL: url, Models: []string{testModel}, MaxConcurrency: 8, MaxPending: 8}}
	exp := tracetest.NewInMemoryExporter()
	gw := startObserved(t, cfg, exp)
	req, _ := http.NewRequest(http.MethodPost, gw.url+"/v1/chat/completions", strings.NewReader(chatBody("hi", `,"stream":true`)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("the client read a whole stream the engine broke")
	}
	resp.Body.Close()
	var up *tracetest.SpanStub
	waitFor(t, "the upstream span", 5*time.Second, func() bool {
		if err := gw.g.obs.tracer.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, s := range exp.GetSpans() {
			if s.Name == spanUpstream {
				up = &s
			}
		}
		return up != nil
	})
	if a := spanAttrs(up.Attributes); a[string(attrOutcome)].AsString() != outcomeAborted || up.Status.Code != codes.Error {
		t.Errorf("upstream span: outcome %q, status %v; want aborted and an error", a[string(attrOutcome)].AsString(), up.Status)
	}
	// The server span too, with the head's status the client got.
	var server *tracetest.SpanStub
	waitFor(t, "the server span", 5*time.Second, func() bool {
		if err := gw.g.obs.tracer.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, s := range exp.GetSpans() {
			if s.SpanKind == trace.SpanKindServer {
				server = &s
			}
		}
		return server != nil
	})
	if a := spanAttrs(server.Attributes); a[string(attrOutcome)].AsString() != outcomeAborted || server.Status.Code != codes.Error ||
		a["http.response.status_code"].AsInt64() != 200 {
		t.Errorf("server span: %v, status %v; want aborted, an error and the head's 200", a, server.Status)
	}
}

// TestDescribeCandidate: a candidate's engine report (running, KV use and
// waiting) is logged while it was fresh (Running set) and null otherwise;
// so is the index's prediction, by its own sentinel.
func TestDescribeCandidate(t *testing.T) {
	for _, tc := range []struct {
		name                string
		cand                policy.Candidate
		running, kv, waited string
		cached              string
	}{
		{"fresh", policy.Candidate{ID: "a", Running: 3, KVUsage: 0.97, Waiting: 5, Cached: 120}, "3", "0.97", "5", "120"},
		{"fresh_none_waiting", policy.Candidate{ID: "a", Running: 0, KVUsage: 0, Waiting: 0, Cached: 0}, "0", "0", "0", "0"},
		{"no_report", policy.Candidate{ID: "a", Running: -1, KVUsage: -1, Waiting: 0, Cached: -1}, "null", "null", "null", "null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c decisionlog.Candidate
			describeCandidate(&c, tc.cand)
			line := string((&decisionlog.Record{Candidates: []decisionlog.Candidate{c}}).AppendJSON(nil))
			for field, want := range map[string]string{"running": tc.running, "kv_usage": tc.kv, "waiting": tc.waited, "cached_tokens": tc.cached} {
				if !strings.Contains(line, fmt.Sprintf(`"%s":%s,`, field, want)) {
					t.Errorf("%s: want %s in %s", field, want, line)
				}
			}
		})
	}
}

// TestTraceEngineRefuses: an engine's 4xx, relayed to the client, marks the
// upstream (client) span an error, as OpenTelemetry's HTTP conventions ask
// of a client span, and leaves the server span's status unset: to the
// gateway's own client a 4xx is its request's fault.
func TestTraceEngineRefuses(t *testing.T) {
	sims := fleetOf(t, 1, true)
	cfg := testConfig(t, sims)
	exp := tracetest.NewInMemoryExporter()
	gw := startObserved(t, cfg, exp)
	sims[0].SetFault(sim.Fault{Kind: sim.FaultFail, Status: 400, SparesHealth: true})
	if resp, _ := chat(t, gw.url, chatBody("refused", "")); resp.StatusCode != 400 {
		t.Fatalf("status %d, want the engine's 400", resp.StatusCode)
	}
	var up, server *tracetest.SpanStub
	waitFor(t, "the upstream and server spans", 5*time.Second, func() bool {
		if err := gw.g.obs.tracer.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, s := range exp.GetSpans() {
			switch {
			case s.Name == spanUpstream:
				up = &s
			case s.SpanKind == trace.SpanKindServer:
				server = &s
			}
		}
		return up != nil && server != nil
	})
	if a := spanAttrs(up.Attributes); a["http.response.status_code"].AsInt64() != 400 || up.Status.Code != codes.Error {
		t.Errorf("upstream span: %v, status %v; want 400 and an error", a, up.Status)
	}
	if a := spanAttrs(server.Attributes); a["http.response.status_code"].AsInt64() != 400 || server.Status.Code != codes.Unset {
		t.Errorf("server span: %v, status %v; want 400 and no status", a, server.Status)
	}
}

// rotationPolicy picks its candidates in turn and names the one it picks
// in its explanation's DecidedBy, so a decision record whose decided_by is
// not its winner explains another request's choice. It explains slowly
// after reading its state, as cost_model works out every candidate's
// estimate, which widens the moment in which another request's Pick can
// come between an Explain and the Pick after it.
type rotationPolicy struct {
	mu   sync.Mutex
	next int // guarded by mu
}

func (*rotationPolicy) Name() string { return "rotation" }

func (p *rotationPolicy) Pick(_ *policy.Request, cands []policy.Candidate) policy.Decision {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pickLocked(cands)
}

func (p *rotationPolicy) pickLocked(cands []policy.Candidate) policy.Decision {
	i := p.next % len(cands)
	p.next++
	return policy.Decision{Index: i}
}

func (p *rotationPolicy) Explain(_ *policy.Request, cands []policy.Candidate) policy.Explanation {
	p.mu.Lock()
	x := p.explainLocked(cands)
	p.mu.Unlock()
	time.Sleep(time.Millisecond) // the work of explaining, after the state was read
	return x
}

func (p *rotationPolicy) explainLocked(cands []policy.Candidate) policy.Explanation {
	i := p.next % len(cands)
	return policy.Explanation{Policy: p.Name(), Winner: cands[i].ID, Decision: policy.Decision{Index: i}, DecidedBy: cands[i].ID}
}

func (p *rotationPolicy) PickExplained(_ *policy.Request, cands []policy.Candidate) (policy.Decision, policy.Explanation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	x := p.explainLocked(cands)
	time.Sleep(time.Millisecond)
	return p.pickLocked(cands), x
}

// TestDecisionLogExplainsItsOwnDecision: under concurrent requests every
// record of the decision log explains the decision it records, not
// another request's (found by a review: the explanation was asked for
// before the pick, so another request's pick could come in between, and
// decided_by and hot_owners then described a choice not made).
func TestDecisionLogExplainsItsOwnDecision(t *testing.T) {
	const requests = 48
	cfg := testConfig(t, fleetOf(t, 3, true))
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	gw := startObserved(t, decisionLogConfig(cfg, path, 1), nil)
	gw.g.current().routing[testModel].arms[0].policy = &rotationPolicy{}
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			if s := sendCompletion(gw.url, `{"model":"sim","prompt":"hello","max_tokens":1}`, openai.HeaderRequestID, fmt.Sprint("req-", i)); s.err != nil || s.status != http.StatusOK {
				t.Errorf("request %d: status %d, %v", i, s.status, s.err)
			}
		})
	}
	wg.Wait()
	gw.stop() // closes the decision log
	recs, _ := readDecisions(t, path)
	if len(recs) < requests {
		t.Fatalf("%d decisions logged, want at least %d", len(recs), requests)
	}
	wrong := 0
	for _, r := range recs {
		if r.DecidedBy != r.Winner {
			wrong++
			t.Logf("%s/%d: winner %s, explained as %s", r.RequestID, r.Attempt, r.Winner, r.DecidedBy)
		}
	}
	if wrong > 0 {
		t.Errorf("%d of %d records explain a decision other than their own", wrong, len(recs))
	}
}
