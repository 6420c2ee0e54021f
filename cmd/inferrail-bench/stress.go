package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/inferrail/inferrail/internal/cli"
	"github.com/inferrail/inferrail/internal/stress/engine"
	"github.com/inferrail/inferrail/internal/stress/gateway"
)

// stressConfig reads stress's flags into the simulator scenarios' config.
func stressConfig(args []string, stderr io.Writer) (engine.Config, error) {
	c := engine.DefaultConfig()
	fs := newSuiteFlags("stress", stderr, &c.OutDir, c.Scenarios, engine.Scenarios, "log the simulator children's life cycle")
	fs.StringVar(&c.SimBinary, "sim-binary", c.SimBinary, "inferrail-sim executable to start")
	fs.IntVar(&c.MaxNumSeqs, "max-num-seqs", c.MaxNumSeqs, "the simulators' --max-num-seqs")
	fs.IntVar(&c.Streams.Streams, "streams", c.Streams.Streams, "sim-streams: concurrent streams")
	fs.IntVar(&c.Streams.MaxTokens, "stream-max-tokens", c.Streams.MaxTokens, "sim-streams: max_tokens of each stream")
	fs.IntVar(&c.Soak.Requests, "soak-requests", c.Soak.Requests, "sim-soak: requests, warmup included")
	fs.IntVar(&c.Soak.Concurrency, "soak-concurrency", c.Soak.Concurrency, "sim-soak: requests in flight")
	fs.IntVar(&c.Soak.Warmup, "soak-warmup", c.Soak.Warmup, "sim-soak: requests before the memory baseline")
	fs.IntVar(&c.Soak.SampleEvery, "soak-sample-every", c.Soak.SampleEvery, "sim-soak: memory sample under load every this many requests (0: none)")
	fs.IntVar(&c.KVMirror.Requests, "kv-requests", c.KVMirror.Requests, "kv-mirror: requests per variant")
	fs.IntVar(&c.KVMirror.Rate, "kv-rate", c.KVMirror.Rate, "kv-mirror: request rate, req/s")
	fs.IntVar(&c.KVMirror.NumGPUBlocks, "kv-blocks", c.KVMirror.NumGPUBlocks, "kv-mirror: the simulator's cache, in blocks")
	fs.IntVar(&c.KVMirror.BufferSteps, "kv-buffer-steps", c.KVMirror.BufferSteps, "kv-mirror: the simulator's replay buffer, in batches")
	fs.IntVar(&c.KVMirror.ReplayCheck, "kv-replay-check", c.KVMirror.ReplayCheck, "kv-mirror: how many of the last batches must replay byte for byte")
	var err error
	c.Scenarios, c.Logger, c.Command, err = fs.parse(args)
	return c, err
}

func stressCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := stressConfig(args, stderr)
	if err != nil {
		return err
	}
	if err := engine.Run(ctx, c); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "results and report written to %s\n", c.OutDir)
	return nil
}

// gwstressConfig reads gwstress's flags into the gateway scenarios'
// config.
func gwstressConfig(args []string, stderr io.Writer) (gateway.Config, error) {
	c := gateway.DefaultConfig()
	if self, err := os.Executable(); err == nil {
		c.BenchBinary = self // gw-floor's plain proxy is this binary's plain-proxy command
	}
	fs := newSuiteFlags("gwstress", stderr, &c.OutDir, c.Scenarios, gateway.Scenarios, "log the children's life cycle")
	fs.StringVar(&c.GatewayBinary, "gateway-binary", c.GatewayBinary, "inferrail-gateway executable to start")
	fs.StringVar(&c.SimBinary, "sim-binary", c.SimBinary, "inferrail-sim executable to start")
	fs.IntVar(&c.Streams.Streams, "streams", c.Streams.Streams, "gw-streams: concurrent streams")
	fs.IntVar(&c.Overhead.Requests, "overhead-requests", c.Overhead.Requests, "gw-overhead: requests per leg")
	fs.IntVar(&c.Observe.Requests, "observability-requests", c.Observe.Requests, "gw-observability: requests per leg")
	var observeRates string
	fs.StringVar(&observeRates, "observability-rates", "", "gw-observability: comma-separated rates in req/s (default 2000)")
	fs.IntVar(&c.Floor.Rate, "floor-rate", c.Floor.Rate, "gw-floor: request rate, req/s")
	fs.DurationVar(&c.ProbeInterval, "probe-interval", c.ProbeInterval, "gw-kill, gw-hang, gw-flap: the gateway's probe interval, each probe timing out at 80% of it (default 100ms; longer on a loaded machine, where probes of the in-process simulators time out)")
	fs.IntVar(&c.Floor.Requests, "floor-requests", c.Floor.Requests, "gw-floor: requests per leg")
	var routingVariants, routingRates string
	fs.StringVar(&routingVariants, "routing-variants", "", "gw-routing: comma-separated variants, each w<system prompt words>-<tok|notok>-<policy>-r<simulators> (default "+
		routingNames(c.Routing.Variants)+")")
	fs.StringVar(&routingRates, "routing-rates", "", "gw-routing: comma-separated rates in req/s for every variant (default: each default variant's own)")
	fs.IntVar(&c.Routing.Requests, "routing-requests", c.Routing.Requests, "gw-routing: requests per leg")
	fs.IntVar(&c.Disconnects.Streams, "disconnect-streams", c.Disconnects.Streams, "gw-disconnects: streams")
	fs.IntVar(&c.Hostile.Hostile, "hostile", c.Hostile.Hostile, "gw-hostile: hostile requests")
	fs.IntVar(&c.Soak.Requests, "soak-requests", c.Soak.Requests, "gw-soak: requests, warmup included")
	fs.DurationVar(&c.Flow.Leg, "flow-leg", c.Flow.Leg, "gw-flow: how long each open-loop leg sends")
	fs.DurationVar(&c.Flow.Capacity, "flow-capacity", c.Flow.Capacity, "gw-flow: how long each capacity measurement runs")
	fs.Float64Var(&c.Flow.FloodFactor, "flow-flood-factor", c.Flow.FloodFactor, "gw-flow: the flooder's rate over its fair share")
	fs.IntVar(&c.Flow.MaxNumSeqs, "flow-max-num-seqs", c.Flow.MaxNumSeqs, "gw-flow: each simulator's --max-num-seqs")
	var err error
	if c.Scenarios, c.Logger, c.Command, err = fs.parse(args); err != nil {
		return c, err
	}
	if observeRates != "" {
		rates, err := parseRates("--observability-rates", observeRates)
		if err != nil {
			return c, err
		}
		c.Observe.Rates = rates
	}
	if routingVariants != "" || routingRates != "" {
		variants, err := selectRouting(c.Routing.Variants, routingVariants, routingRates)
		if err != nil {
			return c, err
		}
		c.Routing.Variants = variants
	}
	return c, nil
}

