package gateway

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/policy"
	"github.com/inferrail/inferrail/internal/sim"
)

var update = flag.Bool("update", false, "rewrite golden files")

// snapshotCostModel is the model TestMetricsSnapshot routes with cost_model.
const snapshotCostModel = "inferrail/cost-8b"

// TestMetricsSnapshot pins every inferrail_ family the gateway exports and
// the labels of each (and checks the runtime's and the process's are
// there), after traffic that touches every path: successes, retries,
// ejections, the gateway's own errors, a client that left, and on a second
// model routed by cost_model with sessions, a conversation steered back to
// its replica until the bounded-load guard sets that replica aside, and an
// engine restart that resets the index.
func TestMetricsSnapshot(t *testing.T) {
	sims := fleetOf(t, 2, true)
	cfg := testConfig(t, sims)
	engines := []*scriptedEngine{newScriptedEngine(t), newScriptedEngine(t), newScriptedEngine(t)}
	cfg.Models = append(cfg.Models, config.Model{Name: snapshotCostModel, Tokenizer: "builtin:sim", Policy: policy.CostModel})
	for i, e := range engines {
		cfg.Replicas = append(cfg.Replicas, config.Replica{ID: fmt.Sprintf("cost-%d", i+1), URL: e.srv.URL,
			Models: []string{snapshotCostModel}, MaxConcurrency: 64, MaxPending: 64})
	}
	cfg.Routing.SessionAffinity = true
	// Probes slow enough that a loaded machine does not fail them: the
	// bounded-load step needs all three engines in rotation.
	cfg.Health.Interval = config.Duration(200 * time.Millisecond)
	cfg.Health.Timeout = config.Duration(200 * time.Millisecond)
	gw := startGateway(t, cfg)
	sessionPastBoundedLoad(t, gw, snapshotCostModel, engines, func(int) {})
	countRestart(t, gw, engines[0], "cost-1")
	for _, c := range []struct{ family, label string }{
		{"inferrail_routing_steered_total", policy.SteerSession},
		{"inferrail_routing_guards_total", policy.GuardBoundedLoad},
	} {
		key := map[string]string{"inferrail_routing_steered_total": "reason", "inferrail_routing_guards_total": "guard"}[c.family]
		if got := counterValue(t, gw, c.family, "model", snapshotCostModel, key, c.label); got != 1 {
			t.Errorf("%s{%s=%q} = %v, want 1", c.family, key, c.label, got)
		}
	}
	chat(t, gw.url, chatBody("ok", ""))
	chat(t, gw.url, chatBody("streamed", `,"stream":true`))
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
	runtimeFamilies := map[string]bool{}
	for _, mf := range families {
		if !strings.HasPrefix(mf.GetName(), "inferrail_") {
			// The Go runtime's and the process's own: their set is the
			// client library's and the platform's, not the golden's.
			runtimeFamilies[mf.GetName()] = true
			continue
		}
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
	wantRuntime := []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "go_gc_duration_seconds"}
	if runtime.GOOS == "linux" {
		wantRuntime = append(wantRuntime, "process_resident_memory_bytes", "process_open_fds", "process_cpu_seconds_total")
	}
	for _, name := range wantRuntime {
		if !runtimeFamilies[name] {
			t.Errorf("no %s on /metrics", name)
		}
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

// TestOpenMetricsPage: the OpenMetrics page the admin port offers names
// each family once. The Go collector's go_memstats_alloc_bytes gauge and
// its go_memstats_alloc_bytes_total counter both became a family
// go_memstats_alloc_bytes there, which strict parsers refuse.
func TestOpenMetricsPage(t *testing.T) {
	gw := startGateway(t, testConfig(t, fleetOf(t, 1, true)))
	resp, page := get(t, gw.admin+"/metrics", "Accept", "application/openmetrics-text; version=1.0.0; charset=utf-8")
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/openmetrics-text") {
		t.Fatalf("Content-Type %q, want OpenMetrics", resp.Header.Get("Content-Type"))
	}
	types := map[string]string{}
	for _, l := range strings.Split(page, "\n") {
		f := strings.Fields(l)
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		if prev, dup := types[f[2]]; dup {
			t.Errorf("family %s is a %s and a %s", f[2], prev, f[3])
		}
		types[f[2]] = f[3]
	}
	if types["go_memstats_alloc_bytes"] != "counter" || types["go_memstats_heap_alloc_bytes"] != "gauge" {
		t.Errorf("go_memstats_alloc_bytes is %q and go_memstats_heap_alloc_bytes %q, want the counter and the gauge kept",
			types["go_memstats_alloc_bytes"], types["go_memstats_heap_alloc_bytes"])
	}
}
