package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/fairshare"
	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/openai"
)

// TestPrefillHolds: a streamed attempt holds its flow on its replica until
// dropped, any other until dropped or its estimated first token; holds are
// per flow and replica, and nothing kept is left in the map.
func TestPrefillHolds(t *testing.T) {
	a, b := standardFlow("a"), standardFlow("b")
	r1, r2 := &fleet.Replica{ID: "r1"}, &fleet.Replica{ID: "r2"}
	now := time.Now()
	var p prefillHolds
	if p.held(a, r1, now) {
		t.Fatal("an empty table holds a")
	}
	p.take(a, r1, true, time.Time{})
	p.take(a, r1, true, time.Time{})
	soon, later := now.Add(time.Hour), now.Add(2*time.Hour)
	p.take(b, r1, false, soon)
	p.take(b, r1, false, later)
	for _, c := range []struct {
		f    fairshare.Flow
		r    *fleet.Replica
		at   time.Time
		want bool
	}{
		{a, r1, now, true}, {a, r2, now, false}, {b, r1, now, true}, {b, r2, now, false},
		{b, r1, later.Add(-time.Second), true}, // the later estimate still holds
	} {
		if got := p.held(c.f, c.r, c.at); got != c.want {
			t.Errorf("held(%s, %s) = %v, want %v", c.f.Key, c.r.ID, got, c.want)
		}
	}
	p.drop(a, r1, true, time.Time{})
	if !p.held(a, r1, now) {
		t.Error("one of a's two streams dropped released both")
	}
	p.drop(a, r1, true, time.Time{})
	p.drop(a, r1, true, time.Time{}) // one drop too many changes nothing
	if p.held(a, r1, now) {
		t.Error("a is held after both its streams dropped")
	}
	p.drop(b, r1, false, soon) // the first non-streamed attempt ended
	if !p.held(b, r1, now) {
		t.Error("b's second attempt is no longer held")
	}
	if p.held(b, r1, later) {
		t.Error("b's hold outlived its estimated first token")
	}
	p.take(b, r1, false, later)
	p.drop(b, r1, false, later) // ended before its estimate
	if got := p.len(); got != 0 {
		t.Errorf("%d holds kept after every attempt ended, want 0", got)
	}
	// Holds only time released are swept as the map grows.
	for i := range 1000 {
		f := standardFlow(string(rune('A' + i%50)))
		p.take(f, &fleet.Replica{}, false, time.Now().Add(-time.Second))
	}
	if got := p.len(); got > 130 {
		t.Errorf("%d holds kept after 1000 that time released, want the sweep to bound them", got)
	}
}

// streamEngine is a stand-in engine whose answers wait on gates named by
// request ID: a streamed one sends its head at once, its first event when
// first(id) opens and ends when end(id) opens; any other answers whole
// when end(id) opens, or, the first time it arrives, has its connection
// broken when break(id) opens.
type streamEngine struct {
	srv   *httptest.Server
	mu    sync.Mutex
	ids   []string
	gates map[string]chan struct{}
	// allOpen: openAll was called; broken: the IDs whose connection
	// break(id) broke; guarded by mu.
	allOpen bool
	broken  map[string]bool
}

func newStreamEngine(t testing.TB) *streamEngine {
	t.Helper()
	e := &streamEngine{gates: map[string]chan struct{}{}}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/completions" {
			return // health
		}
		body, _ := io.ReadAll(r.Body)
		id := r.Header.Get(openai.HeaderRequestID)
		e.mu.Lock()
		e.ids = append(e.ids, id)
		e.mu.Unlock()
		wait := func(gate string) bool {
			select {
			case <-e.gate(gate):
				return true
			case <-r.Context().Done():
				return false
			}
		}
		if !strings.Contains(string(body), `"stream":true`) {
			select {
			case <-e.gate("break " + id):
				if e.breakFirst(id) {
					breakConn(w)
					return
				}
			case <-e.gate("end " + id):
			case <-r.Context().Done():
				return
			}
			if wait("end " + id) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"id":"c","object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"length"}]}`)
			}
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		if !wait("first " + id) {
			return
		}
		_, _ = io.WriteString(w, "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"ok\",\"finish_reason\":null}]}\n\n")
		w.(http.Flusher).Flush()
		if wait("end " + id) {
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
		}
	}))
	t.Cleanup(e.srv.Close)
	t.Cleanup(e.openAll) // a held request must not outlive the test
	return e
}

