package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParsePeerPolicy(t *testing.T) {
	for _, tt := range []struct {
		name    string
		want    PeerPolicy
		wantErr string // part of the error; "" for none
	}{
		{name: "peer:vllm-router:cache_aware", want: PeerPolicy{"vllm-router", "cache_aware"}},
		{name: "peer:vllm-router:round_robin", want: PeerPolicy{"vllm-router", "round_robin"}},
		{name: "peer:sglang-router:cache_aware", want: PeerPolicy{"sglang-router", "cache_aware"}},
		{name: "peer:sglang-router:power_of_two", want: PeerPolicy{"sglang-router", "power_of_two"}},
		{name: "round_robin", wantErr: "not a peer policy"},
		{name: "peer:", wantErr: "want peer:<router>:<policy>"},
		{name: "peer:vllm-router", wantErr: "want peer:<router>:<policy>"},
		{name: "peer:vllm-router:", wantErr: "want peer:<router>:<policy>"},
		{name: "peer::cache_aware", wantErr: "want peer:<router>:<policy>"},
		{name: "peer:nginx:round_robin", wantErr: `router must be one of sglang-router, vllm-router, not "nginx"`},
		{name: "peer:vllm-router:kv_aware", wantErr: `vllm-router's policy must be one of cache_aware, round_robin, random, power_of_two, not "kv_aware"`},
		{name: "peer:sglang-router:manual", wantErr: `not "manual"`},
		{name: "peer:vllm-router:cache_aware:x", wantErr: `not "cache_aware:x"`},
	} {
		got, err := ParsePeerPolicy(tt.name)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("ParsePeerPolicy(%q): %v", tt.name, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("ParsePeerPolicy(%q) = %v, %v; want an error with %q", tt.name, got, err, tt.wantErr)
		case tt.wantErr == "" && got != tt.want:
			t.Errorf("ParsePeerPolicy(%q) = %+v, want %+v", tt.name, got, tt.want)
		case tt.wantErr == "" && got.String() != tt.name:
			t.Errorf("ParsePeerPolicy(%q).String() = %q", tt.name, got.String())
		}
	}
}

func TestPeerArgv(t *testing.T) {
	workers := []string{"http://127.0.0.1:9001", "http://127.0.0.1:9002"}
	for _, tt := range []struct {
		policy PeerPolicy
		want   []string
	}{
		{PeerPolicy{"vllm-router", "cache_aware"}, []string{
			"/v/bin/vllm-router", "--host", "127.0.0.1", "--port", "8100",
			"--worker-urls", "http://127.0.0.1:9001", "http://127.0.0.1:9002",
			"--policy", "cache_aware", "--prometheus-host", "127.0.0.1", "--prometheus-port", "8101",
			"--log-level", "warning", "--worker-startup-check-interval", "1", "--request-timeout-secs", "600",
		}},
		{PeerPolicy{"sglang-router", "round_robin"}, []string{
			"/v/bin/sglang-router", "launch", "--host", "127.0.0.1", "--port", "8100",
			"--worker-urls", "http://127.0.0.1:9001", "http://127.0.0.1:9002",
			"--policy", "round_robin", "--prometheus-host", "127.0.0.1", "--prometheus-port", "8101",
			"--log-level", "warn", "--worker-startup-check-interval", "1", "--request-timeout-secs", "600",
			"--shutdown-grace-period-secs", "2",
		}},
	} {
		got := peerArgv("/v", tt.policy, 8100, 8101, workers)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("peerArgv(%v) (-want +got):\n%s", tt.policy, diff)
		}
	}
}

