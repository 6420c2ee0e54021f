package sim

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var update = flag.Bool("update", false, "rewrite golden files")

// metricsTB is what the helpers need from *testing.T and *rapid.T.
type metricsTB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

func testMetricsConfig() MetricsConfig {
	return MetricsConfig{
		ModelName:   "m",
		Engine:      "0",
		MaxModelLen: 4096,
		CacheConfig: [][2]string{
			{"block_size", "16"},
			{"gpu_memory_utilization", "0.92"},
			{"cache_dtype", "auto"},
			{"sliding_window", "None"},
			{"enable_prefix_caching", "True"},
			{"prefix_caching_hash_algo", "sha256"},
			{"num_gpu_blocks", "2048"},
			{"num_cpu_blocks", "None"},
		},
		Start: time.Unix(1755000000, 500_000_000),
	}
}

// recordedSteps are the hand-built steps behind metrics_recorded.golden.
func recordedSteps() []StepStats {
	return []StepStats{
		{
			Running: 2, Waiting: 1, KVUsage: 0.125,
			PrefixQueries: 300, PrefixHits: 16,
			IterationTokens: 286, GenerationTokens: 2,
			PromptTokens: 300, PromptComputed: 284, PromptCached: 16,
			TTFT: []float64{0.042, 0.0871},
		},
		{
			Running: 1, Waiting: 0, KVUsage: 0.0625, Preemptions: 1,
			IterationTokens: 2, GenerationTokens: 2,
			ITL: []float64{0.0213, 0.0198},
			Finished: []FinishedRequest{{
				Reason: "stop", PromptTokens: 100, GenerationTokens: 2, MaxTokensParam: 256, N: 1,
				E2E: 0.35, Queue: 0.001, Inference: 0.349, Prefill: 0.041, Decode: 0.0213, TPOT: 0.0213,
				PrefillKVComputed: 84,
			}},
		},
		{
			Running: 0, Waiting: 0, KVUsage: 0,
			IterationTokens: 1, GenerationTokens: 1,
			ITL: []float64{0.5},
			Finished: []FinishedRequest{
				{
					Reason: "length", PromptTokens: 200, GenerationTokens: 3, MaxTokensParam: 3, N: 1,
					E2E: 12.5, Queue: 3.2, Inference: 9.3, Prefill: 9.0, Decode: 0.3, TPOT: 0.15,
					PrefillKVComputed: 200,
				},
				{
					Reason: "abort", PromptTokens: 5000, GenerationTokens: 0, MaxTokensParam: 0, N: 1,
					E2E: 9000, Queue: 9000, PrefillKVComputed: 5000,
				},
			},
		},
	}
}

func renderMetrics(t metricsTB, m *Metrics) string {
	t.Helper()
	var buf bytes.Buffer
	n, err := m.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d bytes", n, buf.Len())
	}
	return buf.String()
}

func checkMetricsGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("%s differs at line %d:\n got: %q\nwant: %q", path, i+1, g, w)
			}
		}
	}
}

