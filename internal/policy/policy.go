package policy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"
)

// Candidate is one replica a policy may pick, with its load when offered.
type Candidate struct {
	ID       string
	InFlight int64 // requests in flight to it, this one not counted
	Cached   int   // prompt tokens the KV index predicts it holds; -1 without a prediction
	// QueuedPrefill is the seconds of prefill the gateway has sent it and
	// not seen answered yet; 0 when none.
	QueuedPrefill float64
	// Running is the number of requests its engine reports running while
	// that report is fresh; -1 without a fresh report (cost_model prices
	// the larger of it and InFlight).
	Running int64
	// Waiting is the number of requests its engine reports waiting to be
	// scheduled, while the report is fresh; 0 when none or unknown.
	Waiting float64
	// KVUsage is the share of its engine's KV cache in use, 0 to 1, while
	// the report is fresh; -1 without a fresh report.
	KVUsage float64
	// KVCapacityBlocks is its engine's usable KV cache size in blocks of
	// the request's BlockSize, as the engine reports it or the config sets
	// it; 0 when unknown.
	KVCapacityBlocks int
	// Pace is how its engine's times to first token have lately compared
	// with the cost model's estimates of them: measured over estimated, as
	// the gateway learns it (it offers paces within their noise of the
	// lowest as the lowest). The cost model multiplies its estimate by it,
	// so an engine slower than its peers is priced slower. 0 when unknown,
	// priced as 1.
	Pace float64
}

// blockKey folds a block's hash to the 64 bits the sketch and rendezvous hashing
// use. Both halves are hash output already, and both users mix what they
// are given, so folding needs no mixing of its own.
func blockKey(h blockhash.Hash) uint64 { return h.Lo ^ h.Hi }

// Request is what a policy may know of the request being routed.
type Request struct {
	Model string
	// ID is the request's ID. Choices do not depend on it; explanations
	// carry it.
	ID string
	// PromptTokens is the prompt's length in tokens: exact when it was
	// tokenized, else an estimate; 0 when unknown.
	PromptTokens int
	// Blocks are the chain hashes of the prompt's full KV blocks, in
	// order; nil when the prompt was not tokenized.
	Blocks []blockhash.Hash
	// BlockSize is the tokens per KV block; 0 when Blocks is nil.
	BlockSize int
	// Session is the conversation the request belongs to (x-session-id,
	// else the body's user field); "" when it names none.
	Session string
	// At is when the request is routed: the time a policy whose state
	// decays (the hot prefix sketch) counts it at. The zero time means now
	// by the policy's own clock, Settings.Now. A caller that read the clock
	// for the decision anyway passes its reading and saves a second one.
	At time.Time
}

// Decision is what Pick chose, with what the gateway needs to account for
// it.
type Decision struct {
	// Index is the chosen candidate's position in the slice Pick was given.
	Index int `json:"index"`
	// EstimatedTTFT is the cost model's estimate of the winner's time to
	// first token in seconds, W + P + X with the cached tokens the winner
	// was offered with (a hot-prefix credit left out), whatever the policy,
	// so that policies run in shadow can be compared.
	EstimatedTTFT float64 `json:"estimated_ttft_secs"`
	// PrefillSecs is the P part of EstimatedTTFT: what the gateway adds to
	// the winner's queued prefill.
	PrefillSecs float64 `json:"prefill_secs"`
	// Guards names the load guards that acted, in this order:
	// GuardBoundedLoad and GuardKVPressure when they set a candidate aside,
	// GuardKVWaived when every candidate was under KV pressure. Nil when
	// none acted (and always for policies without guards).
	Guards []string `json:"guards,omitempty"`
	// Steered is what steered the choice: SteerSession, SteerHistory,
	// SteerHotPrefix, SteerCopy, SteerNoPrefix, or "" when the policy's
	// plain rule chose.
	Steered string `json:"steered,omitempty"`
}

// Guard names in Decision.Guards and CandidateExplanation.SetAside.
const (
	GuardBoundedLoad = "bounded_load"
	GuardKVPressure  = "kv_pressure"
	GuardKVWaived    = "kv_waived"
)

