package policy

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Settings configures the policies NewWith builds. Start from
// DefaultSettings: several zero values are invalid. Baselines use only Seed
// and Cost (for the estimate every Decision carries).
type Settings struct {
	// Seed seeds every random choice, so the same seed and the same calls
	// give the same choices. 0 is a seed like any other.
	Seed uint64

	// Epsilon is cost_model's bounded-load slack: it never picks a replica
	// whose in-flight count, this request included, would exceed
	// ceil((1+Epsilon)·(total in flight+1)/n). Must be >= 0; default 1.
	Epsilon float64
	// Kappa is the KV cache use (0 to 1) above which cost_model sets a
	// replica aside for a prompt with more than ShortPromptTokens tokens to
	// compute there, unless every replica the bounded-load guard allows is
	// above it. Default 0.92.
	Kappa float64
	// ShortPromptTokens is the number of tokens to compute up to which the
	// KV-pressure guard does not apply. Must be >= 0; default 256.
	ShortPromptTokens int
	// KVGuard says which replicas above Kappa the KV-pressure guard sets
	// aside, for a prompt with more than ShortPromptTokens to compute
	// there: KVGuardFreeBlocks (the default) only those whose free blocks,
	// (1 − KV use) · capacity, are fewer than the blocks the prompt would
	// compute there (replicas of unknown capacity as KVGuardUsage does);
	// KVGuardUsage every one.
	KVGuard string
	// SessionAffinity sends cost_model's requests that name a conversation
	// (Request.Session) back to the replica its last request went to, while
	// that replica is a candidate and the guards allow it. Default false.
	SessionAffinity bool
	// HistoryAffinity sends cost_model's requests that session affinity did
	// not place and that extend an earlier prompt (a conversation's next
	// turn) back to that prompt's replica when the index has forgotten that
	// prompt's tail on every candidate, while the guards allow it. Default
	// false.
	HistoryAffinity bool
	// BacklogCost ranks cost_model's candidates by their estimate plus a
	// charge for the prefill the request would need there beyond the least
	// any allowed candidate needs: that much once per request its engine
	// reports waiting (Candidate.Waiting). The extra work delays the
	// requests that queue behind it, which the request's own estimate does
	// not see; the waiting count stands for how many will, as a backlog
	// that long takes as long to clear. Moving a request off the replica
	// that holds its context is what costs extra work; where engines hold
	// nothing waiting the charge is 0. Default false.
	BacklogCost bool
	// Sessions is how many conversations cost_model remembers for session
	// affinity, and how many prompts' replicas for history affinity; beyond
	// it the least recently routed one is forgotten (LRU). Must be >= 1;
	// default 65536.
	Sessions int

	// PrefixHashBlocks is how many leading KV blocks of a prompt choose its
	// replica under prefix_hash. Must be >= 1; default 4.
	PrefixHashBlocks int
	// Cost is the cost model's parameters.
	Cost CostParams
	// KVAware weighs kv_aware's score.
	KVAware KVWeights
	// HotPrefix tunes cost_model's replication of hot root prefixes.
	HotPrefix HotPrefixParams

	// Now is the clock the hot-prefix sketch decays by. Nil means time.Now.
	// Tests set it so that Explain and Pick see the same instant.
	Now func() time.Time
	// Start is when the policy starts counting time: the hot-prefix
	// sketch's ticks are counted from it. The zero time means Now() when
	// the policy is built. A replay sets it to rebuild a policy exactly.
	Start time.Time
}

// CostParams are the cost model's parameters, all in seconds and all >= 0.
type CostParams struct {
	// PrefillTokenSecs is a, seconds per computed token. Default 0.0001.
	PrefillTokenSecs float64
	// PrefillPairSecs is b, seconds per pair of a computed token and a token
	// it attends to. Default 0.0000000033.
	PrefillPairSecs float64
	// PrefillFixedSecs is d, seconds per prefill whatever its length.
	// Default 0.005.
	PrefillFixedSecs float64
	// DecodeInterferenceSecs is what each running request adds to the wait
	// for a new request's first token. Default 0.0005: an engine that
	// chunks prefills shares every step with the running decodes, one token
	// each, and a token costs a = 0.1 ms; a prompt of a few thousand tokens
	// spans about five steps of a 2,048-token budget, so each running
	// request delays its first token by about 5 × 0.1 ms.
	DecodeInterferenceSecs float64
}

// KVWeights weighs kv_aware's score, CacheWeight·cached/prompt minus
// LoadWeight·in_flight/busiest. Both must be >= 0; both default to 1.
type KVWeights struct {
	CacheWeight float64
	LoadWeight  float64
}

