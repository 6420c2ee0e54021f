package policy

import "math"

// Explanation is what a policy would do now and why: the Decision Pick
// would return for the same arguments and every candidate's state and
// estimate. Its JSON form is what /admin/explain answers.
type Explanation struct {
	Policy string `json:"policy"`
	// RequestID is Request.ID.
	RequestID    string `json:"request_id,omitempty"`
	PromptTokens int    `json:"prompt_tokens"`
	// Blocks is the number of full KV blocks of the prompt.
	Blocks int `json:"blocks"`
	// Winner is the ID of the candidate Pick would choose, Decision.Index
	// its position.
	Winner   string   `json:"winner"`
	Decision Decision `json:"decision"`
	// DecidedBy is the term (TermQueue, TermPrefill, TermTierLoad, TermPace,
	// TermBacklog or TermCopy) that put cost_model's winner furthest ahead of the
	// runner-up: the allowed candidate with the next lowest estimate
	// (backlog charge included). "" for other policies, when
	// no other candidate was allowed, when the winner's estimate ties the
	// runner-up's (the tie-break chose), and when the session steered the
	// choice to a replica no cheaper than the runner-up.
	DecidedBy string `json:"decided_by"` // always present, as in the decision log
	// HotDemand is the demand of the prompt's root prefix in replicas'
	// worth, as cost_model's sketch counts it: its seconds of prefill per
	// second, or under hot_prefix.demand share the more of that and its
	// share of the fleet's arrivals times the candidates; 0 for other
	// policies or when the prompt is shorter than a root.
	HotDemand float64 `json:"hot_demand,omitempty"`
	// HotOwners is how many owners the root prefix has: 0 unless its demand
	// is above the hot prefix utilization.
	HotOwners int `json:"hot_owners,omitempty"`
	// HotCreditTokens is the cached tokens owners are priced as holding at
	// least: the longest prefix an owner holds that is itself hot.
	HotCreditTokens int `json:"hot_credit_tokens,omitempty"`
	// Replicas describes every candidate, in the order given.
	Replicas []CandidateExplanation `json:"replicas"`
}

// Terms of the estimate named by Explanation.DecidedBy.
const (
	TermQueue    = "queue"
	TermPrefill  = "prefill"
	TermTierLoad = "tier_load"
	// TermBacklog is Settings.BacklogCost's charge: the runner-up would
	// have delayed the requests waiting on its engine more.
	TermBacklog = "backlog"
	// TermPace is the engines' paces: the winner is estimated faster
	// mostly because its engine has lately been delivering faster.
	TermPace = "pace"
	// TermCopy is the copy credit (Estimate.CopyCreditSecs): the winner
	// holds none of the root prefix, and the copy it makes was worth more
	// than its miss.
	TermCopy = "copy"
)

// CandidateExplanation is one candidate as a policy saw it.
type CandidateExplanation struct {
	ID       string  `json:"replica"`
	InFlight int64   `json:"in_flight"`
	Running  int64   `json:"running"`
	KVUsage  float64 `json:"kv_usage"`
	// CachedTokens is the prediction it was offered with, -1 for none.
	CachedTokens int     `json:"cached_tokens"`
	QueuedSecs   float64 `json:"queued_secs"`
	// PricedCachedTokens is the cached tokens its estimate assumes: the
	// prediction, or a hot prefix owner's credit when larger.
	PricedCachedTokens int  `json:"priced_cached_tokens"`
	HotOwner           bool `json:"hot_owner,omitempty"`
	// SetAside names the guard (GuardBoundedLoad or GuardKVPressure) that
	// kept the policy from choosing it; "" when it could be chosen.
	SetAside string `json:"set_aside,omitempty"`
	// Score is kv_aware's score; 0 for other policies.
	Score float64 `json:"score,omitempty"`
	// Estimate is the cost model's estimate for it, whatever the policy.
	Estimate Estimate `json:"estimate"`
}

// Estimate is the cost model's estimate of a candidate's time to first
// token and its terms, in seconds: TTFTSecs = (QueueSecs + PrefillSecs +
// TierSecs) · Pace.
type Estimate struct {
	QueueSecs   float64 `json:"queue_secs"`
	PrefillSecs float64 `json:"prefill_secs"`
	// TierSecs is X, the load time of cached tokens held in slower tiers:
	// zero until the index tracks tiers.
	TierSecs float64 `json:"tier_secs"`
	// BacklogSecs is what cost_model added to TTFTSecs to rank the
	// candidate under Settings.BacklogCost: the delay its extra prefill
	// would add to the requests waiting there. Not part of TTFTSecs.
	BacklogSecs float64 `json:"backlog_secs,omitempty"`
	// CopyCreditSecs is what cost_model took off TTFTSecs to rank a
	// candidate that holds none of the root prefix, under
	// hot_prefix.copies: the waiting a copy there would have saved the
	// prefix's requests lately. Not part of TTFTSecs.
	CopyCreditSecs float64 `json:"copy_credit_secs,omitempty"`
	// Pace is the candidate's (Candidate.Pace), 1 when it has none.
	Pace     float64 `json:"pace"`
	TTFTSecs float64 `json:"ttft_secs"`
}

