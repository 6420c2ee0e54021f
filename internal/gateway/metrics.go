package gateway

import (
	"slices"
	"time"

	"github.com/inferrail/inferrail/internal/cli"
	"github.com/inferrail/inferrail/internal/clock"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/index"
	"github.com/inferrail/inferrail/internal/load"
	"github.com/inferrail/inferrail/internal/policy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// Outcomes of a request in inferrail_requests_total: the class of the status
// the client got, or what broke the response.
const (
	outcomeAborted   = "aborted"   // the engine broke a response that had started
	outcomeCancelled = "cancelled" // the client left
)

// Reasons of errors the gateway answers itself.
const (
	reasonBadRequest   = "bad_request"
	reasonUnknownModel = "unknown_model"
	reasonBodyTooLarge = "body_too_large"
	reasonBodyTimeout  = "body_timeout"
	reasonNoReplica    = "no_healthy_replica"
	reasonFleetFull    = "fleet_full"
	reasonUpstream     = "upstream_failed"
	reasonTimeout      = "timeout"
	reasonNotFound     = "not_found"
	reasonMethod       = "method_not_allowed"
	reasonShutdown     = "shutting_down"
)

// metrics are the gateway's own Prometheus families. Replica gauges are read
// from the fleet at scrape time; series of replicas that leave are deleted.
type metrics struct {
	requests       *prometheus.CounterVec
	ttft           *prometheus.HistogramVec
	duration       *prometheus.HistogramVec
	decisions      *prometheus.CounterVec
	decisionTime   *prometheus.HistogramVec
	retries        *prometheus.CounterVec
	disconnects    *prometheus.CounterVec
	errors         *prometheus.CounterVec
	ejections      *prometheus.CounterVec
	scrapes        *prometheus.CounterVec
	tokenized      *prometheus.CounterVec
	tokenizeTime   *prometheus.HistogramVec
	promptTokens   *prometheus.CounterVec
	predicted      *prometheus.CounterVec
	indexResets    *prometheus.CounterVec
	estimatedTTFT  *prometheus.HistogramVec
	guards         *prometheus.CounterVec
	steered        *prometheus.CounterVec
	reloads        *prometheus.CounterVec
	replicaVectors []interface{ DeletePartialMatch(prometheus.Labels) int }
}

// counter, counterVec, gaugeVec and histogramVec declare a metric family
// in one line: name, help and labels.
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

func histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}

