// Package cli is the scaffolding inferrail's commands share around their own
// run function: Main runs it on the command line under a context that
// SIGINT and SIGTERM cancel and turns its error into the exit status,
// Logger is the stderr logger of a -v flag, and ReadBuild names the build
// for --version.
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
	"runtime"
	"runtime/debug"
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

// Build is what the binary knows of how it was built: its module version
// (a pseudo-version from the commit when built in a checkout), the commit
// and whether the tree had changes, and the Go release.
type Build struct {
	Version, Revision, GoVersion string
	Modified                     bool
}

// stampedRevision and stampedModified are the commit and "true" when the
// tree had changes, set by make build (-ldflags -X): Go stamps them itself
// only where VCS stamping is on, and GOFLAGS=-buildvcs=false turns it off.
var stampedRevision, stampedModified string

// ReadBuild reads the binary's build information; fields it lacks (a test
// binary has no commit) are "unknown".
func ReadBuild() Build {
	b := Build{Version: "unknown", Revision: "unknown", GoVersion: runtime.Version()}
	if stampedRevision != "" {
		b.Revision, b.Modified = stampedRevision, stampedModified == "true"
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if v := info.Main.Version; v != "" {
		b.Version = v
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the build as --version prints it.
func (b Build) String() string {
	rev := b.Revision
	if b.Modified {
		rev += " (modified)"
	}
	return fmt.Sprintf("%s, commit %s, %s", b.Version, rev, b.GoVersion)
}
