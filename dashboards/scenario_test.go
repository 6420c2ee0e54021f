package dashboards

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/bench"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/harness"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/procs/procstest"
	"github.com/inferrail/inferrail/internal/workload"
)

func TestMain(m *testing.M) { procstest.Main(m) }

// The scenario every live check runs: three simulators behind a gateway
// whose traffic is split between two policies with two more in shadow, a
// W1 run through it, then each event a panel exists to show: an error the
// gateway answers itself, a client that leaves mid-stream, an engine that
// dies under traffic (retries, an ejection) and a config change. Children
// are the test binary itself (procstest), so nothing is built.

// startFleet starts the scenario's simulators and gateway; they stop when
// the test ends.
func startFleet(t *testing.T, ctx context.Context) *harness.Fleet {
	t.Helper()
	f := &harness.Fleet{}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Errorf("stop the fleet: %v", err)
		}
	})
	sim := procs.SimOptions{Binary: os.Args[0], Env: procstest.SimEnv(),
		Args: []string{"--served-model-name", procs.SimModel, "--enable-prompt-tokens-details"}}
	if err := f.StartSims(ctx, 3, sim); err != nil {
		t.Fatal(err)
	}
	cfg := harness.GatewayConfig(f.Replicas(), harness.GatewayOptions{Model: procs.SimModel, Tokenizer: "builtin:sim",
		Caps: 256, Seed: 1, RequestTimeout: time.Minute, LogLevel: "warn"})
	cfg.Routing.Split = config.Split{{Policy: "cost_model", Percent: 80}, {Policy: "kv_aware", Percent: 20}}
	cfg.Routing.Shadow = []string{"least_request", "prefix_hash"}
	// Probes so far apart that the dead engine leaves rotation by passive
	// ejection, under traffic, before its probes fail.
	cfg.Health.Interval = config.Duration(time.Minute)
	if err := f.StartGateway(ctx, procs.GatewayOptions{Binary: os.Args[0], Env: procstest.GatewayEnv(), Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if err := f.WaitHealthy(ctx, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	return f
}

// runW1 sends a W1 run of n requests at rate req/s through the gateway
// with the benchmark's own open-loop driver, and fails the test unless
// most of them succeeded.
func runW1(t *testing.T, ctx context.Context, f *harness.Fleet, n int, rate float64) {
	t.Helper()
	spec := bench.RunSpec{URL: f.URL, SLO: bench.DefaultSLO(), Timeout: time.Minute,
		Workload: workload.Spec{Workload: workload.W1, Model: procs.SimModel, Rate: rate, Requests: n, Seed: 1, OutputTokens: 16}}
	res, err := bench.Measure(ctx, spec, bench.RunEnv{})
	if err != nil {
		t.Fatalf("W1 run: %v", err)
	}
	if m := res.Measurements; m.Succeeded < n*9/10 {
		t.Fatalf("W1 run: %d of %d requests succeeded", m.Succeeded, n)
	}
}

// failGenerations serves ln as an engine that passes its health checks
// but answers every other request 503, until ln is closed.
func failGenerations(ln net.Listener) {
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		http.Error(w, `{"error":{"message":"failing","type":"Service Unavailable","param":null,"code":503}}`, http.StatusServiceUnavailable)
	}))
}

// provoke makes the gateway count every event its failure and control
// plane panels show, checking each on its metrics page. It stops the
// fleet's last simulator.
func provoke(t *testing.T, ctx context.Context, f *harness.Fleet) {
	t.Helper()
	client := &http.Client{Timeout: time.Minute}
	defer client.CloseIdleConnections()
	status, _, err := post(ctx, client, f.URL+"/v1/chat/completions", chatBody("no-such-model", "hello", 1, false))
	if err != nil || status != http.StatusNotFound {
		t.Fatalf("a request for an unknown model: status %d, %v; want 404", status, err)
	}
	if err := leaveMidStream(ctx, client, f.URL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, f, "a client disconnect", func(p procs.PromPage) bool { return p.Sum("inferrail_client_disconnects_total") > 0 })

	// The last engine dies, and in its place one that passes its health
	// checks answers every request 503: requests the gateway sends it fail
	// and move on until passive ejection takes it out. A port that refused
	// or dropped connections would have probes take the replica out at
	// once, before three requests could fail there and eject it.
	last := f.Sims[len(f.Sims)-1]
	if err := last.Stop(); err != nil {
		t.Fatalf("stop %s: %v", harness.SimID(len(f.Sims)-1), err)
	}
	f.Sims = f.Sims[:len(f.Sims)-1]
	failing, err := net.Listen("tcp", strings.TrimPrefix(last.URL, "http://"))
	if err != nil {
		t.Fatalf("listen on the dead engine's port: %v", err)
	}
	defer failing.Close()
	go failGenerations(failing)
	ejected := func(p procs.PromPage) bool {
		return p.Sum("inferrail_upstream_retries_total") > 0 && p.Sum("inferrail_ejections_total") > 0
	}
	for i := 0; ; i++ {
		page, err := f.Gateway.Metrics(ctx, client)
		if err != nil {
			t.Fatal(err)
		}
		if ejected(page) {
			break
		}
		if i == 500 {
			t.Fatalf("no retry and ejection after %d requests with an engine dead", i)
		}
		status, body, err := post(ctx, client, f.URL+"/v1/chat/completions", chatBody(procs.SimModel, fmt.Sprintf("request %d", i), 1, false))
		if err != nil || status != http.StatusOK {
			t.Fatalf("request %d with an engine dead: status %d, %v: %s", i, status, err, body)
		}
	}

	status, body, err := patch(ctx, client, f.Gateway.AdminURL+"/admin/config", `{"routing": {"split": {"cost_model": 70, "kv_aware": 30}}}`)
	if err != nil || status != http.StatusOK {
		t.Fatalf("PATCH /admin/config: status %d, %v: %s", status, err, body)
	}
	waitFor(t, ctx, f, "config generation 2", func(p procs.PromPage) bool { return p.Sum("inferrail_config_generation") == 2 })
}

// waitFor polls the gateway's metrics until ok holds, for at most 15 s.
func waitFor(t *testing.T, ctx context.Context, f *harness.Fleet, what string, ok func(procs.PromPage) bool) {
	t.Helper()
	client := procs.AdminClient()
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(15 * time.Second)
	for {
		page, err := f.Gateway.Metrics(ctx, client)
		if err == nil && ok(page) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway's metrics never showed %s (last scrape error: %v)", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leaveMidStream starts a long streamed completion and hangs up after
// its first event.
func leaveMidStream(ctx context.Context, client *http.Client, base string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(chatBody(procs.SimModel, "tell me a long story", 4000, true)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("streamed request: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("streamed request: status %d", resp.StatusCode)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		return fmt.Errorf("streamed request: first line %q, %v", line, err)
	}
	return nil // cancel hangs up
}

func chatBody(model, prompt string, maxTokens int, stream bool) string {
	return fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": %q}], "max_tokens": %d, "stream": %t}`,
		model, prompt, maxTokens, stream)
}

func post(ctx context.Context, client *http.Client, url, body string) (int, string, error) {
	return send(ctx, client, http.MethodPost, url, body)
}

func patch(ctx context.Context, client *http.Client, url, body string) (int, string, error) {
	return send(ctx, client, http.MethodPatch, url, body)
}

func send(ctx context.Context, client *http.Client, method, url, body string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil && !errors.Is(err, io.EOF) {
		return resp.StatusCode, string(data), err
	}
	return resp.StatusCode, string(data), nil
}
