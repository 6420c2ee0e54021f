package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/auth"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/openai"
)

// orderEngine is a stand-in engine that records the request IDs of the
// generations it receives, in order, and holds each until its gate opens.
type orderEngine struct {
	srv  *httptest.Server
	mu   sync.Mutex
	ids  []string
	gate chan struct{}
}

func newOrderEngine(t testing.TB) *orderEngine {
	t.Helper()
	e := &orderEngine{gate: make(chan struct{})}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
		case "/v1/completions", "/v1/chat/completions":
			_, _ = io.Copy(io.Discard, r.Body)
			e.mu.Lock()
			e.ids = append(e.ids, r.Header.Get(openai.HeaderRequestID))
			gate := e.gate
			e.mu.Unlock()
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(e.srv.Close)
	t.Cleanup(e.open) // a held request must not outlive the test
	return e
}

// open lets every held and later generation through.
func (e *orderEngine) open() {
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-e.gate:
	default:
		close(e.gate)
	}
}

func (e *orderEngine) received() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.ids)
}

// flowConfig routes testModel to engine, one request at a time, with
// flow.max_queued queued. Health probes are slow enough that only a test
// that means to can fail them.
func flowConfig(engineURL string, maxQueued int) *config.Config {
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: testModel, Aliases: []string{"sim"}, Tokenizer: "builtin:sim"}}
	cfg.Replicas = []config.Replica{{ID: "one", URL: engineURL, Models: []string{testModel}, MaxConcurrency: 1, MaxPending: 1}}
	cfg.Routing.Seed = 1
	cfg.Health.Interval = config.Duration(time.Second)
	cfg.Health.Timeout = config.Duration(time.Second)
	cfg.Server.RequestTimeout = config.Duration(20 * time.Second)
	cfg.Server.ShutdownTimeout = config.Duration(5 * time.Second)
	cfg.Flow.MaxQueued = maxQueued
	return &cfg
}

// withKeys adds a keys file of keys to cfg.
func withKeys(t *testing.T, cfg *config.Config, keys ...*auth.Key) {
	t.Helper()
	path := t.TempDir() + "/keys.yaml"
	writeKeys(t, path, keys...)
	cfg.Auth.KeysFile = path
}

// waiting is how many requests wait for testModel.
func waiting(gw *running) int64 { return gw.g.flow.queues[testModel].waiting.Load() }

// async sends a completion with request ID id from a goroutine; its
// outcome arrives on the returned channel.
func async(gw *running, id string, header ...string) <-chan sent {
	return asyncBody(gw, id, `{"model":"sim","prompt":"hello","max_tokens":1}`, header...)
}

// histCount is the sample count of a histogram's series with exactly the
// given label pairs; 0 when absent.
func histCount(t testing.TB, gw *running, family string, labels ...string) uint64 {
	t.Helper()
	return series(t, gw, family, labels).GetHistogram().GetSampleCount()
}

// holdSlot sends a request the engine holds, taking the replica's one
// slot, and returns its outcome's channel.
func holdSlot(t *testing.T, gw *running, e *orderEngine, header ...string) <-chan sent {
	t.Helper()
	n := len(e.received())
	ch := async(gw, "hold", header...)
	waitFor(t, "the engine to hold a request", 10*time.Second, func() bool { return len(e.received()) > n })
	return ch
}

// queue sends a request that must wait and returns once it waits.
func queue(t *testing.T, gw *running, id string, header ...string) <-chan sent {
	t.Helper()
	n := waiting(gw)
	ch := async(gw, id, header...)
	waitFor(t, id+" to wait", 10*time.Second, func() bool { return waiting(gw) > n })
	return ch
}

// expectStatus reads every outcome and fails the test unless each is want.
func expectStatus(t *testing.T, want int, chs ...<-chan sent) {
	t.Helper()
	for i, ch := range chs {
		if s := <-ch; s.err != nil || s.status != want {
			t.Errorf("request %d: status %d, %v; want %d", i, s.status, s.err, want)
		}
	}
}

