// Package engine holds the stress scenarios of the simulator alone, behind
// inferrail-bench stress: each runs against fresh inferrail-sim child
// processes (package procs).
//
//   - sim-streams opens many concurrent streamed chat requests against one
//     simulator child, once with the default latency model and once with
//     --zero-latency, and checks that every stream ends properly.
//   - sim-soak sends a long mixed workload to a --zero-latency child and
//     follows the child's resident memory.
//
// Run writes <scenario>.json per scenario into the results directory and
// regenerates its README.md (WriteReport), which also shows the engine-step
// Go benchmarks' saved output when present.
package engine
