package procs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
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

	"github.com/inferrail/inferrail/internal/config"
	"go.yaml.in/yaml/v3"
)

// Gateway is an inferrail-gateway child process serving a generated
// config on loopback ports. Stop ends it; the process, its config file and
// the goroutine that waits for it belong to the Gateway.
type Gateway struct {
	// URL is the base URL of the client (OpenAI API) port; AdminURL that of
	// the admin port.
	URL, AdminURL string
	// Pid is the child's process id.
	Pid int
	// ConfigYAML is the config file the child was started with.
	ConfigYAML string

	*child
	dir    string
	log    *gwLog
	logger *slog.Logger
}

// GatewayOptions say how to start a gateway child process.
type GatewayOptions struct {
	// Binary is the path of the inferrail-gateway executable.
	Binary string
	// Env is added to the harness's own environment. Nil adds nothing.
	Env []string
	// Config is the gateway's config. Its server.listen and
	// server.admin_listen are replaced by free loopback ports; it must
	// otherwise be valid. It is not modified.
	Config *config.Config
	// StartTimeout bounds how long the child may take to answer /health on
	// both ports. Zero means 15 s.
	StartTimeout time.Duration
	// Logger receives the child's life cycle at Debug. Nil discards.
	Logger *slog.Logger
}

// StartGateway writes o.Config to a temporary directory, starts a gateway
// child on free loopback ports and waits until both its ports answer. A
// port taken between choosing it and the child binding it is retried on
// other ports.
func StartGateway(ctx context.Context, o GatewayOptions) (*Gateway, error) {
	if o.StartTimeout <= 0 {
		o.StartTimeout = 15 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Config == nil {
		return nil, errors.New("start gateway: no config")
	}
	return startRetrying(ctx, o.Binary, func() (*Gateway, error) { return startGatewayOnce(ctx, o) })
}

func startGatewayOnce(ctx context.Context, o GatewayOptions) (*Gateway, error) {
	cfg := *o.Config
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	client, admin := ports[0], ports[1]
	cfg.Server.Listen = "127.0.0.1:" + strconv.Itoa(client)
	cfg.Server.AdminListen = "127.0.0.1:" + strconv.Itoa(admin)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gateway config: %w", err)
	}
	data, err := yamlOf(&cfg)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "inferrail-gateway-") // runs, sweeps and gwstress alike
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(o.Binary, "--config", path)
	cmd.Env = append(os.Environ(), o.Env...)
	lg := newGWLog()
	cmd.Stdout = lg
	cmd.Stderr = lg
	c, err := startChild(cmd, "gateway", o.Logger)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p := &Gateway{
		URL:        "http://" + cfg.Server.Listen,
		AdminURL:   "http://" + cfg.Server.AdminListen,
		Pid:        cmd.Process.Pid,
		ConfigYAML: data,
		child:      c,
		dir:        dir,
		log:        lg,
		logger:     o.Logger.With("component", "gateway_child", "pid", cmd.Process.Pid),
	}
	c.clog = p.logger
	p.logger.Debug("started gateway", "config", path)
	for _, u := range []string{p.URL + "/health", p.AdminURL + "/metrics"} {
		if err := p.waitOK(ctx, u, o.StartTimeout, p.log.tail); err != nil {
			_ = p.Stop()
			return nil, err
		}
	}
	return p, nil
}

// yamlOf writes a gateway config as a config file.
func yamlOf(cfg *config.Config) (string, error) {
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("marshal gateway config: %w", err)
	}
	return string(data), nil
}

// Output returns the tail of what the child wrote to stdout and stderr.
func (p *Gateway) Output() string { return p.log.tail() }

// Stop asks the child to shut down (SIGTERM), kills it if it has not exited
// after 15 s, waits for it and removes its config. It reports an exit other
// than the clean one SIGTERM should cause. Stop may be called more than once.
func (p *Gateway) Stop() error {
	defer os.RemoveAll(p.dir)
	return p.stop(15*time.Second, p.log.tail)
}

// Metrics scrapes the admin port's /metrics.
func (p *Gateway) Metrics(ctx context.Context, client *http.Client) (PromPage, error) {
	return ScrapePage(ctx, client, p.AdminURL+"/metrics")
}

// GatewayLog summarizes what a gateway child logged: lines by level and
// message, and samples of the lines that matter for a stress run.
type GatewayLog struct {
	// Messages counts lines by "LEVEL message".
	Messages map[string]int `json:"messages,omitempty"`
	// Panics are samples of lines that mention a panic (net/http logs
	// handler panics at the gateway's debug level).
	Panics []string `json:"panics,omitempty"`
	// Unparsed counts lines that were not JSON log records.
	Unparsed int `json:"unparsed,omitempty"`
	// AttemptErrors counts the failed upstream attempts (debug "attempt
	// failed") by replica and error, addresses masked.
	AttemptErrors map[string]int `json:"attempt_errors,omitempty"`
}

// Log returns what the child has logged so far.
func (p *Gateway) Log() GatewayLog { return p.log.summary() }

// Merge adds src's counts and samples to dst, keeping at most as many
// panic samples as one child's log does.
func (dst *GatewayLog) Merge(src GatewayLog) {
	if len(src.Messages) > 0 && dst.Messages == nil {
		dst.Messages = map[string]int{}
	}
	for k, v := range src.Messages {
		dst.Messages[k] += v
	}
	for _, p := range src.Panics {
		if len(dst.Panics) < maxLogSamples {
			dst.Panics = append(dst.Panics, p)
		}
	}
	dst.Unparsed += src.Unparsed
	for k, v := range src.AttemptErrors {
		if dst.AttemptErrors == nil {
			dst.AttemptErrors = map[string]int{}
		}
		dst.AttemptErrors[k] += v
	}
}