// TestFlowServesQueuedInOrder: on a replica that takes one request at a
// time, requests that find it busy wait instead of getting 503, and are
// routed as the slot frees, in priority order (critical first, sheddable
// last) and, within a class, taking turns between keys. The quiet key goes
// first: it has used none of its share, while the flooding key held the
// slot all along (its one try at a slot on arrival, given back unused,
// leaves no usage behind). Then they take turns, one request each.
func TestFlowServesQueuedInOrder(t *testing.T) {
	e := newOrderEngine(t)
	cfg := flowConfig(e.srv.URL, 16)
	flood, fk := newKey("flood", nil)
	quiet, qk := newKey("quiet", nil)
	crit, ck := newKey("ops", func(k *auth.Key) { k.Priority = auth.Critical })
	withKeys(t, cfg, fk, qk, ck)
	gw := startGatewayWith(t, cfg, Options{})

	chs := []<-chan sent{holdSlot(t, gw, e, bearer(flood)...)}
	for i := 1; i <= 4; i++ {
		chs = append(chs, queue(t, gw, fmt.Sprintf("f%d", i), bearer(flood)...))
	}
	chs = append(chs, queue(t, gw, "q1", bearer(quiet)...))
	chs = append(chs, queue(t, gw, "s1", append(bearer(flood), openai.HeaderPriority, "sheddable")...))
	// A standard key may not raise itself: asking for critical keeps it
	// standard, behind the flood's first turn.
	chs = append(chs, queue(t, gw, "q2", append(bearer(quiet), openai.HeaderPriority, "critical")...))
	chs = append(chs, queue(t, gw, "c1", bearer(crit)...))
	e.open()
	expectStatus(t, http.StatusOK, chs...)

	want := []string{"hold", "c1", "q1", "f1", "f2", "q2", "f3", "f4", "s1"}
	if got := e.received(); !slices.Equal(got, want) {
		t.Errorf("engine received %v, want %v", got, want)
	}
	if n := counterValue(t, gw, "inferrail_flow_queued_total", "model", testModel, "class", "standard"); n != 6 {
		t.Errorf("standard requests queued: %v, want 6", n)
	}
	if n := histCount(t, gw, "inferrail_flow_queue_wait_seconds", "model", testModel, "class", "critical", "outcome", "admitted"); n != 1 {
		t.Errorf("critical waits admitted: %d, want 1", n)
	}
	waitFor(t, "the queue's dispatcher to end", 5*time.Second, func() bool {
		mq := gw.g.flow.queues[testModel]
		mq.mu.Lock()
		defer mq.mu.Unlock()
		return !mq.running
	})
}

// asyncCtx is async with a context the test may cancel.
func asyncCtx(ctx context.Context, gw *running, id string, header ...string) <-chan sent {
	ch := make(chan sent, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.url+"/v1/completions", strings.NewReader(`{"model":"sim","prompt":"hello","max_tokens":1}`))
		req.Header.Set(openai.HeaderRequestID, id)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			ch <- sent{err: err}
			return
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		ch <- sent{status: resp.StatusCode, err: err}
	}()
	return ch
}