func newMetrics(reg prometheus.Registerer, f *fleet.Fleet, sc *load.Scraper, ix index.Index, toks map[string]*modelTokenizer) *metrics {
	latency := prometheus.ExponentialBuckets(0.001, 2, 18) // 1 ms .. ~131 s
	m := &metrics{
		requests:      counterVec("inferrail_requests_total", "Inference requests by outcome: the status class the client got, aborted when the engine broke a started response, cancelled when the client left.", "model", "replica", "status"),
		ttft:          histogramVec("inferrail_ttft_seconds", "Time from a request's arrival to the first byte of its streamed response, for 2xx event streams sent without a length to streaming requests only.", latency, "model", "policy", "replica"),
		duration:      histogramVec("inferrail_request_duration_seconds", "Time from a request's arrival to the end of the response an engine gave it whole; requests cancelled or aborted are not observed.", latency, "model", "policy", "replica"),
		decisions:     counterVec("inferrail_routing_decisions_total", "Replicas chosen by the routing policy, one per attempt.", "model", "policy", "replica"),
		decisionTime:  histogramVec("inferrail_routing_decision_seconds", "Time to choose a replica and take a lease on it.", prometheus.ExponentialBuckets(1e-7, 4, 12), "policy"),
		retries:       counterVec("inferrail_upstream_retries_total", "Attempts after a request's first, made before its first response byte (another replica first, the same one when no other has room).", "model"),
		disconnects:   counterVec("inferrail_client_disconnects_total", "Responses abandoned because the client left.", "model"),
		errors:        counterVec("inferrail_request_errors_total", "Errors the gateway answered itself, by reason.", "model", "reason"),
		ejections:     counterVec("inferrail_ejections_total", "Passive ejections of replicas whose requests kept failing.", "replica"),
		tokenized:     counterVec("inferrail_tokenized_requests_total", "Prompts tokenized at the edge, or why a request got no prediction: invalid, unsupported, template, busy, slow, unavailable, disagrees.", "model", "result"),
		tokenizeTime:  histogramVec("inferrail_tokenize_seconds", "Time to tokenize and hash a prompt, waiting for a worker included.", prometheus.ExponentialBuckets(1e-6, 4, 12), "model"),
		promptTokens:  counterVec("inferrail_prompt_tokens_total", "Prompt tokens of the requests tokenized at the edge, per decision (a retry counts again), as inferrail_predicted_cached_tokens_total is.", "model"),
		predicted:     counterVec("inferrail_predicted_cached_tokens_total", "Prompt tokens the KV index predicted cached on the chosen replica, per decision.", "model"),
		indexResets:   counterVec("inferrail_index_resets_total", "Engines found restarted with an empty cache, whose index entries were dropped.", "replica"),
		estimatedTTFT: histogramVec("inferrail_estimated_ttft_seconds", "The cost model's estimated time to first token on the chosen replica, at every decision; compare with inferrail_ttft_seconds.", latency, "model", "policy"),
		guards:        counterVec("inferrail_routing_guards_total", "Decisions where a load guard set replicas aside (bounded_load, kv_pressure), or kv_waived when every replica was under KV pressure.", "model", "guard"),
		steered:       counterVec("inferrail_routing_steered_total", "Decisions decided by session affinity (session) or history affinity (history), won by a hot prefix owner through credit for a prefix it did not hold yet (hot_prefix) or by a replica without the root prefix through the credit for the copy it makes (copy), or routed by the fallback for prompts without a full block (no_prefix).", "model", "reason"),
		reloads:       counterVec("inferrail_config_reloads_total", "Attempts to change the config (file, SIGHUP or admin API) by result: applied, unchanged or rejected.", "result"),
		scrapes:       counterVec("inferrail_load_scrapes_total", "Scrapes of engines' metrics pages by result: ok, error (no answer), unreadable, too_large.", "replica", "result"),
	}
	m.replicaVectors = []interface{ DeletePartialMatch(prometheus.Labels) int }{
		m.requests, m.ttft, m.duration, m.decisions, m.ejections, m.scrapes, m.indexResets,
	}
	reg.MustRegister(m.requests, m.ttft, m.duration, m.decisions, m.decisionTime,
		m.retries, m.disconnects, m.errors, m.ejections, m.scrapes,
		m.tokenized, m.tokenizeTime, m.promptTokens, m.predicted, m.indexResets,
		m.estimatedTTFT, m.guards, m.steered, m.reloads,
		&replicaCollector{fleet: f, scraper: sc}, &indexCollector{index: ix}, &tokenizerCollector{tokenizers: toks})
	return m
}

// decisionSeries are the series decisions for one model update, looked up
// once: a labelled lookup hashes its labels every time, and every request
// is decided.
type decisionSeries struct {
	model, policy string
	time          prometheus.Observer
	estimate      prometheus.Observer
	guards        map[string]prometheus.Counter // by guard, for the policies' guards
	steered       map[string]prometheus.Counter // by reason, for the policies' reasons
}

func (m *metrics) decisionSeries(model, policyName string) decisionSeries {
	s := decisionSeries{model: model, policy: policyName,
		time: m.decisionTime.WithLabelValues(policyName), estimate: m.estimatedTTFT.WithLabelValues(model, policyName),
		guards: map[string]prometheus.Counter{}, steered: map[string]prometheus.Counter{}}
	for _, gd := range []string{policy.GuardBoundedLoad, policy.GuardKVPressure, policy.GuardKVWaived} {
		s.guards[gd] = m.guards.WithLabelValues(model, gd)
	}
	for _, why := range []string{policy.SteerSession, policy.SteerHistory, policy.SteerHotPrefix, policy.SteerCopy, policy.SteerNoPrefix} {
		s.steered[why] = m.steered.WithLabelValues(model, why)
	}
	return s
}

// decisionsFor is the count of a model's decisions that chose replica.
func (m *metrics) decisionsFor(s *decisionSeries, replica string) prometheus.Counter {
	return m.decisions.WithLabelValues(s.model, s.policy, replica)
}

// decided records a policy's decision that took a lease on a replica,
// counted in chosen.
func (m *metrics) decided(s *decisionSeries, chosen prometheus.Counter, d policy.Decision, took time.Duration) {
	s.time.Observe(took.Seconds())
	chosen.Inc()
	s.estimate.Observe(d.EstimatedTTFT)
	for _, gd := range d.Guards {
		if c, ok := s.guards[gd]; ok {
			c.Inc()
		} else {
			m.guards.WithLabelValues(s.model, gd).Inc()
		}
	}
	if d.Steered != "" {
		if c, ok := s.steered[d.Steered]; ok {
			c.Inc()
		} else {
			m.steered.WithLabelValues(s.model, d.Steered).Inc()
		}
	}
}

