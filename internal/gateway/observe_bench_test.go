package gateway

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferrail/inferrail/internal/config"
)

// BenchmarkObservedRequest is the gateway's whole request path, in
// process (ServeHTTP, no client socket) to a zero-latency simulator on
// loopback, with observing off, with traces of every request exported to
// an unreachable collector, with every decision logged, with both, and
// with every request captured (its response metered for the output).
// Compare the columns with benchstat -col /obs.
func BenchmarkObservedRequest(b *testing.B) {
	for _, mode := range []string{"off", "traces", "decisionlog", "both", "capture"} {
		b.Run("obs="+mode, func(b *testing.B) {
			sims := fleetOf(b, 1, true)
			cfg := testConfig(b, sims)
			o := &cfg.Observability
			if mode == "traces" || mode == "both" {
				o.OTLPEndpoint, o.TraceSampleRatio = "http://127.0.0.1:1", 1 // nobody listens: every export fails
			}
			if mode == "decisionlog" || mode == "both" {
				o.DecisionLog.Path, o.DecisionLog.SampleRate = filepath.Join(b.TempDir(), "decisions.jsonl"), 1
			}
			if mode == "capture" {
				o.Capture.Path = filepath.Join(b.TempDir(), "capture.jsonl")
			}
			benchmarkRequests(b, cfg)
		})
	}
}

func benchmarkRequests(b *testing.B, cfg *config.Config) {
	g, err := New(cfg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	h := g.ClientHandler()
	body := chatBody("hello there", "")
	serve := func() {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	for range 200 { // connections open, pools warm
		serve()
	}
	b.ReportAllocs()
	for b.Loop() {
		serve()
	}
}

// BenchmarkObservationHooks is what observing adds to one request, alone:
// the hooks the request path calls (observe, the pick, the decision, the
// upstream span's life), on a routed model with three replicas, without the
// HTTP around them: the work every request pays, and in off mode the nil
// checks only. Compare the columns with benchstat -col /obs.
func BenchmarkObservationHooks(b *testing.B) {
	for _, mode := range []string{"off", "traces", "decisionlog", "both"} {
		b.Run("obs="+mode, func(b *testing.B) {
			sims := fleetOf(b, 3, true)
			cfg := testConfig(b, sims)
			cfg.Routing.DefaultPolicy = "cost_model"
			o := &cfg.Observability
			if mode == "traces" || mode == "both" {
				o.OTLPEndpoint, o.TraceSampleRatio = "http://127.0.0.1:1", 1
			}
			if mode == "decisionlog" || mode == "both" {
				o.DecisionLog.Path, o.DecisionLog.SampleRate = filepath.Join(b.TempDir(), "decisions.jsonl"), 1
			}
			g, err := New(cfg, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			body := []byte(chatBody("a question of some length, as requests go", ""))
			base := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			up := httptest.NewRequest(http.MethodPost, sims[0].URL()+"/v1/chat/completions", nil)
			b.ReportAllocs()
			for b.Loop() {
				ex := &exchange{w: httptest.NewRecorder(), r: base, id: "req-bench", model: testModel, body: body, gen: g.current(), policy: g.testPolicy(testModel)}
				ex.pred = g.predict(ex, true)
				ex.route = g.routeRequest(ex)
				end := g.observe(ex)
				lease, _, err := g.choose(ex, nil)
				if err != nil {
					b.Fatal(err)
				}
				a := &attempt{lease: lease}
				a.trace = g.traceUpstream(ex, a, up)
				a.trace.headed(&http.Response{StatusCode: 200}, nil, false)
				a.trace.markFirstByte()
				a.trace.end()
				lease.Release()
				ex.w.WriteHeader(http.StatusOK)
				end()
			}
		})
	}
}