// expectShed sends a request that flow control must shed for reason and
// checks the answer: 429 in OpenAI's shape with Retry-After.
func expectShed(t *testing.T, gw *running, reason string, header ...string) {
	t.Helper()
	before := counterValue(t, gw, "inferrail_request_errors_total", "model", testModel, "reason", reason)
	resp, body := chat(t, gw.url, chatBody("hello", ""), header...)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("%s: status %d (%s), want 429", reason, resp.StatusCode, body)
	}
	if e := decodeError(t, body); e.Error.Code != "overloaded" || e.Error.Type != "requests" {
		t.Errorf("%s: error type %q code %q, want requests and overloaded", reason, e.Error.Type, e.Error.Code)
	}
	// A target no replica meets even idle is not worth a retry; any other
	// shed says when to come back.
	if reason == shedSLOUnreachable && resp.Header.Get("X-Should-Retry") != "false" {
		t.Errorf("%s: no x-should-retry: false: %v", reason, resp.Header)
	}
	if reason != shedSLOUnreachable && (resp.Header.Get("Retry-After") == "" || resp.Header.Get("Retry-After-Ms") == "") {
		t.Errorf("%s: no Retry-After: %v", reason, resp.Header)
	}
	if after := counterValue(t, gw, "inferrail_request_errors_total", "model", testModel, "reason", reason); after != before+1 {
		t.Errorf("%s: inferrail_request_errors_total went %v → %v, want one more", reason, before, after)
	}
}

// TestFlowShedsAndCancels: the queue's bounds shed with 429 (a key past
// its cap, a class past its cap, the queue full), a client that leaves
// while queued frees its place at once, and everything queued is served
// once the slot frees.
func TestFlowShedsAndCancels(t *testing.T) {
	e := newOrderEngine(t)
	cfg := flowConfig(e.srv.URL, 4)
	cfg.Flow.KeyMaxQueued = 2
	cfg.Flow.ClassMaxQueued.Sheddable = 1
	a, ak := newKey("a", nil)
	b, bk := newKey("b", nil)
	withKeys(t, cfg, ak, bk)
	gw := startGatewayWith(t, cfg, Options{})

	chs := []<-chan sent{holdSlot(t, gw, e, bearer(a)...)}
	chs = append(chs, queue(t, gw, "a1", bearer(a)...), queue(t, gw, "a2", bearer(a)...))
	expectShed(t, gw, shedKeyFull, bearer(a)...)
	// A request with a target joining others is priced before it waits: a
	// target under any prefill is shed at once, not after waiting.
	expectShed(t, gw, shedSLOUnreachable, append(bearer(b), openai.HeaderTTFTTarget, "1")...)
	chs = append(chs, queue(t, gw, "b1", append(bearer(b), openai.HeaderPriority, "sheddable")...))
	expectShed(t, gw, shedClassFull, append(bearer(b), openai.HeaderPriority, "sheddable")...)

	ctx, cancel := context.WithCancel(context.Background())
	left := asyncCtx(ctx, gw, "b2", bearer(b)...)
	waitFor(t, "b2 to wait", 10*time.Second, func() bool { return waiting(gw) == 4 })
	expectShed(t, gw, shedQueueFull, bearer(b)...)
	cancel()
	if s := <-left; s.err == nil {
		t.Errorf("the cancelled request got an answer: %d", s.status)
	}
	waitFor(t, "b2's place to free", 10*time.Second, func() bool { return waiting(gw) == 3 })
	if n := histCount(t, gw, "inferrail_flow_queue_wait_seconds", "model", testModel, "class", "standard", "outcome", "cancelled"); n != 1 {
		t.Errorf("cancelled waits: %d, want 1", n)
	}
	chs = append(chs, queue(t, gw, "b3", bearer(b)...)) // the freed place takes a new request
	e.open()
	expectStatus(t, http.StatusOK, chs...)
	for _, reason := range []string{shedKeyFull, shedClassFull, shedQueueFull} {
		class := "standard"
		if reason == shedClassFull {
			class = "sheddable"
		}
		if n := counterValue(t, gw, "inferrail_flow_shed_total", "model", testModel, "class", class, "reason", reason); n != 1 {
			t.Errorf("inferrail_flow_shed_total{reason=%q} = %v, want 1", reason, n)
		}
	}
	if got := e.received(); slices.Contains(got, "b2") {
		t.Errorf("the cancelled request reached the engine: %v", got)
	}
}

