// Package procstest lets tests start the harness's child processes without
// building them: the test binary itself acts as inferrail-sim,
// inferrail-gateway or a peer router when started with the environment
// SimEnv or GatewayEnv returns, or from a venv FakePeerVenv made. A package
// whose tests start children calls Main from its TestMain.
package procstest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/fakeengine"
	"github.com/inferrail/inferrail/internal/gateway"
	"github.com/inferrail/inferrail/internal/plainproxy"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/sim"
)

// The variables that make the test binary act as a child.
const (
	helperSimVar     = "INFERRAIL_BENCH_HELPER_SIM"
	helperGatewayVar = "INFERRAIL_BENCH_HELPER_GATEWAY"
	helperBenchVar   = "INFERRAIL_BENCH_HELPER_BENCH"
)

// Main runs the test binary as the child it was started as, if it was, and
// the tests otherwise. Call it from TestMain.
func Main(m *testing.M) {
	if os.Getenv(helperSimVar) == "1" {
		os.Exit(helperSim(os.Args[1:]))
	}
	if os.Getenv(helperGatewayVar) == "1" {
		os.Exit(helperGateway(os.Args[1:]))
	}
	if os.Getenv(helperBenchVar) == "1" {
		os.Exit(helperBench(os.Args[1:]))
	}
	if name := filepath.Base(os.Args[0]); slices.Contains(procs.PeerRouters(), name) {
		os.Exit(helperPeer(name, os.Args[1:])) // a fake venv's router: see FakePeerVenv
	}
	os.Exit(m.Run())
}

// SimEnv is the environment that makes the test binary (os.Args[0]) act as
// inferrail-sim, so tests can start real simulator children without
// building cmd/inferrail-sim.
func SimEnv() []string { return []string{helperSimVar + "=1", noExitSleep()} }

// GatewayEnv is the environment that makes the test binary act as
// inferrail-gateway.
func GatewayEnv() []string { return []string{helperGatewayVar + "=1", noExitSleep()} }

// BenchEnv is the environment that makes the test binary act as
// inferrail-bench, as far as its plain-proxy and fake-engines commands.
func BenchEnv() []string { return []string{helperBenchVar + "=1", noExitSleep()} }

// noExitSleep keeps a race-enabled binary from sleeping 1 s on exit.
func noExitSleep() string { return "GORACE=atexit_sleep_ms=0 " + os.Getenv("GORACE") }

// helperSim is cmd/inferrail-sim's run, inside the test binary.
func helperSim(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	opts, err := sim.ParseFlags(args, os.Stderr)
	if err != nil {
		return 2
	}
	srv, err := sim.New(opts.Config, nil)
	if err != nil {
		return 2
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port)))
	if err != nil {
		return 2
	}
	if err := srv.Serve(ctx, ln); err != nil {
		return 1
	}
	return 0
}

// helperGateway is cmd/inferrail-gateway's run, inside the test binary.
func helperGateway(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fs := flag.NewFlagSet("inferrail-gateway", flag.ContinueOnError)
	path := fs.String("config", "", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g, err := gateway.New(cfg, gateway.Options{Logger: logger})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	client, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	admin, err := net.Listen("tcp", cfg.Server.AdminListen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := g.Serve(ctx, client, admin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// helperBench is inferrail-bench's plain-proxy and fake-engines commands,
// inside the test binary.
func helperBench(args []string) int {
	if len(args) == 0 || (args[0] != "plain-proxy" && args[0] != "fake-engines") {
		fmt.Fprintln(os.Stderr, "the test binary acts only as inferrail-bench plain-proxy and fake-engines")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cmd := func(ctx context.Context, args []string) error { return plainproxy.Command(ctx, args, os.Stderr) }
	if args[0] == "fake-engines" {
		cmd = func(ctx context.Context, args []string) error {
			return fakeengine.Command(ctx, args, os.Stdout, os.Stderr)
		}
	}
	if err := cmd(ctx, args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// FakePeerVenv makes a venv whose routers are the test binary under their
// names (Main runs helperPeer then) and whose .dist-info directories say
// version.
func FakePeerVenv(t testing.TB, version string) string {
	t.Helper()
	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	venv := t.TempDir()
	if err := os.MkdirAll(filepath.Join(venv, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range procs.PeerRouters() {
		if err := os.Symlink(self, filepath.Join(venv, "bin", name)); err != nil {
			t.Fatal(err)
		}
		// A wheel names its .dist-info directory after the distribution,
		// with - written as _.
		dist := strings.ReplaceAll(name, "-", "_")
		info := filepath.Join(venv, "lib", "python3.12", "site-packages", dist+"-"+version+".dist-info")
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
// procs.StartPeer gives, lists its workers at /workers as both routers do, sends every
// other request to the next worker in turn, logs one warning in the
// routers' format (and an error for any request it fails) and stops on
// SIGTERM. With --policy power_of_two it
// fails at once, as a router does when its port is taken. As vllm-router,
// it counts its decisions on its exporter's /metrics as vllm-router does,
// a request with tools as routed without its tokens (missing_tokens), any
// other as a prefix_miss.
func helperPeer(name string, args []string) int {
	if name == "sglang-router" {
		if len(args) == 0 || args[0] != "launch" {
			return 2
		}
		args = args[1:]
	}
	var port, metricsPort, policy string
	var workers []*url.URL
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--port":
			i++
			port = args[i]
		case "--prometheus-port":
			i++
			metricsPort = args[i]
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
	var decided fakeDecisions
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		decided.count(body)
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		proxy.ServeHTTP(w, r)
	})
	fmt.Fprintf(os.Stderr, "\x1b[2m2026-01-02 03:04:05\x1b[0m \x1b[33m WARN\x1b[0m fake_router: listening on %s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Handler: mux}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if name == "vllm-router" {
		stopMetrics, err := decided.serve(metricsPort, policy)
		if err != nil {
			return 2
		}
		defer stopMetrics()
	}
	<-ctx.Done()
	// Up to 8 s to drain, inside the 10 s procs.Peer.Stop allows: 2 s ran
	// out once in make test's race run on a busy machine, and the harness
	// reported the stand-in's exit status as a stop error.
	sctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return 1
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return 1
	}
	return 0
}

// fakeDecisions are the stand-in vllm-router's decisions: a request with
// tools routed without its tokens, any other a prefix miss.
type fakeDecisions struct{ withTools, without atomic.Int64 }

func (d *fakeDecisions) count(body []byte) {
	if bytes.Contains(body, []byte(`"tools"`)) {
		d.withTools.Add(1)
	} else {
		d.without.Add(1)
	}
}

// serve serves them on port as vllm-router's exporter does.
func (d *fakeDecisions) serve(port, policy string) (stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		const family = "vllm_router_prefix_routing_decisions_total"
		fmt.Fprintf(w, "# TYPE %s counter\n", family)
		for outcome, n := range map[string]int64{"missing_tokens": d.withTools.Load(), "prefix_miss": d.without.Load()} {
			if n > 0 {
				fmt.Fprintf(w, "%s{policy=%q,stage=\"regular\",outcome=%q} %d\n", family, policy, outcome, n)
			}
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	return func() { srv.Close() }, nil
}
