package procs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// child is a started child process and its reaper, the only goroutine it
// starts. Sim, Gateway and Peer embed it.
type child struct {
	cmd    *exec.Cmd
	name   string        // what the process is, for messages: "simulator", "gateway"
	exited chan struct{} // closed once cmd.Wait has returned
	err    error         // cmd.Wait's result; read only after exited is closed
	clog   *slog.Logger
}

// startChild starts cmd, dying with the harness unless cmd says otherwise
// (childProcAttr), and reaps it in the background.
func startChild(cmd *exec.Cmd, name string, logger *slog.Logger) (*child, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = childProcAttr()
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, name: name, exited: make(chan struct{}), clog: logger}
	go c.reap()
	return c, nil
}

func (c *child) reap() {
	c.err = c.cmd.Wait()
	close(c.exited)
}

// Exited is closed once the child has exited.
func (c *child) Exited() <-chan struct{} { return c.exited }

// stop asks the child to shut down (SIGTERM), kills it if it has not exited
// within grace, and waits for it. It reports an exit other than the clean one
// SIGTERM should cause, with the tail of its output. It may be called more
// than once.
func (c *child) stop(grace time.Duration, output func() string) error {
	pid := c.cmd.Process.Pid
	select {
	case <-c.exited:
	default:
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(grace):
			c.clog.Warn(c.name + " ignored SIGTERM; killing it")
			_ = c.cmd.Process.Kill()
			<-c.exited
			return fmt.Errorf("%s pid %d did not stop within %v of SIGTERM", c.name, pid, grace)
		}
	}
	c.clog.Debug(c.name+" exited", "err", c.err)
	if c.err != nil {
		return fmt.Errorf("%s pid %d: %w: %s", c.name, pid, c.err, output())
	}
	return nil
}

// waitOK polls url until it answers 200, the child exits (ErrExitedEarly,
// with the tail of its output) or timeout passes.
func (c *child) waitOK(ctx context.Context, url string, timeout time.Duration, output func() string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-c.exited:
			return fmt.Errorf("%s %w (%v): %s", c.name, ErrExitedEarly, c.err, output())
		case <-ctx.Done():
			return fmt.Errorf("%s: %s not answering: %w", c.name, url, ctx.Err())
		case <-tick.C:
		}
	}
}

// ErrExitedEarly marks a child that exited before it was healthy, most
// likely because another process took its port first.
var ErrExitedEarly = errors.New("exited before it was healthy")

// startRetrying calls once up to three times while the child exits early,
// so a port taken between choosing it and the child binding it is retried
// on another.
func startRetrying[P any](ctx context.Context, binary string, once func() (P, error)) (P, error) {
	var errs []error
	for range 3 {
		p, err := once()
		if err == nil {
			return p, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil || !errors.Is(err, ErrExitedEarly) {
			break
		}
	}
	var zero P
	return zero, fmt.Errorf("start %s: %w", binary, errors.Join(errs...))
}

// FreePort asks the kernel for a free loopback port. Another process may
// take it before the child binds it; StartSim retries then.
func FreePort() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// FreePorts asks the kernel for n distinct free loopback ports. It holds
// them all open until it has them: ports asked for one after another can
// come back the same, as the kernel hands a just-closed port out again (a
// gateway got its client and admin ports equal that way on a busy machine).
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, max(n, 0))
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// TailBuffer keeps the last bytes written to it, as many as NewTailBuffer
// was given. Safe for concurrent use.
type TailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte // guarded by mu
}

// NewTailBuffer returns a TailBuffer that keeps the last max bytes.
func NewTailBuffer(max int) *TailBuffer { return &TailBuffer{max: max} }

func (b *TailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

// String returns the bytes kept.
func (b *TailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
