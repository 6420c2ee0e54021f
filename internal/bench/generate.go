package bench

import "github.com/inferrail/inferrail/internal/workload"

// defaultGenerate and defaultOracle are what a RunEnv without its own
// uses.
var (
	defaultGenerate = workload.GenerateRequests
	defaultOracle   = measuredOracle
)

// measuredOracle is the oracle hit rate of the requests after the first
// warm: the share of their prompt tokens whose prefix any earlier request,
// warmup included, already carried. Measured hit rates leave the warmup
// out, so the ceiling they are set against must too.
func measuredOracle(reqs *workload.Requests, blockSize, warm int) (float64, error) {
	a, err := workload.AnalyzeRequests(reqs, blockSize)
	if err != nil {
		return 0, err
	}
	var prompt, cached int64
	for i := warm; i < len(a.PromptTokens); i++ {
		prompt += int64(a.PromptTokens[i])
		cached += int64(a.CachedTokens[i])
	}
	if prompt == 0 {
		return 0, nil
	}
	return float64(cached) / float64(prompt), nil
}
