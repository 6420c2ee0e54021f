// Package policy chooses, among the replicas a request may go to, the one it
// goes to. Policies are values: the gateway builds one per model (and per
// A/B arm or shadow) and offers it only replicas that serve the model, are
// healthy and have room, each described by a Candidate.
//
// Seven policies are provided (see Names). Four are baselines that look at
// nothing but load: round_robin, random, least_request and p2c. Three use
// the prompt's cache: prefix_hash (rendezvous hashing on the prompt's first
// blocks), kv_aware (a weighted score of cached share against load) and
// cost_model, which estimates each replica's time to first token as
//
//	TTFT = W + P(u, c) + X
//	P(u, c) = a·u + b·u·(c + u/2) + d
//
// where W is the prefill queued there plus a decode interference per
// running request, u the prompt tokens it would compute, c those it holds
// and X the load time of cached tokens in slower tiers (zero until the index
// tracks tiers). cost_model never picks a replica that the bounded-load
// guard or the KV-pressure guard sets aside, spreads hot root prefixes over
// several owners (a decaying count-min sketch measures their prefill
// demand) and, with session affinity, keeps a conversation on its replica
// while the guards allow it.
//
// Every policy answers two questions: Pick chooses and commits (advancing a
// rotation or a generator, counting demand, remembering a conversation);
// Explain says what Pick would choose now, with every candidate's estimate,
// and changes nothing. Randomness comes from a generator seeded by
// Settings.Seed; Explain draws from a copy of it, so with the same clock it
// predicts the next Pick exactly. PickExplained does both under one hold of
// the policy's state, so that what it explains is the choice it made,
// whatever other requests are deciding at the same time.
//
// All policies are safe for concurrent use.
package policy
