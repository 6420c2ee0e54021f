package procs

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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

// TestPeerDecisions: a router's decision counter is read by outcome,
// summed over its other labels; a router without one reads as nil.
func TestPeerDecisions(t *testing.T) {
	page := "# TYPE vllm_router_prefix_routing_decisions_total counter\n" +
		`vllm_router_prefix_routing_decisions_total{policy="cache_aware",stage="regular",outcome="missing_tokens"} 296` + "\n" +
		`vllm_router_prefix_routing_decisions_total{policy="cache_aware",stage="prefill",outcome="prefix_hit"} 3` + "\n" +
		`vllm_router_prefix_routing_decisions_total{policy="cache_aware",stage="regular",outcome="prefix_hit"} 4` + "\n" +
		"# TYPE vllm_router_requests_total counter\nvllm_router_requests_total 303\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, page)
	}))
	defer srv.Close()
	tests := []struct {
		router string
		want   map[string]int
	}{
		{"vllm-router", map[string]int{"missing_tokens": 296, "prefix_hit": 7}},
		{"sglang-router", nil},
	}
	for _, tt := range tests {
		p := &Peer{Policy: PeerPolicy{Router: tt.router, Policy: "cache_aware"}, MetricsURL: srv.URL}
		got, err := p.Decisions(t.Context(), srv.Client())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: decisions (-want +got):\n%s", tt.router, diff)
		}
	}
}
