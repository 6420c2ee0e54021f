package sim

// The /metrics page of the simulated engine: the Prometheus families a vLLM
// V1 server (single API server, one engine, default options) exposes, with
// vLLM's names, HELP texts, labels, buckets and registration order
// (vllm/v1/metrics/loggers.py, PrometheusStatLogger), rendered as
// prometheus_client's generate_latest prints them (see promtext.go).
//
// Families that vLLM always registers but that only move with features the
// simulator does not have (MFU estimates, KV-connector and multi-modal cache
// counters, external_kv_transfer prompt tokens) are present and stay at 0,
// exactly as on a real server started without those features. Families that
// vLLM registers only when a feature is enabled (speculative decoding, LoRA,
// KV-cache residency, corrupted requests, KV-connector specific metrics) are
// absent. Python runtime (python_gc_*, python_info, process_*) and HTTP
// instrumentator (http_*) families are not reproduced.

import (
	"io"
	"math"
	"sync"
	"time"
)

// MetricsContentType is the Content-Type of the /metrics page (text format
// 0.0.4, what prometheus_client answers to a request without an OpenMetrics
// Accept header).
const MetricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// MetricsConfig describes the engine the metrics page belongs to.
type MetricsConfig struct {
	ModelName   string      // label model_name (first --served-model-name)
	Engine      string      // label engine, "0"
	MaxModelLen int         // for the 1-2-5 buckets
	CacheConfig [][2]string // vllm:cache_config_info labels as (name, value) pairs; the writer sorts/prints as prometheus_client would, plus engine label
	Start       time.Time   // value of every *_created sample (unix seconds as float)
}

// StepStats is what one engine step reports (vLLM records SchedulerStats and
// IterationStats per step).
type StepStats struct {
	Running, Waiting int     // gauges num_requests_running / num_requests_waiting (waiting_by_reason: all "capacity", "deferred" 0)
	KVUsage          float64 // vllm:kv_cache_usage_perc
	Preemptions      int     // += vllm:num_preemptions_total
	PrefixQueries    int     // += vllm:prefix_cache_queries_total (tokens)
	PrefixHits       int     // += vllm:prefix_cache_hits_total (tokens)
	IterationTokens  int     // observed into vllm:iteration_tokens_total when > 0
	GenerationTokens int     // += vllm:generation_tokens_total
	// Prompt accounting for requests that produced their first token this step:
	PromptTokens   int       // += vllm:prompt_tokens_total
	PromptComputed int       // += prompt_tokens_by_source{source="local_compute"}
	PromptCached   int       // += prompt_tokens_by_source{source="local_cache_hit"} and vllm:prompt_tokens_cached_total
	TTFT           []float64 // seconds, one per request whose first token came this step
	ITL            []float64 // seconds, one per non-first output
	Finished       []FinishedRequest
}

// FinishedRequest is one request that left the engine this step.
//
// vLLM itself records only finishes its engine reports, so a client that
// disconnects leaves no trace in its histograms. The simulator reports those
// requests too, with reason "abort", so routers and tests can see that every
// abandoned request was withdrawn (issue: "it counts as an abort").
type FinishedRequest struct {
	Reason                                       string // "stop", "length", "abort", "error", "repetition"
	PromptTokens                                 int
	GenerationTokens                             int
	MaxTokensParam                               int     // request's max_tokens as sent (effective value); 0 = not observed
	N                                            int     // request n, always 1 here (0 is taken as 1)
	E2E, Queue, Inference, Prefill, Decode, TPOT float64 // seconds
	PrefillKVComputed                            int     // prompt tokens computed (prompt - cached)
}

// finishReasons are vLLM's FinishReason values in enum order; request_success
// children are created in this order.
var finishReasons = [...]string{"stop", "length", "abort", "error", "repetition"}

