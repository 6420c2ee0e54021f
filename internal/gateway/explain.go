package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/inferrail/inferrail/internal/auth"
	"github.com/inferrail/inferrail/internal/clock"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/policy"
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
	Score              *float64         `json:"score,omitempty"` // kv_aware's, 0 included; null for others
	Estimate           *policy.Estimate `json:"estimate"`
	Offered            bool             `json:"offered"`
	NotOffered         string           `json:"not_offered,omitempty"`
}

// describe fills the replica's state from c, the candidate it is or would
// be, turning the policy package's "unknown" values into nulls. c is a
// copy: the answer keeps pointers into it.
func (r *explainedReplica) describe(c policy.Candidate) {
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

// priced adds how the policy saw an offered replica; scored, under a
// policy that scores (kv_aware), a score of 0 is shown, not left out.
func (r *explainedReplica) priced(ce *policy.CandidateExplanation, scored bool) {
	r.PricedCachedTokens, r.Estimate = &ce.PricedCachedTokens, &ce.Estimate
	r.HotOwner, r.SetAside = ce.HotOwner, ce.SetAside
	if scored {
		r.Score = &ce.Score
	}
}

// explainAnswer is the body of /admin/explain.
type explainAnswer struct {
	policy.Explanation
	// Decision stands in for the explanation's own: null when no replica
	// was offered, where a zero decision would read as the first replica
	// answering at once.
	Decision *policy.Decision `json:"decision"`
	Model    string           `json:"model"`
	// Tokenized says whether the prompt was tokenized (its length and
	// blocks are exact), and if not why.
	Tokenized string             `json:"tokenized"`
	Replicas  []explainedReplica `json:"replicas"`
	// Admission is what flow control would do with the request now.
	Admission *admissionVerdict `json:"admission"`
}

// serveExplain answers POST /admin/explain/v1/...: what the model's policy
// would do with the request now, and why. The body is read as on the client
// port, with the same errors; nothing is sent to an engine and no routing
// state changes: no lease, no index record, no policy state, no routing or
// request metric. (The tokenizer's piece cache may learn the prompt's
// pieces, as it would from any request, and counts that lookup.)
func (g *Gateway) serveExplain(w http.ResponseWriter, r *http.Request) {
	ex, err := g.readRequest(w, r)
	if err == nil {
		err = ex.explainPolicy(r.URL.Query().Get("policy"))
	}
	if err == nil {
		// The admin port knows no client key: ?key= names one to ask as
		// (its grant of the model, class, target and fair share; not its
		// rate limits, which only spending reads), and the headers say the rest,
		// clamped as the client port clamps them: to the key's class, or
		// to standard without a key.
		var key *auth.Key
		if key, err = g.explainKey(r.URL.Query().Get("key")); err == nil {
			maxClass := auth.Standard
			if key != nil {
				maxClass = key.Priority
			}
			ex.adm, err = admissionFor(r, key, maxClass, g.modelTarget(ex))
		}
		if err == nil && key != nil {
			if len(r.Header.Values(openai.HeaderPriority)) == 0 {
				ex.adm.class = key.Priority
			}
			ex.adm.denied = !key.Allows(ex.model, ex.gen.resolveModel)
		}
	}
	if err != nil {
		refusalOf(err).write(w) // not counted: explaining routes nothing
		return
	}
	tokenized := "no_tokenizer"
	switch mt := g.tokenizers[ex.model]; {
	case mt != nil && mt.disagrees.Load():
		// Routing goes without predictions for a model whose tokens
		// differ from its engine's (predict): so must its explanation.
		tokenized = tokDisagree
	case mt != nil:
		// As routing would: a full or slow pool leaves it without a
		// prediction.
		ex.pred, tokenized, _ = g.tokenizeAsRouted(ex, mt, isChatPath(r.URL.Path))
	}
	writeAdminJSON(w, http.StatusOK, g.explain(ex, tokenized))
}

// explainKey is the client key named name, for /admin/explain?key=; nil
// when name is "".
func (g *Gateway) explainKey(name string) (*auth.Key, error) {
	if name == "" {
		return nil, nil
	}
	if g.access.keys != nil {
		for _, k := range g.access.keys.Keys().Keys() {
			if k.Name == name {
				return k, nil
			}
		}
	}
	if strings.HasPrefix(name, auth.SecretPrefix) {
		// Answers never quote a key.
		return nil, newRefusal(openai.BadRequest("`key` takes a client key's name, not the key itself.", "key"), reasonBadRequest)
	}
	return nil, newRefusal(openai.BadRequest(fmt.Sprintf("No client key is named %q.", name), "key"), reasonBadRequest)
}

// explainPolicy sets the policy /admin/explain?policy= names: any arm of
// the model's split or any of its shadows. Without one, the request is
// explained by the arm that would route it.
func (ex *exchange) explainPolicy(name string) error {
	if name == "" {
		return nil
	}
	mp := ex.gen.routing[ex.model]
	if p := mp.policyFor(name); p != nil {
		ex.policy = p
		return nil
	}
	var names []string
	for _, a := range mp.arms {
		names = append(names, a.policy.Name())
	}
	for _, p := range mp.shadows {
		names = append(names, p.Name())
	}
	msg := fmt.Sprintf("The model %s has no policy %q: it runs %s.", ex.model, name, strings.Join(names, ", "))
	return newRefusal(openai.BadRequest(msg, "policy"), reasonBadRequest)
}

// explain builds the answer of serveExplain for a parsed request. The
// policy is offered what routing would offer it (offer, shared with
// choose) and explains instead of picking. Every replica serving the model
// is described, those not offered too, with why, so that their load and
// cache show.
func (g *Gateway) explain(ex *exchange, tokenized string) explainAnswer {
	ex.route = g.routeRequest(ex)
	start := time.Now()
	mr := g.routes(ex.gen).model(ex.model)
	sc := decisionScratches.Get().(*decisionScratch)
	defer sc.release()
	why := make([]string, len(mr.routes))
	ex.pace = g.pacedNow(ex, start)
	// With no usable replica nothing is offered and every route says why.
	usable := g.offer(sc, ex, mr, start, nil, why) == nil
	ex.route.At = start // the instant the policy explains at, as choose picks at

	replicas := make([]explainedReplica, len(mr.routes))
	for j, i := range sc.offered {
		replicas[i].describe(sc.cands[j])
		replicas[i].Offered = true
	}
	var left []int // places of the routes not offered
	for i, reason := range why {
		if reason != "" {
			left = append(left, i)
		}
	}
	var cached []int
	if ex.pred != nil && len(left) > 0 {
		ids := make([]string, len(left))
		for k, i := range left {
			ids[k] = mr.routes[i].id
		}
		cached = g.cachedTokens(nil, ids, ex.model, ex.pred)
	}
	at := clock.Of(start)
	for k, i := range left {
		var c policy.Candidate
		g.candidate(&c, &mr.routes[i], at)
		if cached != nil {
			c.Cached = cached[k]
		}
		replicas[i].describe(c)
		replicas[i].NotOffered = why[i]
	}

	ans := explainAnswer{Model: ex.model, Tokenized: tokenized, Admission: g.verdict(ex, sc.cands, usable, start)}
	if len(sc.cands) > 0 {
		ans.Explanation = ex.policy.Explain(&ex.route, sc.cands)
		// The answer lists every replica serving the model; its decision
		// indexes that list, not the offered candidates.
		d := ans.Explanation.Decision
		d.Index = sc.offered[d.Index]
		ans.Decision = &d
		for j := range ans.Explanation.Replicas {
			replicas[sc.offered[j]].priced(&ans.Explanation.Replicas[j], ans.Explanation.Policy == policy.KVAware)
		}
	} else {
		ans.Explanation = policy.Explanation{Policy: ex.policy.Name(), RequestID: ex.id, PromptTokens: ex.route.PromptTokens, Blocks: len(ex.route.Blocks)}
	}
	ans.Explanation.Replicas = nil
	ans.Replicas = replicas
	return ans
}
