package gateway

// The decision log's side of a decision: the policy explains the choice
// it makes as it makes it (PickExplained, under one hold of its state, so
// that no other request's decision comes between), so that the record can
// say what each guard set aside and how the policy priced every candidate.

import (
	"time"

	"github.com/inferrail/inferrail/internal/clock"
	"github.com/inferrail/inferrail/internal/decisionlog"
	"github.com/inferrail/inferrail/internal/policy"
)

// pick is the policy's choice among cands for ex and, when ex's decisions
// are logged, the policy's explanation of it; nil otherwise.
func (g *Gateway) pick(ex *exchange, cands []policy.Candidate) (policy.Decision, *policy.Explanation) {
	if ex.obs != nil && ex.obs.logged {
		d, x := ex.policy.PickExplained(&ex.route, cands)
		return d, &x
	}
	return ex.policy.Pick(&ex.route, cands), nil
}

// observeDecision records the decision that took a lease on cands[i], the
// model's route offered[i], started at start: as a route span with
// tracing, and in the decision log when ex is sampled (x is then the
// policy's explanation). It does nothing while ex is not observed.
func (g *Gateway) observeDecision(ex *exchange, mr *modelRoutes, offered []int, cands []policy.Candidate, i int, d *policy.Decision,
	x *policy.Explanation, start time.Time) {
	if o := ex.obs; o != nil {
		o.attempt++
		now := time.Now()
		if o.server != nil {
			g.traceDecision(ex, o, cands, i, d, start, now)
		}
		if o.logged {
			g.obs.log.Log(decisionRecord(g, ex, mr, offered, cands, i, d, x, start, now))
		}
	}
}

// decisionRecord is the decision log's record of a decision: every route
// of the model, offered (as the policy saw and priced it) or not (with
// why, and its load read again now).
func decisionRecord(g *Gateway, ex *exchange, mr *modelRoutes, offered []int, cands []policy.Candidate, i int, d *policy.Decision,
	x *policy.Explanation, start, now time.Time) *decisionlog.Record {
	rec := &decisionlog.Record{
		Time: start, RequestID: ex.id, Model: ex.model, Policy: ex.policy.Name(), Arm: armName(ex), Attempt: ex.obs.attempt,
		PromptTokens: ex.route.PromptTokens, Blocks: len(ex.route.Blocks), Tokenized: tokenOutcome(ex), Winner: cands[i].ID,
		EstimatedTTFTSecs: d.EstimatedTTFT, PrefillSecs: d.PrefillSecs, Steered: d.Steered, Guards: d.Guards,
		DecisionSecs: now.Sub(start).Seconds(), Candidates: make([]decisionlog.Candidate, len(mr.routes)),
	}
	if rec.Guards == nil {
		rec.Guards = []string{}
	}
	if x != nil {
		rec.DecidedBy, rec.HotOwners = x.DecidedBy, x.HotOwners
	}
	done := make([]bool, len(mr.routes))
	for k, j := range offered {
		c := &rec.Candidates[j]
		describeCandidate(c, cands[k])
		c.State = decisionlog.StateOffered
		if x != nil && k < len(x.Replicas) {
			ce := &x.Replicas[k]
			priced, est := ce.PricedCachedTokens, ce.Estimate.TTFTSecs
			c.PricedCachedTokens, c.EstimatedTTFTSecs, c.SetAside, c.Score = &priced, &est, ce.SetAside, ce.Score
		}
		done[j] = true
	}
	at := clock.Of(now)
	why := ex.obs.why
	for j := range mr.routes {
		if done[j] {
			continue
		}
		var cand policy.Candidate
		g.candidate(&cand, &mr.routes[j], at)
		cand.Cached = -1 // not looked up for a replica not offered
		c := &rec.Candidates[j]
		describeCandidate(c, cand)
		c.State = decisionlog.StateTried // offered nothing and found usable with room: an earlier attempt's
		if j < len(why) && why[j] != "" {
			c.State = why[j]
		}
	}
	return rec
}

// describeCandidate fills c with the load and prediction of cand, whose
// unknown values become nulls.
func describeCandidate(c *decisionlog.Candidate, cand policy.Candidate) {
	c.Replica, c.InFlight, c.QueuedPrefillSecs = cand.ID, cand.InFlight, cand.QueuedPrefill
	if cand.Running >= 0 {
		// A fresh report sets Running; Waiting comes from the same one.
		c.Running, c.Waiting = &cand.Running, &cand.Waiting
	}
	if cand.KVUsage >= 0 {
		c.KVUsage = &cand.KVUsage
	}
	if cand.Cached >= 0 {
		c.CachedTokens = &cand.Cached
	}
}
