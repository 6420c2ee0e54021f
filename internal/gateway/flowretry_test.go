package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
)

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
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				return // health probes
			}
			var body struct{ Prompt string }
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
				http.Error(w, "bad body", http.StatusBadRequest)
				return
			}
			switch {
			case body.Prompt == "hold":
				select {
				case <-gate:
				case <-r.Context().Done():
					return
				}
			case body.Prompt == "close" && closed.CompareAndSwap(false, true):
				// The first attempt's connection breaks before any answer.
				time.Sleep(200 * time.Millisecond)
				if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
					conn.Close()
				}
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`))
		}))
		t.Cleanup(srv.Close)
		return srv.URL
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