// TestFlowWaitEnds: a request that waits past flow.max_wait is shed with
// 429, and the slot it waited for is untouched.
func TestFlowWaitEnds(t *testing.T) {
	e := newOrderEngine(t)
	cfg := flowConfig(e.srv.URL, 4)
	cfg.Flow.MaxWait = config.Duration(50 * time.Millisecond)
	gw := startGatewayWith(t, cfg, Options{})
	hold := holdSlot(t, gw, e)
	expectShed(t, gw, shedQueueTimeout)
	if n := histCount(t, gw, "inferrail_flow_queue_wait_seconds", "model", testModel, "class", "standard", "outcome", "shed"); n != 1 {
		t.Errorf("shed waits: %d, want 1", n)
	}
	e.open()
	expectStatus(t, http.StatusOK, hold)
}

// TestFlowConfigLive: flow control follows PATCH /admin/config: off, a
// busy replica answers 503 as before flow control; on, the request waits;
// a smaller queue sheds what no longer fits, while what waits stays.
func TestFlowConfigLive(t *testing.T) {
	e := newOrderEngine(t)
	gw := startGatewayWith(t, flowConfig(e.srv.URL, 0), Options{})
	hold := holdSlot(t, gw, e)
	if resp, body := chat(t, gw.url, chatBody("hello", "")); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("without flow control: %d %s, want 503", resp.StatusCode, body)
	}
	for _, set := range []string{`{"flow":{"max_queued":2}}`} {
		if code, _, problems := patch(t, gw.admin, set); code != http.StatusOK {
			t.Fatalf("patch %s: %d %v", set, code, problems)
		}
	}
	w1 := queue(t, gw, "w1")
	if code, _, problems := patch(t, gw.admin, `{"flow":{"max_queued":1}}`); code != http.StatusOK {
		t.Fatalf("patch: %d %v", code, problems)
	}
	expectShed(t, gw, shedQueueFull)
	code, _, problems := patch(t, gw.admin, `{"flow":{"max_queued":-1}}`)
	if code != http.StatusUnprocessableEntity || len(problems) == 0 || problems[0].Path != "flow.max_queued" {
		t.Errorf("a bad flow config: %d %+v, want 422 naming flow.max_queued", code, problems)
	}
	if code, _, problems := patch(t, gw.admin, `{"flow":{"max_queued":0}}`); code != http.StatusOK {
		t.Fatalf("patch: %d %v", code, problems)
	}
	if resp, _ := chat(t, gw.url, chatBody("hello", "")); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("flow control off again: %d, want 503", resp.StatusCode)
	}
	e.open()
	expectStatus(t, http.StatusOK, hold, w1)
}

// explainAdmission asks /admin/explain what flow control would do.
func explainAdmission(t *testing.T, gw *running, body string, header ...string) admissionVerdict {
	t.Helper()
	return explainAs(t, gw, "", body, header...)
}

// explainAs is explainAdmission asking as the client key named key
// (none when "").
func explainAs(t *testing.T, gw *running, key, body string, header ...string) admissionVerdict {
	t.Helper()
	url := gw.admin + "/admin/explain/v1/completions"
	if key != "" {
		url += "?key=" + key
	}
	var ans struct {
		Admission *admissionVerdict `json:"admission"`
	}
	postExplain(t, url, body, &ans, header...)
	if ans.Admission == nil {
		t.Fatal("explain answered without an admission verdict")
	}
	return *ans.Admission
}

// postExplain posts body to url, an /admin/explain path on the admin
// port, with the header pairs set, and decodes the answer into ans.
func postExplain(t *testing.T, url, body string, ans any, header ...string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(ans); err != nil {
		t.Fatalf("explain: %d, %v", resp.StatusCode, err)
	}
}