// Bucket lists of vllm/v1/metrics/loggers.py.
var (
	iterationTokensBuckets = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
	paramsNBuckets         = []float64{1, 2, 5, 10, 20}
	ttftBuckets            = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets             = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestLatencyBuckets  = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// build125Buckets returns 1, 2, 5, 10, 20, 50, ... up to and including the
// largest such value <= maxValue (vLLM's build_1_2_5_buckets).
func build125Buckets(maxValue int) []float64 {
	var out []float64
	for scale := 1; ; scale *= 10 {
		for _, m := range [...]int{1, 2, 5} {
			v := m * scale
			if v > maxValue {
				return out
			}
			out = append(out, float64(v))
		}
		if scale > math.MaxInt/100 {
			return out
		}
	}
}

// vllmHist is a histogram series together with its family's bounds.
type vllmHist struct {
	c      *promChild
	bounds []float64
}

func (h vllmHist) observe(v float64) { h.c.observe(h.bounds, v) }

// Metrics holds every vLLM family the simulator models. Safe for concurrent use.
type Metrics struct {
	mu  sync.Mutex
	reg promRegistry

	running, waiting                 *promChild
	waitingCapacity, waitingDeferred *promChild
	kvUsage                          *promChild
	prefixQueries, prefixHits        *promChild
	preemptions                      *promChild
	promptTokens                     *promChild
	promptLocalCompute               *promChild
	promptLocalCacheHit              *promChild
	promptCached                     *promChild
	generationTokens                 *promChild
	requestSuccess                   [len(finishReasons)]*promChild

	reqPromptTokens, reqGenerationTokens vllmHist
	iterationTokens                      vllmHist
	reqMaxNumGenerationTokens            vllmHist
	reqParamsN, reqParamsMaxTokens       vllmHist
	ttft, itl, tpot                      vllmHist
	e2e, queue, inference                vllmHist
	prefill, decode                      vllmHist
	prefillKVComputed                    vllmHist
}

var metricsBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// NewMetrics registers every family in vLLM's order and creates all series,
// so the page lists every series (at 0) before the first request.
func NewMetrics(cfg MetricsConfig) *Metrics {
	m := &Metrics{}
	r := &m.reg
	r.created = float64(cfg.Start.UnixNano()) / 1e9
	f := &families{r: r, base: []string{"model_name", "engine"}, lv: []string{cfg.ModelName, cfg.Engine}}
	m.registerSchedulerFamilies(f)
	m.registerHistograms(f, build125Buckets(cfg.MaxModelLen))
	registerCacheConfigInfo(r, cfg)
	return m
}

// families registers vLLM's families, each labeled with the model and the
// engine, and makes their one series.
type families struct {
	r    *promRegistry
	base []string // label names: model_name, engine
	lv   []string // their values
}

func (f *families) counter(name, help string) *promChild {
	return f.r.child(f.r.register(promCounter, name, help, f.base, nil), f.lv...)
}

func (f *families) gauge(name, help string) *promChild {
	return f.r.child(f.r.register(promGauge, name, help, f.base, nil), f.lv...)
}

func (f *families) histogram(name, help string, buckets []float64) vllmHist {
	fam := f.r.register(promHistogram, name, help, f.base, buckets)
	return vllmHist{c: f.r.child(fam, f.lv...), bounds: fam.bounds}
}

// child makes the series of a family with one label past the base ones.
func (f *families) child(fam *promFamily, extra string) *promChild {
	return f.r.child(fam, f.lv[0], f.lv[1], extra)
}

// withLabel is the base label names and one more.
func (f *families) withLabel(extra string) []string {
	return append(append([]string(nil), f.base...), extra)
}

// registerSchedulerFamilies registers the counters and gauges of the
// engine's state and throughput.
func (m *Metrics) registerSchedulerFamilies(f *families) {
	// PerfMetricsProm (vllm/v1/metrics/perf.py) is constructed before the
	// scheduler gauges and always registers its three counters; they only
	// move with MFU metrics enabled.
	f.counter("vllm:estimated_flops_per_gpu_total",
		"Estimated number of floating point operations per GPU (for Model Flops Utilization calculations).")
	f.counter("vllm:estimated_read_bytes_per_gpu_total",
		"Estimated number of bytes read from memory per GPU (for Model Flops Utilization calculations).")
	f.counter("vllm:estimated_write_bytes_per_gpu_total",
		"Estimated number of bytes written to memory per GPU (for Model Flops Utilization calculations).")

	// Scheduler state.
	m.running = f.gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
	m.waiting = f.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
	byReason := f.r.register(promGauge, "vllm:num_requests_waiting_by_reason",
		"Number of waiting requests by reason. "+
			"Reason labels: 'capacity' = waiting for scheduling capacity; "+
			"'deferred' = deferred by transient constraints "+
			"(LoRA budget, KV transfer, blocked status). "+
			"Sum of all reasons equals vllm:num_requests_waiting.",
		f.withLabel("reason"), nil)
	m.waitingCapacity = f.child(byReason, "capacity")
	m.waitingDeferred = f.child(byReason, "deferred")

	sleep := f.r.register(promGauge, "vllm:engine_sleep_state",
		"Engine sleep state; awake = 0 means engine is sleeping; "+
			"awake = 1 means engine is awake; "+
			"weights_offloaded = 1 means sleep level 1; "+
			"discard_all = 1 means sleep level 2.",
		f.withLabel("sleep_state"), nil)
	f.child(sleep, "awake").set(1)
	f.child(sleep, "weights_offloaded")
	f.child(sleep, "discard_all")

	m.kvUsage = f.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")

	m.prefixQueries = f.counter("vllm:prefix_cache_queries",
		"Prefix cache queries, in terms of number of queried tokens.")
	m.prefixHits = f.counter("vllm:prefix_cache_hits",
		"Prefix cache hits, in terms of number of cached tokens.")
	f.counter("vllm:external_prefix_cache_queries",
		"External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.")
	f.counter("vllm:external_prefix_cache_hits",
		"External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.")
	f.counter("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items.")
	f.counter("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.")

	m.preemptions = f.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
	m.promptTokens = f.counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
	bySource := f.r.register(promCounter, "vllm:prompt_tokens_by_source",
		"Number of prompt tokens by source.", f.withLabel("source"), nil)
	m.promptLocalCompute = f.child(bySource, "local_compute")
	m.promptLocalCacheHit = f.child(bySource, "local_cache_hit")
	f.child(bySource, "external_kv_transfer")
	m.promptCached = f.counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).")
	m.generationTokens = f.counter("vllm:generation_tokens", "Number of generation tokens processed.")

	success := f.r.register(promCounter, "vllm:request_success",
		"Count of successfully processed requests.", f.withLabel("finished_reason"), nil)
	for i, reason := range finishReasons {
		m.requestSuccess[i] = f.child(success, reason)
	}
}

