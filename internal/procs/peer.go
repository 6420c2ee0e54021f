package procs

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A run's policy may name a peer router instead of one of the gateway's
// policies: "peer:<router>:<policy>", such as peer:vllm-router:cache_aware.
// The run then starts that router, installed from PyPI into a venv of its
// own (bench/peers), in front of its simulators in place of
// inferrail-gateway, with the router's own policy of that name.
const peerPrefix = "peer:"

// peerRouter is a router a peer policy may name.
type peerRouter struct {
	// dist is the distribution's name in its .dist-info directory, which
	// holds its version.
	dist string
	// command is the console script in the venv's bin and the arguments
	// before the router's flags.
	command []string
	// policies are the router's policies that work with nothing but a list
	// of worker URLs (kv_aware, say, needs KV event sources; manual a
	// routing key).
	policies []string
	// logLevel is the router's name for the warning level.
	logLevel string
	// extra are flags only this router has.
	extra []string
	// decisions is the counter, on the router's Prometheus exporter, of
	// its routing decisions by outcome; "" when it has none. vllm-router
	// counts there the requests it routed without their tokens
	// (missing_tokens), by load alone.
	decisions string
}

// peerRouters are the routers a peer policy may name.
var peerRouters = map[string]peerRouter{
	"vllm-router": {
		dist:      "vllm_router",
		command:   []string{"vllm-router"},
		policies:  []string{"cache_aware", "round_robin", "random", "power_of_two"},
		logLevel:  "warning",
		decisions: "vllm_router_prefix_routing_decisions_total",
	},
	"sglang-router": {
		dist:     "sglang_router",
		command:  []string{"sglang-router", "launch"},
		policies: []string{"cache_aware", "round_robin", "random", "power_of_two"},
		logLevel: "warn",
		// It waits up to 180 s for requests in flight at SIGTERM; a run
		// stops the router after its last response.
		extra: []string{"--shutdown-grace-period-secs", "2"},
	},
}

// PeerPolicy is a parsed peer policy name.
type PeerPolicy struct {
	// Router is vllm-router or sglang-router.
	Router string
	// Policy is the router's own policy name, such as cache_aware.
	Policy string
}

// String is the policy's name, peer:<router>:<policy>.
func (p PeerPolicy) String() string { return peerPrefix + p.Router + ":" + p.Policy }

// IsPeerPolicy reports whether name names a peer router (rightly or not).
func IsPeerPolicy(name string) bool { return strings.HasPrefix(name, peerPrefix) }

// ParsePeerPolicy parses peer:<router>:<policy>. It fails for a name that
// is not a peer policy, or names a router or policy it does not know.
func ParsePeerPolicy(name string) (PeerPolicy, error) {
	rest, ok := strings.CutPrefix(name, peerPrefix)
	if !ok {
		return PeerPolicy{}, fmt.Errorf("policy %q: not a peer policy (peer:<router>:<policy>)", name)
	}
	router, policy, ok := strings.Cut(rest, ":")
	if !ok || router == "" || policy == "" {
		return PeerPolicy{}, fmt.Errorf("policy %q: want peer:<router>:<policy>", name)
	}
	r, ok := peerRouters[router]
	if !ok {
		return PeerPolicy{}, fmt.Errorf("policy %q: router must be one of %s, not %q", name, strings.Join(PeerRouters(), ", "), router)
	}
	if !slices.Contains(r.policies, policy) {
		return PeerPolicy{}, fmt.Errorf("policy %q: %s's policy must be one of %s, not %q", name, router, strings.Join(r.policies, ", "), policy)
	}
	return PeerPolicy{Router: router, Policy: policy}, nil
}

// PeerRouters lists, sorted, the routers a peer policy may name.
func PeerRouters() []string { return slices.Sorted(maps.Keys(peerRouters)) }

