// Command inferrail-sim is a CPU stand-in for one vLLM engine: the same HTTP
// API, streaming bytes and Prometheus metrics, with a scheduler, KV cache and
// latency model that behave like vLLM's.
package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"

	"github.com/inferrail/inferrail/internal/cli"
	"github.com/inferrail/inferrail/internal/sim"
)

func main() {
	cli.Main("inferrail-sim", func(ctx context.Context, args []string, _, stderr io.Writer) error {
		return run(ctx, args, stderr)
	})
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	opts, err := sim.ParseCommand(args, stderr, os.LookupEnv)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	srv, err := sim.New(opts.Config, logger)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port)))
	if err != nil {
		return err
	}
	logger.Info("inferrail-sim listening", "addr", ln.Addr().String(), "model", opts.ModelName(),
		"num_gpu_blocks", opts.NumGPUBlocks, "block_size", opts.BlockSize, "zero_latency", opts.ZeroLatency)
	return srv.Serve(ctx, ln)
}
