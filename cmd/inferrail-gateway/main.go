// Command inferrail-gateway is the KV-cache-aware router: an OpenAI-compatible
// proxy in front of a fleet of vLLM or SGLang engines.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/inferrail/inferrail/internal/cli"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/gateway"
)

func main() { cli.Main("inferrail-gateway", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "keygen" {
		return runKeygen(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("inferrail-gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "YAML config file (required)")
	check := fs.Bool("check", false, "validate the config and exit")
	replay := fs.String("replay-shadow", "", "rebuild the shadow policies of a shadow log (observability.shadow_log), replay its requests, check every pick and exit")
	version := fs.Bool("version", false, "print the build (version, commit, Go release) and exit")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: inferrail-gateway --config FILE [--check]\n       inferrail-gateway --replay-shadow LOG\n       inferrail-gateway --version\n       inferrail-gateway keygen --name NAME [flags] (a new API key; keygen -h)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		// Parsing stops at the first argument that is not a flag: a
		// --check after it would be dropped, and the gateway started.
		return fmt.Errorf("unexpected argument %q: every option is a flag", fs.Arg(0))
	}
	if *version {
		fmt.Fprintln(stdout, "inferrail-gateway", cli.ReadBuild())
		return nil
	}
	if *replay != "" {
		return replayShadow(*replay, stdout)
	}
	if *path == "" {
		return errors.New("--config is required")
	}
	// SIGHUP is caught from here on: its default is to end the process,
	// and a reload sent while the gateway starts (loading tokenizers can
	// take seconds) must not. One that comes before the gateway serves is
	// kept, and taken as a reread once it does. It stays caught until the
	// process exits, hup (full, no longer read) dropping the rest: given
	// back its default (signal.Stop), one sent in the last moments of a
	// clean stop ended the process with status 129, and signal.Ignore's
	// switch has a moment where a SIGHUP being handled is neither wanted
	// nor ignored, which a flood of them hit in a few stops in a hundred.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	if *check {
		// The files the config names (keys, certificates, tokenizers) are
		// read first: "valid" is said of the whole, once it has loaded.
		notes, err := gateway.CheckAccess(cfg)
		if err != nil {
			return err
		}
		problems, loaded := gateway.CheckTokenizers(cfg)
		fmt.Fprintf(stdout, "%s: valid (%d models, %d replicas, %d dns groups)\n", *path, len(cfg.Models), len(cfg.Replicas), len(cfg.Discovery.DNS))
		for _, l := range loaded {
			fmt.Fprintln(stdout, "predicts:", l)
		}
		for _, p := range append(problems, notes...) {
			fmt.Fprintln(stdout, "note:", p)
		}
		return nil
	}
	logger := newLogger(stderr, cfg.Logging)
	log.SetFlags(0)
	log.SetOutput(libraryLog{logger})
	// Both ports are bound before New opens the observability files: a
	// start that cannot bind (another gateway holds the port) must leave
	// that gateway's capture and shadow log as they are, not rotate the
	// one and append a generation to the other. Connections that come
	// meanwhile wait in the backlog while New loads the tokenizers.
	client, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return err
	}
	admin, err := net.Listen("tcp", cfg.Server.AdminListen)
	if err != nil {
		client.Close()
		return err
	}
	g, err := gateway.New(cfg, gateway.Options{Logger: logger, ConfigPath: *path})
	if err != nil {
		client.Close()
		admin.Close()
		return err
	}
	b := cli.ReadBuild()
	logger.Info("inferrail-gateway listening", "client", client.Addr().String(), "admin", admin.Addr().String(),
		"models", len(cfg.Models), "replicas", len(cfg.Replicas), "version", b.Version, "revision", b.Revision)
	stopHUP := reloadOnHUP(ctx, g, logger, hup)
	defer stopHUP()
	return g.Serve(ctx, client, admin)
}

// reloadOnHUP rereads the config file on every SIGHUP hup delivers until
// ctx ends or the returned stop is called.
func reloadOnHUP(ctx context.Context, g *gateway.Gateway, logger *slog.Logger, hup <-chan os.Signal) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if result, err := g.ReloadFile("sighup"); err == nil {
					logger.Info("config reread on SIGHUP", "result", result)
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// replayShadow checks a shadow log and prints what it replayed.
func replayShadow(path string, stdout io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	start := time.Now()
	rep, err := gateway.ReplayShadow(f)
	if err != nil {
		return fmt.Errorf("%s: %w (after %d generations, %d requests, %d picks that matched)", path, err, rep.Generations, rep.Decisions, rep.Picks)
	}
	fmt.Fprintf(stdout, "%s: %d generations, %d requests, all %d shadow picks replayed identically in %.2fs\n",
		path, rep.Generations, rep.Decisions, rep.Picks, time.Since(start).Seconds())
	for _, line := range rep.CutShort {
		fmt.Fprintf(stdout, "note: line %d was cut short (the gateway stopped while writing it); the next start begins after it\n", line)
	}
	return nil
}

func newLogger(w io.Writer, lc config.Logging) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(lc.Level)))
	opts := &slog.HandlerOptions{Level: level}
	if lc.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// libraryLog carries what libraries write to the standard logger into the
// gateway's log at debug, as net/http's server errors go: net/http's
// client side writes there when an engine sends bytes on an idle
// connection. What such a line quotes is cut: it may be a response body.
type libraryLog struct{ l *slog.Logger }

func (ll libraryLog) Write(p []byte) (int, error) {
	msg, _, _ := strings.Cut(string(p), `"`)
	ll.l.Debug(strings.TrimSpace(msg), "from", "standard logger")
	return len(p), nil
}
