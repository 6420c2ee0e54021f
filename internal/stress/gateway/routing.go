package gateway

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inferrail/inferrail/internal/stress"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/procs"
)

// RoutingLoad is gw-routing: gw-overhead's comparison, direct against
// gateway on the same open-loop schedule, for gateways that tokenize
// prompts, keep the KV index and route with the cache-aware policies.
type RoutingLoad struct {
	// Variants are the gateways measured, each against fresh simulators.
	// At least one; their names (RoutingVariant.Name) are unique.
	Variants []RoutingVariant
	// Requests is the number of requests of each measured leg. Must be
	// positive.
	Requests int
	// Warmup requests go to a leg's target at the same rate right before
	// the leg, unmeasured. Must not be negative.
	Warmup int
	// MaxTokens is each chat's max_tokens. Must be positive.
	MaxTokens int
	// SystemPrompts is the number of distinct system prompts the chats of
	// a variant with system prompts share. Must be positive.
	SystemPrompts int
	// QuestionWords is the length in words of each chat's own question.
	// Must be positive.
	QuestionWords int
	// Seed draws the schedules, the system prompts and the questions.
	Seed uint64
	// Timeout bounds each request. Zero means 10 s.
	Timeout time.Duration
}

// RoutingVariant is one gateway setup of gw-routing.
type RoutingVariant struct {
	// SystemWords is the length in words of each shared system prompt; 0
	// sends chats without one. At most maxSystemWords.
	SystemWords int `json:"system_words"`
	// Tokenizer sets models[].tokenizer to builtin:sim, the simulators'
	// own, which turns tokenization and cache predictions on. False leaves
	// it empty.
	Tokenizer bool `json:"tokenizer"`
	// Policy is the model's routing policy, one the gateway config accepts.
	Policy string `json:"policy"`
	// Replicas is the number of simulator children behind the gateway, the
	// first of which is also the direct target. From 1 to maxReplicas.
	Replicas int `json:"replicas"`
	// Rates are the request rates, per second, each run in turn. At least
	// one, each positive.
	Rates []int `json:"rates"`
}

// Limits of a RoutingVariant.
const (
	// maxSystemWords keeps a prompt (about 2.5 builtin:sim tokens a word)
	// well inside the simulators' 32768-token context.
	maxSystemWords = 8000
	maxReplicas    = 16
)

// Name identifies v by its settings: w<system words>-<tok|notok>-<policy>-r<replicas>.
func (v RoutingVariant) Name() string {
	tok := "notok"
	if v.Tokenizer {
		tok = "tok"
	}
	return fmt.Sprintf("w%d-%s-%s-r%d", v.SystemWords, tok, v.Policy, v.Replicas)
}

// ParseRoutingVariant reads a name that RoutingVariant.Name writes. The
// variant has no rates.
func ParseRoutingVariant(name string) (RoutingVariant, error) {
	var v RoutingVariant
	parts := strings.Split(name, "-")
	if len(parts) != 4 {
		return v, fmt.Errorf("routing variant %q: want w<system words>-<tok|notok>-<policy>-r<replicas>", name)
	}
	var errs []error
	words, ok := strings.CutPrefix(parts[0], "w")
	n, err := strconv.Atoi(words)
	if !ok || err != nil {
		errs = append(errs, fmt.Errorf("system words %q: want w and a number", parts[0]))
	}
	v.SystemWords = n
	switch parts[1] {
	case "tok":
		v.Tokenizer = true
	case "notok":
	default:
		errs = append(errs, fmt.Errorf("tokenizer %q: want tok or notok", parts[1]))
	}
	v.Policy = parts[2]
	replicas, ok := strings.CutPrefix(parts[3], "r")
	n, err = strconv.Atoi(replicas)
	if !ok || err != nil {
		errs = append(errs, fmt.Errorf("replicas %q: want r and a number", parts[3]))
	}
	v.Replicas = n
	if err := errors.Join(errs...); err != nil {
		return v, fmt.Errorf("routing variant %q: %w", name, err)
	}
	return v, nil
}

