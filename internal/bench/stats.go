package bench

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inferrail/inferrail/internal/measure"
)

// distOf summarises ds without changing it, as the stress scenarios'
// percentiles do (measure.Summarize, nearest rank). An empty ds gives the
// zero value.
func distOf(ds []time.Duration) measure.Percentiles {
	return measure.Summarize(slices.Clone(ds))
}

// SLO is the service level a request must meet to count toward goodput.
type SLO struct {
	// TTFT is the longest time to first token, from the scheduled time.
	TTFT time.Duration `json:"ttft"`
	// TPOT is the longest mean time per output token after the first.
	// Requests with one output token or none are judged on TTFT alone.
	TPOT time.Duration `json:"tpot"`
}

// DefaultSLO is the benchmark plan's: TTFT at most 2 s, TPOT at most 100 ms.
func DefaultSLO() SLO { return SLO{TTFT: 2 * time.Second, TPOT: 100 * time.Millisecond} }

// tpot is the mean time per output token after the first, from usage
// tokens, and whether it is defined (at least two output tokens).
func (o *Outcome) tpot() (time.Duration, bool) {
	if o.CompletionTokens < 2 || o.TTFT == 0 || o.E2E < o.TTFT {
		return 0, false
	}
	return (o.E2E - o.TTFT) / time.Duration(o.CompletionTokens-1), true
}

// good reports whether o succeeded within slo.
func (slo SLO) good(o *Outcome) bool {
	if !o.OK() || o.TTFT > slo.TTFT {
		return false
	}
	t, ok := o.tpot()
	return !ok || t <= slo.TPOT
}

// Warmup says how much of the start of a run is left out of the figures:
// the requests scheduled before Duration, or the first Fraction of the
// requests. At most one is set; the zero value keeps everything.
type Warmup struct {
	Duration time.Duration
	Fraction float64
}

// ParseWarmup reads a warmup as a duration ("10s") or as a fraction of the
// requests ("0.1"); "" and "0" mean none.
func ParseWarmup(s string) (Warmup, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return Warmup{}, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if !(f >= 0 && f < 1) {
			return Warmup{}, fmt.Errorf("warmup %q: a fraction must be in [0, 1)", s)
		}
		return Warmup{Fraction: f}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return Warmup{}, fmt.Errorf("warmup %q: want a duration (10s) or a fraction of the requests (0.1)", s)
	}
	if d < 0 {
		return Warmup{}, fmt.Errorf("warmup %q: must not be negative", s)
	}
	return Warmup{Duration: d}, nil
}

// count is how many leading requests of a schedule the warmup discards.
// sched must be in order.
func (w Warmup) count(sched []time.Duration) int {
	switch {
	case w.Fraction > 0:
		return min(len(sched), int(math.Floor(w.Fraction*float64(len(sched)))))
	case w.Duration > 0:
		n, _ := slices.BinarySearch(sched, w.Duration)
		return n
	}
	return 0
}

