package gateway

import (
	"net/http"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/auth"
	"github.com/inferrail/inferrail/internal/config"
)

// TestFairShareGaugesFollowTheKeys: inferrail_flow_active_keys and
// inferrail_flow_fair_share_slots say what fair sharing counts when they
// are read: keys go from the count once their window passes without a
// request, and with fair sharing off there is no share. They were set as
// each request came and went, and kept their last values after traffic
// stopped or fair sharing was turned off (found by a review).
func TestFairShareGaugesFollowTheKeys(t *testing.T) {
	e := newOrderEngine(t)
	e.open()
	cfg := flowConfig(e.srv.URL, 16)
	cfg.Replicas[0].MaxConcurrency, cfg.Replicas[0].MaxPending = 4, 4
	const window = 300 * time.Millisecond
	cfg.Flow.FairShareWindow = config.Duration(window)
	a, ka := newKey("a", nil)
	b, kb := newKey("b", nil)
	c, kc := newKey("c", nil)
	withKeys(t, cfg, ka, kb, kc)
	gw := startGatewayWith(t, cfg, Options{})
	gauges := func() (active, share float64) {
		labels := []string{"model", testModel, "class", "standard"}
		return series(t, gw, "inferrail_flow_active_keys", labels).GetGauge().GetValue(),
			series(t, gw, "inferrail_flow_fair_share_slots", labels).GetGauge().GetValue()
	}
	start := time.Now()
	expectStatus(t, http.StatusOK, async(gw, "a", bearer(a)...), async(gw, "b", bearer(b)...), async(gw, "c", bearer(c)...))
	if active, share := gauges(); time.Since(start) < window && (active != 3 || share != 1) {
		t.Errorf("within the window: %v active keys, a share of %v; want 3 and 1", active, share)
	}
	waitFor(t, "the keys to go quiet", 10*time.Second, func() bool {
		active, share := gauges()
		return active == 0 && share == 4
	})
	off := `{"flow":{"fair_share_window":"0s"}}`
	if code, _, problems := patch(t, gw.admin, off); code != http.StatusOK {
		t.Fatalf("patch: %d %v", code, problems)
	}
	if active, share := gauges(); active != 0 || share != 0 {
		t.Errorf("fair sharing off: %v active keys, a share of %v; want none", active, share)
	}
}

// TestFairShareGaugesCountAKeyOnce: a key with requests of two classes
// is one key in inferrail_flow_active_keys and in the share of the less
// important class. Its flows were counted, so a critical key that also
// sent a standard request made two of the standard class's sharers, and
// every other standard key's share shrank as though a third key had come
// (found by a review).
func TestFairShareGaugesCountAKeyOnce(t *testing.T) {
	e := newOrderEngine(t)
	e.open()
	cfg := flowConfig(e.srv.URL, 16)
	cfg.Replicas[0].MaxConcurrency, cfg.Replicas[0].MaxPending = 4, 4
	cfg.Flow.FairShareWindow = config.Duration(time.Minute)
	a, ka := newKey("a", func(k *auth.Key) { k.Priority = auth.Critical })
	b, kb := newKey("b", nil)
	withKeys(t, cfg, ka, kb)
	gw := startGatewayWith(t, cfg, Options{})
	expectStatus(t, http.StatusOK,
		async(gw, "a-critical", bearer(a)...),
		async(gw, "a-standard", append(bearer(a), "x-inferrail-priority", "standard")...),
		async(gw, "b", bearer(b)...))
	for _, tt := range []struct {
		class         string
		active, share float64
	}{{"critical", 1, 4}, {"standard", 2, 2}, {"sheddable", 2, 2}} {
		labels := []string{"model", testModel, "class", tt.class}
		active := series(t, gw, "inferrail_flow_active_keys", labels).GetGauge().GetValue()
		share := series(t, gw, "inferrail_flow_fair_share_slots", labels).GetGauge().GetValue()
		if active != tt.active || share != tt.share {
			t.Errorf("%s: %v active keys, a share of %v; want %v and %v", tt.class, active, share, tt.active, tt.share)
		}
	}
}