func TestMetricsGoldenEmpty(t *testing.T) {
	page := renderMetrics(t, NewMetrics(testMetricsConfig()))
	checkMetricsGolden(t, "metrics_empty.golden", page)

	// Lines quoted in the spec (vllm-spec.md §2.1) and other known shapes.
	for _, line := range []string{
		"# HELP vllm:num_requests_running Number of requests in model execution batches.\n" +
			"# TYPE vllm:num_requests_running gauge\n" +
			`vllm:num_requests_running{engine="0",model_name="m"} 0.0` + "\n",
		"# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.\n" +
			"# TYPE vllm:prefix_cache_queries_total counter\n" +
			`vllm:prefix_cache_queries_total{engine="0",model_name="m"} 0.0` + "\n",
		"# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.\n" +
			"# TYPE vllm:prefix_cache_queries_created gauge\n" +
			`vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7550000005e+09` + "\n",
		`vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="awake"} 1.0` + "\n" +
			`vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="weights_offloaded"} 0.0` + "\n" +
			`vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="discard_all"} 0.0` + "\n",
		`vllm:iteration_tokens_total_bucket{engine="0",le="16384.0",model_name="m"} 0.0` + "\n" +
			`vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="m"} 0.0` + "\n" +
			`vllm:iteration_tokens_total_count{engine="0",model_name="m"} 0.0` + "\n" +
			`vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 0.0` + "\n",
		`vllm:request_prompt_tokens_bucket{engine="0",le="2000.0",model_name="m"} 0.0` + "\n" +
			`vllm:request_prompt_tokens_bucket{engine="0",le="+Inf",model_name="m"} 0.0` + "\n",
		`vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",` +
			`gpu_memory_utilization="0.92",num_cpu_blocks="None",num_gpu_blocks="2048",` +
			`prefix_caching_hash_algo="sha256",sliding_window="None"} 1.0` + "\n",
	} {
		if !strings.Contains(page, line) {
			t.Errorf("page lacks\n%s", line)
		}
	}
	for _, forbidden := range []string{"python_", "process_", "http_", "spec_decode", "lora", "kv_block_", "corrupted"} {
		if strings.Contains(page, forbidden) {
			t.Errorf("page contains %q", forbidden)
		}
	}
	if !strings.HasSuffix(page, "\n") || strings.Contains(page, "\n\n") {
		t.Errorf("page has an empty line or no final newline")
	}
}

func TestMetricsGoldenRecorded(t *testing.T) {
	m := NewMetrics(testMetricsConfig())
	for _, s := range recordedSteps() {
		m.Record(&s)
	}
	m.Record(nil)
	page := renderMetrics(t, m)
	checkMetricsGolden(t, "metrics_recorded.golden", page)

	for _, line := range []string{
		`vllm:num_requests_running{engine="0",model_name="m"} 0.0`,
		`vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.0`,
		`vllm:num_preemptions_total{engine="0",model_name="m"} 1.0`,
		`vllm:prompt_tokens_total{engine="0",model_name="m"} 300.0`,
		`vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_compute"} 284.0`,
		`vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_cache_hit"} 16.0`,
		`vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="external_kv_transfer"} 0.0`,
		`vllm:generation_tokens_total{engine="0",model_name="m"} 5.0`,
		`vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 1.0`,
		`vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 1.0`,
		`vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 1.0`,
		`vllm:request_success_total{engine="0",finished_reason="error",model_name="m"} 0.0`,
		`vllm:request_params_max_tokens_count{engine="0",model_name="m"} 2.0`,
		`vllm:request_params_n_count{engine="0",model_name="m"} 3.0`,
		`vllm:request_prompt_tokens_bucket{engine="0",le="2000.0",model_name="m"} 2.0`,
		`vllm:request_prompt_tokens_bucket{engine="0",le="+Inf",model_name="m"} 3.0`,
		`vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 9012.85`,
		`vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 3.0`,
		`vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 289.0`,
	} {
		if !strings.Contains(page, line+"\n") {
			t.Errorf("page lacks %s", line)
		}
	}
}

