package gateway

// Shadow policies choose a replica for every routed request without
// routing it. Their choices are made on one worker, off the request path,
// from a copy of the candidates the routing policy saw; when the worker
// falls behind, requests are left out of the shadow and counted.

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferrail/inferrail/internal/policy"
)

// shadowQueue is how many routed requests may wait for the shadow worker.
// Past it a request leaves the shadow: the request path never waits. A
// waiting job holds its prompt's block hashes (30 KB for 30,000 tokens),
// so the queue is bounded in memory too; the worker decides a job in tens
// of microseconds, so it fills only when the worker is starved of CPU or
// the shadow log's disk stalls.
const shadowQueue = 1024

// shadowJob is one routed request as its shadows see it: the request, the
// candidates the routing policy was offered, in the same state, and what
// it chose among them.
type shadowJob struct {
	gen    *generation
	model  string
	req    policy.Request
	cands  []policy.Candidate
	routed policy.Decision
	policy string // the routing policy's name
}

// shadowRunner runs the shadow policies of every model on one worker.
type shadowRunner struct {
	jobs     chan shadowJob
	log      *shadowLog // nil without observability.shadow_log
	dropped  prometheus.Counter
	nDropped atomic.Int64 // what dropped counts, for /admin/shadow
	agreed   *prometheus.CounterVec
	priced   *prometheus.CounterVec

	mu    sync.Mutex
	stats map[shadowStatKey]*shadowStats // guarded by mu
}

type shadowStatKey struct{ model, policy string }

// shadowStats sum one shadow policy's decisions for one model.
type shadowStats struct {
	decisions, agreed, faster, slower int64
	// shadowSecs and routedSecs sum the cost model's estimated TTFT of the
	// shadow's picks and of the routing policy's.
	shadowSecs, routedSecs float64
}

func newShadowRunner(reg prometheus.Registerer, log *shadowLog) *shadowRunner {
	s := &shadowRunner{
		jobs:    make(chan shadowJob, shadowQueue),
		log:     log,
		dropped: counter("inferrail_shadow_dropped_total", "Routed requests left out of the shadow because its worker was behind."),
		agreed:  counterVec("inferrail_shadow_decisions_total", "Requests a shadow policy chose a replica for, by whether it chose the routing policy's.", "model", "policy", "agreed"),
		priced:  counterVec("inferrail_shadow_estimated_ttft_seconds_total", "The cost model's estimated TTFT summed over shadowed requests, for the routing policy's pick (active) and the shadow's (shadow).", "model", "policy", "pick"),
		stats:   map[shadowStatKey]*shadowStats{},
	}
	reg.MustRegister(s.dropped, s.agreed, s.priced)
	return s
}

// submit hands a routed request to the shadows, or leaves it out when the
// worker is behind. cands is copied: the caller's slice is pooled.
func (s *shadowRunner) submit(ex *exchange, cands []policy.Candidate, d policy.Decision) {
	job := shadowJob{gen: ex.gen, model: ex.model, req: ex.route, cands: slices.Clone(cands), routed: d, policy: ex.policy.Name()}
	// Shadows count time by the wall clock, as a replay of the log must.
	job.req.At = job.req.At.Round(0)
	select {
	case s.jobs <- job:
	default:
		s.dropped.Inc()
		s.nDropped.Add(1)
	}
}

// generation records a new config generation in the shadow log.
func (s *shadowRunner) generation(gen *generation) {
	if s.log != nil {
		s.log.generation(gen)
	}
}

// run is the worker: it decides every job's shadows until ctx ends.
func (s *shadowRunner) run(ctx context.Context) {
	defer func() {
		if s.log != nil {
			s.log.close()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case job := <-s.jobs:
			s.decide(&job)
			if s.log != nil && len(s.jobs) == 0 {
				s.log.flush()
			}
		}
	}
}