// SelectRoutingVariants returns the variants names name, parsed with
// ParseRoutingVariant, in that order; no names means every one of
// defaults. A named variant takes the rates of the default of the same
// name; rates, when given, replace every variant's. A variant left
// without rates is an error.
func SelectRoutingVariants(defaults []RoutingVariant, names []string, rates []int) ([]RoutingVariant, error) {
	var out []RoutingVariant
	var errs []error
	if len(names) == 0 {
		for _, d := range defaults {
			d.Rates = slices.Clone(d.Rates)
			out = append(out, d)
		}
	}
	for _, name := range names {
		v, err := ParseRoutingVariant(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if i := slices.IndexFunc(defaults, func(d RoutingVariant) bool { return d.Name() == v.Name() }); i >= 0 {
			v.Rates = slices.Clone(defaults[i].Rates)
		}
		out = append(out, v)
	}
	for i := range out {
		if len(rates) > 0 {
			out[i].Rates = slices.Clone(rates)
		}
		if len(out[i].Rates) == 0 {
			errs = append(errs, fmt.Errorf("routing variant %q: no default rates; give rates", out[i].Name()))
		}
	}
	return out, errors.Join(errs...)
}

// DefaultRoutingVariants are the measurements the issues ask for, with a
// reference for each: the plain chats of gw-overhead, the same prompts
// without tokenization (what proxying the larger bodies costs), and the
// policies over eight replicas.
func DefaultRoutingVariants() []RoutingVariant {
	return []RoutingVariant{
		{SystemWords: 0, Policy: "least_request", Replicas: 3, Rates: []int{2000, 5000}},
		{SystemWords: 200, Policy: "least_request", Replicas: 3, Rates: []int{2000, 5000}},
		{SystemWords: 200, Tokenizer: true, Policy: "kv_aware", Replicas: 3, Rates: []int{2000, 5000}},
		{SystemWords: 2000, Policy: "least_request", Replicas: 3, Rates: []int{1000, 2000}},
		{SystemWords: 2000, Tokenizer: true, Policy: "kv_aware", Replicas: 3, Rates: []int{1000, 2000}},
		{SystemWords: 200, Tokenizer: true, Policy: "prefix_hash", Replicas: 8, Rates: []int{2000, 5000}},
		{SystemWords: 200, Tokenizer: true, Policy: "kv_aware", Replicas: 8, Rates: []int{2000, 5000}},
		{SystemWords: 200, Tokenizer: true, Policy: "cost_model", Replicas: 8, Rates: []int{2000, 5000}},
	}
}

// Validate reports every setting that cannot run.
func (l RoutingLoad) Validate() error {
	var errs []error
	if len(l.Variants) == 0 {
		errs = append(errs, errors.New("variants: at least one is required"))
	}
	seen := map[string]int{}
	for i, v := range l.Variants {
		p := fmt.Sprintf("variants[%d]", i)
		if j, ok := seen[v.Name()]; ok {
			errs = append(errs, fmt.Errorf("%s: same settings as variants[%d] (%s)", p, j, v.Name()))
		}
		seen[v.Name()] = i
		errs = append(errs, stress.Prefixed(p, v.validate())...)
	}
	errs = append(errs, validateLegs(l.Requests, l.Warmup, l.MaxTokens, l.Timeout)...)
	errs = append(errs, stress.Positive("system_prompts", l.SystemPrompts), stress.Positive("question_words", l.QuestionWords))
	return errors.Join(errs...)
}

func (v RoutingVariant) validate() error {
	var errs []error
	if v.SystemWords < 0 || v.SystemWords > maxSystemWords {
		errs = append(errs, fmt.Errorf("system_words: must be from 0 to %d, got %d", maxSystemWords, v.SystemWords))
	}
	if v.Replicas < 1 || v.Replicas > maxReplicas {
		errs = append(errs, fmt.Errorf("replicas: must be from 1 to %d, got %d", maxReplicas, v.Replicas))
	}
	if v.Policy == "" {
		errs = append(errs, errors.New("policy: required"))
	} else if err := routingConfig(v, placeholderReplicas(max(1, v.Replicas))).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("policy: %w", err))
	}
	return errors.Join(append(errs, validateRates(v.Rates)...)...)
}

// placeholderReplicas stand in for simulators when a config is checked
// before any is started.
func placeholderReplicas(n int) []*gwReplica {
	out := make([]*gwReplica, n)
	for i := range out {
		out[i] = &gwReplica{ID: fmt.Sprintf("sim-%d", i+1), URL: "http://127.0.0.1:1"}
	}
	return out
}

// routingConfig is the gateway config of variant v over replicas: the
// scenarios' config (gwConfig) with the variant's policy and
// tokenizer.
func routingConfig(v RoutingVariant, replicas []*gwReplica) *config.Config {
	cfg := gwConfig(replicas, healthDefault)
	cfg.Models[0].Policy = v.Policy
	if v.Tokenizer {
		cfg.Models[0].Tokenizer = "builtin:sim"
	}
	return cfg
}

// RoutingRun is one variant of gw-routing.
type RoutingRun struct {
	Name    string         `json:"name"`
	Variant RoutingVariant `json:"variant"`
	Rates   []RoutingRate  `json:"rates"`
}