// registerHistograms registers the histograms of request sizes and
// timings.
func (m *Metrics) registerHistograms(f *families, buckets125 []float64) {
	// Histograms of counts.
	m.reqPromptTokens = f.histogram("vllm:request_prompt_tokens",
		"Number of prefill tokens processed.", buckets125)
	m.reqGenerationTokens = f.histogram("vllm:request_generation_tokens",
		"Number of generation tokens processed.", buckets125)
	m.iterationTokens = f.histogram("vllm:iteration_tokens_total",
		"Histogram of number of tokens per engine_step.", iterationTokensBuckets)
	m.reqMaxNumGenerationTokens = f.histogram("vllm:request_max_num_generation_tokens",
		"Histogram of maximum number of requested generation tokens.", buckets125)
	m.reqParamsN = f.histogram("vllm:request_params_n",
		"Histogram of the n request parameter.", paramsNBuckets)
	m.reqParamsMaxTokens = f.histogram("vllm:request_params_max_tokens",
		"Histogram of the max_tokens request parameter.", buckets125)

	// Histograms of timing intervals.
	m.ttft = f.histogram("vllm:time_to_first_token_seconds",
		"Histogram of time to first token in seconds.", ttftBuckets)
	m.itl = f.histogram("vllm:inter_token_latency_seconds",
		"Histogram of inter-token latency in seconds.", itlBuckets)
	m.tpot = f.histogram("vllm:request_time_per_output_token_seconds",
		"Histogram of time_per_output_token_seconds per request.", itlBuckets)
	m.e2e = f.histogram("vllm:e2e_request_latency_seconds",
		"Histogram of e2e request latency in seconds.", requestLatencyBuckets)
	m.queue = f.histogram("vllm:request_queue_time_seconds",
		"Histogram of time spent in WAITING phase for request.", requestLatencyBuckets)
	m.inference = f.histogram("vllm:request_inference_time_seconds",
		"Histogram of time spent in RUNNING phase for request.", requestLatencyBuckets)
	m.prefill = f.histogram("vllm:request_prefill_time_seconds",
		"Histogram of time spent in PREFILL phase for request.", requestLatencyBuckets)
	m.decode = f.histogram("vllm:request_decode_time_seconds",
		"Histogram of time spent in DECODE phase for request.", requestLatencyBuckets)
	m.prefillKVComputed = f.histogram("vllm:request_prefill_kv_computed_tokens",
		"Histogram of new KV tokens computed during prefill (excluding cached tokens).", buckets125)
}