// gate is the gate named name, made on first use (open after openAll).
func (e *streamEngine) gate(name string) chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gateLocked(name)
}

func (e *streamEngine) gateLocked(name string) chan struct{} {
	g := e.gates[name]
	if g == nil {
		g = make(chan struct{})
		if e.allOpen {
			close(g)
		}
		e.gates[name] = g
	}
	return g
}

// open opens the gate named name.
func (e *streamEngine) open(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	closeGate(e.gateLocked(name))
}

// openAll opens every gate, and those made later.
func (e *streamEngine) openAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.allOpen = true
	for _, g := range e.gates {
		closeGate(g)
	}
}

func closeGate(g chan struct{}) {
	select {
	case <-g:
	default:
		close(g)
	}
}

// breakFirst reports whether the request with ID id is to have its
// connection broken: the first time it is asked.
func (e *streamEngine) breakFirst(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.broken[id] {
		return false
	}
	if e.broken == nil {
		e.broken = map[string]bool{}
	}
	e.broken[id] = true
	return true
}

// received is how many times the engine received a request with ID id.
func (e *streamEngine) received(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, x := range e.ids {
		if x == id {
			n++
		}
	}
	return n
}

// has reports whether the engine received a request with ID id.
func (e *streamEngine) has(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, x := range e.ids {
		if x == id {
			return true
		}
	}
	return false
}

// holdsOf is how many holds key's flows have in p.
func holdsOf(p *prefillHolds, key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for k := range p.m {
		if k.flow.Key == key {
			n++
		}
	}
	return n
}

// pacingRig starts a gateway with flow control and fair sharing in front
// of a streamEngine of four slots, with pacing on or off, and returns the
// engine, the gateway and the secrets of a flood key and a quiet one.
func pacingRig(t *testing.T, pace bool) (e *streamEngine, gw *running, flood, quiet string) {
	t.Helper()
	e = newStreamEngine(t)
	cfg := flowConfig(e.srv.URL, 16)
	cfg.Replicas[0].MaxConcurrency, cfg.Replicas[0].MaxPending = 4, 4
	cfg.Flow.PacePrefills = pace
	flood, fk := newKey("flood", nil)
	quiet, qk := newKey("quiet", nil)
	withKeys(t, cfg, fk, qk)
	return e, startGatewayWith(t, cfg, Options{}), flood, quiet
}

// waitReceived returns a wait, failing t after 10 s, for the engine to
// receive the request with a given ID.
func (e *streamEngine) waitReceived(t *testing.T) func(id string) {
	return func(id string) {
		t.Helper()
		waitFor(t, "the engine to receive "+id, 10*time.Second, func() bool { return e.has(id) })
	}
}

// asyncBody is async with a body of its own.
func asyncBody(gw *running, id, body string, header ...string) <-chan sent {
	ch := make(chan sent, 1)
	go func() { ch <- sendCompletion(gw.url, body, append([]string{openai.HeaderRequestID, id}, header...)...) }()
	return ch
}

// explainNotOffered is why /admin/explain, asked as key, did not offer each
// replica ("" where it was offered), and where the key stands.
func explainNotOffered(t *testing.T, gw *running, key, body string) (map[string]string, *fairShareVerdict) {
	t.Helper()
	var ans struct {
		Replicas []struct {
			ID         string `json:"replica"`
			NotOffered string `json:"not_offered"`
		} `json:"replicas"`
		Admission *admissionVerdict `json:"admission"`
	}
	postExplain(t, gw.admin+"/admin/explain/v1/completions?key="+key, body, &ans)
	if ans.Admission == nil {
		t.Fatal("explain answered without an admission verdict")
	}
	why := map[string]string{}
	for _, r := range ans.Replicas {
		why[r.ID] = r.NotOffered
	}
	return why, ans.Admission.FairShare
}