// MakePeerVenv runs script (bench/peers/venv.sh) to create or refresh the
// peer routers' venv at venv; it does nothing when the venv matches its
// requirements. What the script prints goes to the logger at Info.
func MakePeerVenv(ctx context.Context, script, venv string, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cmd := exec.CommandContext(ctx, script, venv)
	out, err := cmd.CombinedOutput()
	for line := range strings.Lines(string(out)) {
		logger.Info("peer venv", "output", strings.TrimSpace(line))
	}
	if err != nil {
		return fmt.Errorf("make peer venv %s with %s: %w: %s", venv, script, err, tailText(string(out), 2000))
	}
	return nil
}

// ErrNoPeerVenv means the peer routers' venv is missing or incomplete.
var ErrNoPeerVenv = errors.New("peer venv not found")

// PeerVersion reads the version of router installed in venv from its
// .dist-info directory.
func PeerVersion(venv, router string) (string, error) {
	r, ok := peerRouters[router]
	if !ok {
		return "", fmt.Errorf("peer version: unknown router %q", router)
	}
	dirs, _ := filepath.Glob(filepath.Join(venv, "lib", "python3*", "site-packages", r.dist+"-*.dist-info"))
	if len(dirs) != 1 {
		return "", fmt.Errorf("%w: %d %s dist-info directories in %s (run bench/peers/venv.sh or make peers)", ErrNoPeerVenv, len(dirs), r.dist, venv)
	}
	f, err := os.Open(filepath.Join(dirs[0], "METADATA"))
	if err != nil {
		return "", fmt.Errorf("peer version: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Version: "); ok {
			return strings.TrimSpace(v), nil
		}
		if sc.Text() == "" { // the end of the headers
			break
		}
	}
	return "", fmt.Errorf("peer version: no Version in %s", filepath.Join(dirs[0], "METADATA"))
}

// peerArgv is the command line that starts p's router from venv on
// 127.0.0.1:port, in front of workers, with its Prometheus exporter (which
// both routers start, on a fixed port unless told) on 127.0.0.1:metricsPort.
func peerArgv(venv string, p PeerPolicy, port, metricsPort int, workers []string) []string {
	r := peerRouters[p.Router]
	argv := []string{filepath.Join(venv, "bin", r.command[0])}
	argv = append(argv, r.command[1:]...)
	argv = append(argv, "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--worker-urls")
	argv = append(argv, workers...)
	argv = append(argv,
		"--policy", p.Policy,
		"--prometheus-host", "127.0.0.1", "--prometheus-port", strconv.Itoa(metricsPort),
		"--log-level", r.logLevel,
		// The simulators are healthy before the router starts; check them
		// every second rather than every 30 while it comes up.
		"--worker-startup-check-interval", "1",
		"--request-timeout-secs", "600",
	)
	return append(argv, r.extra...)
}

// PeerOptions say how to start a peer router child process.
type PeerOptions struct {
	// Venv is the venv the routers are installed in (.venv/peers).
	// Required.
	Venv string
	// Policy is the router and its policy.
	Policy PeerPolicy
	// Workers are the base URLs of the engines behind the router. At least
	// one.
	Workers []string
	// Env is added to the harness's own environment, after
	// HF_HUB_OFFLINE=1 (neither router needs the Hugging Face Hub in front
	// of plain HTTP workers). Nil adds nothing.
	Env []string
	// StartTimeout bounds how long the router may take to report every
	// worker healthy. Zero means 30 s.
	StartTimeout time.Duration
	// Logger receives the child's life cycle at Debug. Nil discards.
	Logger *slog.Logger
}

// Peer is a peer router child process on loopback ports. Stop ends
// it; the process and the goroutine that waits for it belong to the
// Peer.
type Peer struct {
	// URL is the base URL of the router's OpenAI-compatible API.
	URL string
	// Pid is the child's process id.
	Pid int
	// Policy is the router and its policy; Version the router's version.
	Policy  PeerPolicy
	Version string
	// Argv is the command line the child was started with.
	Argv []string
	// MetricsURL is the base URL of the router's Prometheus exporter.
	MetricsURL string

	*child
	out *peerLog
}

