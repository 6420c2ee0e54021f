// Command inferrail-bench is inferrail's benchmark harness. Today it runs
// the simulator and gateway stress scenarios and the demo's client:
//
//	inferrail-bench stress --sim-binary bin/inferrail-sim --out bench/results/sim
//	inferrail-bench gwstress --gateway-binary bin/inferrail-gateway --sim-binary bin/inferrail-sim --out bench/results/gateway
//	inferrail-bench demo --gateway http://127.0.0.1:8080
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/inferrail/inferrail/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "inferrail-bench:", err)
		}
		os.Exit(2)
	}
}

const usage = `usage: inferrail-bench <command> [flags]

Commands:
  stress   run the simulator stress scenarios (sim-streams, sim-soak) and
           write their results and report
  gwstress run the gateway stress scenarios (gw-streams, gw-overhead, gw-kill,
           ...) against a gateway child process and write their results and
           report
  demo     send a short burst of chats with shared system prompts through a
           gateway and print which replica served what

Run "inferrail-bench <command> -h" for a command's flags.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "stress":
		return stress(ctx, args[1:], stdout, stderr)
	case "gwstress":
		return gwstress(ctx, args[1:], stdout, stderr)
	case "demo":
		return demo(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func stress(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := bench.DefaultStressConfig()
	fs := flag.NewFlagSet("inferrail-bench stress", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenarios := strings.Join(c.Scenarios, ",")
	verbose := false
	fs.StringVar(&c.SimBinary, "sim-binary", c.SimBinary, "inferrail-sim executable to start")
	fs.StringVar(&c.OutDir, "out", c.OutDir, "directory for <scenario>.json and README.md")
	fs.StringVar(&scenarios, "scenarios", scenarios, "comma-separated scenarios to run: "+strings.Join(bench.Scenarios, ", "))
	fs.IntVar(&c.MaxNumSeqs, "max-num-seqs", c.MaxNumSeqs, "the simulators' --max-num-seqs")
	fs.IntVar(&c.Streams.Streams, "streams", c.Streams.Streams, "sim-streams: concurrent streams")
	fs.IntVar(&c.Streams.MaxTokens, "stream-max-tokens", c.Streams.MaxTokens, "sim-streams: max_tokens of each stream")
	fs.IntVar(&c.Soak.Requests, "soak-requests", c.Soak.Requests, "sim-soak: requests, warmup included")
	fs.IntVar(&c.Soak.Concurrency, "soak-concurrency", c.Soak.Concurrency, "sim-soak: requests in flight")
	fs.IntVar(&c.Soak.Warmup, "soak-warmup", c.Soak.Warmup, "sim-soak: requests before the memory baseline")
	fs.IntVar(&c.Soak.SampleEvery, "soak-sample-every", c.Soak.SampleEvery, "sim-soak: memory sample under load every this many requests (0: none)")
	fs.BoolVar(&verbose, "v", false, "log the simulator children's life cycle")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("stress: unexpected argument %q", fs.Arg(0))
	}
	c.Scenarios = nil
	for s := range strings.SplitSeq(scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.Scenarios = append(c.Scenarios, s)
		}
	}
	if len(c.Scenarios) == 0 {
		return errors.New("stress: --scenarios: name at least one scenario")
	}
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	c.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	c.Command = "go run ./cmd/inferrail-bench stress " + shellJoin(args)
	if err := bench.Stress(ctx, c); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "results and report written to %s\n", c.OutDir)
	return nil
}

func gwstress(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := bench.DefaultGatewayStressConfig()
	fs := flag.NewFlagSet("inferrail-bench gwstress", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenarios := strings.Join(c.Scenarios, ",")
	verbose := false
	fs.StringVar(&c.GatewayBinary, "gateway-binary", c.GatewayBinary, "inferrail-gateway executable to start")
	fs.StringVar(&c.SimBinary, "sim-binary", c.SimBinary, "inferrail-sim executable to start")
	fs.StringVar(&c.OutDir, "out", c.OutDir, "directory for <scenario>.json and README.md")
	fs.StringVar(&scenarios, "scenarios", scenarios, "comma-separated scenarios to run: "+strings.Join(bench.GatewayScenarios, ", "))
	fs.IntVar(&c.Streams.Streams, "streams", c.Streams.Streams, "gw-streams: concurrent streams")
	fs.IntVar(&c.Overhead.Requests, "overhead-requests", c.Overhead.Requests, "gw-overhead: requests per leg")
	fs.IntVar(&c.Disconnects.Streams, "disconnect-streams", c.Disconnects.Streams, "gw-disconnects: streams")
	fs.IntVar(&c.Hostile.Hostile, "hostile", c.Hostile.Hostile, "gw-hostile: hostile requests")
	fs.IntVar(&c.Soak.Requests, "soak-requests", c.Soak.Requests, "gw-soak: requests, warmup included")
	fs.BoolVar(&verbose, "v", false, "log the children's life cycle")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("gwstress: unexpected argument %q", fs.Arg(0))
	}
	c.Scenarios = nil
	for s := range strings.SplitSeq(scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.Scenarios = append(c.Scenarios, s)
		}
	}
	if len(c.Scenarios) == 0 {
		return errors.New("gwstress: --scenarios: name at least one scenario")
	}
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	c.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	c.Command = "go run ./cmd/inferrail-bench gwstress " + shellJoin(args)
	if err := bench.GatewayStress(ctx, c); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "results and report written to %s\n", c.OutDir)
	return nil
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

func demo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := bench.DemoConfig{}
	fs := flag.NewFlagSet("inferrail-bench demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Gateway, "gateway", "http://127.0.0.1:8080", "base URL of the gateway's client port")
	fs.StringVar(&c.Model, "model", "sim", "model name or alias to ask for")
	fs.IntVar(&c.Requests, "requests", 24, "chats to send")
	fs.IntVar(&c.Concurrency, "concurrency", 4, "chats in flight at once")
	fs.DurationVar(&c.Wait, "wait", 15*time.Second, "how long to wait for the gateway and its replicas")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.Requests < 1 || c.Concurrency < 1 {
		return errors.New("--requests and --concurrency must be at least 1")
	}
	return bench.Demo(ctx, c, stdout)
}
