package procs_test

import (
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/procs/procstest"
)

// TestMain lets the test binary act as the children TestChildren starts.
func TestMain(m *testing.M) { procstest.Main(m) }

// TestChildren starts a simulator, a gateway and a (fake) peer router in
// front of it, reads what procs reads of them and stops them cleanly.
func TestChildren(t *testing.T) {
	ctx := t.Context()
	sim, err := procs.StartSim(ctx, procs.SimOptions{Binary: os.Args[0], Env: procstest.SimEnv(), Args: []string{"--zero-latency"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Stop()
	if rss, err := procs.ResidentBytes(sim.Pid); err != nil || rss <= 0 {
		t.Errorf("ResidentBytes(sim) = %d, %v", rss, err)
	}
	if n, err := procs.OpenFDs(sim.Pid); err != nil || n <= 0 {
		t.Errorf("OpenFDs(sim) = %d, %v", n, err)
	}
	client := procs.AdminClient()
	defer client.CloseIdleConnections()
	if page, err := procs.ScrapePage(ctx, client, sim.URL+"/metrics"); err != nil || len(page) == 0 {
		t.Errorf("ScrapePage(sim) = %d series, %v", len(page), err)
	}

	cfg := config.Default()
	cfg.Models = []config.Model{{Name: procs.SimModel}}
	cfg.Replicas = []config.Replica{{ID: "sim-1", URL: sim.URL, Models: []string{procs.SimModel}, MaxConcurrency: 16, MaxPending: 16}}
	cfg.Server.ShutdownTimeout = config.Duration(2 * time.Second)
	gw, err := procs.StartGateway(ctx, procs.GatewayOptions{Binary: os.Args[0], Env: procstest.GatewayEnv(), Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	if page, err := gw.Metrics(ctx, client); err != nil || page.Sum("inferrail_replica_healthy", procs.Label("replica", "sim-1")) != 1 {
		t.Errorf("gateway metrics: sim-1 healthy %v, %v", page.Sum("inferrail_replica_healthy", procs.Label("replica", "sim-1")), err)
	}
	if err := gw.Stop(); err != nil {
		t.Errorf("gateway stop: %v", err)
	}
	if l := gw.Log(); len(l.Panics) != 0 || l.Unparsed != 0 {
		t.Errorf("gateway log: %+v", l)
	}

	peer, err := procs.StartPeer(ctx, procs.PeerOptions{Venv: procstest.FakePeerVenv(t, "1.2.3"),
		Policy: procs.PeerPolicy{Router: "vllm-router", Policy: "round_robin"}, Workers: []string{sim.URL}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(peer.URL + "/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /health through the peer router: %v, %v", resp, err)
	}
	if resp != nil {
		resp.Body.Close()
	}
	if err := peer.Stop(); err != nil {
		t.Errorf("peer stop: %v", err)
	}
	if peer.Version != "1.2.3" || peer.Log().Warnings != 1 {
		t.Errorf("peer version %q, log %+v", peer.Version, peer.Log())
	}
	if err := sim.Stop(); err != nil {
		t.Errorf("sim stop: %v", err)
	}
}

func TestKVEventsConfigJSON(t *testing.T) {
	const want = `{"enable_kv_cache_events":true,"endpoint":"tcp://*:5001","replay_endpoint":"tcp://127.0.0.1:5002"}`
	if got := procs.KVEventsConfigJSON(5001, 5002); got != want {
		t.Errorf("KVEventsConfigJSON = %s, want %s", got, want)
	}
}

// TestFreePortsDistinct: the ports of one call are all different and all
// free, however often the kernel would hand a closed port straight back.
func TestFreePortsDistinct(t *testing.T) {
	for range 50 {
		ports, err := procs.FreePorts(3)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]bool{}
		for _, p := range ports {
			if p <= 0 || seen[p] {
				t.Fatalf("FreePorts(3) gave %v", ports)
			}
			seen[p] = true
		}
	}
}