// TestPrefillPacing: beside an active quiet key, a flooding key with
// requests waiting in the queue gets no second prompt onto a replica while
// one of its prompts there awaits its first token: the request waits,
// explain says why, and it goes as soon as that first byte comes. The
// quiet key, whose requests start as they come, is never held back. With
// flow.pace_prefills off the flood's request starts at once.
func TestPrefillPacing(t *testing.T) {
	const plain, stream = `{"model":"sim","prompt":"hello","max_tokens":1}`, `{"model":"sim","prompt":"hello","max_tokens":1,"stream":true}`
	for _, pace := range []bool{true, false} {
		t.Run(map[bool]string{true: "paced", false: "pacing_off"}[pace], func(t *testing.T) {
			e, gw, flood, quiet := pacingRig(t, pace)
			mq := gw.g.flow.queues[testModel]
			received := e.waitReceived(t)
			var chs []<-chan sent
			chs = append(chs, asyncBody(gw, "q0", plain, bearer(quiet)...))
			received("q0")
			// The flood holds its share (2 of 4), both prompts answered,
			// and three more of its requests wait.
			for _, id := range []string{"f0", "f1"} {
				chs = append(chs, asyncBody(gw, id, stream, bearer(flood)...))
				received(id)
				e.open("first " + id)
			}
			waitFor(t, "the flood's first bytes", 10*time.Second, func() bool { return holdsOf(&mq.holds, "flood") == 0 })
			for i, id := range []string{"f2", "f3", "f4"} {
				chs = append(chs, asyncBody(gw, id, stream, bearer(flood)...))
				waitFor(t, id+" to wait", 10*time.Second, func() bool { return waiting(gw) == int64(i+1) })
			}
			// A slot frees: f2 starts, its prompt awaiting its first token.
			e.open("end f0")
			received("f2")
			// Another frees: f3, with f4 still behind it, waits for f2's
			// first byte when paced.
			e.open("end f1")
			if !pace {
				received("f3")
				e.openAll()
				expectStatus(t, http.StatusOK, chs...)
				if n := counterValue(t, gw, "inferrail_flow_prefill_paced_total", "model", testModel, "class", "standard"); n != 0 {
					t.Errorf("inferrail_flow_prefill_paced_total = %v with pacing off", n)
				}
				return
			}
			waitFor(t, "f1's slot to free", 10*time.Second, func() bool {
				_, v := explainNotOffered(t, gw, "flood", stream)
				return v.InFlight == 1
			})
			why, v := explainNotOffered(t, gw, "flood", stream)
			if why["one"] != notOfferedPaced || !v.Paced {
				t.Errorf("explain as the flood: not_offered %q, paced %v; want %q, true", why["one"], v.Paced, notOfferedPaced)
			}
			if why, v := explainNotOffered(t, gw, "quiet", stream); why["one"] != "" || v.Paced {
				t.Errorf("explain as the quiet key: not_offered %q, paced %v; want it offered, not paced", why["one"], v.Paced)
			}
			chs = append(chs, asyncBody(gw, "q1", stream, bearer(quiet)...))
			received("q1") // the quiet key is not held back by the flood's prompt
			time.Sleep(50 * time.Millisecond)
			if e.has("f3") || waiting(gw) != 2 {
				t.Fatalf("f3 reached the engine (%v) or stopped waiting (%d wait) while f2 awaited its first token", e.has("f3"), waiting(gw))
			}
			e.open("first f2")
			received("f3")
			e.openAll()
			expectStatus(t, http.StatusOK, chs...)
			// f3 waited for pacing, counted once however many times the
			// dispatcher tried it; f4, last of the flood's waiters, is
			// never paced.
			if n := counterValue(t, gw, "inferrail_flow_prefill_paced_total", "model", testModel, "class", "standard"); n != 1 {
				t.Errorf("inferrail_flow_prefill_paced_total = %v, want 1 (f3)", n)
			}
			if n := holdsOf(&mq.holds, "flood"); n != 0 {
				t.Errorf("%d holds of the flood's kept after its requests ended", n)
			}
		})
	}
}

