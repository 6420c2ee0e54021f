package gateway

import (
	"context"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/sim"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestMetricsSnapshot pins every family the gateway exports and the labels
// of each, after traffic that touches every path: successes, retries,
// ejections, the gateway's own errors and a client that left.
func TestMetricsSnapshot(t *testing.T) {
	sims := fleetOf(t, 2, true)
	cfg := testConfig(t, sims)
	gw := startGateway(t, cfg)
	chat(t, gw.url, chatBody("ok", ""))
	chat(t, gw.url, `{"model":"nope"}`)
	sims[1].SetFault(sim.Fault{Kind: sim.FaultFail, Status: 503, SparesHealth: true})
	for range 6 {
		chat(t, gw.url, chatBody("retry", ""))
	}
	// A client that leaves while its request waits.
	sims[0].SetFault(sim.Fault{Kind: sim.FaultDelay, Delay: time.Second, SparesHealth: true})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.url+"/v1/chat/completions", strings.NewReader(chatBody("leave", "")))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	waitFor(t, "the disconnect to be counted", time.Second, func() bool {
		return strings.Contains(scrape(t, gw.admin), "inferrail_client_disconnects_total{")
	})
	waitFor(t, "engine load reports", 2*time.Second, func() bool {
		page := scrape(t, gw.admin)
		return strings.Contains(page, `inferrail_replica_engine_running{replica="sim-1"}`) &&
			strings.Contains(page, `inferrail_replica_engine_running{replica="sim-2"}`)
	})
	families, err := gw.g.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, mf := range families {
		labels := map[string]bool{}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = true
			}
		}
		names := make([]string, 0, len(labels))
		for l := range labels {
			names = append(names, l)
		}
		slices.Sort(names)
		lines = append(lines, mf.GetName()+" "+strings.ToLower(mf.GetType().String())+" {"+strings.Join(names, ",")+"} "+mf.GetHelp())
	}
	got := strings.Join(lines, "\n") + "\n"
	path := filepath.Join("testdata", "metrics.golden")
	if *update {
		_ = os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if got != string(want) {
		t.Errorf("metric families changed:\n--- got\n%s--- want\n%s", got, want)
	}
}
