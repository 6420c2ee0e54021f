package gateway

import (
	"encoding/json"
	"net/http"
	"time"

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
// shows it: offered to the policy and how it saw it, or why not.
type explainedReplica struct {
	policy.CandidateExplanation
	Offered    bool   `json:"offered"`
	NotOffered string `json:"not_offered,omitempty"`
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

// explain builds the answer of serveExplain for a parsed request.
func (g *Gateway) explain(ex *exchange, tokenized string) explainAnswer {
	ex.route = g.routeRequest(ex)
	now := time.Now()
	pool := g.fleet.Snapshot().ForModel(ex.model)
	var cands []policy.Candidate
	var offered []int // positions in pool
	replicas := make([]explainedReplica, len(pool))
	for i, rep := range pool {
		replicas[i].ID = rep.ID
		replicas[i].InFlight = rep.InFlight()
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
			cands = append(cands, g.candidate(rep, now))
		}
	}
	if ex.pred != nil && len(cands) > 0 {
		ids := make([]string, len(cands))
		for i, c := range cands {
			ids[i] = c.ID
		}
		cached := g.cachedTokens(nil, ids, ex.model, ex.pred)
		for i := range cands {
			cands[i].Cached = cached[i]
		}
	}
	ans := explainAnswer{Model: ex.model, Tokenized: tokenized}
	if len(cands) > 0 {
		ans.Explanation = ex.policy.Explain(&ex.route, cands)
		for j, ce := range ans.Explanation.Replicas {
			replicas[offered[j]].CandidateExplanation = ce
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
	ex := &exchange{w: w, r: r, arrived: time.Now(), id: r.Header.Get(headerRequestID)}
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
