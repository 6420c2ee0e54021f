package gateway

import (
	"encoding/json"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/stress/stresstest"
)

func TestRoutingLoadValidate(t *testing.T) {
	valid := func() RoutingLoad { return DefaultConfig().Routing }
	tests := []struct {
		name string
		edit func(*RoutingLoad)
		want []string // substrings of the error; nil for valid
	}{
		{"default", func(*RoutingLoad) {}, nil},
		{"no_variants", func(l *RoutingLoad) { l.Variants = nil }, []string{"variants: at least one is required"}},
		{"duplicate", func(l *RoutingLoad) { l.Variants = append(l.Variants, l.Variants[2]) },
			[]string{"variants[8]: same settings as variants[2] (w200-tok-kv_aware-r3)"}},
		{"unknown_policy", func(l *RoutingLoad) { l.Variants[1].Policy = "fastest" }, []string{`variants[1].policy: models[0].policy: must be empty or one of`}},
		{"no_policy", func(l *RoutingLoad) { l.Variants[1].Policy = "" }, []string{"variants[1].policy: required"}},
		{"all_at_once", func(l *RoutingLoad) {
			l.Variants[0].SystemWords = -1
			l.Variants[3].SystemWords = maxSystemWords + 1
			l.Variants[5].Replicas = 0
			l.Variants[6].Replicas = maxReplicas + 1
			l.Variants[7].Rates = []int{2000, 0}
			l.Variants[4].Rates = nil
			l.Requests, l.Warmup, l.MaxTokens, l.SystemPrompts, l.QuestionWords, l.Timeout = 0, -1, 0, 0, 0, -time.Second
		}, []string{"variants[0].system_words: must be from 0 to 8000, got -1", "variants[3].system_words: must be from 0 to 8000, got 8001",
			"variants[5].replicas: must be from 1 to 16, got 0", "variants[6].replicas: must be from 1 to 16, got 17",
			"variants[7].rates[1]: must be positive", "variants[4].rates: at least one is required", "requests: must be positive",
			"warmup: must not be negative", "max_tokens: must be positive", "system_prompts: must be positive",
			"question_words: must be positive", "timeout: must not be negative"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := valid()
			tt.edit(&l)
			stresstest.CheckValidate(t, l.Validate(), tt.want)
		})
	}
	c := DefaultConfig()
	c.Routing.Requests = 0
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "routing.requests: must be positive") {
		t.Errorf("GatewayConfig.Validate() = %v, want routing.requests named", err)
	}
}

func TestParseRoutingVariant(t *testing.T) {
	for _, v := range DefaultRoutingVariants() {
		got, err := ParseRoutingVariant(v.Name())
		v.Rates = nil
		if err != nil || got.SystemWords != v.SystemWords || got.Tokenizer != v.Tokenizer || got.Policy != v.Policy || got.Replicas != v.Replicas || got.Rates != nil {
			t.Errorf("ParseRoutingVariant(%q) = %+v, %v, want %+v", v.Name(), got, err, v)
		}
	}
	for _, bad := range []string{"", "w200-tok-kv_aware", "x200-tok-kv_aware-r3", "w200-yes-kv_aware-r3", "w200-tok-kv_aware-3", "w-tok-p2c-rx"} {
		if _, err := ParseRoutingVariant(bad); err == nil {
			t.Errorf("ParseRoutingVariant(%q) = nil error, want one", bad)
		}
	}
}