// member reports whether the series of replica r may be written: r is in
// the fleet, or another replica of its ID replaced it. The series of a
// replica that left were deleted (forget); writing one again, as a scrape,
// probe or request that ends after the departure would, brings it back for
// good, and with it a series for every replica that ever passed through a
// DNS group.
func (g *Gateway) member(r *fleet.Replica) bool {
	return !r.Removed() || g.fleet.Snapshot().Get(r.ID) != nil
}

// memberID is member for a replica known by its ID.
func (g *Gateway) memberID(id string) bool { return g.fleet.Snapshot().Get(id) != nil }

// forgetAgainAfter is how long after a departure its series are deleted a
// second time: a write that checked member just before the replica left
// may land after the first deletion.
const forgetAgainAfter = time.Second

// forgetAgain deletes the series of the replica id once more after
// forgetAgainAfter, its prediction checks too, unless a replica of its ID
// has joined since.
func (g *Gateway) forgetAgain(id string) {
	time.AfterFunc(forgetAgainAfter, func() {
		if !g.memberID(id) {
			g.metrics.forget(id)
			g.drift.forget(id)
		}
	})
}

// forget deletes every series of a replica that left the fleet.
func (m *metrics) forget(id string) {
	for _, v := range m.replicaVectors {
		v.DeletePartialMatch(prometheus.Labels{"replica": id})
	}
}

// replicaCollector reports the state of every replica in the fleet at
// scrape time, so series of departed replicas vanish with them.
type replicaCollector struct {
	fleet   *fleet.Fleet
	scraper *load.Scraper
}

var (
	descHealthy  = prometheus.NewDesc("inferrail_replica_healthy", "1 when the replica passes its health probes.", []string{"replica"}, nil)
	descEjected  = prometheus.NewDesc("inferrail_replica_ejected", "1 while passive ejection keeps the replica out of rotation.", []string{"replica"}, nil)
	descInFlight = prometheus.NewDesc("inferrail_replica_in_flight", "Requests in flight to the replica.", []string{"replica"}, nil)
	descPending  = prometheus.NewDesc("inferrail_replica_pending", "Streams to the replica still waiting for a response head (a request that does not stream gets its head with the whole answer and is not counted).", []string{"replica"}, nil)
	descMaxConc  = prometheus.NewDesc("inferrail_replica_max_concurrency", "The replica's cap on requests in flight.", []string{"replica"}, nil)
	descQueued   = prometheus.NewDesc("inferrail_replica_queued_prefill_seconds", "Estimated prefill queued on the replica by the gateway's own decisions, at the pace each was routed with, drained in real time.", []string{"replica"}, nil)
	descPromptIn = prometheus.NewDesc("inferrail_replica_prompt_tokens_in_flight", "Prompt tokens of the requests in flight to the replica.", []string{"replica"}, nil)
	descPromptWt = prometheus.NewDesc("inferrail_replica_prompt_tokens_waiting", "Prompt tokens of the requests to the replica still waiting for their first byte.", []string{"replica"}, nil)
	descPace     = prometheus.NewDesc("inferrail_replica_pace", "How the replica's engine has lately delivered first tokens against the cost model's estimates: measured over estimated time, 1 until known.", []string{"replica"}, nil)

	descEngineRunning = prometheus.NewDesc("inferrail_replica_engine_running", "Requests running in the engine, from its last metrics report.", []string{"replica"}, nil)
	descEngineWaiting = prometheus.NewDesc("inferrail_replica_engine_waiting", "Requests waiting in the engine, from its last metrics report.", []string{"replica"}, nil)
	descEngineKV      = prometheus.NewDesc("inferrail_replica_engine_kv_usage", "Share of the engine's KV cache in use, from its last metrics report.", []string{"replica"}, nil)
	// The engine's own counters, passed on as counters: they start again
	// from 0 when the engine restarts, which rate() reads as a reset.
	descEngineQueries = prometheus.NewDesc("inferrail_replica_engine_prefix_cache_queries_total", "Prompt tokens the engine looked up in its prefix cache, as it last reported (its own counter).", []string{"replica"}, nil)
	descEngineHits    = prometheus.NewDesc("inferrail_replica_engine_prefix_cache_hits_total", "Prompt tokens the engine found in its prefix cache, as it last reported (its own counter).", []string{"replica"}, nil)
	descEnginePreempt = prometheus.NewDesc("inferrail_replica_engine_preemptions_total", "Preemptions the engine counted, as it last reported (its own counter).", []string{"replica"}, nil)
	descEngineAge     = prometheus.NewDesc("inferrail_replica_engine_report_age_seconds", "Age of the engine's last metrics report.", []string{"replica"}, nil)
)