// wantFamilies is vLLM's registration order (loggers.py PrometheusStatLogger,
// with PerfMetricsProm constructed first and cache_config_info last).
var wantFamilies = []struct{ name, typ string }{
	{"vllm:estimated_flops_per_gpu_total", "counter"},
	{"vllm:estimated_read_bytes_per_gpu_total", "counter"},
	{"vllm:estimated_write_bytes_per_gpu_total", "counter"},
	{"vllm:num_requests_running", "gauge"},
	{"vllm:num_requests_waiting", "gauge"},
	{"vllm:num_requests_waiting_by_reason", "gauge"},
	{"vllm:engine_sleep_state", "gauge"},
	{"vllm:kv_cache_usage_perc", "gauge"},
	{"vllm:prefix_cache_queries_total", "counter"},
	{"vllm:prefix_cache_hits_total", "counter"},
	{"vllm:external_prefix_cache_queries_total", "counter"},
	{"vllm:external_prefix_cache_hits_total", "counter"},
	{"vllm:mm_cache_queries_total", "counter"},
	{"vllm:mm_cache_hits_total", "counter"},
	{"vllm:num_preemptions_total", "counter"},
	{"vllm:prompt_tokens_total", "counter"},
	{"vllm:prompt_tokens_by_source_total", "counter"},
	{"vllm:prompt_tokens_cached_total", "counter"},
	{"vllm:generation_tokens_total", "counter"},
	{"vllm:request_success_total", "counter"},
	{"vllm:request_prompt_tokens", "histogram"},
	{"vllm:request_generation_tokens", "histogram"},
	{"vllm:iteration_tokens_total", "histogram"},
	{"vllm:request_max_num_generation_tokens", "histogram"},
	{"vllm:request_params_n", "histogram"},
	{"vllm:request_params_max_tokens", "histogram"},
	{"vllm:time_to_first_token_seconds", "histogram"},
	{"vllm:inter_token_latency_seconds", "histogram"},
	{"vllm:request_time_per_output_token_seconds", "histogram"},
	{"vllm:e2e_request_latency_seconds", "histogram"},
	{"vllm:request_queue_time_seconds", "histogram"},
	{"vllm:request_inference_time_seconds", "histogram"},
	{"vllm:request_prefill_time_seconds", "histogram"},
	{"vllm:request_decode_time_seconds", "histogram"},
	{"vllm:request_prefill_kv_computed_tokens", "histogram"},
	{"vllm:cache_config_info", "gauge"},
}

func TestMetricsFamilies(t *testing.T) {
	p := parsePromText(t, renderMetrics(t, NewMetrics(testMetricsConfig())))
	var got []string
	for _, f := range p.families {
		if strings.HasSuffix(f.name, "_created") && f.typ == "gauge" {
			continue
		}
		got = append(got, f.name+" "+f.typ)
	}
	var want []string
	for _, f := range wantFamilies {
		want = append(want, f.name+" "+f.typ)
	}
	if !slices.Equal(got, want) {
		t.Errorf("families:\n got %q\nwant %q", got, want)
	}
	// Each counter and histogram is followed by its _created gauge promTextFamily.
	for i, f := range p.families {
		if f.typ == "counter" || f.typ == "histogram" {
			created := strings.TrimSuffix(f.name, "_total") + "_created"
			if f.typ == "histogram" {
				created = f.name + "_created"
			}
			if i+1 >= len(p.families) || p.families[i+1].name != created || p.families[i+1].typ != "gauge" {
				t.Errorf("%s is not followed by gauge promTextFamily %s", f.name, created)
			} else if p.families[i+1].help != f.help {
				t.Errorf("%s: HELP differs from %s", created, f.name)
			}
		}
	}
}

func TestMetricsBuckets(t *testing.T) {
	if got, want := build125Buckets(4096), []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}; !slices.Equal(got, want) {
		t.Errorf("build125Buckets(4096) = %v", got)
	}
	if got := build125Buckets(32768); got[len(got)-1] != 20000 || len(got) != 14 {
		t.Errorf("build125Buckets(32768) = %v", got)
	}
	if got, want := build125Buckets(100), []float64{1, 2, 5, 10, 20, 50, 100}; !slices.Equal(got, want) {
		t.Errorf("build125Buckets(100) = %v", got)
	}
	if got := build125Buckets(0); len(got) != 0 {
		t.Errorf("build125Buckets(0) = %v", got)
	}
	if got := build125Buckets(math.MaxInt); len(got) == 0 || got[len(got)-1] > math.MaxInt {
		t.Errorf("build125Buckets(MaxInt) = %v", got)
	}
}

