package workload

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

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
	return analyze(len(reqs), blockSize, func(i int) time.Duration { return reqs[i].At }, func(i int) Request { return reqs[i] })
}

// AnalyzeRequests is Analyze of reqs, asking for a few requests at a time:
// what it holds at once is the cache's blocks, not every prompt.
func AnalyzeRequests(reqs *Requests, blockSize int) (*Analysis, error) {
	return analyze(reqs.Len(), blockSize, func(i int) time.Duration { return reqs.Head(i).At }, reqs.Request)
}

// analyze is Analyze of n requests, request i scheduled at(i) and made by
// get(i). It takes them in At order a batch at a time, hashing a batch's
// prompts in parallel and then replaying it, so that only one batch's
// prompts and hashes are held at once.
func analyze(n, blockSize int, at func(i int) time.Duration, get func(i int) Request) (*Analysis, error) {
	if blockSize < 1 {
		return nil, errors.New("block size: must be >= 1")
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(at(x), at(y)) })
	a := &Analysis{PromptTokens: make([]int, n), CachedTokens: make([]int, n)}
	var errs []error
	seen := make(map[blockhash.Hash]struct{})
	workers := runtime.GOMAXPROCS(0)
	hashes := make([][]blockhash.Hash, 4*workers) // of the batch's requests
	for lo := 0; lo < n; lo += len(hashes) {
		batch := order[lo:min(n, lo+len(hashes))]
		bad := make([]error, len(batch))
		var wg sync.WaitGroup
		for w := range min(workers, len(batch)) {
			wg.Go(func() {
				for k := w; k < len(batch); k += workers {
					r := get(batch[k])
					ids, salt, err := promptIDs(&r)
					if err != nil {
						bad[k] = fmt.Errorf("request %d: %w", batch[k], err)
						continue
					}
					a.PromptTokens[batch[k]] = len(ids)
					hashes[k] = blockhash.Extend(hashes[k][:0], blockhash.Seed("", "", salt), ids, blockSize)
				}
			})
		}
		wg.Wait()
		for _, err := range bad {
			if err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 {
			continue // the rest are still tokenized, to report theirs too
		}
		for k, i := range batch {
			hs := hashes[k]
			hit, lookup := 0, min(len(hs), max(a.PromptTokens[i]-1, 0)/blockSize)
			for hit < lookup {
				if _, ok := seen[hs[hit]]; !ok {
					break
				}
				hit++
			}
			for _, h := range hs[hit:] {
				seen[h] = struct{}{}
			}
			a.CachedTokens[i] = hit * blockSize
			a.Prompt += int64(a.PromptTokens[i])
			a.Cached += int64(a.CachedTokens[i])
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
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