// parseRates reads a flag's comma-separated rates.
func parseRates(flag, s string) ([]int, error) {
	var rs []int
	for _, r := range list(s) {
		n, err := strconv.Atoi(r)
		if err != nil {
			return nil, fmt.Errorf("gwstress: %s: %q is not a number", flag, r)
		}
		rs = append(rs, n)
	}
	return rs, nil
}

// selectRouting picks gw-routing's variants from --routing-variants and
// --routing-rates.
func selectRouting(defaults []gateway.RoutingVariant, variants, rates string) ([]gateway.RoutingVariant, error) {
	var rs []int
	for _, r := range list(rates) {
		n, err := strconv.Atoi(r)
		if err != nil {
			return nil, fmt.Errorf("gwstress: --routing-rates: %q is not a number", r)
		}
		rs = append(rs, n)
	}
	selected, err := gateway.SelectRoutingVariants(defaults, list(variants), rs)
	if err != nil {
		return nil, fmt.Errorf("gwstress: --routing-variants: %w", err)
	}
	return selected, nil
}

func gwstressCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := gwstressConfig(args, stderr)
	if err != nil {
		return err
	}
	if err := gateway.Run(ctx, c); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "results and report written to %s\n", c.OutDir)
	return nil
}

// routingNames lists variants by name.
func routingNames(variants []gateway.RoutingVariant) string {
	names := make([]string, len(variants))
	for i, v := range variants {
		names[i] = v.Name()
	}
	return strings.Join(names, ",")
}

// suiteFlags is the flag set of a stress command: the results directory,
// the scenarios to run and -v, beside each command's own.
type suiteFlags struct {
	*flag.FlagSet
	name      string
	scenarios string
	verbose   bool
}

// newSuiteFlags registers the flags every stress command takes: --out into
// out, --scenarios (all of them known, selected by default) and -v, whose
// help is verboseHelp.
func newSuiteFlags(name string, stderr io.Writer, out *string, selected, all []string, verboseHelp string) *suiteFlags {
	fs := &suiteFlags{FlagSet: flag.NewFlagSet("inferrail-bench "+name, flag.ContinueOnError), name: name}
	fs.SetOutput(stderr)
	fs.StringVar(out, "out", *out, "directory for <scenario>.json and README.md")
	fs.StringVar(&fs.scenarios, "scenarios", strings.Join(selected, ","), "comma-separated scenarios to run: "+strings.Join(all, ", "))
	fs.BoolVar(&fs.verbose, "v", false, verboseHelp)
	return fs
}

// parse parses args and returns the scenarios selected, the logger -v
// asks for and the command line that reproduces the run.
func (fs *suiteFlags) parse(args []string) ([]string, *slog.Logger, string, error) {
	if err := fs.Parse(args); err != nil {
		return nil, nil, "", err
	}
	if fs.NArg() > 0 {
		return nil, nil, "", fmt.Errorf("%s: unexpected argument %q", fs.name, fs.Arg(0))
	}
	scenarios := list(fs.scenarios)
	if len(scenarios) == 0 {
		return nil, nil, "", fmt.Errorf("%s: --scenarios: name at least one scenario", fs.name)
	}
	return scenarios, cli.Logger(fs.Output(), fs.verbose), commandLine(fs.name, args), nil
}