// StartPeer starts o.Policy's router on free loopback ports and waits until
// it lists every worker as healthy. A port taken between
// choosing it and the child binding it is retried on other ports.
func StartPeer(ctx context.Context, o PeerOptions) (*Peer, error) {
	if o.StartTimeout <= 0 {
		o.StartTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if len(o.Workers) == 0 {
		return nil, errors.New("start peer: no workers")
	}
	if _, ok := peerRouters[o.Policy.Router]; !ok {
		return nil, fmt.Errorf("start peer: unknown router %q", o.Policy.Router)
	}
	version, err := PeerVersion(o.Venv, o.Policy.Router)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", o.Policy.Router, err)
	}
	return startRetrying(ctx, o.Policy.Router, func() (*Peer, error) { return startPeerOnce(ctx, o, version) })
}

func startPeerOnce(ctx context.Context, o PeerOptions, version string) (*Peer, error) {
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	port, metricsPort := ports[0], ports[1]
	argv := peerArgv(o.Venv, o.Policy, port, metricsPort, o.Workers)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), "HF_HUB_OFFLINE=1", "NO_COLOR=1"), o.Env...)
	cmd.SysProcAttr = peerProcAttr()
	out := &peerLog{tail: TailBuffer{max: 16 << 10}}
	cmd.Stdout = out
	cmd.Stderr = out
	c, err := startChild(cmd, o.Policy.Router, o.Logger)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", o.Policy.Router, err)
	}
	p := &Peer{
		URL:        "http://127.0.0.1:" + strconv.Itoa(port),
		Pid:        cmd.Process.Pid,
		Policy:     o.Policy,
		Version:    version,
		Argv:       argv,
		MetricsURL: "http://127.0.0.1:" + strconv.Itoa(metricsPort),
		child:      c,
		out:        out,
	}
	c.clog = o.Logger.With("component", "peer_child", "router", o.Policy.Router, "pid", p.Pid)
	c.clog.Debug("started peer router", "argv", argv)
	if err := p.waitReady(ctx, len(o.Workers), o.StartTimeout); err != nil {
		_ = p.Stop() // its output is in err already
		return nil, err
	}
	return p, nil
}

// waitReady polls the router's worker list until it counts n healthy
// workers. (Both also serve /readiness, but sglang-router logs an error for
// every 503 it answers there before its workers are registered.)
func (p *Peer) waitReady(ctx context.Context, n int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		if healthy, err := p.healthyWorkers(ctx, client); err != nil {
			last = err.Error()
		} else if healthy >= n {
			return nil
		} else {
			last = fmt.Sprintf("%d of %d workers healthy", healthy, n)
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s %w (%v): %s", p.Policy.Router, ErrExitedEarly, p.err, p.Output())
		case <-ctx.Done():
			return fmt.Errorf("%s at %s not ready (%s): %w", p.Policy.Router, p.URL, last, ctx.Err())
		case <-tick.C:
		}
	}
}

// peerWorkers is the part of a router's GET /workers the harness reads;
// both routers answer {"workers": [{"url": …, "is_healthy": …, …}, …]}.
type peerWorkers struct {
	Workers []struct {
		URL       string `json:"url"`
		IsHealthy bool   `json:"is_healthy"`
	} `json:"workers"`
}

// healthyWorkers counts the workers the router lists as healthy.
func (p *Peer) healthyWorkers(ctx context.Context, client *http.Client) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/workers", nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("workers: status %d", resp.StatusCode)
	}
	var w peerWorkers
	if err := json.NewDecoder(resp.Body).Decode(&w); err != nil {
		return 0, fmt.Errorf("workers: %w", err)
	}
	n := 0
	for _, x := range w.Workers {
		if x.IsHealthy {
			n++
		}
	}
	return n, nil
}

