// Package cli is the scaffolding inferrail's commands share around their own
// run function: Main runs it on the command line under a context that
// SIGINT and SIGTERM cancel and turns its error into the exit status, and
// Logger is the stderr logger of a -v flag.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// Run is a command: it reads its flags from args, does its work and writes
// its output to stdout, flag errors and progress to stderr.
type Run func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// Main runs run with the process's arguments and exits with status 2 when
// it fails, after printing the error after the command's name. The flag
// package's answer to -h is no failure: the usage asked for is printed
// already, and the status is 0.
func Main(name string, run Run) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if code := ExitCode(err); code != 0 {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(code)
	}
}

// ExitCode is the exit status of a command that returned err: 0 for none
// or for -h (flag.ErrHelp), else 2.
func ExitCode(err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// Logger logs as text to w at Info, or at Debug when verbose.
func Logger(w io.Writer, verbose bool) *slog.Logger {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}
