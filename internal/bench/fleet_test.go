package bench

import (
	"strconv"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/harness"
)

// TestFleetConfigEverySpeedup: the gateway config of a fleet is valid at
// every speedup a run accepts (1-1000). Dividing the 100 ms scrape interval
// by more than 10 fell under config.MinPeriod, and the gateway refused to
// start.
func TestFleetConfigEverySpeedup(t *testing.T) {
	replicas := []harness.Replica{{ID: "sim-1", URL: "http://127.0.0.1:1"}, {ID: "sim-2", URL: "http://127.0.0.1:2"}}
	patches := map[string]string{
		"defaults": "",
		// A longer interval of the user's own is still scaled down.
		"slow_scrapes": `{"load":{"scrape_interval":"2s","scrape_timeout":"1s","max_age":"5s"}}`,
	}
	for name, patch := range patches {
		for _, speedup := range []float64{0, 1, 4, 10, 11, 20, 333, 1000} {
			t.Run(name+"/"+strconv.FormatFloat(speedup, 'g', -1, 64), func(t *testing.T) {
				o := FleetOptions{Policy: "cost_model", Model: "inferrail/sim-8b", Index: IndexExact, Speedup: speedup, GatewayPatch: patch}
				cfg, err := fleetConfig(o, replicas)
				if err != nil {
					t.Fatal(err)
				}
				if err := cfg.Validate(); err != nil {
					t.Errorf("fleetConfig at speedup %v: %v", speedup, err)
				}
				if l := cfg.Load; l.ScrapeInterval < config.MinPeriod || l.MaxAge < l.ScrapeInterval+l.ScrapeTimeout {
					t.Errorf("load = %+v, want an interval >= %v and max_age covering interval and timeout", l, config.MinPeriod)
				}
			})
		}
	}
}

// TestFasterDuration: a time shrinks by the speedup down to its floor, a
// time already under the floor is left as it is (the config refuses it, as
// without a speedup), and a set time never becomes 0.
func TestFasterDuration(t *testing.T) {
	const ms = config.Duration(time.Millisecond)
	tests := []struct {
		d       config.Duration
		f       float64
		floor   config.Duration
		want    config.Duration
		comment string
	}{
		{100 * ms, 4, config.MinPeriod, 25 * ms, "above the floor"},
		{100 * ms, 20, config.MinPeriod, config.MinPeriod, "floored"},
		{5 * ms, 4, config.MinPeriod, 5 * ms, "under the floor already"},
		{3, 1000, 1, 1, "stays set"},
		{0, 1000, config.MinPeriod, 0, "zero stays zero"},
	}
	for _, tt := range tests {
		if got := fasterDuration(tt.d, tt.f, tt.floor); got != tt.want {
			t.Errorf("fasterDuration(%v, %v, %v) = %v, want %v (%s)", tt.d, tt.f, tt.floor, got, tt.want, tt.comment)
		}
	}
}