// Prefill is the cost model's P(u, c) = a·u + b·u·(c + u/2) + d: the
// seconds an idle engine takes to compute u prompt tokens after c cached
// ones. Negative arguments count as 0. With u + c fixed it never grows as c
// grows.
func (c CostParams) Prefill(u, cached int) float64 {
	fu, fc := float64(max(u, 0)), float64(max(cached, 0))
	// u·(c + u/2) is (n² - c²)/2 for n = u + c: written so, every step
	// rounds monotonically as c grows with n fixed, so more cache never
	// costs more even by a rounding error (the product form broke that at
	// a billion tokens). Exact below 2^26 tokens either way.
	n := fu + fc
	return c.PrefillTokenSecs*fu + c.PrefillPairSecs*(n*n-fc*fc)/2 + c.PrefillFixedSecs
}

// queue is W: the prefill queued on the candidate plus the decode
// interference of its running requests: the more of what its engine last
// reported and what the gateway has in flight there. The report is up to
// a scrape interval old, and a burst routed within one interval would
// otherwise find every replica as the report left it and pile onto the one
// it showed least busy; the gateway's own count moves with every request
// it routes (the report still counts other gateways' requests).
func (c CostParams) queue(cand *Candidate) float64 {
	running := max(cand.Running, cand.InFlight, 0)
	return max(cand.QueuedPrefill, 0) + c.DecodeInterferenceSecs*float64(running)
}

// Estimate prices the request on the candidate with the cached tokens it
// was offered with, as every Decision's EstimatedTTFT does (no hot-prefix
// credit).
func (c CostParams) Estimate(req *Request, cand *Candidate) Estimate {
	return c.estimate(req, cand, cachedTokens(req, cand))
}

// estimate prices the request on the candidate as if it held cached of the
// prompt's tokens.
func (c CostParams) estimate(req *Request, cand *Candidate, cached int) Estimate {
	return c.withPrefill(cand, c.prefill(req, cached))
}

// prefill is estimate's P, which depends on the candidate only through
// cached.
func (c CostParams) prefill(req *Request, cached int) float64 {
	prompt := max(req.PromptTokens, 0)
	cached = min(max(cached, 0), prompt)
	return c.Prefill(prompt-cached, cached)
}

// withPrefill is estimate given its P.
func (c CostParams) withPrefill(cand *Candidate, prefill float64) Estimate {
	e := Estimate{QueueSecs: c.queue(cand), PrefillSecs: prefill, Pace: paceOf(cand)}
	e.TTFTSecs = (e.QueueSecs + e.PrefillSecs + e.TierSecs) * e.Pace
	return e
}

// paceOf is the candidate's pace, 1 when it has none (or one that is not
// a positive number).
func paceOf(cand *Candidate) float64 {
	if p := cand.Pace; p < math.Inf(1) {
		return paceOr1(p)
	}
	return 1
}

// cachedTokens is the candidate's prediction clamped to the prompt; 0
// without a prediction.
func cachedTokens(req *Request, cand *Candidate) int {
	return min(max(cand.Cached, 0), max(req.PromptTokens, 0))
}

// explainPlain explains the decision d of a policy without guards.
func explainPlain(name string, cost CostParams, req *Request, cands []Candidate, d Decision) Explanation {
	ex := newExplanation(name, req, cands, d)
	for i := range cands {
		cached := cachedTokens(req, &cands[i])
		ex.Replicas[i].PricedCachedTokens = cached
		ex.Replicas[i].Estimate = cost.estimate(req, &cands[i], cached)
	}
	return ex
}

// newExplanation fills what every explanation shares.
func newExplanation(name string, req *Request, cands []Candidate, d Decision) Explanation {
	ex := Explanation{
		Policy:       name,
		RequestID:    req.ID,
		PromptTokens: req.PromptTokens,
		Blocks:       len(req.Blocks),
		Winner:       cands[d.Index].ID,
		Decision:     d,
		Replicas:     make([]CandidateExplanation, len(cands)),
	}
	for i, c := range cands {
		ex.Replicas[i] = CandidateExplanation{
			ID:           c.ID,
			InFlight:     c.InFlight,
			Running:      c.Running,
			KVUsage:      c.KVUsage,
			CachedTokens: c.Cached,
			QueuedSecs:   c.QueuedPrefill,
		}
	}
	return ex
}

// decidedBy names the term in which the winner's estimate is furthest
// below the runner-up's. The difference of two paced estimates splits
// exactly into the terms' differences at the winner's pace and the paces'
// difference over the runner-up's terms:
// r·pr − w·pw = (r − w)·pw + r·(pr − pw) for each term. The backlog
// charges are paced already and compare as they are.
func decidedBy(win, runnerUp Estimate) string {
	pw, pr := paceOr1(win.Pace), paceOr1(runnerUp.Pace)
	term, lead := TermQueue, (runnerUp.QueueSecs-win.QueueSecs)*pw
	if l := (runnerUp.PrefillSecs - win.PrefillSecs) * pw; l > lead {
		term, lead = TermPrefill, l
	}
	if l := (runnerUp.TierSecs - win.TierSecs) * pw; l > lead {
		term, lead = TermTierLoad, l
	}
	if l := (runnerUp.QueueSecs + runnerUp.PrefillSecs + runnerUp.TierSecs) * (pr - pw); l > lead {
		term, lead = TermPace, l
	}
	if l := runnerUp.BacklogSecs - win.BacklogSecs; l > lead {
		term, lead = TermBacklog, l
	}
	if l := win.CopyCreditSecs - runnerUp.CopyCreditSecs; l > lead {
		term = TermCopy
	}
	return term
}

// paceOr1 is an estimate's pace, 1 for an estimate made without one.
func paceOr1(p float64) float64 {
	if p > 0 {
		return p
	}
	return 1
}