func (c *replicaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHealthy, descEjected, descInFlight, descPending, descMaxConc, descQueued, descPromptIn, descPromptWt, descPace,
		descEngineRunning, descEngineWaiting, descEngineKV, descEngineQueries, descEngineHits, descEnginePreempt, descEngineAge} {
		ch <- d
	}
}

func (c *replicaCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	for _, r := range c.fleet.Snapshot().Replicas {
		ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, b(r.Healthy()), r.ID)
		ch <- prometheus.MustNewConstMetric(descEjected, prometheus.GaugeValue, b(r.Ejected(now)), r.ID)
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(r.InFlight()), r.ID)
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(r.Pending()), r.ID)
		ch <- prometheus.MustNewConstMetric(descMaxConc, prometheus.GaugeValue, float64(r.MaxConcurrency()), r.ID)
		ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, r.QueuedPrefill(now), r.ID)
		inFlight, waiting := r.PromptLoad()
		ch <- prometheus.MustNewConstMetric(descPromptIn, prometheus.GaugeValue, float64(inFlight), r.ID)
		ch <- prometheus.MustNewConstMetric(descPromptWt, prometheus.GaugeValue, float64(waiting), r.ID)
		ch <- prometheus.MustNewConstMetric(descPace, prometheus.GaugeValue, r.Pace().PaceAt(clock.Of(time.Now())), r.ID)
		smp := c.scraper.Last(r.ID)
		if smp == nil {
			continue
		}
		e := smp.Report
		for _, g := range []struct {
			d *prometheus.Desc
			t prometheus.ValueType
			v float64
		}{
			{descEngineRunning, prometheus.GaugeValue, e.Running}, {descEngineWaiting, prometheus.GaugeValue, e.Waiting},
			{descEngineKV, prometheus.GaugeValue, e.KVUsage},
			{descEngineQueries, prometheus.CounterValue, e.PrefixQueries}, {descEngineHits, prometheus.CounterValue, e.PrefixHits},
			{descEnginePreempt, prometheus.CounterValue, e.Preemptions},
			{descEngineAge, prometheus.GaugeValue, now.Sub(smp.At).Seconds()},
		} {
			ch <- prometheus.MustNewConstMetric(g.d, g.t, g.v, r.ID)
		}
	}
}

// tokenizerCollector reports each model's piece cache lookups at scrape
// time, from the tokenizer's own counters.
type tokenizerCollector struct{ tokenizers map[string]*modelTokenizer }

var descCacheLookups = prometheus.NewDesc("inferrail_tokenize_cache_lookups_total",
	"Repeated prompt pieces looked up in the tokenization cache, by result: hit (tokenized once already) or miss.", []string{"model", "result"}, nil)

func (c *tokenizerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descCacheLookups }

func (c *tokenizerCollector) Collect(ch chan<- prometheus.Metric) {
	for model, mt := range c.tokenizers {
		hits, misses := mt.tok.CacheStats()
		ch <- prometheus.MustNewConstMetric(descCacheLookups, prometheus.CounterValue, float64(hits), model, "hit")
		ch <- prometheus.MustNewConstMetric(descCacheLookups, prometheus.CounterValue, float64(misses), model, "miss")
	}
}

// indexCollector reports the KV index's size at scrape time.
type indexCollector struct{ index index.Index }

var (
	descIndexEntries = prometheus.NewDesc("inferrail_index_entries", "Blocks the KV index holds, summed over replicas.", nil, nil)
	descIndexBytes   = prometheus.NewDesc("inferrail_index_bytes", "Approximate memory of the KV index.", nil, nil)
	descIndexBlocks  = prometheus.NewDesc("inferrail_replica_index_blocks", "Blocks the KV index assumes cached on the replica.", []string{"replica"}, nil)
	descIndexCap     = prometheus.NewDesc("inferrail_replica_index_capacity_blocks", "The replica's KV capacity as the index assumes it.", []string{"replica"}, nil)
)

func (c *indexCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descIndexEntries
	ch <- descIndexBytes
	ch <- descIndexBlocks
	ch <- descIndexCap
}

