package gateway

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/inferrail/inferrail/internal/clock"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/policy"
)

// Why a replica serving the model was not offered to the policy, in
// /admin/explain.
const (
	notOfferedUnhealthy = "unhealthy"
	notOfferedEjected   = "ejected"
	notOfferedFull      = "at_capacity"
)

// explainedReplica is one replica serving the model, as /admin/explain
// shows it: its load, its predicted cache and, when it was offered to the
// policy, how the policy saw it; else why it was not offered. A field that
// is unknown for the replica is null, never a number that would read as
// idle or uncached: running and kv_usage without a fresh engine report,
// cached_tokens when the prompt was not tokenized, and
// priced_cached_tokens and estimate when the policy did not price it.
type explainedReplica struct {
	ID       string `json:"replica"`
	InFlight int64  `json:"in_flight"`
	// Running and KVUsage are from the engine's report while it is fresh.
	Running *int64   `json:"running"`
	KVUsage *float64 `json:"kv_usage"`
	// CachedTokens is the KV index's prediction for the prompt.
	CachedTokens *int    `json:"cached_tokens"`
	QueuedSecs   float64 `json:"queued_secs"`
	// The rest is the policy's view, for an offered replica only; see
	// policy.CandidateExplanation.
	PricedCachedTokens *int             `json:"priced_cached_tokens"`
	HotOwner           bool             `json:"hot_owner,omitempty"`
	SetAside           string           `json:"set_aside,omitempty"`
	Score              float64          `json:"score,omitempty"`
	Estimate           *policy.Estimate `json:"estimate"`
	Offered            bool             `json:"offered"`
	NotOffered         string           `json:"not_offered,omitempty"`
}

// describe fills the replica's state from c, the candidate it is or would
// be, turning the policy package's "unknown" values into nulls.
func (r *explainedReplica) describe(c *policy.Candidate) {
	r.ID, r.InFlight, r.QueuedSecs = c.ID, c.InFlight, c.QueuedPrefill
	if c.Running >= 0 {
		r.Running = &c.Running
	}
	if c.KVUsage >= 0 {
		r.KVUsage = &c.KVUsage
	}
	if c.Cached >= 0 {
		r.CachedTokens = &c.Cached
	}
}

// priced adds how the policy saw an offered replica.
func (r *explainedReplica) priced(ce *policy.CandidateExplanation) {
	r.PricedCachedTokens, r.Estimate = &ce.PricedCachedTokens, &ce.Estimate
	r.HotOwner, r.SetAside, r.Score = ce.HotOwner, ce.SetAside, ce.Score
}

// explainAnswer is the body of /admin/explain.
type explainAnswer struct {
	policy.Explanation
	Model string `json:"model"`
	// Tokenized says whether the prompt was tokenized (its length and
	// blocks are exact), and if not why.
	Tokenized string             `json:"tokenized"`
	Replicas  []explainedReplica `json:"replicas"`
}

// serveExplain answers POST /admin/explain/v1/...: what the model's policy
// would do with the request now, and why. The body is read as on the client
// port; nothing is sent to an engine and no routing state changes: no
// lease, no index record, no policy state, no routing or request metric.
// (The tokenizer's piece cache may learn the prompt's pieces, as it would
// from any request, and counts that lookup.)
func (g *Gateway) serveExplain(w http.ResponseWriter, r *http.Request) {
	ex, ok := g.adminExchange(w, r)
	if !ok {
		return
	}
	tokenized := "no_tokenizer"
	if mt := g.tokenizers[ex.model]; mt != nil {
		ex.pred, tokenized = tokenizeBody(mt, ex.model, ex.body, isChatPath(r.URL.Path))
	}
	writeAdminJSON(w, http.StatusOK, g.explain(ex, tokenized))
}

// explain builds the answer of serveExplain for a parsed request. Every
// replica serving the model is described from the state a decision reads
// (replicas not offered as well, so that their load and cache show); only
// the offered ones are given to the policy.
func (g *Gateway) explain(ex *exchange, tokenized string) explainAnswer {
	ex.route = g.routeRequest(ex)
	now := time.Now()
	ex.route.At = now
	at := clock.Of(now)
	mr := g.routes().model(ex.model)
	pool := mr.routes
	all := make([]policy.Candidate, len(pool))
	for i := range pool {
		g.candidate(&all[i], &pool[i], at)
	}
	if ex.pred != nil && len(pool) > 0 {
		for i, n := range g.cachedTokens(nil, mr.ids(), ex.model, ex.pred) {
			all[i].Cached = n
		}
	}
	var cands []policy.Candidate
	var offered []int // positions in pool
	replicas := make([]explainedReplica, len(pool))
	for i, rep := range pool {
		replicas[i].describe(&all[i])
		switch {
		case !rep.Healthy():
			replicas[i].NotOffered = notOfferedUnhealthy
		case rep.Ejected(now):
			replicas[i].NotOffered = notOfferedEjected
		case !rep.HasRoom():
			replicas[i].NotOffered = notOfferedFull
		default:
			replicas[i].Offered = true
			offered = append(offered, i)
			cands = append(cands, all[i])
		}
	}
	ans := explainAnswer{Model: ex.model, Tokenized: tokenized}
	if len(cands) > 0 {
		ans.Explanation = ex.policy.Explain(&ex.route, cands)
		for j := range ans.Explanation.Replicas {
			replicas[offered[j]].priced(&ans.Explanation.Replicas[j])
		}
	} else {
		ans.Explanation = policy.Explanation{Policy: ex.policy.Name(), RequestID: ex.id, PromptTokens: ex.route.PromptTokens, Blocks: len(ex.route.Blocks)}
	}
	ans.Explanation.Replicas = nil
	ans.Replicas = replicas
	return ans
}

// adminExchange reads an admin request carrying a client's request body as
// the client port would (same deadline and size limit), checks it and
// resolves its model, answering the error itself when it cannot.
func (g *Gateway) adminExchange(w http.ResponseWriter, r *http.Request) (*exchange, bool) {
	ex := &exchange{w: w, r: r, arrived: time.Now(), id: r.Header.Get(openai.HeaderRequestID)}
	if !openai.ValidRequestID(ex.id) {
		ex.id = newRequestID()
	}
	ex.deadline = ex.arrived.Add(time.Duration(g.cfg.Server.RequestTimeout))
	body, e, _ := g.readBody(w, r, ex.deadline)
	if e != nil {
		e.Write(w)
		return nil, false
	}
	if !json.Valid(body) {
		openai.BadRequest("The request body is not valid JSON.", "").Write(w)
		return nil, false
	}
	mf, err := openai.FindModel(body)
	if err != nil {
		openai.BadRequest(err.Error(), "model").Write(w)
		return nil, false
	}
	model, ok := g.resolveModel(mf.Name)
	if !ok {
		openai.ModelNotFound(mf.Name).Write(w)
		return nil, false
	}
	ex.model, ex.body, ex.policy, ex.user = model, body, g.policies[model], mf.User
	return ex, true
}