// TestExplainAdmission: /admin/explain says whether the request would be
// admitted, queued or shed, and why.
func TestExplainAdmission(t *testing.T) {
	e := newOrderEngine(t)
	gw := startGatewayWith(t, flowConfig(e.srv.URL, 1), Options{})
	short := `{"model":"sim","prompt":"hello","max_tokens":1}`
	long := promptOf(testModel, 0, 2000)
	type want struct{ verdict, reason string }
	check := func(name string, got admissionVerdict, w want) {
		t.Helper()
		if got.Verdict != w.verdict || got.Reason != w.reason {
			t.Errorf("%s: verdict %s (%s), want %s (%s); %+v", name, got.Verdict, got.Reason, w.verdict, w.reason, got)
		}
	}
	check("idle", explainAdmission(t, gw, short), want{verdictAdmit, ""})
	got := explainAdmission(t, gw, long, openai.HeaderTTFTTarget, "10")
	check("unreachable_target", got, want{verdictShed, shedSLOUnreachable})
	if got.FloorSecs == nil || *got.FloorSecs < 0.2 || got.TTFTTargetMs != 10 {
		t.Errorf("unreachable_target: floor %v target %d, want the prefill of 2,000 tokens (over 0.2 s) and 10", got.FloorSecs, got.TTFTTargetMs)
	}
	hold := holdSlot(t, gw, e)
	// Asked for as critical without a key, it is standard, as a client's
	// request would be: the same flow as the one holding the slot, alone,
	// so it waits for room, not for its share.
	got = explainAdmission(t, gw, short, openai.HeaderPriority, "critical")
	check("busy", got, want{verdictQueue, notOfferedFull})
	if got.Class != "standard" {
		t.Errorf("busy: class %s, want standard: without a key, critical is clamped", got.Class)
	}
	w1 := queue(t, gw, "w1")
	check("queue_full", explainAdmission(t, gw, short), want{verdictShed, shedQueueFull})
	if waiting(gw) != 1 || len(e.received()) != 1 {
		t.Errorf("explaining changed something: %d waiting, %d received", waiting(gw), len(e.received()))
	}
	e.open()
	expectStatus(t, http.StatusOK, hold, w1)
}

// TestFlowTurnedOffWithWaiters: once flow control is turned off live, a
// request with a TTFT target that finds no room is refused as one without
// (503), not shed by a queue that is off, while requests queued before
// still wait (found by a review: 429 "the queue is full").
func TestFlowTurnedOffWithWaiters(t *testing.T) {
	e := newOrderEngine(t)
	gw := startGatewayWith(t, flowConfig(e.srv.URL, 2), Options{})
	hold := holdSlot(t, gw, e)
	w1 := queue(t, gw, "w1")
	if code, _, problems := patch(t, gw.admin, `{"flow":{"max_queued":0}}`); code != http.StatusOK {
		t.Fatalf("patch: %d %v", code, problems)
	}
	for _, target := range []string{"60000", ""} {
		var hdr []string
		if target != "" {
			hdr = []string{openai.HeaderTTFTTarget, target}
		}
		resp, body := chat(t, gw.url, chatBody("hello", ""), hdr...)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("target %q: %d %s, want 503: flow control is off", target, resp.StatusCode, body)
		}
	}
	e.open()
	expectStatus(t, http.StatusOK, hold, w1)
}

// TestGatewayMsHeader: X-Inferrail-Gateway-Ms says how long the gateway
// held a request before sending it: at least its time in the queue for
// one that waited, less for one that found a free slot, and never more
// than the client saw in all.
func TestGatewayMsHeader(t *testing.T) {
	e := newOrderEngine(t)
	gw := startGatewayWith(t, flowConfig(e.srv.URL, 16), Options{})
	first := holdSlot(t, gw, e)
	queued := queue(t, gw, "queued")
	const held = 150 * time.Millisecond
	time.Sleep(held)
	e.open()
	a, b := <-first, <-queued
	for _, s := range []sent{a, b} {
		if s.err != nil || s.status != http.StatusOK || s.held < 0 || s.held > s.took {
			t.Fatalf("status %d, %v: held %v in a request of %v", s.status, s.err, s.held, s.took)
		}
	}
	if b.held < held {
		t.Errorf("the queued request was held %v, want at least the %v it waited", b.held, held)
	}
	if a.held >= b.held {
		t.Errorf("the request that found a free slot was held %v, the queued one %v", a.held, b.held)
	}
}