func TestMetricsLabelEscaping(t *testing.T) {
	cfg := testMetricsConfig()
	cfg.ModelName = "org/m \"x\"\\\n"
	cfg.CacheConfig = [][2]string{{"kv_sharing_fast_prefill", "False"}, {"engine", "ignored"}}
	page := renderMetrics(t, NewMetrics(cfg))
	if want := `vllm:num_requests_running{engine="0",model_name="org/m \"x\"\\\n"} 0.0` + "\n"; !strings.Contains(page, want) {
		t.Errorf("page lacks %s", want)
	}
	if want := `vllm:cache_config_info{engine="0",kv_sharing_fast_prefill="False"} 1.0` + "\n"; !strings.Contains(page, want) {
		t.Errorf("page lacks %s", want)
	}
	parsePromText(t, page)
}

// ---- a small text-format parser used by the invariant tests ----

type promTextSample struct {
	name   string
	labels map[string]string
	keys   []string // label names in printed order
	value  float64
}

type promTextFamily struct {
	name, typ, help string
	samples         []promTextSample
}

type promText struct {
	families []*promTextFamily
}

// parsePromText parses a text-format 0.0.4 page and checks its structure: every
// promTextFamily opens with HELP then TYPE, every promTextSample belongs to the promTextFamily above
// it, label names are printed sorted, values parse.
func parsePromText(t metricsTB, text string) *promText {
	t.Helper()
	p := &promText{}
	var cur *promTextFamily
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	ln := 0
	for sc.Scan() {
		ln++
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, help, _ := strings.Cut(rest, " ")
			cur = &promTextFamily{name: name, help: help}
			p.families = append(p.families, cur)
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			if cur == nil || cur.name != name || cur.typ != "" {
				t.Fatalf("line %d: TYPE without matching HELP: %q", ln, line)
			}
			cur.typ = typ
			continue
		}
		if cur == nil || cur.typ == "" {
			t.Fatalf("line %d: promTextSample outside a promTextFamily: %q", ln, line)
		}
		s, err := parsePromSample(line)
		if err != nil {
			t.Fatalf("line %d: %v: %q", ln, err, line)
		}
		if !slices.IsSorted(s.keys) {
			t.Fatalf("line %d: labels not sorted: %q", ln, line)
		}
		var ok bool
		switch cur.typ {
		case "gauge":
			ok = s.name == cur.name
		case "counter":
			ok = s.name == cur.name && strings.HasSuffix(s.name, "_total")
		case "histogram":
			ok = s.name == cur.name+"_bucket" || s.name == cur.name+"_count" || s.name == cur.name+"_sum"
			if _, hasLe := s.labels["le"]; hasLe != (s.name == cur.name+"_bucket") {
				ok = false
			}
		}
		if !ok {
			t.Fatalf("line %d: promTextSample %s does not belong to %s promTextFamily %s", ln, s.name, cur.typ, cur.name)
		}
		cur.samples = append(cur.samples, s)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return p
}

func parsePromSample(line string) (promTextSample, error) {
	s := promTextSample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, fmt.Errorf("no metric name")
	}
	s.name = line[:i]
	rest := line[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for rest != "" && rest[0] != '}' {
			eq := strings.IndexByte(rest, '=')
			if eq <= 0 || len(rest) < eq+2 || rest[eq+1] != '"' {
				return s, fmt.Errorf("bad label")
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var val strings.Builder
			for {
				if rest == "" {
					return s, fmt.Errorf("unterminated label value")
				}
				c := rest[0]
				rest = rest[1:]
				if c == '"' {
					break
				}
				if c == '\\' {
					if rest == "" {
						return s, fmt.Errorf("bad escape")
					}
					switch rest[0] {
					case 'n':
						val.WriteByte('\n')
					case '\\', '"':
						val.WriteByte(rest[0])
					default:
						return s, fmt.Errorf("bad escape")
					}
					rest = rest[1:]
					continue
				}
				val.WriteByte(c)
			}
			if _, dup := s.labels[key]; dup {
				return s, fmt.Errorf("duplicate label %s", key)
			}
			s.labels[key] = val.String()
			s.keys = append(s.keys, key)
			rest = strings.TrimPrefix(rest, ",")
		}
		if rest == "" {
			return s, fmt.Errorf("unterminated labels")
		}
		rest = rest[1:]
	}
	v, ok := strings.CutPrefix(rest, " ")
	if !ok || strings.Contains(v, " ") {
		return s, fmt.Errorf("bad value part")
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return s, err
	}
	s.value = f
	return s, nil
}

