// Command inferrail-bench is inferrail's benchmark harness: open-loop runs,
// comparisons, sweeps and their reports, the simulator and gateway stress
// scenarios and the demo:
//
//	inferrail-bench run --workload w1 --rate 6 --policy least_request -- --max-num-seqs 64
//	inferrail-bench compare --workload w1 --rate 6 --policies round_robin,least_request --reps 3
//	inferrail-bench compare --workload w1 --rate 4 --policies cost_model,peer:vllm-router:cache_aware,peer:sglang-router:cache_aware
//	inferrail-bench sweep --file bench/sweeps/smoke.toml --jobs 2
//	inferrail-bench report --in bench/results/smoke --out bench/report/smoke
//	inferrail-bench stress --sim-binary bin/inferrail-sim --out bench/results/sim
//	inferrail-bench gwstress --gateway-binary bin/inferrail-gateway --sim-binary bin/inferrail-sim --out bench/results/gateway
//	inferrail-bench demo --out bench/tmp/demo
//	inferrail-bench replay-check --workload mix --rate 4 --requests 400 --policies round_robin,cost_model --out bench/results/capture
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/inferrail/inferrail/internal/cli"
	"github.com/inferrail/inferrail/internal/fakeengine"
	"github.com/inferrail/inferrail/internal/plainproxy"
)

func main() { cli.Main("inferrail-bench", run) }

const usage = `usage: inferrail-bench <command> [flags]

Commands:
  run      one open-loop run: a workload on its schedule against a fleet the
           run starts (N simulators behind a gateway) or against --url
  compare  the same workload for each of --policies, a cold fleet per run,
           --reps repetitions with new seeds; prints a table. A policy
           peer:<router>:<policy> (vllm-router, sglang-router) runs that
           router from .venv/peers in place of the gateway
  sweep    the runs of a TOML sweep file, policies innermost, resuming past
           runs whose result file matches
  report   a Markdown report from a directory of result files
  plot     the same for the result files named: plot FILE... --out DIR
  tail     the slowest requests of a run written with --outcomes: where each
           went, what was cached against predicted, and with --decisions
           how it was decided; counts the misses that set the p99
  stress   run the simulator stress scenarios (sim-streams, sim-soak,
           kv-mirror) and write their results and report
  gwstress run the gateway stress scenarios (gw-streams, gw-overhead,
           gw-routing, gw-kill, gw-flow, ...) against a gateway child process and write their results and
           report
  demo     a short W1 run under round_robin, then cost_model, on cold fleets;
           prints a comparison table and writes a chart and a report
  replay-check
           each of --policies live with the gateway capturing the traffic,
           then the first capture replayed (workload trace) under each; prints
           the hit rates and oracle hit rates side by side
  plain-proxy
           a bare net/http reverse proxy taking turns over --upstreams: the
           floor gw-floor compares the gateway's CPU per request with
  fake-engines
           stand-in engines on many loopback ports in one process, with
           stamped, huge or endless metrics pages (--pages): the replicas of
           gw-fleet
  testcerts
           write a throwaway CA and a server certificate for 127.0.0.1 and
           localhost it signed (the end-to-end TLS tests' certificates)

Run "inferrail-bench <command> -h" for a command's flags.
`

// commands are the subcommands, each reading its flags from args into a
// config, carrying it out and writing what it has to say to stdout; flag
// errors and progress go to stderr.
var commands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"run":          runCmd,
	"compare":      compareCmd,
	"sweep":        sweepCmd,
	"report":       reportCmd,
	"tail":         tailCmd,
	"plot":         plotCmd,
	"stress":       stressCmd,
	"gwstress":     gwstressCmd,
	"demo":         demoCmd,
	"replay-check": replayCheckCmd,
	"testcerts":    testCertsCmd,
	"plain-proxy": func(ctx context.Context, args []string, _, stderr io.Writer) error {
		return plainproxy.Command(ctx, args, stderr)
	},
	"fake-engines": fakeengine.Command,
}

// run carries out the command args name.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	if cmd, ok := commands[args[0]]; ok {
		return cmd(ctx, args[1:], stdout, stderr)
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// commandLine is the command line a result records to reproduce it: the
// program as it was run (its base name, as a binary on the PATH or in
// bin/ would be), the subcommand and its arguments.
func commandLine(subcommand string, args []string) string {
	return shellJoin(append([]string{filepath.Base(os.Args[0]), subcommand}, args...))
}

// shellJoin quotes args for a POSIX shell where they need it.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=,:", r))
		}) < 0 {
			q[i] = a
			continue
		}
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// list splits a comma-separated flag value into its items, blanks
// trimmed, empty items dropped.
func list(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
