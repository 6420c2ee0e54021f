package workload

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/inferrail/inferrail/internal/blockhash"

	"github.com/inferrail/inferrail/internal/tokenize"
)

// Analysis is what an unlimited prefix cache would make of a request
// stream: per request, its prompt tokens as builtin:sim counts them and the
// tokens whose whole block an earlier request already carried.
type Analysis struct {
	PromptTokens []int // per request, in the order given
	CachedTokens []int // per request, in the order given
	Prompt       int64 // sum of PromptTokens
	Cached       int64 // sum of CachedTokens
}

// HitRate is Cached over Prompt, 0 when there are no prompt tokens.
func (a *Analysis) HitRate() float64 {
	if a.Prompt == 0 {
		return 0
	}
	return float64(a.Cached) / float64(a.Prompt)
}

// OracleHitRate is Analyze(reqs, blockSize).HitRate().
func OracleHitRate(reqs []Request, blockSize int) (float64, error) {
	a, err := Analyze(reqs, blockSize)
	if err != nil {
		return 0, err
	}
	return a.HitRate(), nil
}

// Analyze tokenizes every request's prompt exactly as the simulator does
// (tokenize.ParseChatRequest or ParseCompletionRequest, then the builtin:sim
// tokenizer's PromptIDs), chains its block hashes and replays the requests
// in At order (ties in the order given) against an unlimited cache that
// keeps every block of every earlier prompt. A request's cached tokens are
// blockSize times the leading blocks found, counting at most the blocks
// before its last token, as the simulator (and vLLM) always compute that
// one; every full block is then cached. Requests are taken to name one
// model: the model field does not salt the hashes, cache_salt does.
func Analyze(reqs []Request, blockSize int) (*Analysis, error) {
	if blockSize < 1 {
		return nil, errors.New("block size: must be >= 1")
	}
	hashes := make([][]blockhash.Hash, len(reqs))
	a := &Analysis{
		PromptTokens: make([]int, len(reqs)),
		CachedTokens: make([]int, len(reqs)),
	}
	errs := make([]error, len(reqs))
	workers := min(runtime.GOMAXPROCS(0), len(reqs))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(reqs); i += workers {
				ids, salt, err := promptIDs(&reqs[i])
				if err != nil {
					errs[i] = fmt.Errorf("request %d: %w", i, err)
					continue
				}
				a.PromptTokens[i] = len(ids)
				seed := blockhash.Seed("", "", salt)
				hashes[i] = blockhash.Extend(nil, seed, ids, blockSize)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(reqs[x].At, reqs[y].At) })
	seen := make(map[blockhash.Hash]struct{})
	for _, i := range order {
		hit, lookup := 0, min(len(hashes[i]), max(a.PromptTokens[i]-1, 0)/blockSize)
		for hit < lookup {
			if _, ok := seen[hashes[i][hit]]; !ok {
				break
			}
			hit++
		}
		for _, h := range hashes[i][hit:] {
			seen[h] = struct{}{}
		}
		a.CachedTokens[i] = hit * blockSize
		a.Prompt += int64(a.PromptTokens[i])
		a.Cached += int64(a.CachedTokens[i])
	}
	return a, nil
}

// promptIDs returns the builtin:sim prompt ids of r and its cache salt.
func promptIDs(r *Request) ([]int, string, error) {
	var p *tokenize.Prompt
	var err error
	switch r.Path {
	case ChatPath:
		p, err = tokenize.ParseChatRequest(r.Body)
	case "/v1/completions":
		p, err = tokenize.ParseCompletionRequest(r.Body)
	default:
		return nil, "", fmt.Errorf("path %q: want %s or /v1/completions", r.Path, ChatPath)
	}
	if err != nil {
		return nil, "", err
	}
	return simTok.PromptIDs(p), p.CacheSalt, nil
}