// Events returns the records logged so far of the messages in
// watchedMessages.
func (p *Gateway) Events() []Event { return p.log.eventsCopy() }

// Messages of the gateway's log that the harness follows as Events.
const (
	MsgAttemptFailed = "attempt failed" // debug
	MsgEjected       = "replica ejected after failed requests"
	MsgProbesFail    = "replica fails probes"
	MsgProbesPass    = "replica passes probes again"
)

var watchedMessages = []string{MsgAttemptFailed, MsgEjected, MsgProbesFail, MsgProbesPass}

// Event is one record of a followed message. At has the log's
// resolution: slog writes times to the millisecond.
type Event struct {
	At        time.Time
	Msg       string
	RequestID string
	Replica   string
	Error     string
}

// FirstEvent returns the first event of msg about replica at or after
// from, and whether there is one.
func FirstEvent(events []Event, msg, replica string, from time.Time) (Event, bool) {
	for _, e := range events {
		if e.Msg == msg && e.Replica == replica && !e.At.Before(from) {
			return e, true
		}
	}
	return Event{}, false
}

// gwLog reads a gateway child's JSON log line by line. Safe for concurrent
// use.
type gwLog struct {
	mu       sync.Mutex
	partial  []byte         // an unfinished line; guarded by mu
	tailBuf  TailBuffer     // the raw tail
	messages map[string]int // guarded by mu
	panics   []string       // guarded by mu
	unparsed int            // guarded by mu
	events   []Event        // guarded by mu
}

const (
	maxLogSamples = 10
	maxLogEvents  = 1 << 20
)

func newGWLog() *gwLog {
	return &gwLog{tailBuf: TailBuffer{max: 16 << 10}, messages: map[string]int{}}
}

func (l *gwLog) Write(b []byte) (int, error) {
	_, _ = l.tailBuf.Write(b)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, b...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.line(l.partial[:i])
		l.partial = l.partial[i+1:]
	}
	if len(l.partial) > 1<<20 { // a runaway line: count it and move on
		l.unparsed++
		l.partial = l.partial[:0]
	}
	return len(b), nil
}

// addrPattern matches the peer addresses net/http puts in its messages, so
// that messages differing only by peer count together.
var addrPattern = regexp.MustCompile(`\[?[0-9a-fA-F.:]+\]?:[0-9]+`)

// line records one log line; l.mu is held.
func (l *gwLog) line(b []byte) {
	if len(bytes.TrimSpace(b)) == 0 {
		return
	}
	if bytes.Contains(b, []byte("panic")) && len(l.panics) < maxLogSamples {
		l.panics = append(l.panics, string(b[:min(len(b), 2000)]))
	}
	var rec struct {
		Time      time.Time `json:"time"`
		Level     string    `json:"level"`
		Msg       string    `json:"msg"`
		RequestID string    `json:"request_id"`
		Replica   string    `json:"replica"`
		Error     string    `json:"error"`
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.Msg == "" {
		l.unparsed++
		return
	}
	l.messages[rec.Level+" "+addrPattern.ReplaceAllString(rec.Msg, "<addr>")]++
	if slices.Contains(watchedMessages, rec.Msg) && len(l.events) < maxLogEvents {
		l.events = append(l.events, Event{At: rec.Time, Msg: rec.Msg, RequestID: rec.RequestID, Replica: rec.Replica, Error: rec.Error})
	}
}

func (l *gwLog) tail() string { return l.tailBuf.String() }

func (l *gwLog) summary() GatewayLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := GatewayLog{Messages: make(map[string]int, len(l.messages)), Panics: append([]string(nil), l.panics...), Unparsed: l.unparsed}
	for k, v := range l.messages {
		s.Messages[k] = v
	}
	for _, e := range l.events {
		if e.Msg != MsgAttemptFailed {
			continue
		}
		if s.AttemptErrors == nil {
			s.AttemptErrors = map[string]int{}
		}
		key := e.Replica + ": " + addrPattern.ReplaceAllString(e.Error, "<addr>")
		if _, ok := s.AttemptErrors[key]; ok || len(s.AttemptErrors) < 20 {
			s.AttemptErrors[key]++
		}
	}
	return s
}

func (l *gwLog) eventsCopy() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// AdminClient is the harness's client for the /metrics and /health pages
// of its children.
func AdminClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}, Timeout: 10 * time.Second}
}

// ClientConns counts the client connections the gateway holds open: TCP
// sockets of the process on its client port, in any state but LISTEN. It
// reads /proc, so it works on Linux only.
func (p *Gateway) ClientConns() (int, error) {
	_, port, err := net.SplitHostPort(strings.TrimPrefix(p.URL, "http://"))
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return 0, err
	}
	return heldConns(p.Pid, n)
}

// heldConns counts the TCP sockets process pid holds whose local port is
// port, LISTEN sockets aside.
func heldConns(pid, port int) (int, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("count connections: %w", err)
	}
	inodes := map[string]bool{}
	for _, e := range entries {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if inode, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	n := 0
	for _, table := range []string{"tcp", "tcp6"} {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/" + table)
		if err != nil {
			continue
		}
		lines := strings.Split(string(data), "\n")
		for _, line := range lines[min(1, len(lines)):] {
			f := strings.Fields(line)
			if len(f) < 10 {
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			lp, err := strconv.ParseUint(hexPort, 16, 32)
			if err != nil || int(lp) != port || f[3] == "0A" || !inodes[f[9]] {
				continue
			}
			n++
		}
	}
	return n, nil
}
