package bench

import "github.com/inferrail/inferrail/internal/workload"

// defaultGenerate and defaultOracle are what a RunEnv without its own
// uses.
var (
	defaultGenerate = workload.Generate
	defaultOracle   = workload.OracleHitRate
)
