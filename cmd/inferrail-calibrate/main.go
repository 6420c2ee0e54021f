// Command inferrail-calibrate measures an idle engine's prefill and fits the
// gateway's cost model to it:
//
//	inferrail-calibrate --url http://127.0.0.1:8000 [--out cost_model.yaml]
//
// It prints every probe, the fit and a routing.cost_model fragment, which
// --out also writes to a file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/inferrail/inferrail/internal/calibrate"
	"github.com/inferrail/inferrail/internal/cli"
)

func main() { cli.Main("inferrail-calibrate", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	d := calibrate.DefaultDesign()
	opts := calibrate.Options{Design: d}
	fs := flag.NewFlagSet("inferrail-calibrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&opts.URL, "url", "", "the engine's base URL, such as http://127.0.0.1:8000 (required)")
	fs.StringVar(&opts.Model, "model", "", "model to probe (default: the first /v1/models lists)")
	fs.Uint64Var(&opts.Seed, "seed", 0, "seed of the prompts' words (0, the default: the clock)")
	out := fs.String("out", "", "also write the routing.cost_model fragment to this file")
	fs.Var((*intList)(&opts.Design.Uncached), "uncached", "comma-separated tokens each probe computes")
	fs.Var((*intList)(&opts.Design.Cached), "cached", "comma-separated tokens each probe finds cached (0 for none)")
	fs.IntVar(&opts.Design.Reps, "reps", d.Reps, "repetitions of each (uncached, cached) pair; the fastest of each is fitted")
	fs.IntVar(&opts.Warmup, "warmup", 2, "requests sent first and left out of the fit")
	fs.DurationVar(&opts.Timeout, "timeout", 2*time.Minute, "limit on each request")
	verbose := fs.Bool("v", false, "log every probe as it finishes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if opts.URL == "" {
		return errors.New("--url: the engine to calibrate is required")
	}
	// -1s silently became the default 2m, and --warmup -3 sent none.
	if opts.Timeout < 0 {
		return fmt.Errorf("--timeout: must not be negative, got %v", opts.Timeout)
	}
	if opts.Warmup < 0 {
		return fmt.Errorf("--warmup: must not be negative, got %d", opts.Warmup)
	}
	if opts.Seed == 0 {
		opts.Seed = uint64(time.Now().UnixNano())
	}
	opts.Logger = cli.Logger(stderr, *verbose)

	res, err := calibrate.Run(ctx, opts)
	if err != nil {
		return err
	}
	if err := res.WriteReport(stdout); err != nil {
		return err
	}
	if *out != "" {
		if err := os.WriteFile(*out, res.Params.Fragment(), 0o644); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	return nil
}

// intList is a flag of comma-separated integers; setting it replaces the
// default.
type intList []int

func (l *intList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("not a comma-separated list of integers: %q", v)
		}
		out = append(out, n)
	}
	*l = out
	return nil
}