func TestSelectRoutingVariants(t *testing.T) {
	defaults := DefaultRoutingVariants()
	names := func(vs []RoutingVariant) string {
		var out []string
		for _, v := range vs {
			var rates []string
			for _, r := range v.Rates {
				rates = append(rates, strconv.Itoa(r))
			}
			out = append(out, v.Name()+":"+strings.Join(rates, ","))
		}
		return strings.Join(out, " ")
	}
	tests := []struct {
		name    string
		names   []string
		rates   []int
		want    string
		wantErr string
	}{
		{"all", nil, nil, names(defaults), ""},
		{"named", []string{"w2000-tok-kv_aware-r3", "w200-tok-prefix_hash-r8"}, nil, "w2000-tok-kv_aware-r3:1000,2000 w200-tok-prefix_hash-r8:2000,5000", ""},
		{"rates", []string{"w0-notok-p2c-r2"}, []int{300}, "w0-notok-p2c-r2:300", ""},
		{"rates_for_all", nil, []int{100}, strings.NewReplacer(":2000,5000", ":100", ":1000,2000", ":100").Replace(names(defaults)), ""},
		{"no_rates", []string{"w0-notok-p2c-r2"}, nil, "", `routing variant "w0-notok-p2c-r2": no default rates`},
		{"bad_name", []string{"kv_aware"}, nil, "", `routing variant "kv_aware"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SelectRoutingVariants(defaults, tt.names, tt.rates)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("SelectRoutingVariants(%v, %v) error = %v, want %q", tt.names, tt.rates, err, tt.wantErr)
				}
				return
			}
			if err != nil || names(got) != tt.want {
				t.Errorf("SelectRoutingVariants(%v, %v) = %s, %v, want %s", tt.names, tt.rates, names(got), err, tt.want)
			}
		})
	}
	if got, _ := SelectRoutingVariants(defaults, nil, nil); &got[0].Rates[0] == &defaults[0].Rates[0] {
		t.Error("SelectRoutingVariants shares the defaults' rates")
	}
}

// decisionBounds are the gateway's inferrail_routing_decision_seconds
// buckets.
var decisionBounds = func() []float64 {
	var b []float64
	for i, v := 0, 1e-7; i < 12; i, v = i+1, v*4 {
		b = append(b, v)
	}
	return b
}()

// bucketed counts samples into cumulative buckets as a Prometheus
// histogram does: an observation counts in every bucket whose bound is at
// least it.
func bucketed(samples []float64, bounds []float64) histogram {
	h := histogram{math.Inf(1): float64(len(samples))}
	for _, b := range bounds {
		h[b] = 0
		for _, s := range samples {
			if s <= b {
				h[b]++
			}
		}
	}
	return h
}

// TestHistogramQuantileReference checks the estimate against the exact
// (nearest-rank) quantile of the samples bucketed: the exact value lies in
// the bucket the estimate names, and so does the estimate.
func TestHistogramQuantileReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 1 + r.IntN(3000)
		samples := make([]float64, n)
		for i := range samples {
			samples[i] = 1e-7 * math.Pow(2, r.Float64()*24) // 0.1 µs to 1.7 s, past the last bound
		}
		h := bucketed(samples, decisionBounds)
		sorted := slices.Sorted(slices.Values(samples))
		for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999, 1} {
			exact := sorted[max(0, int(math.Ceil(q*float64(n)))-1)]
			got := h.quantile(q)
			if got.N != float64(n) {
				t.Fatalf("trial %d: quantile(%v).N = %v, want %d", trial, q, got.N, n)
			}
			if got.High == 0 {
				if last := decisionBounds[len(decisionBounds)-1]; exact <= last || got.Low != last || got.Seconds != last {
					t.Errorf("trial %d: quantile(%v) = %+v above the last bound, exact %v", trial, q, got, exact)
				}
				continue
			}
			if !(got.Low < exact && exact <= got.High) || !(got.Low <= got.Seconds && got.Seconds <= got.High) {
				t.Errorf("trial %d: quantile(%v) = %+v, exact %v not inside its bucket", trial, q, got, exact)
			}
		}
	}
}

func TestHistogramQuantile(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name string
		h    histogram
		q    float64
		want BucketQuantile
	}{
		{"empty", nil, 0.99, BucketQuantile{}},
		{"no_observations", histogram{1: 0, inf: 0}, 0.5, BucketQuantile{}},
		{"no_inf", histogram{1: 3}, 0.5, BucketQuantile{}},
		// 100 observations: 40 in (0, 1], 60 in (1, 3]. p50 is the 10th of
		// the 60, a sixth of the way into (1, 3].
		{"interpolated", histogram{1: 40, 3: 100, inf: 100}, 0.5, BucketQuantile{N: 100, Seconds: 1 + 2*10.0/60, Low: 1, High: 3}},
		{"first_bucket_from_zero", histogram{2: 100, 4: 100, inf: 100}, 0.25, BucketQuantile{N: 100, Seconds: 0.5, Low: 0, High: 2}},
		{"skips_empty_buckets", histogram{1: 0, 2: 0, 4: 10, inf: 10}, 0.5, BucketQuantile{N: 10, Seconds: 3, Low: 2, High: 4}},
		{"above_last_bound", histogram{1: 10, 2: 10, inf: 20}, 0.99, BucketQuantile{N: 20, Seconds: 2, Low: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.h.quantile(tt.q); math.Abs(got.Seconds-tt.want.Seconds) > 1e-12 || got.N != tt.want.N || got.Low != tt.want.Low || got.High != tt.want.High {
				t.Errorf("quantile(%v) = %+v, want %+v", tt.q, got, tt.want)
			}
		})
	}
}

func TestRoutingCountersFromPage(t *testing.T) {
	page := func(s string) procs.PromPage {
		t.Helper()
		p, err := procs.ParsePage(strings.NewReader(s))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	before := page(`# HELP inferrail_routing_decision_seconds Time to choose a replica and take a lease on it.
# TYPE inferrail_routing_decision_seconds histogram
inferrail_routing_decision_seconds_bucket{policy="kv_aware",le="1e-07"} 0
inferrail_routing_decision_seconds_bucket{policy="kv_aware",le="4e-07"} 1
inferrail_routing_decision_seconds_bucket{policy="kv_aware",le="+Inf"} 2
inferrail_routing_decision_seconds_sum{policy="kv_aware"} 1e-06
inferrail_routing_decision_seconds_count{policy="kv_aware"} 2
inferrail_tokenized_requests_total{model="inferrail/sim-8b",result="tokenized"} 5
inferrail_prompt_tokens_total{model="inferrail/sim-8b"} 100
inferrail_predicted_cached_tokens_total{model="inferrail/sim-8b"} 10
`)
	after := page(`inferrail_routing_decision_seconds_bucket{policy="kv_aware",le="1e-07"} 0
inferrail_routing_decision_seconds_bucket{policy="kv_aware",le="4e-07"} 11
inferrail_routing_decision_seconds_bucket{policy="kv_aware",le="+Inf"} 12
inferrail_routing_decision_seconds_bucket{policy="least_request",le="1e-07"} 1
inferrail_routing_decision_seconds_bucket{policy="least_request",le="4e-07"} 1
inferrail_routing_decision_seconds_bucket{policy="least_request",le="+Inf"} 1
inferrail_tokenize_seconds_bucket{model="inferrail/sim-8b",le="1e-06"} 3
inferrail_tokenize_seconds_bucket{model="inferrail/sim-8b",le="+Inf"} 4
inferrail_tokenized_requests_total{model="inferrail/sim-8b",result="tokenized"} 13
inferrail_tokenized_requests_total{model="inferrail/sim-8b",result="busy"} 1
inferrail_prompt_tokens_total{model="inferrail/sim-8b"} 900
inferrail_predicted_cached_tokens_total{model="inferrail/sim-8b"} 610
`)
	d := readRoutingCounters(after).sub(readRoutingCounters(before))
	d = d.add(d) // two legs alike
	inf := math.Inf(1)
	if want := (histogram{1e-07: 2, 4e-07: 22, inf: 22}); !maps.Equal(d.decision, want) {
		t.Errorf("decision = %v, want %v", d.decision, want)
	}
	if want := (histogram{1e-06: 6, inf: 8}); !maps.Equal(d.tokenize, want) {
		t.Errorf("tokenize = %v, want %v", d.tokenize, want)
	}
	if d.tokenized["tokenized"] != 16 || d.tokenized["busy"] != 2 || d.promptTokens != 1600 || d.predicted != 1200 {
		t.Errorf("counters = %+v, want tokenized 16, busy 2, prompt 1600, predicted 1200", d)
	}
	rr := routingRate(OverheadRate{Gateway: OverheadLeg{Requests: 20}}, d)
	if rr.Decisions != 22 || rr.Tokenizations != 8 || rr.TokenizedShare != 0.8 || rr.PredictedHitRate != 0.75 || rr.DecisionP99.High != 4e-07 {
		t.Errorf("routingRate = %+v", rr)
	}
}

func TestRoutingPrompts(t *testing.T) {
	type chat struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
		MaxTokens int `json:"max_tokens"`
	}
	parse := func(b []byte) chat {
		t.Helper()
		var c chat
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatalf("body %s: %v", b, err)
		}
		return c
	}
	for _, words := range []int{0, 200, 2000} {
		p := newRoutingPrompts(1, 8, words, 12, 1)
		again := newRoutingPrompts(1, 8, words, 12, 1)
		systems := map[string]bool{}
		questions := map[string]bool{}
		for stream := range uint64(3) {
			for i := range 200 {
				b := p.body(stream, i)
				if string(b) != string(again.body(stream, i)) {
					t.Fatalf("words %d: body(%d, %d) differs between two builds from the same seed", words, stream, i)
				}
				c := parse(b)
				if c.Model != procs.SimModel || c.MaxTokens != 1 {
					t.Errorf("words %d: body(%d, %d) = model %q, max_tokens %d", words, stream, i, c.Model, c.MaxTokens)
				}
				wantMsgs := 2
				if words == 0 {
					wantMsgs = 1
				}
				if len(c.Messages) != wantMsgs {
					t.Fatalf("words %d: body(%d, %d) has %d messages, want %d", words, stream, i, len(c.Messages), wantMsgs)
				}
				if words > 0 {
					sys := c.Messages[0]
					if n := len(strings.Fields(sys.Content)); sys.Role != "system" || n != words {
						t.Errorf("words %d: system message %q of %d words, want system of %d", words, sys.Role, n, words)
					}
					systems[sys.Content] = true
				}
				q := c.Messages[len(c.Messages)-1]
				if n := len(strings.Fields(q.Content)); q.Role != "user" || n != 12+2 { // "Question s.i:" and the words
					t.Errorf("words %d: question %q has %d words, want 14", words, q.Content, n)
				}
				if questions[q.Content] {
					t.Errorf("words %d: question %q repeats", words, q.Content)
				}
				questions[q.Content] = true
			}
		}
		if want := min(words, 8); words > 0 && len(systems) != want {
			t.Errorf("words %d: %d distinct system prompts, want %d", words, len(systems), want)
		}
	}
	if a, b := newRoutingPrompts(1, 8, 200, 12, 1), newRoutingPrompts(2, 8, 200, 12, 1); a.system[0] == b.system[0] {
		t.Error("system prompts do not depend on the seed")
	}
}

func TestGatewayStressRouting(t *testing.T) {
	c := testGatewayConfig(t)
	c.Scenarios = []string{ScenarioRouting}
	c.Routing.Variants = []RoutingVariant{
		{SystemWords: 200, Tokenizer: true, Policy: "kv_aware", Replicas: 2, Rates: []int{300}},
		{SystemWords: 0, Policy: "least_request", Replicas: 2, Rates: []int{300}},
	}
	if err := Run(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	res := readGWResult(t, c.OutDir, ScenarioRouting)
	if len(res.Routing) != 2 || len(res.Checks) != 2 {
		t.Fatalf("gw-routing has %d variants and %d checks, want 2 and 2", len(res.Routing), len(res.Checks))
	}
	tok, plain := res.Routing[0].Rates[0], res.Routing[1].Rates[0]
	for _, rr := range []RoutingRate{tok, plain} {
		if rr.Direct.Errors != 0 || rr.Gateway.Errors != 0 || rr.Gateway.Latency.N != 2*c.Routing.Requests || len(rr.Legs) != 4 || rr.MetricsError != "" {
			t.Errorf("gw-routing at %d req/s: errors %d / %d (%v), gateway latencies %d, legs %d, metrics error %q", rr.Rate,
				rr.Direct.Errors, rr.Gateway.Errors, rr.Gateway.ErrorSamples, rr.Gateway.Latency.N, len(rr.Legs), rr.MetricsError)
		}
		// The warmups' decisions are not counted; retries would add some.
		if rr.Decisions < float64(2*c.Routing.Requests) || rr.DecisionP99.N != rr.Decisions {
			t.Errorf("gw-routing: %v decisions (p99 over %v), want at least %d", rr.Decisions, rr.DecisionP99.N, 2*c.Routing.Requests)
		}
	}
	// Prompts of about 1.3 KB go to the tokenizer pool, which may turn a
	// few away as busy on a loaded machine.
	if tok.TokenizedShare < 0.5 || tok.PromptTokens <= 0 || tok.PredictedHitRate <= 0 || tok.TokenizeP99.N != tok.Tokenizations {
		t.Errorf("tokenizing variant: share %v, prompt tokens %v, hit rate %v, tokenizations %v", tok.TokenizedShare, tok.PromptTokens, tok.PredictedHitRate, tok.Tokenizations)
	}
	if plain.Tokenizations != 0 || plain.TokenizedShare != 0 || plain.PromptTokens != 0 {
		t.Errorf("variant without a tokenizer tokenized: %+v", plain)
	}
	report, err := os.ReadFile(filepath.Join(c.OutDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(report), "| w200-tok-kv_aware-r2 | 300 req/s |") {
		t.Errorf("README lacks the gw-routing row:\n%s", report)
	}
}
