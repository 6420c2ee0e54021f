package decisionlog

import "time"

// Record is one routing decision: what the policy was offered and why it
// chose as it did. Fields the gateway could not know are null, never a
// number that would read as idle or uncached.
type Record struct {
	Time      time.Time `json:"time"`
	RequestID string    `json:"request_id"`
	Model     string    `json:"model"`
	Policy    string    `json:"policy"`
	// Arm is the A/B split arm the request was routed by; "" without
	// splits.
	Arm string `json:"arm"`
	// Attempt counts the request's decisions, from 1; a retry is a new
	// decision.
	Attempt      int `json:"attempt"`
	PromptTokens int `json:"prompt_tokens"`
	// Blocks is the prompt's full KV blocks; 0 when it was not tokenized.
	Blocks int `json:"blocks"`
	// Tokenized is the tokenization outcome: tokenized, or why the prompt
	// got no prediction (as inferrail_tokenized_requests_total's result).
	Tokenized string `json:"tokenized"`
	Winner    string `json:"winner"`
	// EstimatedTTFTSecs is the cost model's estimate for the winner, and
	// PrefillSecs its prefill part, added to the winner's queue.
	EstimatedTTFTSecs float64 `json:"estimated_ttft_secs"`
	PrefillSecs       float64 `json:"prefill_secs"`
	// Steered is what steered the choice (session, hot_prefix,
	// no_prefix); "" when the policy's plain rule chose.
	Steered string `json:"steered"`
	// DecidedBy is the cost model's term that put the winner furthest
	// ahead of the runner-up; "" for other policies.
	DecidedBy string `json:"decided_by"`
	// Guards are the load guards that acted (bounded_load, kv_pressure,
	// kv_waived); the candidates they set aside say so.
	Guards []string `json:"guards"`
	// HotOwners is how many replicas own the prompt's hot root prefix; 0
	// when it is not hot.
	HotOwners int `json:"hot_owners"`
	// DecisionSecs is the time from the start of the decision to the
	// lease on the winner.
	DecisionSecs float64 `json:"decision_secs"`
	// Candidates are every replica serving the model, in the fleet's
	// order: those offered to the policy and those that were not.
	Candidates []Candidate `json:"candidates"`
}

// Candidate is one replica in a decision.
type Candidate struct {
	Replica string `json:"replica"`
	// State is offered, or why the replica was not offered: tried (an
	// earlier attempt of the request went there, and it was usable with
	// room), at_capacity (a replica whose last slot another request took
	// between the pick and its lease too), prefill_paced, unhealthy,
	// ejected or removed. A replica tried and since ejected, failing its
	// probes or full says that: it is what kept it out.
	State string `json:"state"`
	// SetAside names the guard that kept the policy from an offered
	// replica; "" when it could be chosen.
	SetAside string `json:"set_aside"`
	InFlight int64  `json:"in_flight"`
	// Running and KVUsage are from the engine's report while it is fresh;
	// null otherwise.
	Running *int64   `json:"running"`
	KVUsage *float64 `json:"kv_usage"`
	// Waiting is the engine's count of requests it has not yet scheduled,
	// from the same report (null without one), as the cost model's
	// backlog charge and copy credit read it.
	Waiting *float64 `json:"waiting"`
	// QueuedPrefillSecs is the prefill the gateway has sent the replica
	// and not seen answered.
	QueuedPrefillSecs float64 `json:"queued_prefill_secs"`
	// CachedTokens is the KV index's prediction for the prompt; null when
	// the prompt was not tokenized or the replica not offered.
	CachedTokens *int `json:"cached_tokens"`
	// PricedCachedTokens is the cached tokens the policy priced (a hot
	// prefix owner's credit when larger); null when not offered.
	PricedCachedTokens *int `json:"priced_cached_tokens"`
	// EstimatedTTFTSecs is the cost model's estimate for the replica;
	// null when not offered.
	EstimatedTTFTSecs *float64 `json:"estimated_ttft_secs"`
	// Score is kv_aware's score; 0 for other policies.
	Score float64 `json:"score"`
}

// Candidate states besides the reasons a replica was not offered.
const (
	StateOffered = "offered"
	StateTried   = "tried"
)