// Measurements are the figures of one run over its measured requests,
// those after the warmup.
type Measurements struct {
	// Requests were scheduled in all; Warmup of them were left out of every
	// figure; Measured = Requests − Warmup; Succeeded of those succeeded.
	Requests  int `json:"requests"`
	Warmup    int `json:"warmup"`
	Measured  int `json:"measured"`
	Succeeded int `json:"succeeded"`
	// Errors counts the measured requests that failed, by kind.
	Errors       map[string]int `json:"errors,omitempty"`
	ErrorSamples []string       `json:"error_samples,omitempty"`

	// WindowSeconds runs from the first measured request's scheduled time
	// to the end of the last measured response, a failed one's included
	// (one that timed out ends at its timeout): the drain after the last
	// send is in it, so the rates below stay under the offered rate even
	// when every request succeeds within the SLO.
	WindowSeconds float64 `json:"window_seconds"`

	// Latencies of the measured requests that succeeded. TTFT and E2E count
	// from the scheduled time; TPOT is (E2E − TTFT)/(completion tokens − 1)
	// from usage; ITL pools the gaps between content chunks.
	TTFT measure.Percentiles `json:"ttft"`
	TPOT measure.Percentiles `json:"tpot"`
	ITL  measure.Percentiles `json:"itl"`
	E2E  measure.Percentiles `json:"e2e"`
	// TTFTP99WithFailures is the nearest-rank p99 TTFT over every measured
	// request, a failed one counted as slower than any success, in seconds
	// (TTFT.P99 is over the successes alone). It is set only when some
	// failed and the p99 still falls on a success, at most 1% having
	// failed: with none failed it is TTFT.P99, and with more the p99 is a
	// failure, which reports show as unreachable (runP99). Results written
	// before it lack it.
	TTFTP99WithFailures *float64 `json:"ttft_p99_with_failures_seconds,omitempty"`
	// SendLag is actual − scheduled send time, over every measured request
	// that was sent.
	SendLag measure.Percentiles `json:"send_lag"`

	// ThroughputRPS is measured successes per second of the window;
	// OutputTokensPerSec their completion tokens per second.
	ThroughputRPS      float64 `json:"throughput_rps"`
	OutputTokensPerSec float64 `json:"output_tokens_per_sec"`
	// GoodputRPS counts only the successes that met the SLO;
	// GoodFraction is their share of the measured requests.
	SLO          SLO     `json:"slo"`
	GoodputRPS   float64 `json:"goodput_rps"`
	GoodFraction float64 `json:"good_fraction"`

	// PromptTokens and CachedTokens add up usage over the measured
	// successes; HitRate is their ratio.
	PromptTokens int64   `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	HitRate      float64 `json:"hit_rate"`
	// Engine is the hit rate from the engines' own counters over the
	// measured window; nil when they were not read.
	Engine *EngineHits `json:"engine,omitempty"`
	// OracleHitRate is the workload's ceiling: the share of prompt tokens
	// whose prefix an earlier request of the whole schedule already
	// carried. Nil when unknown. The *OfOracle fields divide a hit rate by it.
	OracleHitRate            *float64 `json:"oracle_hit_rate,omitempty"`
	HitRateOfOracle          *float64 `json:"hit_rate_of_oracle,omitempty"`
	EngineHitRateOfOracle    *float64 `json:"engine_hit_rate_of_oracle,omitempty"`
	PredictedHitRateOfOracle *float64 `json:"predicted_hit_rate_of_oracle,omitempty"`

	// Replicas counts measured successes by the replica that served them
	// (x-inferrail-replica); BusiestShare is the largest count's share.
	// Without that header (a peer router in front), ReplicasFrom is
	// "engines" and Replicas counts the requests each simulator finished
	// over the measured window (vllm:request_success_total), which may
	// take in a few warmup requests that finished within it.
	Replicas     map[string]int `json:"replicas,omitempty"`
	ReplicasFrom string         `json:"replicas_from,omitempty"`
	BusiestShare float64        `json:"busiest_share"`
	// ReplicaTTFTP99 is the p99 TTFT of the measured successes each
	// replica served, by x-inferrail-replica: where the slow requests were.
	ReplicaTTFTP99 map[string]float64 `json:"replica_ttft_p99,omitempty"`
	// Turns says how often a conversation's next turn went to the replica
	// its previous turn went to; nil without sessions or replica names.
	Turns *Turns `json:"turns,omitempty"`
	// Herding says how much busier than the least busy replica the ones
	// chosen were when the requests were sent; nil without replica names.
	Herding *Herding `json:"herding,omitempty"`
	// Gateways breaks the figures down by gateway when the run had more
	// than one (RunSpec.Gateways), in the order of their URLs.
	Gateways []GatewayFigures `json:"gateways,omitempty"`
	// Policies counts measured successes by x-inferrail-policy, when the
	// gateway names it.
	Policies map[string]int `json:"policies,omitempty"`
	// Prediction compares the gateway's predictions with usage; nil when the
	// gateway predicted nothing.
	Prediction *Prediction `json:"prediction,omitempty"`
	// Unpredicted counts the requests of the whole run, warmup included,
	// that the gateways routed without tokenizing them because a tokenizer
	// worker was not free or not done within tokenizer.max_wait (results
	// busy and slow of inferrail_tokenized_requests_total): a machine too
	// busy for the run shows here.
	Unpredicted int `json:"unpredicted,omitempty"`
	// Steered counts the decisions of the whole run, warmup included, that
	// something other than the plain estimate decided, by reason
	// (inferrail_routing_steered_total: session, history, hot_prefix,
	// copy, no_prefix), and Guards those where a load guard set replicas
	// aside (inferrail_routing_guards_total), over every gateway: how often
	// a setting under test acted at all. Nil when none did.
	Steered map[string]int `json:"steered,omitempty"`
	Guards  map[string]int `json:"guards,omitempty"`
	// Estimate is how far the gateway's estimates of the time to first
	// token were from what the client measured; nil without estimates.
	Estimate *EstimateError `json:"estimate,omitempty"`
	// Kinds breaks the measured requests down by workload kind when there
	// is more than one (mix).
	Kinds map[string]KindFigures `json:"kinds,omitempty"`
	// Arms breaks the measured requests down by the policy that routed
	// them (x-inferrail-policy) when there is more than one: the arms of an
	// A/B split.
	Arms map[string]KindFigures `json:"arms,omitempty"`
}

// Turns counts measured follow-up turns, successes whose conversation had
// an earlier success (warmup included), and how many of them Kept their
// previous turn's replica. Moved turns leave a copy of the history behind
// on the old replica, taking cache that other conversations need.
type Turns struct {
	FollowUps int     `json:"follow_ups"`
	Kept      int     `json:"kept"`
	KeptShare float64 `json:"kept_share"`
}

// turnsOf is the Turns of outs, whose first warm ones are warmup; nil when
// no follow-up turn has a replica name.
func turnsOf(outs []Outcome, warm int) *Turns {
	last := map[string]string{}
	var t Turns
	for i := range outs {
		o := &outs[i]
		if o.Session == "" || o.Replica == "" || !o.OK() {
			continue
		}
		if prev, ok := last[o.Session]; ok && i >= warm {
			t.FollowUps++
			if prev == o.Replica {
				t.Kept++
			}
		}
		last[o.Session] = o.Replica
	}
	if t.FollowUps == 0 {
		return nil
	}
	t.KeptShare = float64(t.Kept) / float64(t.FollowUps)
	return &t
}

// EngineHits is the engines' prefix cache counters over the window.
type EngineHits struct {
	Queries float64 `json:"queries"`
	Hits    float64 `json:"hits"`
	HitRate float64 `json:"hit_rate"`
	// Preemptions adds up the engines' vllm:num_preemptions_total over the
	// window: running requests sent back to wait because the KV cache had
	// no free block for them. Where prompts crowd every replica's cache,
	// this is how a full cache shows, though the hit rate does not move.
	Preemptions float64 `json:"preemptions"`
}

// Prediction is how the gateway's predicted prompt and cached tokens
// (response headers) compare with the engine's usage, over the measured
// successes that carried both.
type Prediction struct {
	Requests int `json:"requests"`
	// Exact, Over and Under are shares of Requests whose predicted cached
	// tokens equalled, exceeded or fell short of usage's.
	Exact float64 `json:"exact"`
	Over  float64 `json:"over"`
	Under float64 `json:"under"`
	// MeanError is the mean of predicted − actual cached tokens;
	// MeanAbsError the mean of its absolute value.
	MeanError    float64 `json:"mean_error_tokens"`
	MeanAbsError float64 `json:"mean_abs_error_tokens"`
	// PromptExact is the share whose predicted prompt tokens equalled
	// usage's.
	PromptExact float64 `json:"prompt_exact"`
	// HitRate is predicted cached over predicted prompt tokens.
	HitRate float64 `json:"hit_rate"`
}

// KindFigures are the figures of one workload kind within a run.
type KindFigures struct {
	Measured  int                 `json:"measured"`
	Succeeded int                 `json:"succeeded"`
	TTFT      measure.Percentiles `json:"ttft"`
	E2E       measure.Percentiles `json:"e2e"`
	HitRate   float64             `json:"hit_rate"`
}

// measureOutcomes computes the figures of outcomes after the first warm ones. It
// fills neither Engine nor the oracle fields.
func measureOutcomes(outs []Outcome, warm int, slo SLO) Measurements {
	m := Measurements{Requests: len(outs), Warmup: warm, SLO: slo, Turns: turnsOf(outs, warm)}
	outs = outs[min(warm, len(outs)):]
	m.Measured = len(outs)
	if len(outs) == 0 {
		return m
	}
	var ttft, tpot, itl, e2e, lag []time.Duration
	var completion int64
	good := 0
	var pred predictionTally
	var est estimateTally
	kinds := map[string][]Outcome{}
	first, last := outs[0].Sched, time.Duration(0)
	for i := range outs {
		o := &outs[i]
		kinds[o.Kind] = append(kinds[o.Kind], *o)
		first = min(first, o.Sched)
		if o.Sent > 0 {
			lag = append(lag, o.Sent-o.Sched)
		}
		if end := o.Sched + o.E2E; end > last {
			last = end
		}
		if !o.OK() {
			if m.Errors == nil {
				m.Errors = map[string]int{}
			}
			m.Errors[o.ErrKind]++
			if len(m.ErrorSamples) < measure.MaxErrorSamples {
				m.ErrorSamples = append(m.ErrorSamples, o.Err)
			}
			continue
		}
		m.Succeeded++
		ttft = append(ttft, o.TTFT)
		e2e = append(e2e, o.E2E)
		itl = append(itl, o.ITL...)
		if t, ok := o.tpot(); ok {
			tpot = append(tpot, t)
		}
		if slo.good(o) {
			good++
		}
		completion += int64(o.CompletionTokens)
		m.PromptTokens += int64(o.PromptTokens)
		m.CachedTokens += int64(o.CachedTokens)
		if o.Replica != "" {
			if m.Replicas == nil {
				m.Replicas = map[string]int{}
			}
			m.Replicas[o.Replica]++
		}
		if o.Policy != "" {
			if m.Policies == nil {
				m.Policies = map[string]int{}
			}
			m.Policies[o.Policy]++
		}
		pred.add(o)
		est.add(o)
	}
	m.TTFT, m.TPOT, m.ITL, m.E2E, m.SendLag = distOf(ttft), distOf(tpot), distOf(itl), distOf(e2e), distOf(lag)
	m.TTFTP99WithFailures = p99WithFailures(ttft, m.Measured)
	m.WindowSeconds = (last - first).Seconds()
	if m.WindowSeconds > 0 {
		m.ThroughputRPS = float64(m.Succeeded) / m.WindowSeconds
		m.OutputTokensPerSec = float64(completion) / m.WindowSeconds
		m.GoodputRPS = float64(good) / m.WindowSeconds
	}
	m.GoodFraction = float64(good) / float64(m.Measured)
	m.HitRate = ratio(float64(m.CachedTokens), float64(m.PromptTokens))
	if m.Succeeded > 0 && len(m.Replicas) > 0 {
		m.BusiestShare = float64(slices.Max(slices.Collect(maps.Values(m.Replicas)))) / float64(m.Succeeded)
	}
	m.Prediction = pred.result()
	m.Estimate = est.result()
	m.ReplicaTTFTP99 = replicaTTFTP99(outs)
	if len(kinds) > 1 {
		m.Kinds = map[string]KindFigures{}
		for k, os := range kinds {
			m.Kinds[k] = kindFigures(os)
		}
	}
	if len(m.Policies) > 1 {
		arms := map[string][]Outcome{}
		for _, o := range outs {
			if o.Policy != "" {
				arms[o.Policy] = append(arms[o.Policy], o)
			}
		}
		m.Arms = map[string]KindFigures{}
		for p, os := range arms {
			m.Arms[p] = kindFigures(os)
		}
	}
	return m
}

// p99WithFailures is Measurements.TTFTP99WithFailures from the TTFTs of
// the successes among measured requests, the rest failed.
func p99WithFailures(ttft []time.Duration, measured int) *float64 {
	r := measure.Rank(measured, 0.99)
	if len(ttft) == measured || r >= len(ttft) {
		return nil
	}
	// The failures sort after every success, so the p99 is the success at
	// the rank among all.
	v := slices.Sorted(slices.Values(ttft))[r].Seconds()
	return &v
}

// setEngineReplicas takes per-replica counts from the engines' own counters
// (see Replicas); it does nothing when they counted nothing.
func (m *Measurements) setEngineReplicas(served map[string]int) {
	total := 0
	for _, n := range served {
		total += n
	}
	if total <= 0 {
		return
	}
	m.Replicas, m.ReplicasFrom = served, "engines"
	m.BusiestShare = float64(slices.Max(slices.Collect(maps.Values(served)))) / float64(total)
}

func kindFigures(outs []Outcome) KindFigures {
	f := KindFigures{Measured: len(outs)}
	var ttft, e2e []time.Duration
	var prompt, cached int64
	for i := range outs {
		o := &outs[i]
		if !o.OK() {
			continue
		}
		f.Succeeded++
		ttft, e2e = append(ttft, o.TTFT), append(e2e, o.E2E)
		prompt += int64(o.PromptTokens)
		cached += int64(o.CachedTokens)
	}
	f.TTFT, f.E2E, f.HitRate = distOf(ttft), distOf(e2e), ratio(float64(cached), float64(prompt))
	return f
}

// predictionTally adds up predictions against usage.
type predictionTally struct {
	n, exact, over, under, promptExact int
	errSum, absSum                     float64
	predPrompt, predCached             int64
}

func (t *predictionTally) add(o *Outcome) {
	if !o.Predicted || !o.HasUsage {
		return
	}
	t.n++
	d := o.PredCachedToks - o.CachedTokens
	switch {
	case d == 0:
		t.exact++
	case d > 0:
		t.over++
	default:
		t.under++
	}
	if o.PredPromptTokens == o.PromptTokens {
		t.promptExact++
	}
	t.errSum += float64(d)
	t.absSum += math.Abs(float64(d))
	t.predPrompt += int64(o.PredPromptTokens)
	t.predCached += int64(o.PredCachedToks)
}

func (t *predictionTally) result() *Prediction {
	if t.n == 0 {
		return nil
	}
	n := float64(t.n)
	return &Prediction{
		Requests:     t.n,
		Exact:        float64(t.exact) / n,
		Over:         float64(t.over) / n,
		Under:        float64(t.under) / n,
		MeanError:    t.errSum / n,
		MeanAbsError: t.absSum / n,
		PromptExact:  float64(t.promptExact) / n,
		HitRate:      ratio(float64(t.predCached), float64(t.predPrompt)),
	}
}

// setOracle records the oracle hit rate and every hit rate as a share of
// it.
func (m *Measurements) setOracle(oracle float64) {
	m.OracleHitRate = &oracle
	of := func(v float64) *float64 {
		if oracle <= 0 {
			return nil
		}
		r := v / oracle
		return &r
	}
	m.HitRateOfOracle = of(m.HitRate)
	if m.Engine != nil {
		m.EngineHitRateOfOracle = of(m.Engine.HitRate)
	}
	if m.Prediction != nil {
		m.PredictedHitRateOfOracle = of(m.Prediction.HitRate)
	}
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}
