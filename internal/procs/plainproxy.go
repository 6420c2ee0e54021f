package procs

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// PlainProxy is an `inferrail-bench plain-proxy` child process: a bare
// net/http reverse proxy over fixed upstreams, the floor the gateway's
// per-request cost is compared with. Stop ends it.
type PlainProxy struct {
	// URL is its base URL, http://127.0.0.1:port.
	URL string
	// Pid is the child's process id.
	Pid int

	*child
	out *TailBuffer
}

// PlainProxyOptions say how to start a plain proxy child.
type PlainProxyOptions struct {
	// Binary is the inferrail-bench executable (its plain-proxy command).
	Binary string
	// Env is added to the harness's own environment. Nil adds nothing.
	Env []string
	// Upstreams are the base URLs it takes turns over. At least one.
	Upstreams []string
	// Logger receives the child's life cycle at Debug. Nil discards.
	Logger *slog.Logger
}

// StartPlainProxy starts a plain proxy on a free loopback port and waits
// until GET /health answers 200 through it (from an upstream).
func StartPlainProxy(ctx context.Context, o PlainProxyOptions) (*PlainProxy, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return startRetrying(ctx, o.Binary, func() (*PlainProxy, error) {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		listen := "127.0.0.1:" + strconv.Itoa(port)
		cmd := exec.Command(o.Binary, "plain-proxy", "--listen", listen, "--upstreams", strings.Join(o.Upstreams, ","))
		cmd.Env = append(os.Environ(), o.Env...)
		out := NewTailBuffer(16 << 10)
		cmd.Stdout, cmd.Stderr = out, out
		c, err := startChild(cmd, "plain proxy", o.Logger.With("component", "plain_proxy_child"))
		if err != nil {
			return nil, err
		}
		p := &PlainProxy{URL: "http://" + listen, Pid: cmd.Process.Pid, child: c, out: out}
		if err := p.waitOK(ctx, p.URL+"/health", 15*time.Second, out.String); err != nil {
			_ = p.Stop()
			return nil, err
		}
		return p, nil
	})
}

// Output returns the tail of what the child wrote.
func (p *PlainProxy) Output() string { return p.out.String() }

// Stop asks the child to shut down, kills it after 5 s, and waits for it.
func (p *PlainProxy) Stop() error { return p.stop(5*time.Second, p.out.String) }