// promSeriesKey is a promTextSample's labels without "le", printed canonically.
func promSeriesKey(s promTextSample) string {
	var parts []string
	for _, k := range s.keys {
		if k != "le" {
			parts = append(parts, k+"="+s.labels[k])
		}
	}
	return strings.Join(parts, ",")
}

type promHistSeries struct {
	bounds  []float64
	buckets []float64 // cumulative, as printed
	count   float64
	sum     float64
}

// histograms checks the histogram invariants of a page and returns every
// histogram series by promTextFamily name (single-series families here).
func (p *promText) histograms(t metricsTB) map[string]*promHistSeries {
	t.Helper()
	out := map[string]*promHistSeries{}
	for _, f := range p.families {
		if f.typ != "histogram" {
			continue
		}
		series := map[string]*promHistSeries{}
		var order []string
		for _, s := range f.samples {
			k := promSeriesKey(s)
			h := series[k]
			if h == nil {
				h = &promHistSeries{count: math.NaN(), sum: math.NaN()}
				series[k] = h
				order = append(order, k)
			}
			switch s.name {
			case f.name + "_bucket":
				if !math.IsNaN(h.count) {
					t.Fatalf("%s: bucket after _count", f.name)
				}
				le, err := strconv.ParseFloat(s.labels["le"], 64)
				if err != nil {
					t.Fatalf("%s: le %q: %v", f.name, s.labels["le"], err)
				}
				if n := len(h.bounds); n > 0 {
					if le <= h.bounds[n-1] {
						t.Fatalf("%s: le not increasing: %v after %v", f.name, le, h.bounds[n-1])
					}
					if s.value < h.buckets[n-1] {
						t.Fatalf("%s: buckets not cumulative at le=%v", f.name, le)
					}
				}
				h.bounds = append(h.bounds, le)
				h.buckets = append(h.buckets, s.value)
			case f.name + "_count":
				h.count = s.value
			case f.name + "_sum":
				h.sum = s.value
			}
		}
		for _, k := range order {
			h := series[k]
			n := len(h.bounds)
			if n < 2 || !math.IsInf(h.bounds[n-1], 1) {
				t.Fatalf("%s{%s}: last bucket is not +Inf", f.name, k)
			}
			if h.buckets[n-1] != h.count {
				t.Fatalf("%s{%s}: +Inf bucket %v != _count %v", f.name, k, h.buckets[n-1], h.count)
			}
			if math.IsNaN(h.sum) && h.count > 0 {
				t.Fatalf("%s{%s}: no _sum", f.name, k)
			}
		}
		if len(order) != 1 {
			t.Fatalf("%s: %d series, want 1", f.name, len(order))
		}
		out[f.name] = series[order[0]]
	}
	return out
}

// values returns every gauge/counter promTextSample value by name and labels.
func (p *promText) values() map[string]float64 {
	out := map[string]float64{}
	for _, f := range p.families {
		if f.typ == "histogram" {
			continue
		}
		for _, s := range f.samples {
			out[s.name+"{"+promSeriesKey(s)+"}"] = s.value
		}
	}
	return out
}

// ---- the model the property test compares the page against ----

type metricsModel struct {
	counters map[string]float64
	gauges   map[string]float64
	obs      map[string][]float64
}

func newMetricsModel() *metricsModel {
	return &metricsModel{counters: map[string]float64{}, gauges: map[string]float64{}, obs: map[string][]float64{}}
}