// RoutingRate is one variant at one rate: gw-overhead's four legs, and
// what the gateway's own metrics counted over the two measured gateway
// legs (differences of scrapes taken right before and right after each).
type RoutingRate struct {
	OverheadRate
	// Decisions is the number of routing decisions (one per attempt), and
	// Decision* the time each took, estimated from the buckets of
	// inferrail_routing_decision_seconds.
	Decisions   float64        `json:"decisions"`
	DecisionP50 BucketQuantile `json:"decision_p50"`
	DecisionP99 BucketQuantile `json:"decision_p99"`
	// Tokenizations is the number of prompts tokenized or given up on in
	// time, and Tokenize* the time each took, waiting for a worker
	// included, estimated from the buckets of inferrail_tokenize_seconds.
	Tokenizations float64        `json:"tokenizations"`
	TokenizeP50   BucketQuantile `json:"tokenize_p50"`
	TokenizeP99   BucketQuantile `json:"tokenize_p99"`
	// Tokenized counts inferrail_tokenized_requests_total by result.
	Tokenized map[string]float64 `json:"tokenized,omitempty"`
	// TokenizedShare is the share of the gateway legs' requests whose
	// result was tokenized.
	TokenizedShare float64 `json:"tokenized_share"`
	// PromptTokens and PredictedCachedTokens are
	// inferrail_prompt_tokens_total and
	// inferrail_predicted_cached_tokens_total; PredictedHitRate is the
	// second over the first.
	PromptTokens          float64 `json:"prompt_tokens"`
	PredictedCachedTokens float64 `json:"predicted_cached_tokens"`
	PredictedHitRate      float64 `json:"predicted_hit_rate"`
	// MetricsError says why a scrape failed; the gateway figures then
	// miss that leg.
	MetricsError string `json:"metrics_error,omitempty"`
}

func runGWRouting(ctx context.Context, r *gwRun) error {
	l := r.c.Routing
	for _, v := range l.Variants {
		run, err := r.routingVariant(ctx, l, v)
		if err != nil {
			return fmt.Errorf("%s: %w", v.Name(), err)
		}
		r.res.Routing = append(r.res.Routing, run)
		var got []string
		met := true
		for _, rr := range run.Rates {
			got = append(got, fmt.Sprintf("%d req/s: direct %d, gateway %d", rr.Rate, rr.Direct.Errors, rr.Gateway.Errors))
			met = met && rr.Direct.Errors == 0 && rr.Gateway.Errors == 0
		}
		r.check(run.Name+": errors", "0", strings.Join(got, "; "), met)
	}
	var counts []string
	for _, v := range l.Variants {
		if n := strconv.Itoa(v.Replicas); !slices.Contains(counts, n) {
			counts = append(counts, n)
		}
	}
	r.res.Setup.Simulators = fmt.Sprintf("%s inferrail-sim child processes (%s), started afresh for each variant", strings.Join(counts, " or "), r.c.SimBinary)
	r.res.Setup.GatewayConfig = "" // one per variant, which the description says how to build
	r.note("Decision and tokenize times are estimated from the gateway's histogram buckets, the differences of the bucket counts " +
		"before and after each measured gateway leg, by linear interpolation inside the bucket that holds the quantile (as Prometheus's histogram_quantile); " +
		"the buckets grow fourfold (decisions: 0.1 µs, 0.4 µs, 1.6 µs, 6.4 µs, 26 µs, 102 µs…; tokenization: 1 µs, 4 µs, 16 µs, 64 µs, 256 µs…), " +
		"so only the bucket, shown in brackets, is certain.")
	r.note("The direct target is one simulator taking the whole rate; through the gateway the simulators share it, so the difference slightly " +
		"favours the gateway at the engine. With eight simulators the machine's two cores also run five more processes than with three.")
	r.note("The predicted hit rate is the prompt tokens the KV index predicted cached on the chosen replica over the prompt tokens tokenized; " +
		"with the gateway's decisions as its only source, the index predicts a system prompt cached where the gateway has sent it before.")
	return nil
}

