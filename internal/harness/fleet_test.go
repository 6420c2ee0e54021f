package harness

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
)

// TestGatewayConfigSplit: a policy written as a split becomes the model's
// split; a malformed one is refused by the config's validation, with
// the path.
func TestGatewayConfigSplit(t *testing.T) {
	reps := []Replica{{ID: "r", URL: "http://127.0.0.1:1"}}
	cfg := GatewayConfig(reps, GatewayOptions{Model: "m", Policy: "split:cost_model=90,kv_aware=10", Caps: 8, RequestTimeout: time.Second, LogLevel: "info"})
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := cfg.ModelSplit("m"); !slices.Equal(got, config.Split{{Policy: "cost_model", Percent: 90}, {Policy: "kv_aware", Percent: 10}}) {
		t.Errorf("split %v", got)
	}
	for _, bad := range []string{"split:cost_model=90", "split:cost_model=x,p2c=100", "split:", "split:fast=100"} {
		cfg := GatewayConfig(reps, GatewayOptions{Model: "m", Policy: bad, Caps: 8, RequestTimeout: time.Second, LogLevel: "info"})
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "models[0].split") {
			t.Errorf("%s: validation says %v, want a models[0].split problem", bad, err)
		}
	}
}
