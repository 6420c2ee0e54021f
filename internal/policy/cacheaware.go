package policy

import (
	"math/rand/v2"
	"sync"
)

// prefixHash sends every prompt that starts with the same blocks to the same
// replica, whatever the load: the candidate with the highest rendezvous
// weight for the hash of its first blocks. Adding or removing a replica
// moves only the prompts that go to or came from it.
type prefixHash struct {
	cost   CostParams
	blocks int
	mu     sync.Mutex // guards src
	src    *source    // for prompts without a full block
}

func (*prefixHash) Name() string { return PrefixHash }

func (p *prefixHash) choose(req *Request, cands []Candidate, commit bool) Decision {
	j := min(len(req.Blocks), p.blocks)
	if j == 0 {
		i := p.src.draw(&p.mu, commit, func(r *rand.Rand) int { return twoChoices(cands, r) })
		d := plainDecision(p.cost, req, cands, i)
		d.Steered = SteerNoPrefix
		return d
	}
	// The chain hash of block j-1 stands for blocks 0 to j-1.
	key := blockKey(req.Blocks[j-1])
	best, weight := 0, uint64(0)
	for i := range cands {
		if w := rendezvous(key, cands[i].ID); i == 0 || w > weight {
			best, weight = i, w
		}
	}
	return plainDecision(p.cost, req, cands, best)
}

func (p *prefixHash) Pick(req *Request, cands []Candidate) Decision {
	return p.choose(req, cands, true)
}

func (p *prefixHash) PickExplained(req *Request, cands []Candidate) (Decision, Explanation) {
	d := p.choose(req, cands, true)
	return d, explainPlain(PrefixHash, p.cost, req, cands, d)
}

func (p *prefixHash) Explain(req *Request, cands []Candidate) Explanation {
	return explainPlain(PrefixHash, p.cost, req, cands, p.choose(req, cands, false))
}

// kvAware scores each candidate CacheWeight·cached/prompt −
// LoadWeight·in_flight/busiest, where busiest is the most requests in flight
// on any candidate, and picks the best score; ties go to fewer requests in
// flight, then to chance.
type kvAware struct {
	cost CostParams
	w    KVWeights
	mu   sync.Mutex // guards src
	src  *source
}

func (*kvAware) Name() string { return KVAware }

// score is the candidate's kv_aware score; busiest is the highest
// InFlight among the candidates.
func (p *kvAware) score(req *Request, c *Candidate, busiest int64) float64 {
	s := 0.0
	if req.PromptTokens > 0 {
		s = p.w.CacheWeight * float64(cachedTokens(req, c)) / float64(req.PromptTokens)
	}
	if busiest > 0 {
		s -= p.w.LoadWeight * float64(max(c.InFlight, 0)) / float64(busiest)
	}
	return s
}

func (p *kvAware) choose(req *Request, cands []Candidate, commit bool) Decision {
	busiest := int64(0)
	for i := range cands {
		busiest = max(busiest, cands[i].InFlight)
	}
	i := p.src.draw(&p.mu, commit, func(r *rand.Rand) int {
		best, ties, top := 0, 0, 0.0
		for i := range cands {
			s := p.score(req, &cands[i], busiest)
			switch {
			case i == 0 || s > top || (s == top && cands[i].InFlight < cands[best].InFlight):
				best, ties, top = i, 1, s
			case s == top && cands[i].InFlight == cands[best].InFlight:
				ties++
				if r.IntN(ties) == 0 {
					best = i
				}
			}
		}
		return best
	})
	return plainDecision(p.cost, req, cands, i)
}

func (p *kvAware) Pick(req *Request, cands []Candidate) Decision { return p.choose(req, cands, true) }

func (p *kvAware) PickExplained(req *Request, cands []Candidate) (Decision, Explanation) {
	d := p.choose(req, cands, true)
	return d, p.explain(req, cands, d)
}

func (p *kvAware) Explain(req *Request, cands []Candidate) Explanation {
	return p.explain(req, cands, p.choose(req, cands, false))
}

// explain explains the decision d with every candidate's score, which
// depends on the candidates alone.
func (p *kvAware) explain(req *Request, cands []Candidate, d Decision) Explanation {
	ex := explainPlain(KVAware, p.cost, req, cands, d)
	busiest := int64(0)
	for i := range cands {
		busiest = max(busiest, cands[i].InFlight)
	}
	for i := range cands {
		ex.Replicas[i].Score = p.score(req, &cands[i], busiest)
	}
	return ex
}
