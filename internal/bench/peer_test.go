package bench

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/procs/procstest"
)

func TestPeerPolicyValidation(t *testing.T) {
	s := smallSpec("peer:vllm-router:kv_aware", 10, 10)
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "kv_aware") {
		t.Errorf("Validate of peer:vllm-router:kv_aware: %v", err)
	}
	s.Policy = "peer:sglang-router:cache_aware"
	if err := s.Validate(); err != nil {
		t.Errorf("Validate of %s: %v", s.Policy, err)
	}
	_, err := ParseSweep([]byte(`
policies = ["round_robin", "peer:vllm-router"]
requests = 10

[[points]]
workload = "w1"
rates = [4]
policies = ["cost_model", "peer:haproxy:round_robin", "peer:sglang-router:round_robin"]
`))
	for _, want := range []string{`policies[1]: policy "peer:vllm-router": want`, `points[0].policies[1]: policy "peer:haproxy:round_robin": router must be`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSweep: %v; want an error with %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "policies[2]") {
		t.Errorf("ParseSweep rejects a good peer policy: %v", err)
	}
}

func TestServedSince(t *testing.T) {
	a := engineReading{served: []float64{3, 10}}
	b := engineReading{served: []float64{13, 40}}
	var m Measurements
	m.setEngineReplicas(b.servedSince(a))
	if diff := cmp.Diff(map[string]int{"sim-1": 10, "sim-2": 30}, m.Replicas); diff != "" || m.ReplicasFrom != "engines" || m.BusiestShare != 0.75 {
		t.Errorf("replicas %v from %q, busiest %v (-want +got replicas:\n%s)", m.Replicas, m.ReplicasFrom, m.BusiestShare, diff)
	}
	var none Measurements
	none.setEngineReplicas(a.servedSince(a))
	if none.Replicas != nil || none.ReplicasFrom != "" {
		t.Errorf("no requests served: replicas %v from %q", none.Replicas, none.ReplicasFrom)
	}
}

// portClosed reports whether nothing listens on the port of a peer's argv
// any more.
func portClosed(t *testing.T, argv []string) bool {
	t.Helper()
	i := slices.Index(argv, "--port")
	if i < 0 || i+1 >= len(argv) {
		t.Fatalf("no --port in %v", argv)
	}
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+argv[i+1], time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return true
}

// A run through a stand-in peer router: the harness starts it from the
// venv in place of the gateway, waits for its readiness, takes the requests
// per replica from the simulators' counters, records the router's version
// and warnings, and stops it.
func TestMeasureFakePeer(t *testing.T) {
	venv := procstest.FakePeerVenv(t, "9.9.9")
	for _, router := range procs.PeerRouters() {
		t.Run(router, func(t *testing.T) {
			reqs := sharedPromptRequests(30, 20*time.Millisecond, 4, 0)
			env := fleetEnv(t, reqs)
			env.PeerVenv = venv
			r, err := Measure(t.Context(), smallSpec("peer:"+router+":round_robin", 50, len(reqs)), env)
			if err != nil {
				t.Fatal(err)
			}
			m := r.Measurements
			if m.Succeeded != m.Measured || m.Measured != 24 {
				t.Fatalf("%d of %d succeeded, errors %v %v; peer log %+v", m.Succeeded, m.Measured, m.Errors, m.ErrorSamples, r.PeerLog)
			}
			total := m.Replicas["sim-1"] + m.Replicas["sim-2"]
			if m.ReplicasFrom != "engines" || len(m.Replicas) != 2 || total < m.Succeeded || total > m.Requests {
				t.Errorf("replicas %v from %q: want both simulators' counts from the engines, adding up to %d..%d",
					m.Replicas, m.ReplicasFrom, m.Succeeded, m.Requests)
			}
			// A round robin alternates: over the whole run each simulator
			// served half the requests, so half at most since the warmup's
			// end, whichever of the warmup's finished after the engines'
			// counters were read then.
			for sim, n := range m.Replicas {
				if n > (m.Requests+1)/2 {
					t.Errorf("%s served %d requests since the warmup behind a round robin, more than half the run's %d (replicas %v)",
						sim, n, m.Requests, m.Replicas)
				}
			}
			if m.Prediction != nil || m.Policies != nil {
				t.Errorf("prediction %+v, policies %v without the gateway's headers", m.Prediction, m.Policies)
			}
			if m.Engine == nil || m.HitRate <= 0.3 {
				t.Errorf("engine %+v, usage hit rate %v", m.Engine, m.HitRate)
			}
			p := r.Setup.Peer
			if p == nil || p.Router != router || p.Version != "9.9.9" || p.Policy != "round_robin" || r.Setup.GatewayConfig != "" {
				t.Fatalf("setup %+v, peer %+v", r.Setup, p)
			}
			if !strings.Contains(r.Setup.Gateway, router+" 9.9.9") {
				t.Errorf("setup says %q", r.Setup.Gateway)
			}
			if r.PeerLog == nil || r.PeerLog.Warnings != 1 || r.PeerLog.Errors != 0 || r.GatewayLog != nil {
				t.Errorf("peer log %+v, gateway log %+v", r.PeerLog, r.GatewayLog)
			}
			// vllm-router's own count of its decisions, every request of
			// the run; sglang-router has none.
			var want map[string]int
			if router == "vllm-router" {
				want = map[string]int{"prefix_miss": m.Requests}
			}
			if diff := cmp.Diff(want, r.PeerDecisions); diff != "" {
				t.Errorf("peer decisions (-want +got):\n%s", diff)
			}
			if len(r.StopErrors) > 0 {
				t.Errorf("stop errors: %v", r.StopErrors)
			}
			if !portClosed(t, p.Argv) {
				t.Errorf("the router still listens after the run: %v", p.Argv)
			}
		})
	}
}