// routingVariant runs variant v at each of its rates against fresh
// simulators and a fresh gateway, which it stops before returning.
func (r *gwRun) routingVariant(ctx context.Context, l RoutingLoad, v RoutingVariant) (RoutingRun, error) {
	run := RoutingRun{Name: v.Name(), Variant: v}
	log := r.log.With("variant", run.Name)
	log.Info("variant start")
	sims, err := r.simChildren(ctx, v.Replicas, overheadSimArgs)
	defer r.stopReplicas()
	if err != nil {
		return run, err
	}
	gw, err := r.gateway(ctx, routingConfig(v, sims))
	if err != nil {
		return run, err
	}
	defer r.stopGateway(gw)
	pair := newOverheadPair(gw, sims, l.Timeout, l.MaxTokens)
	defer pair.close()
	prompts := newRoutingPrompts(l.Seed, l.SystemPrompts, v.SystemWords, l.QuestionWords, l.MaxTokens)
	admin := procs.AdminClient()
	defer admin.CloseIdleConnections()
	for _, rate := range v.Rates {
		var sum routingCounters
		var scrapeErrs []error
		spec := overheadSpec{Rate: rate, Requests: l.Requests, Warmup: l.Warmup, Seed: l.Seed,
			Bodies: func(leg int) (warm, measured func(int) []byte) {
				w := prompts.bodies(uint64(rate)<<8|uint64(leg)<<1|1, l.Warmup)
				m := prompts.bodies(uint64(rate)<<8|uint64(leg)<<1, l.Requests)
				return func(i int) []byte { return w[i] }, func(i int) []byte { return m[i] }
			},
			GatewayLeg: func() func() {
				before, err := gw.Metrics(ctx, admin)
				return func() {
					after, err2 := gw.Metrics(ctx, admin)
					if err := errors.Join(err, err2); err != nil {
						scrapeErrs = append(scrapeErrs, err)
						return
					}
					sum = sum.add(readRoutingCounters(after).sub(readRoutingCounters(before)))
				}
			}}
		res, err := pair.rate(ctx, log, spec)
		if err != nil {
			return run, err
		}
		rr := routingRate(res, sum)
		if err := errors.Join(scrapeErrs...); err != nil {
			rr.MetricsError = err.Error()
		}
		log.Info("routing rate", "rate", rate, "added_p50_ms", rr.AddedP50*1e3, "added_p99_ms", rr.AddedP99*1e3,
			"decision_p99_us", rr.DecisionP99.Seconds*1e6, "tokenize_p99_us", rr.TokenizeP99.Seconds*1e6,
			"tokenized_share", rr.TokenizedShare, "predicted_hit_rate", rr.PredictedHitRate)
		run.Rates = append(run.Rates, rr)
	}
	return run, nil
}

// routingRate puts a rate's overhead figures and the gateway's counts of
// its measured legs together.
func routingRate(res OverheadRate, c routingCounters) RoutingRate {
	rr := RoutingRate{
		OverheadRate:          res,
		Decisions:             c.decision.count(),
		DecisionP50:           c.decision.quantile(0.50),
		DecisionP99:           c.decision.quantile(0.99),
		Tokenizations:         c.tokenize.count(),
		TokenizeP50:           c.tokenize.quantile(0.50),
		TokenizeP99:           c.tokenize.quantile(0.99),
		Tokenized:             c.tokenized,
		PromptTokens:          c.promptTokens,
		PredictedCachedTokens: c.predicted,
	}
	if res.Gateway.Requests > 0 {
		rr.TokenizedShare = c.tokenized["tokenized"] / float64(res.Gateway.Requests)
	}
	if c.promptTokens > 0 {
		rr.PredictedHitRate = c.predicted / c.promptTokens
	}
	return rr
}

// routingPrompts makes gw-routing's chats: one of a few shared system
// prompts, if any, and a question of the chat's own.
type routingPrompts struct {
	system        []string // nil: chats have no system prompt
	questionWords int
	maxTokens     int
	seed          uint64
}

// newRoutingPrompts draws n system prompts of words words each (none when
// words is 0) from seed.
func newRoutingPrompts(seed uint64, n, words, questionWords, maxTokens int) *routingPrompts {
	p := &routingPrompts{questionWords: questionWords, maxTokens: maxTokens, seed: seed}
	if words > 0 {
		for k := range n {
			p.system = append(p.system, stress.Babble(rand.New(rand.NewPCG(seed, 1<<63|uint64(k))), words))
		}
	}
	return p
}

// body is chat i of stream (a leg, or its warmup): it depends only on the
// seed, stream and i, and its question on all three.
func (p *routingPrompts) body(stream uint64, i int) []byte {
	r := rand.New(rand.NewPCG(p.seed^stream<<32, uint64(i)))
	b := []byte(`{"model":`)
	b = openai.AppendString(b, procs.SimModel)
	b = append(b, `,"messages":[`...)
	if len(p.system) > 0 {
		b = append(b, `{"role":"system","content":`...)
		b = openai.AppendString(b, p.system[r.IntN(len(p.system))])
		b = append(b, `},`...)
	}
	b = append(b, `{"role":"user","content":`...)
	q := "Question " + strconv.FormatUint(stream, 10) + "." + strconv.Itoa(i) + ": " + stress.Babble(r, p.questionWords) + "?"
	b = openai.AppendString(b, q)
	b = append(b, `}],"max_tokens":`...)
	b = strconv.AppendInt(b, int64(p.maxTokens), 10)
	return append(b, '}')
}

