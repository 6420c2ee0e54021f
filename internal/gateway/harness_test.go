package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/policy"
	"github.com/inferrail/inferrail/internal/sim"
	"github.com/inferrail/inferrail/internal/syncbuf"
)

const testModel = "inferrail/sim-8b"

// fleetOf starts n simulators on loopback ports.
func fleetOf(t testing.TB, n int, zeroLatency bool) []*sim.Local {
	t.Helper()
	return simsWith(t, n, func(_ int, cfg *sim.Config) {
		cfg.ZeroLatency = zeroLatency
		cfg.MaxModelLen = 4096
		cfg.NumGPUBlocks = 1024
		cfg.EnablePromptTokensDetails = true
	})
}

// simsWith starts n in-process simulators on loopback, the i-th with
// sim.DefaultConfig() as tune(i, ...) changes it, each closed when the test
// ends.
func simsWith(t testing.TB, n int, tune func(i int, cfg *sim.Config)) []*sim.Local {
	t.Helper()
	sims := make([]*sim.Local, n)
	for i := range sims {
		cfg := sim.DefaultConfig()
		tune(i, &cfg)
		l, err := sim.StartLocal(cfg, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.Close)
		sims[i] = l
	}
	return sims
}

// testConfig is a gateway config in front of sims with fast health checks:
// a probe every 250 ms, so a killed engine is out of rotation within a
// second. Not faster: under the race detector on a machine whose cores are
// all busy, a probe's answer can take longer than 40 ms three times in a
// row, and every replica of a healthy fleet went out of rotation at once.
func testConfig(t testing.TB, sims []*sim.Local) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: testModel, Aliases: []string{"sim"}, Tokenizer: "builtin:sim"}}
	for i, s := range sims {
		rc := config.Replica{ID: fmt.Sprintf("sim-%d", i+1), URL: s.URL(), Models: []string{testModel}, MaxConcurrency: 256, MaxPending: 64}
		cfg.Replicas = append(cfg.Replicas, rc)
	}
	cfg.Routing.DefaultPolicy = "round_robin"
	cfg.Routing.Seed = 1
	cfg.Health.Interval = config.Duration(250 * time.Millisecond)
	cfg.Health.Timeout = config.Duration(250 * time.Millisecond)
	cfg.Health.EjectionBackoff = config.Duration(200 * time.Millisecond)
	cfg.Health.MaxEjectionBackoff = config.Duration(time.Second)
	// Every request tokenized, however long a busy machine keeps the
	// workers waiting: tests that check predictions would otherwise find
	// requests routed without one. The tests of that path set their own.
	cfg.Tokenizer.MaxWait = config.Duration(10 * time.Second)
	cfg.Retry.Backoff = config.Duration(time.Millisecond)
	cfg.Retry.MaxBackoff = config.Duration(5 * time.Millisecond)
	cfg.Server.RequestTimeout = config.Duration(5 * time.Second)
	cfg.Server.ShutdownTimeout = config.Duration(5 * time.Second)
	return &cfg
}

// running is a gateway serving on loopback ports.
type running struct {
	g      *Gateway
	url    string
	admin  string
	logs   *syncbuf.Buffer
	cancel context.CancelFunc
	done   chan struct{} // closed when Serve has returned
	err    error         // what Serve returned, once done
}

func startGateway(t testing.TB, cfg *config.Config) *running {
	t.Helper()
	return startResolvingGateway(t, cfg, nil)
}

// startResolvingGateway is startGateway with DNS groups resolved by res
// (nil: the system resolver).
func startResolvingGateway(t testing.TB, cfg *config.Config, res fleet.Resolver) *running {
	t.Helper()
	return startGatewayWith(t, cfg, Options{Resolver: res})
}

// startGatewayWith is startGateway with opts; their Logger is the test's.
func startGatewayWith(t testing.TB, cfg *config.Config, opts Options) *running {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return serveGateway(t, g, logs)
}

// serveGateway serves g on loopback ports until the test ends; logs is
// where g logs.
func serveGateway(t testing.TB, g *Gateway, logs *syncbuf.Buffer) *running {
	t.Helper()
	client, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rg := &running{g: g, url: "http://" + client.Addr().String(), admin: "http://" + admin.Addr().String(), logs: logs, cancel: cancel, done: make(chan struct{})}
	go func() {
		rg.err = g.Serve(ctx, client, admin)
		close(rg.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-rg.done:
		case <-time.After(10 * time.Second):
			t.Error("gateway did not stop")
		}
	})
	return rg
}

// fataler is what the helpers need of *testing.T and *rapid.T.
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// chat sends a chat request and returns the response with its body read.
func chat(t fataler, url, body string, header ...string) (*http.Response, string) {
	t.Helper()
	return post(t, url+"/v1/chat/completions", body, header...)
}

// post POSTs a JSON body with the given header pairs and returns the
// response with its body read.
func post(t fataler, url, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	return resp, string(b)
}

func chatBody(content string, extra string) string {
	return `{"model":"sim","messages":[{"role":"user","content":` + fmt.Sprintf("%q", content) + `}],"max_tokens":4` + extra + `}`
}

// scrape returns the gateway's metrics page.
func scrape(t testing.TB, admin string) string {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// waitFor polls cond until it holds or the time is up.
func waitFor(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testPolicy is the policy of the model's first arm in the generation in
// effect: its only one without a split.
func (g *Gateway) testPolicy(model string) policy.Policy {
	return g.current().routing[model].arms[0].policy
}

// noContext is tokenizeBody's context length when no engine has said one.
func noContext() int { return 0 }