// Steering reasons in Decision.Steered.
const (
	// SteerSession: cost_model sent the request to its conversation's
	// last replica.
	SteerSession = "session"
	// SteerHistory: cost_model sent the request back to the replica of the
	// earlier prompt it extends, which the index had forgotten everywhere
	// (history affinity).
	SteerHistory = "history"
	// SteerHotPrefix: cost_model's winner is a hot prefix owner that won
	// only through the credit for a prefix it did not hold.
	SteerHotPrefix = "hot_prefix"
	// SteerCopy: cost_model's winner holds none of the root prefix and won
	// only through the credit for the copy it makes (HotPrefixParams.Copies).
	SteerCopy = "copy"
	// SteerNoPrefix: prefix_hash had no full block to hash and fell back to
	// power of two choices.
	SteerNoPrefix = "no_prefix"
)

// Policy picks one of the candidates. Both methods are called only with at
// least one candidate, never modify the slices they are given, and are
// safe for concurrent use.
type Policy interface {
	Name() string
	// Pick chooses a candidate and commits the choice to the policy's
	// state: a rotation, a generator, the hot prefix sketch, the session
	// table.
	Pick(req *Request, cands []Candidate) Decision
	// Explain returns what Pick would return now for the same arguments
	// (with the same clock reading, and no Pick in between), and every
	// candidate's estimate. It changes no state.
	Explain(req *Request, cands []Candidate) Explanation
	// PickExplained is Pick with the explanation of the choice it made,
	// both under one hold of the policy's state: Explain and then Pick
	// would let another request's Pick run in between, and the
	// explanation would then describe a choice this Pick did not make.
	// The explanation's Decision is the returned one.
	PickExplained(req *Request, cands []Candidate) (Decision, Explanation)
}

// Names of the policies this package provides.
const (
	RoundRobin   = "round_robin"
	Random       = "random"
	LeastRequest = "least_request"
	P2C          = "p2c"
	PrefixHash   = "prefix_hash"
	KVAware      = "kv_aware"
	CostModel    = "cost_model"
)

// Names lists every policy name New and NewWith accept.
func Names() []string {
	return []string{RoundRobin, Random, LeastRequest, P2C, PrefixHash, KVAware, CostModel}
}

// ErrUnknownPolicy is returned for a name Names does not list.
var ErrUnknownPolicy = errors.New("unknown policy")

// New builds the named policy with DefaultSettings and the given seed.
func New(name string, seed uint64) (Policy, error) {
	s := DefaultSettings()
	s.Seed = seed
	return NewWith(name, s)
}

// NewWith builds the named policy with the given settings, which must be
// valid. Randomized policies draw from a generator seeded with s.Seed, so
// the same seed and the same sequence of calls give the same choices.
func NewWith(name string, s Settings) (Policy, error) {
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("policy %s: %w", name, err)
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	switch name {
	case RoundRobin:
		return &roundRobin{cost: s.Cost}, nil
	case Random:
		return &drawn{name: Random, cost: s.Cost, draw: anyOne, src: newSource(s.Seed)}, nil
	case LeastRequest:
		return &drawn{name: LeastRequest, cost: s.Cost, draw: fewestInFlight, src: newSource(s.Seed)}, nil
	case P2C:
		return &drawn{name: P2C, cost: s.Cost, draw: twoChoices, src: newSource(s.Seed)}, nil
	case PrefixHash:
		return &prefixHash{cost: s.Cost, blocks: s.PrefixHashBlocks, src: newSource(s.Seed)}, nil
	case KVAware:
		return &kvAware{cost: s.Cost, w: s.KVAware, src: newSource(s.Seed)}, nil
	case CostModel:
		return newCostModel(s), nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownPolicy, name)
}

// source is a seeded generator whose next draws can be previewed: peek
// returns a generator in the same state, so Explain draws exactly what the
// next Pick will without advancing the original. Guarded by the owning
// policy's mutex.
type source struct {
	pcg rand.PCG
	r   *rand.Rand // draws from pcg
}

func newSource(seed uint64) *source {
	s := &source{pcg: *rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)}
	s.r = rand.New(&s.pcg)
	return s
}

func (s *source) peek() *rand.Rand {
	c := s.pcg
	return rand.New(&c)
}

// draw runs choose with the policy's generator, advancing it (commit) or
// with a preview of it.
func (s *source) draw(mu *sync.Mutex, commit bool, choose func(r *rand.Rand) int) int {
	mu.Lock()
	defer mu.Unlock()
	if commit {
		return choose(s.r)
	}
	return choose(s.peek())
}

