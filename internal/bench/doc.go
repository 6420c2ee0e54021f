// Package bench is inferrail's benchmark harness: it drives real processes
// over real sockets and writes machine-readable results and a short Markdown
// report.
//
// It holds the simulator stress scenarios that Stress runs (the gateway's
// run through GatewayStress):
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
//
// It also holds the policy benchmarks. Measure is one open-loop run
// (inferrail-bench run): a workload's requests leave at their scheduled
// times whatever earlier ones are doing (RunOpenLoop), against a cold fleet
// of simulator children behind a gateway child (StartFleet) or an existing
// URL, and the figures (Measurements) count from the scheduled times.
// Sweep carries out many runs from a TOML file (ParseSweep,
// SweepFile.Plan), resuming past runs whose result file records the same
// RunSpec, and WriteRunReport turns result files alone into a Markdown
// report with PNG charts (p99 TTFT and goodput against the offered rate),
// the milestone verdict and the benchmark plan's targets, rebuilt byte for
// byte from the same files. Demo is make demo's comparison of two policies
// on the same W1 requests.
//
// A run's policy may also name a peer router, peer:<router>:<policy>
// (ParsePeerPolicy): vllm-router or sglang-router from PyPI, installed into
// a venv of their own by bench/peers/venv.sh (MakePeerVenv) and started in
// place of the gateway in front of the same simulators (StartPeer). Their
// results have no predictions, and requests per replica come from the
// simulators' own counters.
package bench
