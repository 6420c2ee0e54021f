package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// GatewayProcess is an inferrail-gateway child process serving a generated
// config on loopback ports. Stop ends it; the process, its config file and
// the goroutine that waits for it belong to the GatewayProcess.
type GatewayProcess struct {
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
func StartGateway(ctx context.Context, o GatewayOptions) (*GatewayProcess, error) {
	if o.StartTimeout <= 0 {
		o.StartTimeout = 15 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Config == nil {
		return nil, errors.New("start gateway: no config")
	}
	return startRetrying(ctx, o.Binary, func() (*GatewayProcess, error) { return startGatewayOnce(ctx, o) })
}

func startGatewayOnce(ctx context.Context, o GatewayOptions) (*GatewayProcess, error) {
	cfg := *o.Config
	client, err := freePort()
	if err != nil {
		return nil, err
	}
	admin, err := freePort()
	if err != nil {
		return nil, err
	}
	cfg.Server.Listen = "127.0.0.1:" + strconv.Itoa(client)
	cfg.Server.AdminListen = "127.0.0.1:" + strconv.Itoa(admin)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gateway config: %w", err)
	}
	data, err := yamlOf(&cfg)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "inferrail-gwstress-")
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
	p := &GatewayProcess{
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
		if err := p.waitOK(ctx, u, o.StartTimeout); err != nil {
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

func (p *GatewayProcess) waitOK(ctx context.Context, url string, timeout time.Duration) error {
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
		case <-p.exited:
			return fmt.Errorf("gateway %w (%v): %s", errExitedEarly, p.err, p.log.tail())
		case <-ctx.Done():
			return fmt.Errorf("gateway %s not answering: %w", url, ctx.Err())
		case <-tick.C:
		}
	}
}

// Output returns the tail of what the child wrote to stdout and stderr.
func (p *GatewayProcess) Output() string { return p.log.tail() }

// Stop asks the child to shut down (SIGTERM), kills it if it has not exited
// after 15 s, waits for it and removes its config. It reports an exit other
// than the clean one SIGTERM should cause. Stop may be called more than once.
func (p *GatewayProcess) Stop() error {
	defer os.RemoveAll(p.dir)
	return p.stop(15*time.Second, p.log.tail)
}

// Metrics scrapes the admin port's /metrics.
func (p *GatewayProcess) Metrics(ctx context.Context, client *http.Client) (promPage, error) {
	return scrapePage(ctx, client, p.AdminURL+"/metrics")
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
func (p *GatewayProcess) Log() GatewayLog { return p.log.summary() }

// events returns the records logged so far of the messages in
// watchedMessages.
func (p *GatewayProcess) events() []gwEvent { return p.log.eventsCopy() }

// Messages of the gateway's log that the harness follows.
const (
	msgAttemptFailed = "attempt failed" // debug
	msgEjected       = "replica ejected after failed requests"
	msgProbesFail    = "replica fails probes"
	msgProbesPass    = "replica passes probes again"
)

var watchedMessages = []string{msgAttemptFailed, msgEjected, msgProbesFail, msgProbesPass}

// gwEvent is one record of a followed message. At has the log's
// resolution: slog writes times to the millisecond.
type gwEvent struct {
	At        time.Time
	Msg       string
	RequestID string
	Replica   string
	Error     string
}

// firstEvent returns the first event of msg about replica at or after
// from, and whether there is one.
func firstEvent(events []gwEvent, msg, replica string, from time.Time) (gwEvent, bool) {
	for _, e := range events {
		if e.Msg == msg && e.Replica == replica && !e.At.Before(from) {
			return e, true
		}
	}
	return gwEvent{}, false
}

// gwLog reads a gateway child's JSON log line by line. Safe for concurrent
// use.
type gwLog struct {
	mu       sync.Mutex
	partial  []byte         // an unfinished line; guarded by mu
	tailBuf  tailBuffer     // the raw tail
	messages map[string]int // guarded by mu
	panics   []string       // guarded by mu
	unparsed int            // guarded by mu
	events   []gwEvent      // guarded by mu
}

const (
	maxLogSamples = 10
	maxLogEvents  = 1 << 20
)

func newGWLog() *gwLog {
	return &gwLog{tailBuf: tailBuffer{max: 16 << 10}, messages: map[string]int{}}
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
		l.events = append(l.events, gwEvent{At: rec.Time, Msg: rec.Msg, RequestID: rec.RequestID, Replica: rec.Replica, Error: rec.Error})
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
		if e.Msg != msgAttemptFailed {
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

func (l *gwLog) eventsCopy() []gwEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// promPage is a scraped Prometheus text page: series, as printed with their
// labels, and their values.
type promPage map[string]float64

// scrapePage reads a Prometheus text page (format 0.0.4).
func scrapePage(ctx context.Context, client *http.Client, url string) (promPage, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: status %d", url, resp.StatusCode)
	}
	p, err := parsePage(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return p, nil
}

// parsePage parses the sample lines of a Prometheus text page; comments and
// blank lines are skipped. A sample's timestamp, if any, is dropped.
func parsePage(r io.Reader) (promPage, error) {
	p := promPage{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		// The value follows the series; label values may hold spaces, so
		// split after the closing brace when there is one.
		series, rest := line, ""
		if i := strings.LastIndexByte(line, '}'); i >= 0 {
			series, rest = line[:i+1], strings.TrimSpace(line[i+1:])
		} else if i := strings.IndexByte(line, ' '); i >= 0 {
			series, rest = line[:i], strings.TrimSpace(line[i+1:])
		}
		value, _, _ := strings.Cut(rest, " ")
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		p[series] = v
	}
	return p, sc.Err()
}

// sum adds the values of the series of family name whose labels include
// every one of labels, each written as key="value".
func (p promPage) sum(name string, labels ...string) float64 {
	var total float64
	for series, v := range p {
		n, ls, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(ls, l) {
				ok = false
				break
			}
		}
		if ok {
			total += v
		}
	}
	return total
}

// label writes a label matcher for promPage.sum.
func label(k, v string) string { return k + "=" + strconv.Quote(v) }

// ClientConns counts the client connections the gateway holds open: TCP
// sockets of the process on its client port, in any state but LISTEN. It
// reads /proc, so it works on Linux only.
func (p *GatewayProcess) ClientConns() (int, error) {
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

// clockTicks is the unit of /proc/<pid>/stat CPU times (USER_HZ), 100 on
// every Linux build this runs on.
const clockTicks = 100

// processCPU returns the CPU time (user and system) process pid has used,
// from /proc/<pid>/stat, with a resolution of 10 ms.
func processCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("read CPU time: %w", err)
	}
	// The command name may hold spaces; the fields after it are fixed.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("read CPU time: malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("read CPU time: short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("read CPU time: %w", err)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// cpuTimes is the machine's CPU time by kind and this process's own, its
// reaped children's included, at one moment.
type cpuTimes struct {
	at      time.Time
	procs   time.Duration // every CPU, time in processes: user, nice, system (from /proc/stat)
	irq     time.Duration // every CPU, interrupts: irq and softirq (loopback TCP is mostly softirq)
	steal   time.Duration // every CPU, taken by the hypervisor
	ours    time.Duration // this process and the children it has waited for
	loadavg string
}

// readCPUTimes reads /proc/stat, /proc/self/stat and /proc/loadavg; what
// it cannot read stays zero, which machineShare reports as nothing.
func readCPUTimes() cpuTimes {
	t := cpuTimes{at: time.Now()}
	ticks := func(f []string, i int) time.Duration {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(v) * time.Second / clockTicks
	}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(data), "\n")
		// cpu user nice system idle iowait irq softirq steal ...
		if f := strings.Fields(line); len(f) >= 9 && f[0] == "cpu" {
			t.procs = ticks(f, 1) + ticks(f, 2) + ticks(f, 3)
			t.irq = ticks(f, 6) + ticks(f, 7)
			t.steal = ticks(f, 8)
		}
	}
	if data, err := os.ReadFile("/proc/self/stat"); err == nil {
		if i := bytes.LastIndexByte(data, ')'); i >= 0 {
			// After the name: state ppid ... utime(11) stime cutime cstime.
			if f := strings.Fields(string(data[i+1:])); len(f) >= 15 {
				t.ours = ticks(f, 11) + ticks(f, 12) + ticks(f, 13) + ticks(f, 14)
			}
		}
	}
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(data)); len(f) >= 3 {
			t.loadavg = strings.Join(f[:3], " ")
		}
	}
	return t
}

