package calibrate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/calibrate"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/sim"
)

func startSim(t *testing.T, lat sim.LatencyModel, prefixCaching bool) *sim.Local {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Latency = lat
	cfg.EnablePrefixCaching = prefixCaching
	l, err := sim.StartLocal(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// within reports whether got is within rel of want.
func within(got, want, rel float64) bool { return math.Abs(got-want) <= rel*want }

func checkParams(t *testing.T, got calibrate.Params, lat sim.LatencyModel) {
	t.Helper()
	want := calibrate.Params{
		TokenSecs: lat.PrefillToken.Seconds(),
		PairSecs:  lat.PrefillPair * 1e-9,
		FixedSecs: lat.PrefillFixed.Seconds(),
	}
	// Nine significant digits: an idle simulator's TTFT is P to the
	// nanosecond (its step once started when its loop woke, and d came
	// out 0.1% high).
	if !within(got.TokenSecs, want.TokenSecs, 1e-9) || !within(got.PairSecs, want.PairSecs, 1e-9) ||
		!within(got.FixedSecs, want.FixedSecs, 1e-9) {
		t.Errorf("calibrated %+v, want %+v to nine digits", got, want)
	}
}

// TestRecoversSimulatorParams calibrates two simulators with different
// latency models and recovers each one's a, b and d.
func TestRecoversSimulatorParams(t *testing.T) {
	other := sim.DefaultLatency()
	other.PrefillToken = 50 * time.Microsecond
	other.PrefillPair = 8
	other.PrefillFixed = 2 * time.Millisecond
	for name, lat := range map[string]sim.LatencyModel{"default": sim.DefaultLatency(), "other": other} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := startSim(t, lat, true)
			res, err := calibrate.Run(t.Context(), calibrate.Options{URL: l.URL(), Seed: 7, Design: calibrate.DefaultDesign()})
			if err != nil {
				t.Fatal(err)
			}
			checkParams(t, res.Params, lat)
			t.Logf("a = %.6g µs, b = %.6g ns, d = %.6g ms", res.Params.TokenSecs*1e6, res.Params.PairSecs*1e9, res.Params.FixedSecs*1e3)
			for _, p := range res.Probes {
				// Prompts are planned to within 0.2%, and the simulator
				// caches whole blocks of 16 tokens.
				if p.Kind == "probe" && p.PlannedCached > 0 && float64(p.Cached) < 0.99*float64(p.PlannedCached)-16 {
					t.Errorf("probe %+v found %d tokens cached, planned %d", p, p.Cached, p.PlannedCached)
				}
				if p.TTFT <= 0 || p.HTTP < p.TTFT {
					t.Errorf("probe %+v: TTFT %v, HTTP %v; want 0 < TTFT <= HTTP", p, p.TTFT, p.HTTP)
				}
			}
			if t.Failed() {
				var b strings.Builder
				_ = res.WriteReport(&b)
				t.Log(b.String())
			}
		})
	}
}

// TestFitsWhatTheEngineCached: an engine with prefix caching off computes
// every probe's whole prompt; calibration sees that in the hit counters and
// still recovers the parameters, where trusting the planned cached lengths
// would not.
func TestFitsWhatTheEngineCached(t *testing.T) {
	lat := sim.DefaultLatency()
	l := startSim(t, lat, false)
	design := calibrate.Design{Uncached: []int{32, 256, 1024}, Cached: []int{0, 1024, 2048}, Reps: 3}
	res, err := calibrate.Run(t.Context(), calibrate.Options{URL: l.URL(), Seed: 8, Design: design})
	if err != nil {
		t.Fatal(err)
	}
	checkParams(t, res.Params, lat)
	t.Logf("a = %.6g µs, b = %.6g ns, d = %.6g ms", res.Params.TokenSecs*1e6, res.Params.PairSecs*1e9, res.Params.FixedSecs*1e3)
	var planned []calibrate.Point
	for _, p := range res.Probes {
		if p.Cached != 0 || p.Uncached() != p.PromptTokens {
			t.Errorf("probe %+v: %d cached, %d computed of %d, want none cached", p, p.Cached, p.Uncached(), p.PromptTokens)
		}
		if p.Kind == "probe" {
			planned = append(planned, calibrate.Point{Uncached: float64(p.PromptTokens - p.PlannedCached),
				Cached: float64(p.PlannedCached), TTFT: p.TTFT})
		}
	}
	// Fitting the plan instead of the measurement gets a badly wrong: the
	// cached tokens it thinks free were paid for.
	wrong, err := calibrate.Fit(planned)
	if err != nil {
		t.Fatal(err)
	}
	if within(wrong.TokenSecs, lat.PrefillToken.Seconds(), 0.05) && within(wrong.FixedSecs, lat.PrefillFixed.Seconds(), 0.05) {
		t.Errorf("fitting the planned cached lengths gave %+v, close to the truth: the test does not tell them apart", wrong)
	}
}

