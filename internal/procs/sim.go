package procs

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// Sim is an inferrail-sim child process listening on a loopback
// port. Stop ends it; the process and the goroutine that waits for it
// belong to the Sim.
type Sim struct {
	// URL is the base URL of the simulator's HTTP API, http://127.0.0.1:port.
	URL string
	// Pid is the child's process id.
	Pid int
	// KVEndpoint and KVReplayEndpoint are where the child publishes its KV
	// cache events and answers replay requests, tcp://127.0.0.1:port;
	// empty unless SimOptions.KVEvents.
	KVEndpoint, KVReplayEndpoint string

	*child
	stderr *TailBuffer
	log    *slog.Logger
}

// SimOptions say how to start a simulator child process.
type SimOptions struct {
	// Binary is the path of the inferrail-sim executable.
	Binary string
	// Args are extra flags; --host and --port are added. Nil means none.
	Args []string
	// KVEvents makes the child publish its KV cache events on a free port
	// and answer replay requests on another (--kv-events-config is added;
	// Args must not hold one).
	KVEvents bool
	// Env is added to the harness's own environment. Nil adds nothing.
	Env []string
	// StartTimeout bounds how long the child may take to answer /health.
	// Zero means 15 s.
	StartTimeout time.Duration
	// Logger receives the child's life cycle at Debug. Nil discards.
	Logger *slog.Logger
}

// StartSim starts an inferrail-sim child on a free loopback port and waits
// until it answers GET /health. A port taken between choosing it and the
// child binding it is retried on another port.
func StartSim(ctx context.Context, o SimOptions) (*Sim, error) {
	if o.StartTimeout <= 0 {
		o.StartTimeout = 15 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return startRetrying(ctx, o.Binary, func() (*Sim, error) { return startSimOnce(ctx, o) })
}

func startSimOnce(ctx context.Context, o SimOptions) (*Sim, error) {
	ports, err := FreePorts(3) // HTTP, and the KV events' two if asked for
	if err != nil {
		return nil, err
	}
	port := ports[0]
	args := []string{"--host", "127.0.0.1", "--port", strconv.Itoa(port)}
	var kvPub, kvReplay int
	if o.KVEvents {
		kvPub, kvReplay = ports[1], ports[2]
		args = append(args, "--kv-events-config", KVEventsConfigJSON(kvPub, kvReplay))
	}
	args = append(args, o.Args...)
	cmd := exec.Command(o.Binary, args...)
	cmd.Env = append(os.Environ(), o.Env...)
	stderr := &TailBuffer{max: 16 << 10}
	cmd.Stdout = stderr
	cmd.Stderr = stderr
	c, err := startChild(cmd, "simulator", o.Logger)
	if err != nil {
		return nil, err
	}
	p := &Sim{
		URL:    "http://127.0.0.1:" + strconv.Itoa(port),
		Pid:    cmd.Process.Pid,
		child:  c,
		stderr: stderr,
		log:    o.Logger.With("component", "sim_child", "pid", cmd.Process.Pid),
	}
	if o.KVEvents {
		p.KVEndpoint, p.KVReplayEndpoint = loopbackTCP(kvPub), loopbackTCP(kvReplay)
	}
	c.clog = p.log
	p.log.Debug("started simulator", "args", args)
	if err := p.waitOK(ctx, p.URL+"/health", o.StartTimeout, p.stderr.String); err != nil {
		_ = p.Stop()
		return nil, err
	}
	return p, nil
}

// KVEventsConfigJSON is the simulator's --kv-events-config publishing on
// port pub (bound on every interface, as an endpoint the engine binds must
// name *) and answering replays on port replay of the loopback interface.
func KVEventsConfigJSON(pub, replay int) string {
	return `{"enable_kv_cache_events":true,"endpoint":"tcp://*:` + strconv.Itoa(pub) +
		`","replay_endpoint":"` + loopbackTCP(replay) + `"}`
}

// loopbackTCP is the ZeroMQ endpoint of a loopback port.
func loopbackTCP(port int) string { return "tcp://127.0.0.1:" + strconv.Itoa(port) }

// Output returns the tail of what the child wrote to stdout and stderr.
func (p *Sim) Output() string { return p.stderr.String() }

// Stop asks the child to shut down (SIGTERM), kills it if it has not exited
// after 10 s, and waits for it. It reports an exit other than the clean one
// SIGTERM should cause. Stop may be called more than once.
func (p *Sim) Stop() error { return p.stop(10*time.Second, p.stderr.String) }

// SimModel is the model an inferrail-sim child serves unless its flags name
// another: the model the stress scenarios' simulators serve and their
// gateways route, and the harness's default.
const SimModel = "inferrail/sim-8b"

// SimToolCallArgs are the simulator flags of an engine that serves agents:
// vLLM answers a chat that sends tools, unless its tool_choice is "none",
// only when started with them. hermes is the parser of the ChatML-style
// models the simulator's chat template follows.
func SimToolCallArgs() []string {
	return []string{"--enable-auto-tool-choice", "--tool-call-parser", "hermes"}
}