func (mm *metricsModel) apply(s *StepStats) {
	mm.gauges["running"] = float64(s.Running)
	mm.gauges["waiting"] = float64(s.Waiting)
	mm.gauges["kv"] = s.KVUsage
	mm.counters["preemptions"] += float64(s.Preemptions)
	mm.counters["queries"] += float64(s.PrefixQueries)
	mm.counters["hits"] += float64(s.PrefixHits)
	mm.counters["prompt"] += float64(s.PromptTokens)
	mm.counters["computed"] += float64(s.PromptComputed)
	mm.counters["cached"] += float64(s.PromptCached)
	mm.counters["generation"] += float64(s.GenerationTokens)
	if s.IterationTokens > 0 {
		mm.obs["vllm:iteration_tokens_total"] = append(mm.obs["vllm:iteration_tokens_total"], float64(s.IterationTokens))
	}
	add := func(name string, v float64) { mm.obs[name] = append(mm.obs[name], v) }
	for _, f := range s.Finished {
		add("vllm:request_max_num_generation_tokens", float64(f.GenerationTokens))
		add("vllm:request_params_n", float64(max(f.N, 1)))
	}
	for _, v := range s.TTFT {
		add("vllm:time_to_first_token_seconds", v)
	}
	for _, v := range s.ITL {
		add("vllm:inter_token_latency_seconds", v)
	}
	for _, f := range s.Finished {
		mm.counters["success/"+f.Reason]++
		add("vllm:e2e_request_latency_seconds", f.E2E)
		add("vllm:request_queue_time_seconds", f.Queue)
		add("vllm:request_inference_time_seconds", f.Inference)
		add("vllm:request_prefill_time_seconds", f.Prefill)
		add("vllm:request_decode_time_seconds", f.Decode)
		add("vllm:request_time_per_output_token_seconds", f.TPOT)
		add("vllm:request_prompt_tokens", float64(f.PromptTokens))
		add("vllm:request_generation_tokens", float64(f.GenerationTokens))
		add("vllm:request_prefill_kv_computed_tokens", float64(f.PrefillKVComputed))
		if f.MaxTokensParam != 0 {
			add("vllm:request_params_max_tokens", float64(f.MaxTokensParam))
		}
	}
}

