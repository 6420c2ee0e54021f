// Package engine holds the stress scenarios of the simulator alone, behind
// inferrail-bench stress: each runs against fresh inferrail-sim child
// processes (package procs), but kv-mirror, whose simulator runs in this
// process (sim.Local) so that its cache can be read.
//
//   - sim-streams opens many concurrent streamed chat requests against one
//     simulator child, once with the default latency model and once with
//     --zero-latency, and checks that every stream ends properly.
//   - sim-soak sends a long mixed workload to a --zero-latency child and
//     follows the child's resident memory.
//   - kv-mirror sends an open-loop load through a small cache that evicts
//     constantly, follows the simulator's KV events with a kvfeed.Feed into
//     an index.Mirror and checks that the mirror equals the engine's cache
//     and that the last batches replay byte for byte; again with the
//     subscriber restarted mid-run (it must catch up by replay) and with
//     the engine restarted mid-run (the feed must purge and rebuild).
//
// Run writes <scenario>.json per scenario into the results directory and
// regenerates its README.md (WriteReport), which also shows the engine-step
// Go benchmarks' saved output when present.
package engine