// HotPrefixParams tunes how cost_model spreads a root prefix whose prefill
// demand is more than one replica should carry.
type HotPrefixParams struct {
	// Blocks is the length of a root prefix in KV blocks. 0 turns hot
	// prefix replication off; must be >= 0; default 4.
	Blocks int
	// Window is the time constant of the demand count's decay: demand
	// older than about a window counts for a third. Must be > 0 when Blocks
	// is; default 10s.
	Window time.Duration
	// Utilization is the share of one replica's time, in (0, 1], a root
	// prefix's prefill may take before it gets more owners: a root with
	// demand D seconds of prefill per second gets ceil(D/Utilization).
	// Default 0.5.
	Utilization float64
	// Demand says what makes a prefix hot. DemandPrefill counts the
	// prefill the chosen replica computes, its uncached tokens'.
	// DemandPrompt counts each request's whole prompt's prefill, as if
	// nothing were cached: the work a prefix's traffic brings to the
	// replicas that hold it. Counted as computed, a prefix that one replica
	// holds looks cold however much traffic it draws there, because that
	// replica computes little of it; counted whole, a long system prompt
	// looks hot at a fraction of the traffic that would need a second
	// owner. DemandShare (the default) counts the computed prefill and,
	// beside it, the prefix's share of the fleet's arrivals: a prefix is as
	// hot as the more of its prefill demand and its arrivals in replicas'
	// worth (share · candidates), so a prefix drawing more than
	// Utilization of one replica's arrivals gets a second owner however
	// little its holder computes.
	Demand string
	// Copies credits every candidate that holds neither the root prefix
	// nor an owner's credit with the waiting a copy there would have saved:
	// what the root's requests lately waited, on the replicas holding it,
	// beyond the least queued candidate's queue, shared among the
	// candidates without it, and given only to those that are idle (nothing
	// queued, nothing waiting). A copy costs one request a miss once and
	// spares the prefix's later requests queueing behind its holders, so
	// it is made, on an idle candidate where the miss is cheapest, once
	// their waiting outweighs that miss. On by default: over 300 s runs
	// it shortened the tails of W2, W5 and W8 and moved no other
	// workload's beyond its spread.
	Copies bool
}

// What a request adds to its prefixes' demand (HotPrefixParams.Demand).
const (
	DemandPrefill = "prefill"
	DemandPrompt  = "prompt"
	DemandShare   = "share"
)

// The KV-pressure guard's rules (Settings.KVGuard).
const (
	KVGuardUsage      = "usage"
	KVGuardFreeBlocks = "free_blocks"
)

// DefaultSettings returns the defaults documented on each field.
func DefaultSettings() Settings {
	return Settings{
		Epsilon:           1,
		Kappa:             0.92,
		ShortPromptTokens: 256,
		KVGuard:           KVGuardFreeBlocks,
		Sessions:          65536,
		PrefixHashBlocks:  4,
		Cost: CostParams{
			PrefillTokenSecs:       0.0001,
			PrefillPairSecs:        0.0000000033,
			PrefillFixedSecs:       0.005,
			DecodeInterferenceSecs: 0.0005,
		},
		KVAware: KVWeights{CacheWeight: 1, LoadWeight: 1},
		HotPrefix: HotPrefixParams{
			Blocks:      4,
			Window:      10 * time.Second,
			Utilization: 0.5,
			Demand:      DemandShare,
			Copies:      true,
		},
	}
}

// Validate reports every setting that breaks its rule, each named by its
// field path. It has no side effects.
func (s *Settings) Validate() error {
	var errs []error
	fail := func(path, rule string) { errs = append(errs, fmt.Errorf("%s: %s", path, rule)) }
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	if !finite(s.Epsilon) || s.Epsilon < 0 {
		fail("epsilon", "must be >= 0")
	}
	if !(s.Kappa >= 0 && s.Kappa <= 1) {
		fail("kappa", "must be between 0 and 1")
	}
	if s.ShortPromptTokens < 0 {
		fail("short_prompt_tokens", "must be >= 0")
	}
	if s.KVGuard != KVGuardUsage && s.KVGuard != KVGuardFreeBlocks {
		fail("kv_guard", fmt.Sprintf("must be %s or %s, not %q", KVGuardUsage, KVGuardFreeBlocks, s.KVGuard))
	}
	if s.Sessions < 1 {
		fail("sessions", "must be >= 1")
	}
	if s.PrefixHashBlocks < 1 {
		fail("prefix_hash.blocks", "must be >= 1")
	}
	for _, f := range []struct {
		path string
		v    float64
	}{
		{"cost_model.prefill_token_secs", s.Cost.PrefillTokenSecs},
		{"cost_model.prefill_pair_secs", s.Cost.PrefillPairSecs},
		{"cost_model.prefill_fixed_secs", s.Cost.PrefillFixedSecs},
		{"cost_model.decode_interference_secs", s.Cost.DecodeInterferenceSecs},
		{"kv_aware.cache_weight", s.KVAware.CacheWeight},
		{"kv_aware.load_weight", s.KVAware.LoadWeight},
	} {
		if !finite(f.v) || f.v < 0 {
			fail(f.path, "must be >= 0")
		}
	}
	h := s.HotPrefix
	if h.Blocks < 0 {
		fail("hot_prefix.blocks", "must be >= 0")
	}
	if h.Blocks > 0 {
		if h.Window <= 0 {
			fail("hot_prefix.window", "must be > 0")
		}
		if !(h.Utilization > 0 && h.Utilization <= 1) {
			fail("hot_prefix.utilization", "must be > 0 and <= 1")
		}
		if h.Demand != DemandPrefill && h.Demand != DemandPrompt && h.Demand != DemandShare {
			fail("hot_prefix.demand", "must be prefill, prompt or share")
		}
	}
	return errors.Join(errs...)
}

// For returns the settings the named policy reads: s with every other
// field zeroed. Two policies of one name built from settings whose For is
// equal behave alike, so a reload that changes only what a policy does not
// read may keep it, and its state. For is for comparing settings: some of
// the zeroed fields are not valid to build with.
func (s Settings) For(name string) Settings {
	if name == CostModel {
		// Every field but the two other policies' own: a live tweak of
		// kv_aware's weights must not cost cost_model its sessions and
		// hot-prefix sketch.
		s.PrefixHashBlocks, s.KVAware = 0, KVWeights{}
		return s
	}
	out := Settings{Seed: s.Seed, Cost: s.Cost, Now: s.Now, Start: s.Start}
	switch name {
	case PrefixHash:
		out.PrefixHashBlocks = s.PrefixHashBlocks
	case KVAware:
		out.KVAware = s.KVAware
	}
	return out
}
