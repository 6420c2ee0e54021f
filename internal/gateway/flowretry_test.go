package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/sim"
)

// promptEngine starts an engine answering every completion with one
// token, once script has seen its prompt: script may hold it first, or
// answer it itself (or break its connection) and report true. Its probes
// fail while sick is set (nil: never).
func promptEngine(t *testing.T, sick *atomic.Bool, script func(prompt string, w http.ResponseWriter, r *http.Request) (answered bool)) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			if sick != nil && sick.Load() {
				http.Error(w, "down", http.StatusServiceUnavailable)
			}
			return
		}
		var body struct{ Prompt string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		if script(body.Prompt, w, r) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// holdUntil holds a request until gate closes or its client leaves; it
// reports whether the client left (nothing to answer).
func holdUntil(gate <-chan struct{}, r *http.Request) (left bool) {
	select {
	case <-gate:
		return false
	case <-r.Context().Done():
		return true
	}
}

// breakConn breaks a request's connection unanswered.
func breakConn(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		conn.Close()
	}
}

// TestRetryWaitsInTheQueue: with a flow queue, a request whose attempt
// failed at its connection while the fleet was full waits for room, as a
// first attempt does. Freeing the failed attempt's slot wakes the
// dispatcher, which gives it to a waiter; the retry found every replica
// full and was told so with a 503 (found by a review).
func TestRetryWaitsInTheQueue(t *testing.T) {
	gate := make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	var closed atomic.Bool
	engine := func() string {
		return promptEngine(t, nil, func(prompt string, w http.ResponseWriter, r *http.Request) bool {
			switch {
			case prompt == "hold":
				return holdUntil(gate, r)
			case prompt == "close" && closed.CompareAndSwap(false, true):
				// The first attempt's connection breaks before any answer.
				time.Sleep(200 * time.Millisecond)
				breakConn(w)
				return true
			}
			return false
		})
	}
	cfg := flowConfig(engine(), 10)
	cfg.Replicas = append(cfg.Replicas, config.Replica{ID: "two", URL: engine(), Models: []string{testModel}, MaxConcurrency: 1, MaxPending: 1})
	cfg.Routing.DefaultPolicy = "round_robin"
	gw := startGateway(t, cfg)
	body := func(prompt string) string { return `{"model":"sim","prompt":"` + prompt + `","max_tokens":1}` }

	held := asyncBody(gw, "held", body("hold"))
	waitFor(t, "a replica held", 5*time.Second, func() bool {
		return gw.g.fleet.Snapshot().Get("one").InFlight()+gw.g.fleet.Snapshot().Get("two").InFlight() == 1
	})
	victim := asyncBody(gw, "victim", body("close"))
	waitFor(t, "both replicas busy", 5*time.Second, func() bool {
		return gw.g.fleet.Snapshot().Get("one").InFlight()+gw.g.fleet.Snapshot().Get("two").InFlight() == 2
	})
	// Queued behind a full fleet: it takes the victim's replica when the
	// victim's connection breaks, and holds it.
	held2 := asyncBody(gw, "held2", body("hold"))
	waitFor(t, "the victim to retry", 5*time.Second, func() bool { return closed.Load() })
	select {
	case s := <-victim:
		t.Fatalf("the victim was answered %d while every replica was held; want it to wait", s.status)
	case <-time.After(500 * time.Millisecond):
	}
	if n := waiting(gw); n != 1 {
		t.Errorf("%d waiting, want the victim's retry", n)
	}
	release()
	for name, ch := range map[string]<-chan sent{"held": held, "held2": held2, "victim": victim} {
		if s := <-ch; s.err != nil || s.status != http.StatusOK {
			t.Errorf("%s: status %d, %v; want 200", name, s.status, s.err)
		}
	}
	page := scrape(t, gw.admin)
	if got := metricValue(page, `inferrail_request_errors_total{model="`+testModel+`",reason="fleet_full"}`); got != 0 {
		t.Errorf("%v requests refused as fleet_full, want none", got)
	}
}

