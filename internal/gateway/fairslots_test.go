package gateway

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
)

// TestFairShareCountsSlotsHeldElsewhere: under fair sharing, a request
// still running on a replica that is no longer usable (failing its
// probes) or no longer in the fleet (removed by a reload) holds a slot of
// its key's share that no usable replica gives. Such requests counted in
// the key's in-flight but not in the slots, so the key's next request
// waited for max_wait and got a 429 while a usable replica sat idle
// (found by a review).
func TestFairShareCountsSlotsHeldElsewhere(t *testing.T) {
	for _, how := range []string{"unhealthy", "removed"} {
		t.Run(how, func(t *testing.T) {
			gate := make(chan struct{})
			release := sync.OnceFunc(func() { close(gate) })
			t.Cleanup(release)
			var sick atomic.Bool
			hold := func(prompt string, w http.ResponseWriter, r *http.Request) bool {
				return prompt == "hold" && holdUntil(gate, r)
			}
			cfg := flowConfig(promptEngine(t, &sick, hold), 10)
			cfg.Replicas = append(cfg.Replicas, config.Replica{ID: "two", URL: promptEngine(t, nil, hold), Models: []string{testModel}, MaxConcurrency: 1, MaxPending: 1})
			cfg.Routing.DefaultPolicy = "round_robin"
			// Probes quick enough to find replica one sick well within the
			// wait below, slow enough that a loaded machine does not fail
			// replica two's too (50 ms did, 1 run in 5 beside other work).
			cfg.Health.Interval, cfg.Health.Timeout = config.Duration(250*time.Millisecond), config.Duration(250*time.Millisecond)
			cfg.Flow.MaxWait = config.Duration(3 * time.Second)
			gw := startGateway(t, cfg)
			body := func(prompt string) string { return `{"model":"sim","prompt":"` + prompt + `","max_tokens":1}` }

			held := asyncBody(gw, "held", body("hold"))
			waitFor(t, "a request held on replica one", 5*time.Second, func() bool { return gw.g.fleet.Snapshot().Get("one").InFlight() == 1 })
			switch how {
			case "unhealthy":
				sick.Store(true)
				waitFor(t, "replica one to fail its probes", 5*time.Second, func() bool { return !gw.g.fleet.Snapshot().Get("one").Healthy() })
			case "removed":
				next := *gw.g.current().cfg
				next.Replicas = next.Replicas[1:]
				if result, _, err := gw.g.apply(&next, "test"); result != reloadApplied {
					t.Fatalf("removing replica one: %s, %v", result, err)
				}
			}
			start := time.Now()
			if s := sendCompletion(gw.url, body("next")); s.err != nil || s.status != http.StatusOK || s.replica != "two" {
				t.Errorf("the key's next request: %d from %q, %v, after %v; want 200 from the idle replica two", s.status, s.replica, s.err, time.Since(start))
			}
			release()
			if s := <-held; s.err != nil || s.status != http.StatusOK {
				t.Errorf("the held request: %d, %v", s.status, s.err)
			}
		})
	}
}