func (mm *metricsModel) check(t metricsTB, text string) {
	t.Helper()
	p := parsePromText(t, text)
	vals := p.values()
	lbl := "engine=0,model_name=m"
	want := map[string]float64{
		"vllm:num_requests_running{" + lbl + "}":                                      mm.gauges["running"],
		"vllm:num_requests_waiting{" + lbl + "}":                                      mm.gauges["waiting"],
		"vllm:num_requests_waiting_by_reason{" + lbl + ",reason=capacity}":            mm.gauges["waiting"],
		"vllm:num_requests_waiting_by_reason{" + lbl + ",reason=deferred}":            0,
		"vllm:kv_cache_usage_perc{" + lbl + "}":                                       mm.gauges["kv"],
		"vllm:engine_sleep_state{" + lbl + ",sleep_state=awake}":                      1,
		"vllm:num_preemptions_total{" + lbl + "}":                                     mm.counters["preemptions"],
		"vllm:prefix_cache_queries_total{" + lbl + "}":                                mm.counters["queries"],
		"vllm:prefix_cache_hits_total{" + lbl + "}":                                   mm.counters["hits"],
		"vllm:prompt_tokens_total{" + lbl + "}":                                       mm.counters["prompt"],
		"vllm:prompt_tokens_by_source_total{" + lbl + ",source=local_compute}":        mm.counters["computed"],
		"vllm:prompt_tokens_by_source_total{" + lbl + ",source=local_cache_hit}":      mm.counters["cached"],
		"vllm:prompt_tokens_by_source_total{" + lbl + ",source=external_kv_transfer}": 0,
		"vllm:prompt_tokens_cached_total{" + lbl + "}":                                mm.counters["cached"],
		"vllm:generation_tokens_total{" + lbl + "}":                                   mm.counters["generation"],
		"vllm:external_prefix_cache_queries_total{" + lbl + "}":                       0,
		"vllm:mm_cache_hits_total{" + lbl + "}":                                       0,
		"vllm:estimated_flops_per_gpu_total{" + lbl + "}":                             0,
		"vllm:cache_config_info{block_size=16,cache_dtype=auto,enable_prefix_caching=True," +
			"engine=0,gpu_memory_utilization=0.92,num_cpu_blocks=None,num_gpu_blocks=2048," +
			"prefix_caching_hash_algo=sha256,sliding_window=None}": 1,
	}
	for _, r := range finishReasons {
		want["vllm:request_success_total{engine=0,finished_reason="+r+",model_name=m}"] = mm.counters["success/"+r]
	}
	for k, w := range want {
		g, ok := vals[k]
		if !ok {
			t.Fatalf("no promTextSample %s", k)
		}
		if g != w {
			t.Fatalf("%s = %v, want %v", k, g, w)
		}
	}
	for k, v := range vals {
		if strings.Contains(k, "_created{") && v != 1755000000.5 {
			t.Fatalf("%s = %v", k, v)
		}
	}

	hs := p.histograms(t)
	if len(hs) != 15 {
		t.Fatalf("%d histograms, want 15", len(hs))
	}
	for name, h := range hs {
		obs := mm.obs[name]
		sum := 0.0
		for _, v := range obs {
			sum += v
		}
		if h.count != float64(len(obs)) {
			t.Fatalf("%s_count = %v, want %d", name, h.count, len(obs))
		}
		if h.sum != sum {
			t.Fatalf("%s_sum = %v, want %v", name, h.sum, sum)
		}
		for i, le := range h.bounds {
			n := 0
			for _, v := range obs {
				if v <= le {
					n++
				}
			}
			if h.buckets[i] != float64(n) {
				t.Fatalf("%s_bucket{le=%v} = %v, want %d", name, le, h.buckets[i], n)
			}
		}
	}
}

func TestMetricsParseInvariants(t *testing.T) {
	// The golden scenario first.
	m := NewMetrics(testMetricsConfig())
	mm := newMetricsModel()
	mm.check(t, renderMetrics(t, m))
	for _, s := range recordedSteps() {
		m.Record(&s)
		mm.apply(&s)
		mm.check(t, renderMetrics(t, m))
	}

	reasons := append(finishReasons[:], "bogus")
	seconds := rapid.OneOf(
		rapid.Float64Range(0, 0.2),
		rapid.Float64Range(0, 10000),
		rapid.SampledFrom([]float64{0, 0.001, 0.01, 0.3, 1, 2560, 7680, 80}), // bucket bounds
	)
	tokens := rapid.OneOf(rapid.IntRange(0, 20), rapid.IntRange(0, 100000), rapid.SampledFrom([]int{1, 2, 5, 2000, 16384}))
	rapid.Check(t, func(rt *rapid.T) {
		m := NewMetrics(testMetricsConfig())
		mm := newMetricsModel()
		steps := rapid.IntRange(1, 8).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			s := StepStats{
				Running:          rapid.IntRange(0, 300).Draw(rt, "running"),
				Waiting:          rapid.IntRange(0, 300).Draw(rt, "waiting"),
				KVUsage:          rapid.Float64Range(0, 1).Draw(rt, "kv"),
				Preemptions:      rapid.IntRange(0, 3).Draw(rt, "preempt"),
				PrefixQueries:    tokens.Draw(rt, "queries"),
				PrefixHits:       tokens.Draw(rt, "hits"),
				IterationTokens:  tokens.Draw(rt, "iter"),
				GenerationTokens: tokens.Draw(rt, "gen"),
				PromptTokens:     tokens.Draw(rt, "prompt"),
				PromptComputed:   tokens.Draw(rt, "computed"),
				PromptCached:     tokens.Draw(rt, "cached"),
				TTFT:             rapid.SliceOfN(seconds, 0, 5).Draw(rt, "ttft"),
				ITL:              rapid.SliceOfN(seconds, 0, 10).Draw(rt, "itl"),
			}
			nf := rapid.IntRange(0, 3).Draw(rt, "finished")
			for j := 0; j < nf; j++ {
				s.Finished = append(s.Finished, FinishedRequest{
					Reason:            rapid.SampledFrom(reasons).Draw(rt, "reason"),
					PromptTokens:      tokens.Draw(rt, "fprompt"),
					GenerationTokens:  tokens.Draw(rt, "fgen"),
					MaxTokensParam:    tokens.Draw(rt, "maxtok"),
					N:                 rapid.IntRange(0, 25).Draw(rt, "n"),
					E2E:               seconds.Draw(rt, "e2e"),
					Queue:             seconds.Draw(rt, "queue"),
					Inference:         seconds.Draw(rt, "inference"),
					Prefill:           seconds.Draw(rt, "prefill"),
					Decode:            seconds.Draw(rt, "decode"),
					TPOT:              seconds.Draw(rt, "tpot"),
					PrefillKVComputed: tokens.Draw(rt, "kvcomputed"),
				})
			}
			m.Record(&s)
			mm.apply(&s)
		}
		mm.check(rt, renderMetrics(rt, m))
	})
}

