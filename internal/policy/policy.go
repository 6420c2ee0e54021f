// Package policy chooses, among the replicas a request may go to, the one it
// goes to. Policies are values: the gateway builds one per model and offers
// it only replicas that serve the model, are healthy and have room.
package policy

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Candidate is one replica a policy may pick, with its load when offered.
type Candidate struct {
	ID       string
	InFlight int64 // requests in flight to it, this one not counted
	Cached   int   // prompt tokens the KV index predicts it holds; -1 without a prediction
}

// Request is what a policy may know of the request being routed.
type Request struct {
	Model string
}

// Policy picks one of the candidates, returning its index. It is called
// only with at least one candidate and must be safe for concurrent use.
type Policy interface {
	Name() string
	Pick(req *Request, cands []Candidate) int
}

// Names of the policies this package provides.
const (
	RoundRobin   = "round_robin"
	Random       = "random"
	LeastRequest = "least_request"
	P2C          = "p2c"
)

// Names lists every policy name New accepts.
func Names() []string { return []string{RoundRobin, Random, LeastRequest, P2C} }

// New builds the named policy. Randomized policies draw from a generator
// seeded with seed, so the same seed and the same sequence of calls give the
// same choices.
func New(name string, seed uint64) (Policy, error) {
	switch name {
	case RoundRobin:
		return &roundRobin{}, nil
	case Random:
		return &random{rng: newRNG(seed)}, nil
	case LeastRequest:
		return &leastRequest{rng: newRNG(seed)}, nil
	case P2C:
		return &p2c{rng: newRNG(seed)}, nil
	}
	return nil, fmt.Errorf("unknown policy %q", name)
}

// rng is a seeded generator shared by concurrent picks.
type rng struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newRNG(seed uint64) *rng {
	return &rng{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (g *rng) intN(n int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.r.IntN(n)
}

type roundRobin struct{ next atomic.Uint64 }

func (*roundRobin) Name() string { return RoundRobin }

func (p *roundRobin) Pick(_ *Request, cands []Candidate) int {
	return int((p.next.Add(1) - 1) % uint64(len(cands)))
}

type random struct{ rng *rng }

func (*random) Name() string { return Random }

func (p *random) Pick(_ *Request, cands []Candidate) int { return p.rng.intN(len(cands)) }

type leastRequest struct{ rng *rng }

func (*leastRequest) Name() string { return LeastRequest }

// Pick returns a candidate with the fewest requests in flight; ties are
// broken uniformly at random (reservoir sampling over the tied ones).
func (p *leastRequest) Pick(_ *Request, cands []Candidate) int {
	best, ties := 0, 0
	p.rng.mu.Lock()
	defer p.rng.mu.Unlock()
	for i, c := range cands {
		switch {
		case c.InFlight < cands[best].InFlight:
			best, ties = i, 1
		case c.InFlight == cands[best].InFlight:
			ties++
			if p.rng.r.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

type p2c struct{ rng *rng }

func (*p2c) Name() string { return P2C }

// Pick draws two distinct candidates and keeps the one with fewer requests
// in flight, either on a tie.
func (p *p2c) Pick(_ *Request, cands []Candidate) int {
	if len(cands) == 1 {
		return 0
	}
	p.rng.mu.Lock()
	defer p.rng.mu.Unlock()
	a := p.rng.r.IntN(len(cands))
	b := p.rng.r.IntN(len(cands) - 1)
	if b >= a {
		b++
	}
	switch {
	case cands[a].InFlight < cands[b].InFlight:
		return a
	case cands[b].InFlight < cands[a].InFlight:
		return b
	case p.rng.r.IntN(2) == 0:
		return a
	}
	return b
}