// decide runs a job's shadows, counts their agreement and estimates, and
// logs them.
func (s *shadowRunner) decide(job *shadowJob) {
	mp := job.gen.routing[job.model]
	if mp == nil || len(mp.shadows) == 0 {
		return
	}
	picks := make([]shadowPick, len(mp.shadows))
	routedID := job.cands[job.routed.Index].ID
	for i, p := range mp.shadows {
		d := p.Pick(&job.req, job.cands)
		picks[i] = shadowPick{Policy: p.Name(), Index: d.Index, Replica: job.cands[d.Index].ID, Estimate: d.EstimatedTTFT}
		s.count(job, &picks[i], routedID)
	}
	if s.log != nil {
		s.log.decision(job, picks)
	}
}

func (s *shadowRunner) count(job *shadowJob, pick *shadowPick, routedID string) {
	agreed := pick.Replica == routedID
	label := "false"
	if agreed {
		label = "true"
	}
	s.agreed.WithLabelValues(job.model, pick.Policy, label).Inc()
	s.priced.WithLabelValues(job.model, pick.Policy, "active").Add(job.routed.EstimatedTTFT)
	s.priced.WithLabelValues(job.model, pick.Policy, "shadow").Add(pick.Estimate)

	s.mu.Lock()
	defer s.mu.Unlock()
	key := shadowStatKey{job.model, pick.Policy}
	st := s.stats[key]
	if st == nil {
		st = &shadowStats{}
		s.stats[key] = st
	}
	st.decisions++
	switch {
	case agreed:
		st.agreed++
	case pick.Estimate < job.routed.EstimatedTTFT:
		st.faster++
	case pick.Estimate > job.routed.EstimatedTTFT:
		st.slower++
	}
	st.shadowSecs += pick.Estimate
	st.routedSecs += job.routed.EstimatedTTFT
}

// shadowView is one shadow policy of one model as GET /admin/shadow shows
// it. Shares are of its decisions; the gain is the routing policy's mean
// estimated TTFT minus the shadow's, so a positive gain means the cost
// model prices the shadow's picks faster.
type shadowView struct {
	Model        string  `json:"model"`
	Policy       string  `json:"policy"`
	Decisions    int64   `json:"decisions"`
	Agreement    float64 `json:"agreement"`
	PricedFaster float64 `json:"priced_faster"`
	PricedSlower float64 `json:"priced_slower"`
	MeanGainSecs float64 `json:"mean_estimated_gain_secs"`
	// Active says the config in effect still shadows it; its figures stay
	// after it is dropped, until the gateway restarts.
	Active bool `json:"active"`
}

// serveShadow answers GET /admin/shadow: every shadow policy's decisions,
// agreement with the routing policy and estimated gain, by model.
func (g *Gateway) serveShadow(w http.ResponseWriter, r *http.Request) {
	out := struct {
		Dropped int64        `json:"dropped"`
		Shadows []shadowView `json:"shadows"`
	}{Shadows: []shadowView{}}
	if s := g.shadows; s != nil {
		out.Dropped = s.nDropped.Load()
		gen := g.current()
		active := func(model, name string) bool {
			mp := gen.routing[model]
			return mp != nil && slices.ContainsFunc(mp.shadows, func(p policy.Policy) bool { return p.Name() == name })
		}
		s.mu.Lock()
		for k, st := range s.stats {
			n := float64(st.decisions)
			out.Shadows = append(out.Shadows, shadowView{Model: k.model, Policy: k.policy, Decisions: st.decisions,
				Agreement: float64(st.agreed) / n, PricedFaster: float64(st.faster) / n, PricedSlower: float64(st.slower) / n,
				MeanGainSecs: (st.routedSecs - st.shadowSecs) / n, Active: active(k.model, k.policy)})
		}
		s.mu.Unlock()
	}
	slices.SortFunc(out.Shadows, func(a, b shadowView) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.Policy, b.Policy))
	})
	writeAdminJSON(w, http.StatusOK, out)
}