// TestQueuedRetryNotPaced: a retry is never paced, in the queue too. A
// flooding key's request whose connection broke, finding the fleet full,
// waits in the queue before another of its key's; when a slot frees it
// goes at once, though a third of its key's prompts awaits its first
// token. The dispatcher paced every
// waiter, retries included (found by a review).
func TestQueuedRetryNotPaced(t *testing.T) {
	const plain, stream = `{"model":"sim","prompt":"hello","max_tokens":1}`, `{"model":"sim","prompt":"hello","max_tokens":1,"stream":true}`
	e, gw, flood, quiet := pacingRig(t, true)
	received := e.waitReceived(t)
	var chs []<-chan sent
	for _, id := range []string{"q0", "q1"} {
		chs = append(chs, asyncBody(gw, id, plain, bearer(quiet)...))
		received(id)
	}
	chs = append(chs, asyncBody(gw, "f0", stream, bearer(flood)...))
	received("f0")
	e.open("first f0")
	chs = append(chs, asyncBody(gw, "f1", plain, bearer(flood)...))
	received("f1") // the fleet's fourth slot
	chs = append(chs, asyncBody(gw, "f2", stream, bearer(flood)...))
	waitFor(t, "f2 to wait", 10*time.Second, func() bool { return waiting(gw) == 1 })
	// f1's connection breaks: its slot goes to f2, whose prompt then
	// awaits its first token, and f1's retry, after its backoff, finds the
	// fleet full.
	e.open("break f1")
	received("f2")
	waitFor(t, "f1's retry to wait", 10*time.Second, func() bool { return waiting(gw) == 1 })
	// Another of the flood's behind it: the last of a key's waiters is
	// never paced, the others are.
	chs = append(chs, asyncBody(gw, "f3", stream, bearer(flood)...))
	waitFor(t, "f3 to wait", 10*time.Second, func() bool { return waiting(gw) == 2 })
	e.open("end f0") // a slot of the flood's frees
	waitFor(t, "f1's retry to reach the engine", 10*time.Second, func() bool { return e.received("f1") == 2 })
	e.openAll()
	expectStatus(t, http.StatusOK, chs...)
}

// TestPrefillPacingNotStreamed: a backlogged key's answer that is not
// streamed has no first byte until its end, so its prompt is held only
// until its estimated first token: the key's next request starts while the
// previous one is still running, instead of one request per replica.
func TestPrefillPacingNotStreamed(t *testing.T) {
	const plain = `{"model":"sim","prompt":"hello","max_tokens":1}`
	e, gw, flood, quiet := pacingRig(t, true)
	received := e.waitReceived(t)
	chs := []<-chan sent{asyncBody(gw, "q0", plain, bearer(quiet)...)}
	received("q0")
	for _, id := range []string{"f0", "f1"} {
		chs = append(chs, asyncBody(gw, id, plain, bearer(flood)...))
		received(id)
	}
	for i, id := range []string{"f2", "f3", "f4"} {
		chs = append(chs, asyncBody(gw, id, plain, bearer(flood)...))
		waitFor(t, id+" to wait", 10*time.Second, func() bool { return waiting(gw) == int64(i+1) })
	}
	e.open("end f0")
	received("f2")
	// f3 is paced behind f2, which runs on: it goes once f2's estimated
	// first token has passed, not when f2 ends.
	e.open("end f1")
	received("f3") // f2's end gate opens only below
	e.openAll()
	expectStatus(t, http.StatusOK, chs...)
}