func (c *indexCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.index.Stats()
	ch <- prometheus.MustNewConstMetric(descIndexEntries, prometheus.GaugeValue, float64(st.Entries))
	ch <- prometheus.MustNewConstMetric(descIndexBytes, prometheus.GaugeValue, float64(st.Bytes))
	for _, r := range st.Replicas {
		ch <- prometheus.MustNewConstMetric(descIndexBlocks, prometheus.GaugeValue, float64(r.Held), r.ID)
		ch <- prometheus.MustNewConstMetric(descIndexCap, prometheus.GaugeValue, float64(r.Capacity), r.ID)
	}
}

// refusalReasons are every reason of inferrail_request_errors_total
// (TestRefusalReasonsListed ties the list to the refusals the package
// makes).
var refusalReasons = []string{
	reasonBadRequest, reasonUnknownModel, reasonBodyTooLarge, reasonBodyTimeout, reasonNoReplica,
	reasonFleetFull, reasonUpstream, reasonTimeout, reasonNotFound, reasonMethod, reasonShutdown,
	reasonUnauthorized, reasonForbidden, reasonRateLimited,
	shedQueueFull, shedClassFull, shedKeyFull, shedQueueTimeout, shedSLOUnreachable, shedSLOUnmet,
}

// tokenizedResults are every result of inferrail_tokenized_requests_total.
var tokenizedResults = []string{tokOK, tokInvalid, tokUnsupported, tokTemplate, tokBusy, tokSlow, tokUnavailable, tokDisagree}

// Outcomes of inferrail_requests_total: those of a replica's answers, and
// of requests no replica answered (the gateway refused them, or their
// client left first).
var (
	replicaOutcomes = []string{"2xx", "4xx", "5xx", outcomeAborted, outcomeCancelled}
	gatewayOutcomes = []string{"4xx", "5xx", outcomeCancelled}
)

// startAtZero creates at 0 the counters whose every label value is known
// beforehand: a series Prometheus first sees at n has no earlier sample, so
// rate() and increase() never count the events before its first scrape (a
// whole burst of errors). Replicas that join later get theirs when they
// join (replicaAtZero). The model "" is that of requests refused before
// their model was known.
func (m *metrics) startAtZero(cfg *config.Config, replicas []*fleet.Replica, tokenized func(model string) bool) {
	for _, result := range []string{reloadApplied, reloadUnchanged, reloadRejected} {
		m.reloads.WithLabelValues(result)
	}
	models := []string{""}
	for _, model := range cfg.Models {
		models = append(models, model.Name)
		m.retries.WithLabelValues(model.Name)
		m.disconnects.WithLabelValues(model.Name)
		if tokenized(model.Name) {
			for _, result := range tokenizedResults {
				m.tokenized.WithLabelValues(model.Name, result)
			}
		}
	}
	for _, model := range models {
		for _, reason := range refusalReasons {
			m.errors.WithLabelValues(model, reason)
		}
		for _, outcome := range gatewayOutcomes {
			m.requests.WithLabelValues(model, "", outcome)
		}
	}
	for _, r := range replicas {
		m.replicaAtZero(r)
	}
}

// replicaAtZero creates a replica's counters of rare events at 0.
func (m *metrics) replicaAtZero(r *fleet.Replica) {
	m.ejections.WithLabelValues(r.ID)
	for _, model := range r.Models {
		for _, outcome := range replicaOutcomes {
			m.requests.WithLabelValues(model, r.ID, outcome)
		}
	}
}

// registerProcessMetrics adds what every Go service shows its operator:
// the runtime's (go_*) and the process's (process_*: memory, CPU, open
// files) metrics, and inferrail_build_info naming the build that runs.
func registerProcessMetrics(reg prometheus.Registerer) {
	b := cli.ReadBuild()
	rev := b.Revision
	if b.Modified {
		rev += "-modified"
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "inferrail_build_info",
		Help:        "Always 1; its labels name the gateway's build: module version, commit (-modified when the tree had changes) and Go release.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": rev, "goversion": b.GoVersion},
	})
	build.Set(1)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), build)
}

// openMetricsClash is the Go collector's gauge whose name, in OpenMetrics,
// is also the family of its counter go_memstats_alloc_bytes_total: a page
// with both is refused by strict OpenMetrics parsers (client_golang issue
// 829). go_memstats_heap_alloc_bytes carries the same value.
const openMetricsClash = "go_memstats_alloc_bytes"

// withoutClash gathers reg without openMetricsClash.
func withoutClash(reg prometheus.Gatherer) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := reg.Gather()
		return slices.DeleteFunc(mfs, func(mf *dto.MetricFamily) bool {
			return mf.GetName() == openMetricsClash && mf.GetType() == dto.MetricType_GAUGE
		}), err
	})
}