// TestSLOShedSaysWhy: a request shed for its TTFT target is told whether
// even an idle replica is too slow for it (raise the target) or its wait
// for a replica with room used up the time an idle one would have needed.
func TestSLOShedSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		floor  float64
		waited time.Duration
		want   string
		retry  bool // the SDKs may retry it (Retry-After, no x-should-retry: false)
	}{
		{0.5, 0, "No replica can give a first token within the TTFT target of 300ms: even an idle one needs about 500ms.", false},
		{0.008, 292 * time.Millisecond, "The request waited 292ms for a replica with room, too long for a first token within the TTFT target of 300ms (an idle replica needs about 8ms).", true},
	} {
		rf := shed(shedSLOUnreachable, &admission{target: 300 * time.Millisecond, floor: tc.floor}, tc.waited)
		if !strings.Contains(rf.Error(), tc.want) {
			t.Errorf("floor %v waited %v: %s, want %q", tc.floor, tc.waited, rf.Error(), tc.want)
		}
		retry := rf.header.Get("Retry-After") != "" && rf.header.Get("X-Should-Retry") != "false"
		if retry != tc.retry {
			t.Errorf("floor %v waited %v: headers %v, want retry %v", tc.floor, tc.waited, rf.header, tc.retry)
		}
	}
}

// TestShutdownSendsQueuedAway: requests still queued when the gateway
// starts to shut down reached no engine, so they get a 503 at once,
// which a client may retry elsewhere, while the running one finishes.
func TestShutdownSendsQueuedAway(t *testing.T) {
	e := newOrderEngine(t)
	gw := startGatewayWith(t, flowConfig(e.srv.URL, 4), Options{})
	hold := holdSlot(t, gw, e)
	q1, q2 := queue(t, gw, "q1"), queue(t, gw, "q2")
	gw.cancel()
	expectStatus(t, http.StatusServiceUnavailable, q1, q2)
	e.open()
	expectStatus(t, http.StatusOK, hold)
	if got := e.received(); !slices.Equal(got, []string{"hold"}) {
		t.Errorf("engine received %v, want only the request that ran", got)
	}
}

// TestOneKeyAcrossClassesIsAlone: a key's own requests of a more important
// class do not count against its less important ones. Without keys, every
// client is one key: a standard request that has just ended keeps no slot
// from the sheddable ones that follow it.
func TestOneKeyAcrossClassesIsAlone(t *testing.T) {
	e := newOrderEngine(t)
	cfg := flowConfig(e.srv.URL, 4)
	cfg.Replicas[0].MaxConcurrency, cfg.Replicas[0].MaxPending = 2, 2
	gw := startGatewayWith(t, cfg, Options{})
	std := holdSlot(t, gw, e)
	e.open()
	expectStatus(t, http.StatusOK, std)
	e.mu.Lock()
	e.gate = make(chan struct{}) // hold what comes next
	e.mu.Unlock()
	s1 := async(gw, "s1", openai.HeaderPriority, "sheddable")
	s2 := async(gw, "s2", openai.HeaderPriority, "sheddable")
	waitFor(t, "both sheddable requests to reach the engine", 10*time.Second, func() bool { return len(e.received()) == 3 })
	if n := counterValue(t, gw, "inferrail_flow_over_share_total", "model", testModel, "class", "sheddable"); n != 0 {
		t.Errorf("sheddable requests held by fair sharing: %v, want 0 (the key is alone)", n)
	}
	e.open()
	expectStatus(t, http.StatusOK, s1, s2)
}