// bodies builds chats 0 to n-1 of stream.
func (p *routingPrompts) bodies(stream uint64, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = p.body(stream, i)
	}
	return out
}

// routingCounters is what gw-routing reads of the gateway's /metrics,
// summed over every series of each family.
type routingCounters struct {
	decision, tokenize histogram
	tokenized          map[string]float64 // by result
	promptTokens       float64
	predicted          float64
}

func readRoutingCounters(p procs.PromPage) routingCounters {
	return routingCounters{
		decision:     p.Buckets("inferrail_routing_decision_seconds"),
		tokenize:     p.Buckets("inferrail_tokenize_seconds"),
		tokenized:    p.ByLabel("inferrail_tokenized_requests_total", "result"),
		promptTokens: p.Sum("inferrail_prompt_tokens_total"),
		predicted:    p.Sum("inferrail_predicted_cached_tokens_total"),
	}
}

// combine returns c plus sign times o, figure by figure.
func (c routingCounters) combine(o routingCounters, sign float64) routingCounters {
	return routingCounters{
		decision:     c.decision.combine(o.decision, sign),
		tokenize:     c.tokenize.combine(o.tokenize, sign),
		tokenized:    combineCounts(c.tokenized, o.tokenized, sign),
		promptTokens: c.promptTokens + sign*o.promptTokens,
		predicted:    c.predicted + sign*o.predicted,
	}
}

func (c routingCounters) add(o routingCounters) routingCounters { return c.combine(o, 1) }
func (c routingCounters) sub(o routingCounters) routingCounters { return c.combine(o, -1) }

// combineCounts returns a plus sign times b, key by key; nil when both
// are empty.
func combineCounts(a, b map[string]float64, sign float64) map[string]float64 {
	if len(a) == 0 && len(b) == 0 {
		return nil
	}
	out := maps.Clone(a)
	if out == nil {
		out = map[string]float64{}
	}
	for k, v := range b {
		out[k] += sign * v
	}
	return out
}

// histogram is a Prometheus histogram's cumulative bucket counts by upper
// bound, +Inf included.
type histogram map[float64]float64

// combine returns h plus sign times o, bound by bound.
func (h histogram) combine(o histogram, sign float64) histogram {
	if h == nil && o == nil {
		return nil
	}
	out := maps.Clone(h)
	if out == nil {
		out = histogram{}
	}
	for le, c := range o {
		out[le] += sign * c
	}
	return out
}

// count is the number of observations: the +Inf bucket's count.
func (h histogram) count() float64 { return h[math.Inf(1)] }

// BucketQuantile is a quantile estimated from histogram buckets: by linear
// interpolation inside the bucket that holds it, as Prometheus's
// histogram_quantile does, and the bounds of that bucket, between which
// the true value lies (Low excluded, High included). All zero without
// observations.
type BucketQuantile struct {
	// N is the number of observations.
	N       float64 `json:"n"`
	Seconds float64 `json:"seconds"`
	Low     float64 `json:"bucket_low_seconds"`
	// High is 0 when the quantile lies above the highest finite bound;
	// Seconds and Low are then that bound.
	High float64 `json:"bucket_high_seconds"`
}

// quantile estimates the q-quantile (0 < q <= 1) of h's observations.
// The first bucket starts at 0.
func (h histogram) quantile(q float64) BucketQuantile {
	bounds := slices.Sorted(maps.Keys(h))
	if len(bounds) == 0 || !math.IsInf(bounds[len(bounds)-1], 1) {
		return BucketQuantile{}
	}
	total := h[bounds[len(bounds)-1]]
	if total <= 0 {
		return BucketQuantile{}
	}
	rank := q * total
	low, below := 0.0, 0.0
	for _, le := range bounds {
		c := h[le]
		if c < rank || c <= below {
			low, below = le, c
			continue
		}
		if math.IsInf(le, 1) {
			return BucketQuantile{N: total, Seconds: low, Low: low}
		}
		return BucketQuantile{N: total, Seconds: low + (le-low)*(rank-below)/(c-below), Low: low, High: le}
	}
	return BucketQuantile{N: total, Seconds: low, Low: low}
}
