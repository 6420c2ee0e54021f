// Command inferrail-sim is a CPU stand-in for one vLLM engine: the same HTTP
// API, streaming bytes and Prometheus metrics, with a scheduler, KV cache and
// latency model that behave like vLLM's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/inferrail/inferrail/internal/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "inferrail-sim:", err)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	opts, err := sim.ParseFlags(args, stderr)
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
