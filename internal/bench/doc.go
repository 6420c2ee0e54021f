// Package bench is inferrail's benchmark harness: it drives real processes
// over real sockets and writes machine-readable results and a short Markdown
// report.
//
// Today it holds the simulator stress scenarios that Stress runs:
//
//   - sim-streams opens many concurrent streamed chat requests against one
//     inferrail-sim child process, once with the default latency model and
//     once with --zero-latency, and checks that every stream ends properly.
//   - sim-soak sends a long mixed workload (chat and completions, streamed or
//     not, varied prompts with shared prefixes, some cancelled by the client)
//     to a --zero-latency child and follows the child's resident memory.
//
// RunStreams and RunSoak are the load generators behind those scenarios; they
// take a base URL, so tests can point them at an in-process simulator or at
// a port where nothing listens. Targets are reported as measured figures,
// never asserted against a clock: the machines these run on are shared.
package bench