// TestRetryQueuesForWhatIsLeftOfMaxWait: flow.max_wait bounds the time a
// request spends queued, over all its waits, not the time since it
// arrived. A request whose attempt ran past max_wait on an engine that
// then broke its connection, and whose retry found the fleet full, was
// shed at once as a queue timeout, having waited nothing (found by a
// review); it now waits for room, which frees here within max_wait. A
// request queued behind the full fleet takes the broken attempt's slot,
// so that the retry finds the fleet full.
func TestRetryQueuesForWhatIsLeftOfMaxWait(t *testing.T) {
	gate := make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	var broke atomic.Bool
	engine := func() string {
		return promptEngine(t, nil, func(prompt string, w http.ResponseWriter, r *http.Request) bool {
			switch {
			case prompt == "hold":
				return holdUntil(gate, r)
			case prompt == "long" && !broke.Load():
				// Past max_wait, then the connection breaks unanswered.
				time.Sleep(800 * time.Millisecond)
				breakConn(w)
				broke.Store(true)
				return true
			}
			return false
		})
	}
	cfg := flowConfig(engine(), 10)
	cfg.Replicas = append(cfg.Replicas, config.Replica{ID: "two", URL: engine(), Models: []string{testModel}, MaxConcurrency: 1, MaxPending: 1})
	cfg.Flow.MaxWait = config.Duration(500 * time.Millisecond)
	gw := startGateway(t, cfg)
	body := func(prompt string) string { return `{"model":"sim","prompt":"` + prompt + `","max_tokens":1}` }
	busy := func() int64 {
		return gw.g.fleet.Snapshot().Get("one").InFlight() + gw.g.fleet.Snapshot().Get("two").InFlight()
	}

	held := asyncBody(gw, "held", body("hold"))
	waitFor(t, "a replica held", 5*time.Second, func() bool { return busy() == 1 })
	sentLong := time.Now()
	long := asyncBody(gw, "long", body("long"))
	waitFor(t, "both replicas busy", 5*time.Second, func() bool { return busy() == 2 })
	// Queued 500 ms after the long request: waiting still when its
	// attempt breaks, 800 ms after it.
	time.Sleep(time.Until(sentLong.Add(500 * time.Millisecond)))
	held2 := asyncBody(gw, "held2", body("hold"))
	waitFor(t, "the long attempt's connection to break", 5*time.Second, broke.Load)
	waitFor(t, "its retry to queue", 2*time.Second, func() bool { return waiting(gw) == 1 && busy() == 2 })
	release() // the held requests end, and a replica takes the retry
	for name, ch := range map[string]<-chan sent{"held": held, "held2": held2, "long": long} {
		if s := <-ch; s.err != nil || s.status != http.StatusOK {
			t.Errorf("%s: status %d, %v; want 200", name, s.status, s.err)
		}
	}
	if got := counterValue(t, gw, "inferrail_flow_shed_total", "model", testModel, "class", "standard", "reason", "queue_timeout"); got != 0 {
		t.Errorf("%v requests shed as queue timeouts, want none", got)
	}
}

// TestRetriesCountAttempts: inferrail_upstream_retries_total counts the
// attempts after a request's first, each made on a replica. A retry whose
// client left during its backoff, or that found no replica, moved nothing
// and was counted all the same (found by a review).
func TestRetriesCountAttempts(t *testing.T) {
	sims := fleetOf(t, 1, true)
	cfg := testConfig(t, sims)
	cfg.Retry.MaxAttempts = 2
	cfg.Retry.Backoff, cfg.Retry.MaxBackoff = config.Duration(300*time.Millisecond), config.Duration(300*time.Millisecond)
	gw := startGateway(t, cfg)
	sims[0].SetFault(sim.Fault{Kind: sim.FaultFail, Status: 503, SparesHealth: true})
	decisions := func() float64 {
		return counterValue(t, gw, "inferrail_routing_decisions_total", "model", testModel, "policy", "round_robin", "replica", "sim-1")
	}
	retries := func() float64 { return counterValue(t, gw, "inferrail_upstream_retries_total", "model", testModel) }
	for i := range 3 { // each client leaves during the backoff
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.url+"/v1/chat/completions", strings.NewReader(chatBody(fmt.Sprint("left ", i), "")))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("request %d answered %d before its client left", i, resp.StatusCode)
		}
		cancel()
	}
	waitFor(t, "the backoffs to end", 2*time.Second, func() bool { return gw.g.fleet.Snapshot().Get("sim-1").InFlight() == 0 })
	time.Sleep(400 * time.Millisecond) // past every backoff
	if d, r := decisions(), retries(); d != 3 || r != 0 {
		t.Errorf("clients gone during the backoff: %v decisions, %v retries; want 3 and 0", d, r)
	}
	// One that stays: its retry goes back to the one replica.
	if resp, body := chat(t, gw.url, chatBody("stays", "")); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a failing replica's answer %d %s, want its 503", resp.StatusCode, body)
	}
	if d, r := decisions(), retries(); d != 5 || r != 1 {
		t.Errorf("after one request tried twice: %v decisions, %v retries; want 5 and 1", d, r)
	}
}
