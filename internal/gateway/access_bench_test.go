package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/auth"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/policy"
	"github.com/inferrail/inferrail/internal/ratelimit"
)

// accessModes are the configurations the access benchmarks compare: no
// keys (the gateway as before), a key out of 10,000, and that key with
// every limit of its own and of its model (never reached).
var accessModes = []string{"none", "keys", "keys+limits"}

// accessConfig edits cfg for mode and returns the secret to send ("" for
// none).
func accessConfig(b *testing.B, cfg *config.Config, mode string) string {
	b.Helper()
	if mode == "none" {
		return ""
	}
	big := config.Limits{RequestsPerMinute: ratelimit.MaxPerMinute, PromptTokensPerMinute: ratelimit.MaxPerMinute, OutputTokensPerMinute: ratelimit.MaxPerMinute}
	keys := make([]*auth.Key, 10_000)
	var secret string
	for i := range keys {
		s, k := newKey(fmt.Sprintf("tenant-%05d", i), nil)
		if mode == "keys+limits" {
			k.Limits = big
		}
		keys[i] = k
		if i == 4321 {
			secret = s
		}
	}
	path := filepath.Join(b.TempDir(), "keys.yaml")
	writeKeys(b, path, keys...)
	cfg.Auth.KeysFile = path
	if mode == "keys+limits" {
		cfg.Models[0].Limits = big
	}
	return secret
}

// BenchmarkProxyChatAccess is BenchmarkProxyChat in each access mode, side
// by side: the whole request path over loopback to a zero-latency
// simulator. Compare with
//
//	go test -run '^$' -bench ProxyChatAccess -count 6 ./internal/gateway | benchstat -col /mode -
func BenchmarkProxyChatAccess(b *testing.B) {
	// Every mode's gateway is set up first, outside the timed runs (10,000
	// keys take a second to write and read), so each run shares the
	// machine with the same idle gateways; their probes and scrapes are
	// slowed to once a second to keep that background small.
	type setup struct {
		url, secret string
	}
	setups := map[string]setup{}
	for _, mode := range accessModes {
		cfg := testConfig(b, fleetOf(b, 1, true))
		cfg.Health.Interval, cfg.Health.Timeout = config.Duration(time.Second), config.Duration(500*time.Millisecond)
		cfg.Load.ScrapeInterval, cfg.Load.ScrapeTimeout = config.Duration(time.Second), config.Duration(500*time.Millisecond)
		cfg.Load.MaxAge = config.Duration(2 * time.Second)
		secret := accessConfig(b, cfg, mode)
		setups[mode] = setup{url: startGateway(b, cfg).url, secret: secret}
	}
	body := chatBody("hello there", "")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Cleanup(client.CloseIdleConnections)
	for _, mode := range accessModes {
		s := setups[mode]
		b.Run("mode="+mode, func(b *testing.B) {
			b.ReportAllocs()
			cpu := processCPU()
			defer func() { reportCPU(b, processCPU()-cpu) }()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/chat/completions", strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					if s.secret != "" {
						req.Header.Set("Authorization", "Bearer "+s.secret)
					}
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}

// reportCPU reports the process's CPU time per operation, every goroutine
// (the gateway's, the simulator's, the client's and the collector's)
// included: on a shared machine wall time per operation counts the time
// other processes ran; CPU time does not.
func reportCPU(b *testing.B, cpu time.Duration) {
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// nopWriter is a ResponseWriter that keeps nothing but a fresh header map.
type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *nopWriter) WriteHeader(int)             {}

// BenchmarkAccessPath is what access adds to a request, alone: the key
// looked up among 10,000, the request's costs taken from six buckets, its
// response metered and its output charged from the usage.
//
//	go test -run '^$' -bench AccessPath -count 6 ./internal/gateway | benchstat -col /mode -
func BenchmarkAccessPath(b *testing.B) {
	usage := []byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":100,"total_tokens":104,"completion_tokens":4}}`)
	for _, mode := range accessModes {
		b.Run("mode="+mode, func(b *testing.B) {
			cfg := testConfig(b, fleetOf(b, 1, true))
			secret := accessConfig(b, cfg, mode)
			g, err := New(cfg, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			h := g.requireKey(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ex := &exchange{w: w, r: r, model: testModel, route: policy.Request{PromptTokens: 100}}
				if err := g.admit(ex); err != nil {
					b.Fatal(err)
				}
				resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(usage))}
				g.meter(ex, resp)
				_, _ = io.Copy(io.Discard, resp.Body)
				g.finish(ex)
			}))
			req, _ := http.NewRequest(http.MethodPost, "http://gateway/v1/chat/completions", nil)
			if secret != "" {
				req.Header.Set("Authorization", "Bearer "+secret)
			}
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				h.ServeHTTP(&nopWriter{h: http.Header{}}, req)
			}
			reportCPU(b, processCPU()-cpu)
		})
	}
}