// registerCacheConfigInfo registers vLLM's cache_config_info gauge.
func registerCacheConfigInfo(r *promRegistry, cfg MetricsConfig) {
	// log_engine_initialized: CacheConfig.metrics_info() plus engine, value 1.
	names := make([]string, 0, len(cfg.CacheConfig)+1)
	values := make([]string, 0, len(cfg.CacheConfig)+1)
	for _, kv := range cfg.CacheConfig {
		if kv[0] == "engine" {
			continue
		}
		names = append(names, kv[0])
		values = append(values, kv[1])
	}
	names = append(names, "engine")
	values = append(values, cfg.Engine)
	info := r.register(promGauge, "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", names, nil)
	r.child(info, values...).set(1)
}

// Record applies one engine step, the way PrometheusStatLogger.record does
// for one SchedulerStats + IterationStats pair.
func (m *Metrics) Record(s *StepStats) {
	if s == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()

	m.running.set(float64(s.Running))
	m.waiting.set(float64(s.Waiting))
	m.waitingCapacity.set(float64(s.Waiting))
	m.waitingDeferred.set(0)
	m.kvUsage.set(s.KVUsage)
	m.prefixQueries.inc(float64(s.PrefixQueries))
	m.prefixHits.inc(float64(s.PrefixHits))

	m.preemptions.inc(float64(s.Preemptions))
	m.promptTokens.inc(float64(s.PromptTokens))
	m.promptLocalCompute.inc(float64(s.PromptComputed))
	m.promptLocalCacheHit.inc(float64(s.PromptCached))
	m.promptCached.inc(float64(s.PromptCached))
	m.generationTokens.inc(float64(s.GenerationTokens))
	if s.IterationTokens > 0 {
		m.iterationTokens.observe(float64(s.IterationTokens))
	}

	for i := range s.Finished {
		f := &s.Finished[i]
		n := f.N
		if n <= 0 {
			n = 1
		}
		// ParentRequest.observe_finished_request: the largest generation
		// count among the n samples, and n itself.
		m.reqMaxNumGenerationTokens.observe(float64(f.GenerationTokens))
		m.reqParamsN.observe(float64(n))
	}
	for _, v := range s.TTFT {
		m.ttft.observe(v)
	}
	for _, v := range s.ITL {
		m.itl.observe(v)
	}
	for i := range s.Finished {
		f := &s.Finished[i]
		for j, reason := range finishReasons {
			if reason == f.Reason {
				m.requestSuccess[j].inc(1)
				break
			}
		}
		m.e2e.observe(f.E2E)
		m.queue.observe(f.Queue)
		m.prefill.observe(f.Prefill)
		m.inference.observe(f.Inference)
		m.decode.observe(f.Decode)
		m.prefillKVComputed.observe(float64(f.PrefillKVComputed))
		m.reqPromptTokens.observe(float64(f.PromptTokens))
		m.reqGenerationTokens.observe(float64(f.GenerationTokens))
		m.tpot.observe(f.TPOT)
		if f.MaxTokensParam != 0 {
			m.reqParamsMaxTokens.observe(float64(f.MaxTokensParam))
		}
	}
}

// WriteTo writes the whole /metrics page.
func (m *Metrics) WriteTo(w io.Writer) (int64, error) {
	bp := metricsBufPool.Get().(*[]byte)
	m.mu.Lock()
	b := m.reg.appendTo((*bp)[:0])
	m.mu.Unlock()
	n, err := w.Write(b)
	*bp = b
	metricsBufPool.Put(bp)
	return int64(n), err
}
