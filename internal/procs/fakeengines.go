package procs

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"
)

// FakeEngines is an `inferrail-bench fake-engines` child process: many
// stand-in engines in one process, each on its own loopback port (see
// package fakeengine). Stop ends it.
type FakeEngines struct {
	// URLs are the engines' base URLs, in the order of the pages asked for.
	URLs []string
	// Pid is the child's process id.
	Pid int

	*child
	out *TailBuffer
}

// FakeEnginesOptions say how to start a fake engines child.
type FakeEnginesOptions struct {
	// Binary is the inferrail-bench executable (its fake-engines command).
	Binary string
	// Env is added to the harness's own environment. Nil adds nothing.
	Env []string
	// Pages is its --pages value, such as "stampedx64" or
	// "stampedx4,hugex10,endlessx10".
	Pages string
	// SharePort puts every engine on one port of its own loopback address
	// (127.1.0.1, 127.1.0.2, ...), as the members of a DNS group.
	SharePort bool
	// Model is the model every engine serves; empty means SimModel.
	Model string
	// Logger receives the child's life cycle at Debug. Nil discards.
	Logger *slog.Logger
}

// StartFakeEngines starts the child, reads the engines' URLs it prints and
// waits until the first answers /health.
func StartFakeEngines(ctx context.Context, o FakeEnginesOptions) (*FakeEngines, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Model == "" {
		o.Model = SimModel
	}
	args := []string{"fake-engines", "--pages", o.Pages, "--model", o.Model}
	if o.SharePort {
		args = append(args, "--share-port")
	}
	cmd := exec.Command(o.Binary, args...)
	cmd.Env = append(os.Environ(), o.Env...)
	out := NewTailBuffer(16 << 10)
	cmd.Stderr = out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c, err := startChild(cmd, "fake engines", o.Logger.With("component", "fake_engines_child"))
	if err != nil {
		return nil, err
	}
	p := &FakeEngines{Pid: cmd.Process.Pid, child: c, out: out}
	urls := make(chan []string, 1)
	go readEngineURLs(stdout, out, urls)
	select {
	case p.URLs = <-urls:
	case <-time.After(30 * time.Second):
		_ = p.Stop()
		return nil, fmt.Errorf("fake engines: no ready line within 30 s: %s", out.String())
	case <-ctx.Done():
		_ = p.Stop()
		return nil, ctx.Err()
	}
	if len(p.URLs) == 0 {
		_ = p.Stop()
		return nil, fmt.Errorf("fake engines %w: %s", ErrExitedEarly, out.String())
	}
	if err := p.waitOK(ctx, p.URLs[0]+"/health", 15*time.Second, out.String); err != nil {
		_ = p.Stop()
		return nil, err
	}
	return p, nil
}

// readEngineURLs sends the URLs of the "engine URL" lines once "ready"
// comes (nil if the output ends first), then copies the rest to rest.
func readEngineURLs(r io.Reader, rest io.Writer, urls chan<- []string) {
	sc := bufio.NewScanner(r)
	var got []string
	sent := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case sent:
			fmt.Fprintln(rest, line)
		case line == "ready":
			urls <- got
			sent = true
		case strings.HasPrefix(line, "engine "):
			got = append(got, strings.TrimPrefix(line, "engine "))
		default:
			fmt.Fprintln(rest, line)
		}
	}
	if !sent {
		urls <- nil
	}
	_, _ = io.Copy(rest, r)
}

// Output returns the tail of what the child wrote.
func (p *FakeEngines) Output() string { return p.out.String() }

// Stop asks the child to shut down, kills it after 5 s, and waits for it.
func (p *FakeEngines) Stop() error { return p.stop(5*time.Second, p.out.String) }