// Decisions reads the router's counter of routing decisions from its
// exporter, by outcome, over its life so far. Nil, and no error, for a
// router that has no such counter, or none yet.
func (p *Peer) Decisions(ctx context.Context, client *http.Client) (map[string]int, error) {
	name := peerRouters[p.Policy.Router].decisions
	if name == "" {
		return nil, nil
	}
	page, err := ScrapePage(ctx, client, p.MetricsURL+"/metrics")
	if err != nil {
		return nil, err
	}
	var out map[string]int
	for outcome, n := range page.ByLabel(name, "outcome") {
		if out == nil {
			out = map[string]int{}
		}
		out[outcome] = int(n)
	}
	return out, nil
}

// Output returns the tail of what the child wrote, without terminal
// colors.
func (p *Peer) Output() string { return p.out.String() }

// Log sums up what the router logged.
func (p *Peer) Log() PeerLog { return p.out.summary() }

// Stop asks the router to shut down (SIGTERM), kills it if it has not
// exited after 10 s, and waits for it. It reports an exit other than the
// clean one SIGTERM should cause. Stop may be called more than once.
func (p *Peer) Stop() error { return p.stop(10*time.Second, p.Output) }

// PeerLog sums up what a peer router logged at warning level and above
// (the level it is started at) during a run.
type PeerLog struct {
	// Warnings and Errors count lines by level.
	Warnings int `json:"warnings,omitempty"`
	Errors   int `json:"errors,omitempty"`
	// Samples are the first few distinct ones, without their time and
	// with addresses masked.
	Samples []string `json:"samples,omitempty"`
}

// ansiEscape matches the terminal color sequences the routers' loggers
// write even to a pipe.
var ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*m")

// rustSource matches the source location the routers' loggers put before
// a message ("/home/…/src/server.rs:1025: ").
var rustSource = regexp.MustCompile(`\S+\.rs:[0-9]+: `)

// peerLog takes a peer router's output line by line (an escape sequence
// may be split between writes): a tail without colors for error messages
// and a count of its warning and error lines. Safe for concurrent use.
type peerLog struct {
	tail TailBuffer // whole lines

	mu      sync.Mutex
	partial []byte  // the unfinished last line; guarded by mu
	sum     PeerLog // guarded by mu
}

const maxPeerLogSamples = 5

func (l *peerLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, b...)
	for {
		i := slices.Index(l.partial, '\n')
		if i < 0 {
			break
		}
		line := ansiEscape.ReplaceAll(l.partial[:i+1], nil)
		l.tail.Write(line)
		l.line(string(line[:len(line)-1]))
		l.partial = l.partial[i+1:]
	}
	if len(l.partial) > l.tail.max { // no line is that long; keep the tail
		l.partial = append(l.partial[:0], l.partial[len(l.partial)-l.tail.max:]...)
	}
	return len(b), nil
}

// String is the tail of the output, the unfinished last line included.
func (l *peerLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tail.String() + string(ansiEscape.ReplaceAll(l.partial, nil))
}

// line counts one line. Both routers log as "<date> <time> <LEVEL>
// <target>: …". Guarded by mu.
func (l *peerLog) line(s string) {
	fields := strings.Fields(s)
	if len(fields) < 4 {
		return
	}
	switch fields[2] {
	case "WARN":
		l.sum.Warnings++
	case "ERROR":
		l.sum.Errors++
	default:
		return
	}
	// A sample is the line without its time, once per distinct text.
	msg := strings.Join(fields[2:], " ")
	msg = addrPattern.ReplaceAllString(rustSource.ReplaceAllString(msg, ""), "<addr>")
	if r := []rune(msg); len(r) > 300 {
		msg = string(r[:300]) + "…"
	}
	if len(l.sum.Samples) < maxPeerLogSamples && !slices.Contains(l.sum.Samples, msg) {
		l.sum.Samples = append(l.sum.Samples, msg)
	}
}

func (l *peerLog) summary() PeerLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sum
	s.Samples = slices.Clone(s.Samples)
	return s
}

// tailText is the last n bytes of s.
func tailText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
