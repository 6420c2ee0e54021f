// Package bench is inferrail's open-loop benchmark harness, behind
// inferrail-bench run, compare, sweep, report and demo: it drives real
// processes over real sockets and writes machine-readable results and
// Markdown reports. (The stress scenarios are packages stress/engine and
// stress/gateway; the child processes both start are package procs.)
//
// Measure is one open-loop run (inferrail-bench run): a workload's requests
// leave at their scheduled times whatever earlier ones are doing
// (RunOpenLoop), against a cold fleet of simulator children behind a
// gateway child (StartFleet) or an existing URL, and the figures
// (Measurements) count from the scheduled times. Sweep carries out many
// runs from a TOML file (ParseSweep, SweepFile.Plan), resuming past runs
// whose result file records the same RunSpec, and WriteRunReport turns
// result files alone into a Markdown report with PNG charts (p99 TTFT and
// goodput against the offered rate), the milestone verdict and the
// benchmark plan's targets, rebuilt byte for byte from the same files. Demo
// is make demo's comparison of two policies on the same W1 requests.
//
// A run's policy may also name a peer router, peer:<router>:<policy>
// (procs.ParsePeerPolicy): vllm-router or sglang-router from PyPI,
// installed into a venv of their own by bench/peers/venv.sh
// (procs.MakePeerVenv) and started in place of the gateway in front of the
// same simulators (procs.StartPeer). Their results have no predictions,
// and requests per replica come from the simulators' own counters.
package bench