func TestMetricsConcurrent(t *testing.T) {
	m := NewMetrics(testMetricsConfig())
	const writers, perWriter, readers = 4, 200, 3
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				m.Record(&StepStats{
					Running: i, GenerationTokens: 1, IterationTokens: 1, PromptTokens: 2,
					ITL:      []float64{0.01},
					Finished: []FinishedRequest{{Reason: "stop", PromptTokens: 2, GenerationTokens: 1, N: 1, E2E: 0.5}},
				})
			}
		}()
	}
	var rwg sync.WaitGroup
	for r := 0; r < readers; r++ {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for {
				var buf bytes.Buffer
				if _, err := m.WriteTo(&buf); err != nil {
					t.Error(err)
					return
				}
				p := parsePromText(t, buf.String())
				hs := p.histograms(t)
				// A page is a consistent snapshot of whole steps.
				if hs["vllm:iteration_tokens_total"].count != hs["vllm:e2e_request_latency_seconds"].count {
					t.Error("torn snapshot")
					return
				}
				select {
				case <-done:
					return
				default:
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	rwg.Wait()
	vals := parsePromText(t, renderMetrics(t, m)).values()
	total := float64(writers * perWriter)
	if got := vals["vllm:generation_tokens_total{engine=0,model_name=m}"]; got != total {
		t.Errorf("generation_tokens_total = %v, want %v", got, total)
	}
	if got := vals["vllm:request_success_total{engine=0,finished_reason=stop,model_name=m}"]; got != total {
		t.Errorf("request_success_total{stop} = %v, want %v", got, total)
	}
}

func TestMetricsAllocs(t *testing.T) {
	m := NewMetrics(testMetricsConfig())
	steps := recordedSteps()
	if n := testing.AllocsPerRun(100, func() {
		for i := range steps {
			m.Record(&steps[i])
		}
	}); n != 0 {
		t.Errorf("Record allocates %v times per run", n)
	}
	m.WriteTo(io.Discard)
	if n := testing.AllocsPerRun(100, func() { m.WriteTo(io.Discard) }); n > 1 {
		t.Errorf("WriteTo allocates %v times per run", n)
	}
}

func BenchmarkMetricsWriteTo(b *testing.B) {
	m := NewMetrics(testMetricsConfig())
	steps := recordedSteps()
	for i := range steps {
		m.Record(&steps[i])
	}
	b.ReportAllocs()
	for b.Loop() {
		m.WriteTo(io.Discard)
	}
}