func TestFragmentIsAcceptedByConfig(t *testing.T) {
	p := calibrate.Params{TokenSecs: 9.998008216045109e-05, PairSecs: 3.303117695100775e-09, FixedSecs: 0}
	base, err := os.ReadFile("../config/testdata/minimal.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(append(append(base, '\n'), p.Fragment()...))
	if err != nil {
		t.Fatalf("config.Parse(minimal + fragment): %v\n%s", err, p.Fragment())
	}
	got := cfg.Routing.CostModel
	if got.PrefillTokenSecs != p.TokenSecs || got.PrefillPairSecs != p.PairSecs || got.PrefillFixedSecs != p.FixedSecs {
		t.Errorf("routing.cost_model = %+v, want %+v exactly", got, p)
	}
}

// fakeEngine is a vLLM stand-in whose metrics page a test writes.
type fakeEngine struct {
	running     atomic.Int64
	ttftCount   atomic.Int64 // added per completion
	noHistogram bool
}

func (f *fakeEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/models":
		fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model","max_model_len":4096}]}`)
	case "/tokenize":
		var req struct {
			Prompt string `json:"prompt"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, `{"count":%d,"max_model_len":4096,"tokens":[],"token_strs":null}`, len(strings.Fields(req.Prompt))+1)
	case "/v1/completions":
		fmt.Fprint(w, `{"choices":[{"text":"x"}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}`)
	case "/metrics":
		fmt.Fprintf(w, "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} %d\n", f.running.Load())
		fmt.Fprint(w, "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 0\n")
		fmt.Fprint(w, "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0\n")
		if !f.noHistogram {
			n := f.ttftCount.Add(2) // two requests finish between any two reads
			fmt.Fprint(w, "# TYPE vllm:time_to_first_token_seconds histogram\n")
			fmt.Fprintf(w, "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} %d\n", n)
			fmt.Fprintf(w, "vllm:time_to_first_token_seconds_count{engine=\"0\",model_name=\"m\"} %d\n", n)
			fmt.Fprintf(w, "vllm:time_to_first_token_seconds_sum{engine=\"0\",model_name=\"m\"} %g\n", float64(n)*0.01)
		}
	default:
		http.NotFound(w, r)
	}
}

func TestErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()

	tests := []struct {
		name   string
		fake   *fakeEngine // nil: nothing listens
		want   error
		detail string
	}{
		{name: "unreachable", want: calibrate.ErrUnreachable, detail: "connect"},
		{name: "busy", fake: func() *fakeEngine { f := &fakeEngine{}; f.running.Store(2); return f }(),
			want: calibrate.ErrNotIdle, detail: "2 requests running"},
		{name: "traffic_during_a_probe", fake: &fakeEngine{}, want: calibrate.ErrNotIdle, detail: "during one probe"},
		{name: "no_ttft_histogram", fake: &fakeEngine{noHistogram: true}, want: calibrate.ErrNoTTFT, detail: "vllm:time_to_first_token_seconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := closed
			if tt.fake != nil {
				srv := httptest.NewServer(tt.fake)
				defer srv.Close()
				url = srv.URL
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, err := calibrate.Run(ctx, calibrate.Options{URL: url, Design: calibrate.DefaultDesign(), Settle: 200 * time.Millisecond})
			if !errors.Is(err, tt.want) {
				t.Fatalf("Run = %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.detail) {
				t.Errorf("Run = %q, want it to mention %q", err, tt.detail)
			}
		})
	}
}

// TestRedirectNotFollowed: an engine that redirects is refused, not
// measured on the host it points to (found by a review of the gateway's
// clients, which followed redirects; this one did too).
func TestRedirectNotFollowed(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirecting.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := calibrate.Run(ctx, calibrate.Options{URL: redirecting.URL, Design: calibrate.DefaultDesign(), Settle: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "307") {
		t.Errorf("Run = %v, want the engine's 307", err)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("%d requests reached the host the engine redirected to, want none", n)
	}
}

// Run refuses a negative timeout or warmup rather than taking the default
// or sending none.
func TestNegativeOptions(t *testing.T) {
	for _, o := range []calibrate.Options{{Timeout: -time.Second}, {Warmup: -3}} {
		o.URL, o.Design = "http://127.0.0.1:1", calibrate.DefaultDesign()
		if _, err := calibrate.Run(t.Context(), o); err == nil || !strings.Contains(err.Error(), "neither may be negative") {
			t.Errorf("Run(timeout %v, warmup %d) = %v, want it refused", o.Timeout, o.Warmup, err)
		}
	}
}

func TestDesign(t *testing.T) {
	if err := calibrate.DefaultDesign().Validate(); err != nil {
		t.Errorf("DefaultDesign().Validate() = %v", err)
	}
	bad := calibrate.Design{Uncached: []int{0, 0}, Cached: []int{-1}, Reps: 0}
	err := bad.Validate()
	for _, want := range []string{"two different lengths", "uncached[0]: must be >= 1", "cached[0]: must be >= 0", "three different", "reps: must be >= 1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%+v) = %v, want it to mention %q", bad, err, want)
		}
	}
}

// TestWithoutTokenize: an engine without /tokenize (SGLang's OpenAI server
// has none) gets prompts sized from a first request's usage, and the fit
// still uses what the engine counted.
func TestWithoutTokenize(t *testing.T) {
	lat := sim.DefaultLatency()
	l := startSim(t, lat, true)
	target, err := url.Parse(l.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tokenize" {
			http.NotFound(w, r)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer srv.Close()
	design := calibrate.Design{Uncached: []int{32, 256, 1024}, Cached: []int{0, 1024, 4096}, Reps: 3}
	res, err := calibrate.Run(t.Context(), calibrate.Options{URL: srv.URL, Seed: 9, Design: design})
	if err != nil {
		t.Fatal(err)
	}
	if res.Tokenizer != "estimate" {
		t.Errorf("Tokenizer = %q, want estimate", res.Tokenizer)
	}
	if res.Probes[0].Kind != "warmup" {
		t.Errorf("first probe is a %s, want the warmup that sizes words", res.Probes[0].Kind)
	}
	checkParams(t, res.Params, lat)
}

// hostile puts a proxy in front of the engine at target that passes each
// answer to path through rewrite.
func hostile(t *testing.T, target string, rewrite func(path string, body []byte) []byte) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ModifyResponse = func(resp *http.Response) error {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		b = rewrite(resp.Request.URL.Path, b)
		resp.Body = io.NopCloser(bytes.NewReader(b))
		resp.ContentLength = int64(len(b))
		resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return srv.URL
}

// rewriteSample applies f to the value of every sample of the metric name
// on a metrics page.
func rewriteSample(page []byte, name string, f func(v float64) float64) []byte {
	re := regexp.MustCompile(`(?m)^(` + regexp.QuoteMeta(name) + `(?:\{[^}]*\})?) (\S+)$`)
	return re.ReplaceAllFunc(page, func(line []byte) []byte {
		m := re.FindSubmatch(line)
		v, err := strconv.ParseFloat(string(m[2]), 64)
		if err != nil {
			return line
		}
		return []byte(string(m[1]) + " " + strconv.FormatFloat(f(v), 'g', -1, 64))
	})
}

// TestHostileEngine: a real simulator behind a proxy that spoils its
// answers. Each spoiling is refused with an error saying what is wrong,
// never fitted: a TTFT histogram whose sum went backwards gave negative
// TTFTs, which the old code fitted into an all-zero cost model, and an
// answer over 16 MiB is named as such.
func TestHostileEngine(t *testing.T) {
	const sum, count = "vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count"
	tests := []struct {
		name    string
		rewrite func(path string, body []byte) []byte
		want    string
	}{
		{"ttft_sum_backwards", func(path string, b []byte) []byte {
			if path != "/metrics" {
				return b
			}
			return rewriteSample(b, sum, func(v float64) float64 { return -v })
		}, "the TTFT histogram went backwards"},
		{"ttft_count_backwards", func(path string, b []byte) []byte {
			if path != "/metrics" {
				return b
			}
			return rewriteSample(b, count, func(v float64) float64 { return 1e6 - v })
		}, "the TTFT histogram went backwards"},
		{"ttft_sum_still", func(path string, b []byte) []byte {
			if path != "/metrics" {
				return b
			}
			return rewriteSample(b, sum, func(float64) float64 { return 1 })
		}, "the TTFT histogram's sum moved by 0 s over a request"},
		// Answers past 16 MiB were cut there and read as "unexpected end
		// of JSON input" or "line N: no value".
		{"models_too_large", func(path string, b []byte) []byte {
			if path != "/v1/models" {
				return b
			}
			return append([]byte(`{"padding":"`+strings.Repeat("x", 17<<20)+`",`), b[1:]...)
		}, "GET /v1/models: the answer is larger than 16 MiB"},
		{"metrics_too_large", func(path string, b []byte) []byte {
			if path != "/metrics" {
				return b
			}
			return append(b, bytes.Repeat([]byte("padding_total 1\n"), 17<<20/16+1)...)
		}, "GET /metrics: the answer is larger than 16 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := startSim(t, sim.DefaultLatency(), true)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			res, err := calibrate.Run(ctx, calibrate.Options{URL: hostile(t, l.URL(), tt.rewrite), Seed: 3,
				Design: calibrate.DefaultDesign(), Settle: time.Second})
			if !errors.Is(err, calibrate.ErrEngine) || !strings.Contains(err.Error(), tt.want) {
				var params calibrate.Params
				if res != nil {
					params = res.Params
				}
				t.Errorf("Run = %v (fitted %+v), want %v mentioning %q", err, params, calibrate.ErrEngine, tt.want)
			}
		})
	}
}
