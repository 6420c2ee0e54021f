// Package stress holds the stress scenarios behind inferrail-bench stress
// and gwstress: each drives real child processes (package procs) over real
// sockets, writes <scenario>.json per scenario and regenerates a README.md
// of the results next to them.
//
// Sim runs the simulator scenarios:
//
//   - sim-streams opens many concurrent streamed chat requests against one
//     inferrail-sim child process, once with the default latency model and
//     once with --zero-latency, and checks that every stream ends properly.
//   - sim-soak sends a long mixed workload (chat and completions, streamed or
//     not, varied prompts with shared prefixes, some cancelled by the client)
//     to a --zero-latency child and follows the child's resident memory.
//
// Gateway runs the gateway scenarios (GatewayScenarios) against an
// inferrail-gateway child in front of simulators: streams, overhead,
// routing, replica kills, hangs and flaps, client disconnects, hostile
// clients, a soak, slow readers and a slow request body.
//
// RunStreams and RunSoak are the load generators behind the simulator
// scenarios; they take a base URL, so tests can point them at an
// in-process simulator or at a port where nothing listens. Targets are
// reported as measured figures, never asserted against a clock: the
// machines these run on are shared.
package stress