type roundRobin struct {
	cost CostParams
	next atomic.Uint64
}

func (*roundRobin) Name() string { return RoundRobin }

func (p *roundRobin) Pick(req *Request, cands []Candidate) Decision {
	i := int((p.next.Add(1) - 1) % uint64(len(cands)))
	return plainDecision(p.cost, req, cands, i)
}

func (p *roundRobin) PickExplained(req *Request, cands []Candidate) (Decision, Explanation) {
	d := p.Pick(req, cands)
	return d, explainPlain(RoundRobin, p.cost, req, cands, d)
}

func (p *roundRobin) Explain(req *Request, cands []Candidate) Explanation {
	i := int(p.next.Load() % uint64(len(cands)))
	return explainPlain(RoundRobin, p.cost, req, cands, plainDecision(p.cost, req, cands, i))
}

// drawn is a policy that chooses on load alone with a seeded generator:
// random, least_request and p2c, which differ only in draw.
type drawn struct {
	name string
	cost CostParams
	draw func(cands []Candidate, r *rand.Rand) int
	mu   sync.Mutex // guards src
	src  *source
}

func (p *drawn) Name() string { return p.name }

func (p *drawn) choose(req *Request, cands []Candidate, commit bool) Decision {
	i := p.src.draw(&p.mu, commit, func(r *rand.Rand) int { return p.draw(cands, r) })
	return plainDecision(p.cost, req, cands, i)
}

func (p *drawn) Pick(req *Request, cands []Candidate) Decision { return p.choose(req, cands, true) }

// PickExplained explains the drawn decision itself: the explanation reads
// only the decision and the candidates, so no lock need span both.
func (p *drawn) PickExplained(req *Request, cands []Candidate) (Decision, Explanation) {
	d := p.choose(req, cands, true)
	return d, explainPlain(p.name, p.cost, req, cands, d)
}

func (p *drawn) Explain(req *Request, cands []Candidate) Explanation {
	return explainPlain(p.name, p.cost, req, cands, p.choose(req, cands, false))
}

// anyOne draws a candidate uniformly.
func anyOne(cands []Candidate, r *rand.Rand) int { return r.IntN(len(cands)) }

// fewestInFlight returns a candidate with the fewest requests in flight;
// ties are broken uniformly at random (reservoir sampling over the tied
// ones).
func fewestInFlight(cands []Candidate, r *rand.Rand) int {
	best, ties := 0, 0
	for i, c := range cands {
		switch {
		case c.InFlight < cands[best].InFlight:
			best, ties = i, 1
		case c.InFlight == cands[best].InFlight:
			ties++
			if r.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// twoChoices draws two distinct candidates and keeps the one with fewer
// requests in flight, either on a tie.
func twoChoices(cands []Candidate, r *rand.Rand) int {
	if len(cands) == 1 {
		return 0
	}
	a := r.IntN(len(cands))
	b := r.IntN(len(cands) - 1)
	if b >= a {
		b++
	}
	switch {
	case cands[a].InFlight < cands[b].InFlight:
		return a
	case cands[b].InFlight < cands[a].InFlight:
		return b
	case r.IntN(2) == 0:
		return a
	}
	return b
}

// plainDecision is the Decision of a policy without guards or steering
// that chose cands[i].
func plainDecision(cost CostParams, req *Request, cands []Candidate, i int) Decision {
	cached := cachedTokens(req, &cands[i])
	e := cost.estimate(req, &cands[i], cached)
	return Decision{Index: i, EstimatedTTFT: e.TTFTSecs, PrefillSecs: e.PrefillSecs}
}

// mix64 is the splitmix64 finalizer: a bijection of uint64 whose output
// bits all depend on every input bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// idHash is the 64-bit FNV-1a hash of a replica ID.
func idHash(id string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 0x100000001b3
	}
	return h
}

// rendezvous is the weight of replica id for key in highest random weight
// hashing. It depends on nothing but its arguments, so every gateway (and
// every restart) agrees on it.
func rendezvous(key uint64, id string) uint64 { return mix64(key ^ idKey(id)) }

// idKey is the part of rendezvous that depends on id alone, for callers
// that keep it.
func idKey(id string) uint64 { return mix64(idHash(id)) }