func TestMeasurePeerFailures(t *testing.T) {
	reqs := sharedPromptRequests(4, 20*time.Millisecond, 2, 0)
	env := fleetEnv(t, reqs)
	// No venv given.
	if _, err := Measure(t.Context(), smallSpec("peer:vllm-router:cache_aware", 50, len(reqs)), env); !errors.Is(err, procs.ErrNoPeerVenv) {
		t.Errorf("without a venv: %v, want ErrNoPeerVenv", err)
	}
	// A venv without the routers.
	env.PeerVenv = t.TempDir()
	if _, err := Measure(t.Context(), smallSpec("peer:vllm-router:cache_aware", 50, len(reqs)), env); !errors.Is(err, procs.ErrNoPeerVenv) {
		t.Errorf("with an empty venv: %v, want ErrNoPeerVenv", err)
	}
	// A router that exits at once is tried three times and its output
	// reported.
	env.PeerVenv = procstest.FakePeerVenv(t, "9.9.9")
	_, err := Measure(t.Context(), smallSpec("peer:sglang-router:power_of_two", 50, len(reqs)), env)
	if !errors.Is(err, procs.ErrExitedEarly) || strings.Count(err.Error(), "Address already in use") != 3 {
		t.Errorf("a router that exits at once: %v", err)
	}
}

func TestReportNamesPeers(t *testing.T) {
	rs := reportResults()[:3]
	peer := *rs[0]
	peer.Spec.Policy = "peer:vllm-router:cache_aware"
	peer.Setup.Peer = &PeerSetup{Router: "vllm-router", Version: "0.1.17", Policy: "cache_aware"}
	peer.Measurements.Prediction = nil
	report := RenderRunReport(append(rs, &peer))
	for _, want := range []string{"**Peers:** rows named peer:<router>:<policy> ran vllm-router 0.1.17 from PyPI", "| peer:vllm-router:cache_aware | 1 |"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(RenderRunReport(rs), "**Peers:**") {
		t.Error("a report without peers names peers")
	}
}

// peerVenvForTest is the venv make peers builds (.venv/peers at the root of
// the repository, or $INFERRAIL_PEER_VENV), or skips the test when it is
// missing or was built from other requirements: creating it takes a
// download and half a minute, so only make peers does.
func peerVenvForTest(t *testing.T) string {
	t.Helper()
	venv := os.Getenv("INFERRAIL_PEER_VENV")
	if venv == "" {
		venv = filepath.Join("..", "..", ".venv", "peers")
	}
	venv, err := filepath.Abs(venv)
	if err != nil {
		t.Fatal(err)
	}
	req, err := os.ReadFile(filepath.Join("..", "..", "bench", "peers", "requirements.txt"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(req)
	stamp, err := os.ReadFile(filepath.Join(venv, "requirements.sha256"))
	switch {
	case err != nil:
		t.Skipf("no peer venv at %s (make peers creates it: bench/peers/venv.sh)", venv)
	case strings.TrimSpace(string(stamp)) != hex.EncodeToString(sum[:]):
		t.Skipf("the peer venv at %s was built from other requirements; make peers rebuilds it", venv)
	}
	return venv
}

// A tiny open-loop run through each real peer router and policy, in front
// of two simulators: every request succeeds, the cache-aware policies keep
// a shared prompt on one simulator and the round robins spread it, the
// versions are the venv's, and no router outlives its run. make peers
// builds the venv and runs this test; without the venv it skips.
func TestPeerRouters(t *testing.T) {
	venv := peerVenvForTest(t)
	for _, router := range procs.PeerRouters() {
		version, err := procs.PeerVersion(venv, router)
		if err != nil {
			t.Fatal(err)
		}
		for _, policy := range []string{"cache_aware", "round_robin"} {
			t.Run(router+"_"+policy, func(t *testing.T) {
				reqs := sharedPromptRequests(40, 25*time.Millisecond, 4, 0)
				env := fleetEnv(t, reqs)
				env.PeerVenv = venv
				r, err := Measure(t.Context(), smallSpec("peer:"+router+":"+policy, 40, len(reqs)), env)
				if err != nil {
					t.Fatal(err)
				}
				m := r.Measurements
				if m.Succeeded != m.Measured || len(m.Errors) > 0 {
					t.Fatalf("%d of %d succeeded, errors %v %v", m.Succeeded, m.Measured, m.Errors, m.ErrorSamples)
				}
				if m.ReplicasFrom != "engines" || m.Engine == nil || m.Prediction != nil {
					t.Errorf("replicas %v from %q, engine %+v, prediction %+v", m.Replicas, m.ReplicasFrom, m.Engine, m.Prediction)
				}
				switch policy {
				case "cache_aware":
					if m.BusiestShare < 0.8 || m.HitRate < 0.5 {
						t.Errorf("cache_aware: busiest share %v, hit rate %v; a shared prompt should stay on one simulator", m.BusiestShare, m.HitRate)
					}
				case "round_robin":
					if m.BusiestShare > 0.6 {
						t.Errorf("round_robin: busiest share %v", m.BusiestShare)
					}
				}
				if p := r.Setup.Peer; p == nil || p.Version != version {
					t.Errorf("setup peer %+v, want version %s", p, version)
				} else if !portClosed(t, p.Argv) {
					t.Errorf("%s still listens after the run", router)
				}
				if len(r.StopErrors) > 0 || r.PeerLog == nil || r.PeerLog.Errors > 0 {
					t.Errorf("stop errors %v, peer log %+v", r.StopErrors, r.PeerLog)
				}
				var b strings.Builder
				WriteSummary(&b, r)
				t.Logf("%s %s:\n%s(peer log %+v)", router, version, b.String(), *r.PeerLog)
			})
		}
	}
}