// MachineShare says how busy the machine was during a scenario, and with
// whose work. Shares are of the machine's capacity, every CPU over the
// scenario's wall time: 0.5 is one core of two. They come from 10 ms
// ticks, so they are rough.
type MachineShare struct {
	// LoadAvgStart and LoadAvgEnd are /proc/loadavg's 1, 5 and 15 minute
	// averages when the scenario began and ended.
	LoadAvgStart string `json:"loadavg_start"`
	LoadAvgEnd   string `json:"loadavg_end"`
	// Ours is the CPU the harness, the gateway and the simulators used;
	// Others what every other process on the machine used; Interrupts the
	// kernel's interrupt work, which no process is charged for (most of
	// it is loopback TCP, ours or others'); Steal what the hypervisor took.
	Ours       float64 `json:"ours_cpu_share"`
	Others     float64 `json:"others_cpu_share"`
	Interrupts float64 `json:"interrupts_cpu_share"`
	Steal      float64 `json:"steal_cpu_share"`
}

// machineShare compares two readings taken before the scenario's first
// child started and after its last child was reaped.
func machineShare(a, b cpuTimes, cpus int) MachineShare {
	m := MachineShare{LoadAvgStart: a.loadavg, LoadAvgEnd: b.loadavg}
	capacity := b.at.Sub(a.at).Seconds() * float64(cpus)
	if capacity <= 0 || b.procs == 0 {
		return m
	}
	ours := (b.ours - a.ours).Seconds()
	m.Ours = ours / capacity
	m.Others = max(0, (b.procs-a.procs).Seconds()-ours) / capacity
	m.Interrupts = (b.irq - a.irq).Seconds() / capacity
	m.Steal = (b.steal - a.steal).Seconds() / capacity
	return m
}