// fakePeerVenv makes a venv whose routers are the test binary under their
// names (TestMain runs helperPeer then) and whose .dist-info directories
// say version.
func fakePeerVenv(t *testing.T, version string) string {
	t.Helper()
	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	venv := t.TempDir()
	if err := os.MkdirAll(filepath.Join(venv, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, r := range peerRouters {
		if err := os.Symlink(self, filepath.Join(venv, "bin", name)); err != nil {
			t.Fatal(err)
		}
		info := filepath.Join(venv, "lib", "python3.12", "site-packages", r.dist+"-"+version+".dist-info")
		if err := os.MkdirAll(info, 0o755); err != nil {
			t.Fatal(err)
		}
		// The body after the headers must not be read as a version.
		meta := "Metadata-Version: 2.4\nName: " + name + "\nVersion: " + version + "\n\nVersion: 0.0.0\n"
		if err := os.WriteFile(filepath.Join(info, "METADATA"), []byte(meta), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return venv
}

// helperPeer is a stand-in for a peer router: it takes the flags
// peerArgv writes, lists its workers at /workers as both routers do, sends every
// other request to the next worker in turn, logs one warning in the
// routers' format (and an error for any request it fails) and stops on
// SIGTERM. With --policy power_of_two it
// fails at once, as a router does when its port is taken.
func helperPeer(name string, args []string) int {
	if name == "sglang-router" {
		if len(args) == 0 || args[0] != "launch" {
			return 2
		}
		args = args[1:]
	}
	var port, policy string
	var workers []*url.URL
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--port":
			i++
			port = args[i]
		case "--policy":
			i++
			policy = args[i]
		case "--worker-urls":
			for i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
				i++
				u, err := url.Parse(args[i])
				if err != nil {
					return 2
				}
				workers = append(workers, u)
			}
		}
	}
	if policy == "power_of_two" {
		fmt.Fprintln(os.Stderr, "failed to install Prometheus metrics exporter: Address already in use")
		return 3
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil || len(workers) == 0 {
		return 2
	}
	var next atomic.Uint64
	proxy := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(workers[(next.Add(1)-1)%uint64(len(workers))]) },
		FlushInterval: -1,
		ErrorLog:      log.New(os.Stderr, "2026-01-02 03:04:05 ERROR fake_router: ", 0),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			fmt.Fprintf(os.Stderr, "2026-01-02 03:04:05 ERROR fake_router: %v\n", err)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /workers", func(w http.ResponseWriter, _ *http.Request) {
		var list []map[string]any
		for _, u := range workers {
			list = append(list, map[string]any{"url": u.String(), "is_healthy": true, "load": 0})
		}
		json.NewEncoder(w).Encode(map[string]any{"workers": list})
	})
	// The request is read whole before it goes on, as the routers do (they
	// read it to route it), so the proxy never reads a body the server has
	// closed once the response began.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		proxy.ServeHTTP(w, r)
	})
	fmt.Fprintf(os.Stderr, "\x1b[2m2026-01-02 03:04:05\x1b[0m \x1b[33m WARN\x1b[0m fake_router: listening on %s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Handler: mux}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return 1
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return 1
	}
	return 0
}

func TestPeerVersion(t *testing.T) {
	venv := fakePeerVenv(t, "1.2.3")
	for _, router := range peerRouterNames() {
		if v, err := PeerVersion(venv, router); err != nil || v != "1.2.3" {
			t.Errorf("PeerVersion(%s) = %q, %v; want 1.2.3", router, v, err)
		}
	}
	if _, err := PeerVersion(t.TempDir(), "vllm-router"); !errors.Is(err, ErrNoPeerVenv) {
		t.Errorf("PeerVersion of an empty venv: %v, want ErrNoPeerVenv", err)
	}
	if _, err := PeerVersion(venv, "nginx"); err == nil {
		t.Error("PeerVersion of an unknown router: no error")
	}
}

func TestPeerLog(t *testing.T) {
	var l peerLog
	l.tail.max = 1 << 10
	lines := "DEBUG: Server startup function called\n" +
		"\x1b[2m2026-01-02 03:04:05\x1b[0m \x1b[33m WARN\x1b[0m smg::discover: /home/runner/work/src/discover.rs:64: Endpoint '/server_info' of http://127.0.0.1:4000 returned 404\n" +
		"\x1b[2m2026-01-02 03:04:06\x1b[0m \x1b[33m WARN\x1b[0m smg::discover: Endpoint '/server_info' of http://127.0.0.1:4001 returned 404\n" +
		"2026-01-02 03:04:07 ERROR router: worker http://127.0.0.1:4000 failed\n" +
		"2026-01-02 03:04:08  INFO router: ready\n"
	// Written in pieces that split lines and escape sequences.
	for i := 0; i < len(lines); i += 7 {
		l.Write([]byte(lines[i:min(i+7, len(lines))]))
	}
	want := PeerLog{Warnings: 2, Errors: 1, Samples: []string{
		"WARN smg::discover: Endpoint '/server_info' of http://<addr> returned 404",
		"ERROR router: worker http://<addr> failed",
	}}
	if diff := cmp.Diff(want, l.summary()); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
	// The escape sequences split across writes survive in the tail, but
	// whole ones do not.
	if strings.Contains(l.tail.String(), "\x1b[33m") {
		t.Errorf("tail keeps colors: %q", l.tail.String())
	}
}

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
	venv := fakePeerVenv(t, "9.9.9")
	for _, router := range peerRouterNames() {
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
			if m.BusiestShare > 0.55 {
				t.Errorf("busiest share %v behind a round robin", m.BusiestShare)
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
	if _, err := Measure(t.Context(), smallSpec("peer:vllm-router:cache_aware", 50, len(reqs)), env); !errors.Is(err, ErrNoPeerVenv) {
		t.Errorf("without a venv: %v, want ErrNoPeerVenv", err)
	}
	// A venv without the routers.
	env.PeerVenv = t.TempDir()
	if _, err := Measure(t.Context(), smallSpec("peer:vllm-router:cache_aware", 50, len(reqs)), env); !errors.Is(err, ErrNoPeerVenv) {
		t.Errorf("with an empty venv: %v, want ErrNoPeerVenv", err)
	}
	// A router that exits at once is tried three times and its output
	// reported.
	env.PeerVenv = fakePeerVenv(t, "9.9.9")
	_, err := Measure(t.Context(), smallSpec("peer:sglang-router:power_of_two", 50, len(reqs)), env)
	if !errors.Is(err, errExitedEarly) || strings.Count(err.Error(), "Address already in use") != 3 {
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
	for _, router := range peerRouterNames() {
		version, err := PeerVersion(venv, router)
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
