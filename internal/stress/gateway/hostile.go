package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/stress"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/procs"
)

// HostileLoad is gw-hostile: hostile requests mixed with valid ones, over
// raw TCP connections, against a gateway with a short header timeout.
type HostileLoad struct {
	// Hostile requests, spread over the kinds in hostileShares. Must be
	// positive.
	Hostile int
	// Valid requests mixed in. Must not be negative.
	Valid int
	// Concurrency is how many exchanges (slow ones aside) run at once.
	// Must be positive.
	Concurrency int
	// HeaderTimeout and RequestTimeout are the gateway's
	// server.header_read_timeout and server.request_timeout. Each must be
	// positive.
	HeaderTimeout, RequestTimeout time.Duration
	// Seed shuffles the mix.
	Seed uint64
	// IdleWindow is how long the gateway's idle memory is sampled before
	// and after the mix (keeping the least). Zero means 2 s.
	IdleWindow time.Duration
}

// Validate reports every setting that cannot run.
func (l HostileLoad) Validate() error {
	return errors.Join(stress.Positive("hostile", l.Hostile), stress.Positive("concurrency", l.Concurrency),
		stress.Positive("header_timeout", l.HeaderTimeout), stress.Positive("request_timeout", l.RequestTimeout),
		stress.NotNegative("valid", l.Valid), stress.NotNegative("idle_window", l.IdleWindow))
}

// HostileFigures is what gw-hostile measured.
type HostileFigures struct {
	Requests int                  `json:"requests"`
	Hostile  int                  `json:"hostile"`
	Valid    int                  `json:"valid"`
	Kinds    []HostileKindFigures `json:"kinds"`
	// GatewayFailures are answers of the gateway itself (no
	// X-Inferrail-Replica header) with a 5xx status that neither the
	// request's kind calls for (505, 501) nor an engine caused.
	// Upstream5xx are 502, 503 and 504 the gateway answered because no
	// engine took the request in time, and 5xx answers relayed from an
	// engine. Hangs are exchanges that got neither an answer nor a closed
	// connection in time. ValidFailures are valid requests not answered
	// 200 with a good body.
	GatewayFailures int `json:"gateway_failures"`
	Upstream5xx     int `json:"upstream_5xx"`
	Hangs           int `json:"hangs"`
	ValidFailures   int `json:"valid_failures"`
	// SlowClose is how long the gateway took to close (or answer)
	// connections that never finished their headers (slowloris and idle),
	// from connecting.
	SlowClose measure.Percentiles `json:"slow_close"`
	// StalledBody is how long requests whose body stopped half-way waited
	// for the gateway's answer, from connecting.
	StalledBody measure.Percentiles `json:"stalled_body"`
	Seconds     float64             `json:"seconds"`
	// Gateway process health: idle resident memory before and after, the
	// peak in between, and open files idle before and after.
	RSSBeforeBytes int64 `json:"rss_before_bytes"`
	RSSPeakBytes   int64 `json:"rss_peak_bytes"`
	RSSAfterBytes  int64 `json:"rss_after_bytes"`
	FDsBefore      int   `json:"fds_before"`
	FDsAfter       int   `json:"fds_after"`
	// ClientConnsAfter counts client connections the gateway still held
	// once every client connection was closed.
	ClientConnsAfter int `json:"client_conns_after"`
	// HealthyAfter: /health answered 200 and a valid chat succeeded after
	// the run.
	HealthyAfter  bool               `json:"healthy_after"`
	HealthDetail  string             `json:"health_detail,omitempty"`
	GatewayErrors map[string]float64 `json:"gateway_errors"` // inferrail_request_errors_total by reason
}

// HostileKindFigures is one kind of request of gw-hostile.
type HostileKindFigures struct {
	Kind     string `json:"kind"`
	Requests int    `json:"requests"`
	// Outcomes counts answers by status code and the other endings:
	// closed (no answer before the connection ended), not_http1 (an answer
	// that is not HTTP/1.x, such as HTTP/2 frames), timeout.
	Outcomes       map[string]int `json:"outcomes"`
	Failures       int            `json:"failures"`
	FailureSamples []string       `json:"failure_samples,omitempty"`
}

// hostileReq is one exchange over a raw connection.
type hostileReq struct {
	kind       string
	variant    string
	parts      [][]byte      // written in order
	pause      time.Duration // between two parts
	drip       time.Duration // > 0: after the parts, write one more byte this often until the gateway closes
	closeWrite bool          // half-close after writing
	method     string        // of the request, for reading the answer ("" means POST)
	wait       time.Duration // how long to wait for the answer
	expect5xx  int           // a 5xx the protocol calls for (505, 501); 0 for none
	valid      bool          // must be answered 200 with a good chat
	slow       bool          // runs in its own goroutine from the start
	h2c        bool          // valid request sent with net/http over h2c instead
	keepAlive  bool          // valid request sent with the net/http client
}

func runGWHostile(ctx context.Context, r *gwRun) error {
	l := r.c.Hostile
	sims, gw := r.sims, r.gw
	admin := procs.AdminClient()
	defer admin.CloseIdleConnections()
	addr := strings.TrimPrefix(gw.URL, "http://")
	reqs := hostileMix(l, addr)
	f := &HostileFigures{Requests: len(reqs), Valid: l.Valid, Hostile: len(reqs) - l.Valid}

	// Warm up, then take the idle baseline.
	warm := gwClient(8)
	warmChats(ctx, warm, gw, 50, "sim")
	warm.CloseIdleConnections()
	f.RSSBeforeBytes = idleRSS(ctx, gw.Pid, l.IdleWindow)
	f.FDsBefore, _ = procs.OpenFDs(gw.Pid)

	sampler := startRSSSampler(ctx, gw.Pid, 100*time.Millisecond)
	began := time.Now()
	outcomes := exchangeAll(ctx, gw, reqs, l)
	f.Seconds = time.Since(began).Seconds()
	f.RSSPeakBytes = peak(sampler.stop())
	if err := ctx.Err(); err != nil {
		return err
	}
	f.tally(reqs, outcomes)

	// The gateway afterwards: healthy, memory and files back.
	_, st := waitIdle(ctx, admin, gw, sims, 10*time.Second)
	f.HealthyAfter, f.HealthDetail = gatewayServes(ctx, gw)
	if !st.idle() {
		f.HealthDetail = strings.TrimSpace(f.HealthDetail + fmt.Sprintf(" still in flight: %+v", st))
	}
	f.RSSAfterBytes = idleRSS(ctx, gw.Pid, l.IdleWindow)
	f.FDsAfter, _ = procs.OpenFDs(gw.Pid)
	f.ClientConnsAfter, _ = gw.ClientConns()
	f.GatewayErrors = map[string]float64{}
	if p, err := gw.Metrics(ctx, admin); err == nil {
		maps.Copy(f.GatewayErrors, p.ByLabel("inferrail_request_errors_total", "reason"))
	}
	r.res.Hostile = f
	hostileChecks(r, f, l, len(gw.Log().Panics), st.idle(), l.IdleWindow)
	return nil
}

// exchangeAll carries out every exchange of reqs with the gateway: the
// slow ones all at once, each from the start, the others l.Concurrency at
// a time.
func exchangeAll(ctx context.Context, gw *procs.Gateway, reqs []hostileReq, l HostileLoad) []rawOutcome {
	addr := strings.TrimPrefix(gw.URL, "http://")
	// The gateway closes client connections idle for its header timeout:
	// keep-alive clients let theirs go before.
	keep := gwClient(l.Concurrency)
	keep.Transport.(*http.Transport).IdleConnTimeout = l.HeaderTimeout / 2
	defer keep.CloseIdleConnections()
	h2c := gwClient(l.Concurrency)
	h2c.Transport.(*http.Transport).IdleConnTimeout = l.HeaderTimeout / 2
	h2c.Transport.(*http.Transport).Protocols = new(http.Protocols)
	h2c.Transport.(*http.Transport).Protocols.SetUnencryptedHTTP2(true)
	defer h2c.CloseIdleConnections()

	outcomes := make([]rawOutcome, len(reqs))
	var fast []int
	var wg sync.WaitGroup
	for i := range reqs {
		if reqs[i].slow {
			wg.Go(func() { outcomes[i] = rawExchange(ctx, addr, &reqs[i]) })
		} else {
			fast = append(fast, i)
		}
	}
	stress.Pool(ctx, 0, len(fast), l.Concurrency, func(j int) {
		i := fast[j]
		switch q := &reqs[i]; {
		case q.h2c:
			outcomes[i] = clientExchange(ctx, h2c, gw.URL, i)
		case q.keepAlive:
			outcomes[i] = clientExchange(ctx, keep, gw.URL, i)
		default:
			outcomes[i] = rawExchange(ctx, addr, q)
		}
	})
	wg.Wait()
	return outcomes
}

// tally sorts the outcomes of reqs by kind and counts the failures: hangs,
// valid requests not served, 5xx for want of an engine and 5xx of the
// gateway's own.
func (f *HostileFigures) tally(reqs []hostileReq, outcomes []rawOutcome) {
	kinds := map[string]*HostileKindFigures{}
	var slowClose, stalled []time.Duration
	for i, o := range outcomes {
		q := &reqs[i]
		k := kinds[q.kind]
		if k == nil {
			k = &HostileKindFigures{Kind: q.kind, Outcomes: map[string]int{}}
			kinds[q.kind] = k
		}
		k.Requests++
		k.Outcomes[o.label()]++
		if fail := f.failure(q, &o); fail != "" {
			k.Failures++
			if len(k.FailureSamples) < measure.MaxErrorSamples {
				k.FailureSamples = append(k.FailureSamples, q.variant+": "+fail)
			}
		}
		switch q.kind {
		case "slowloris", "idle-conn":
			if !o.timeout {
				slowClose = append(slowClose, o.elapsed)
			}
		case "stalled-body":
			stalled = append(stalled, o.elapsed)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(kinds)) {
		f.Kinds = append(f.Kinds, *kinds[name])
	}
	f.SlowClose, f.StalledBody = measure.Summarize(slowClose), measure.Summarize(stalled)
}

// failure says how the exchange of q failed, counting it in f, or "" when
// it did not.
func (f *HostileFigures) failure(q *hostileReq, o *rawOutcome) string {
	switch {
	case o.timeout:
		f.Hangs++
		return "no answer and no close within " + q.wait.String()
	case q.valid && (o.status != http.StatusOK || o.bad != ""):
		f.ValidFailures++
		return fmt.Sprintf("valid request: status %d %s %s", o.status, o.bad, o.err)
	case o.status >= 500 && o.replica != "":
		f.Upstream5xx++
		return fmt.Sprintf("engine %s answered %d", o.replica, o.status)
	case o.status == http.StatusBadGateway || o.status == http.StatusServiceUnavailable || o.status == http.StatusGatewayTimeout:
		f.Upstream5xx++
		return fmt.Sprintf("gateway answered %d for want of an engine", o.status)
	case o.status >= 500 && o.status != q.expect5xx:
		f.GatewayFailures++
		return fmt.Sprintf("gateway answered %d", o.status)
	case o.notHTTP1 && q.kind != "h2-garbage":
		return "answer is not HTTP/1.x: " + o.err
	}
	return ""
}

func hostileChecks(r *gwRun, f *HostileFigures, l HostileLoad, panics int, idle bool, idleWindow time.Duration) {
	r.check("5xx answers of the gateway itself (beyond the 505/501 HTTP/1.1 calls for)", "0", strconv.Itoa(f.GatewayFailures), f.GatewayFailures == 0)
	r.check("5xx for want of an engine (502/503/504, or relayed)", "0: should not happen here", strconv.Itoa(f.Upstream5xx), f.Upstream5xx == 0)
	r.check("hangs (no answer, connection not closed)", "0", strconv.Itoa(f.Hangs), f.Hangs == 0)
	r.check("valid requests answered 200", fmt.Sprintf("%d of %d", l.Valid, l.Valid), fmt.Sprintf("%d failed", f.ValidFailures), f.ValidFailures == 0)
	r.check("handler panics in the gateway log", "0", strconv.Itoa(panics), panics == 0)
	r.check("gateway healthy afterwards", "/health 200 and a chat served", stress.OrText(f.HealthDetail, "yes"), f.HealthyAfter && idle)
	r.check("client connections the gateway still holds afterwards", "0", strconv.Itoa(f.ClientConnsAfter), f.ClientConnsAfter == 0)
	r.check("gateway idle memory afterwards", "within 16 MiB of the baseline: an idle gateway returns what a burst left it holding",
		fmt.Sprintf("%s → %s (peak %s); open files %d → %d", stress.MiB(f.RSSBeforeBytes), stress.MiB(f.RSSAfterBytes), stress.MiB(f.RSSPeakBytes), f.FDsBefore, f.FDsAfter),
		f.RSSAfterBytes-f.RSSBeforeBytes < 16<<20)
	r.note("Idle memory is the lowest resident size read in the %v after the last request. A Go process that falls idle runs no garbage "+
		"collection until the runtime forces one (every two minutes), and its scavenger returns freed pages slowly; the gateway therefore "+
		"returns them itself (package reclaim: debug.FreeOSMemory once a whole 500 ms passed without a request and it holds 32 MiB more "+
		"than after its last return).", idleWindow)
	r.check("partial headers closed by the header timeout", fmt.Sprintf("about %v", l.HeaderTimeout),
		fmt.Sprintf("p50 %s, max %s (%d connections)", stress.Secs(f.SlowClose.P50), stress.Secs(f.SlowClose.Max), f.SlowClose.N),
		f.SlowClose.N > 0 && f.SlowClose.Max < (l.HeaderTimeout+time.Second).Seconds())
}

// gatewayServes checks that the gateway answers /health and a chat.
func gatewayServes(ctx context.Context, gw *procs.Gateway) (bool, string) {
	c := gwClient(1)
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, gw.URL+"/health", nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := c.Do(req)
	if err != nil {
		return false, "/health: " + err.Error()
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Sprintf("/health: status %d", resp.StatusCode)
	}
	if _, _, err := postChat(ctx, c, gw.URL+"/v1/chat/completions", gwChatBody("sim", 0, 4), "", 4); err != nil {
		return false, "chat: " + err.Error()
	}
	return true, ""
}

// rawOutcome is how one exchange ended.
type rawOutcome struct {
	status   int
	replica  string
	closed   bool // the connection ended before an answer
	notHTTP1 bool // the answer was not HTTP/1.x
	timeout  bool // neither an answer nor a close in time
	bad      string
	err      string
	elapsed  time.Duration
}

func (o *rawOutcome) label() string {
	switch {
	case o.timeout:
		return "timeout"
	case o.notHTTP1:
		return "not_http1"
	case o.closed:
		return "closed"
	}
	return strconv.Itoa(o.status)
}

// rawExchange writes q on a fresh connection and reads the answer.
func rawExchange(ctx context.Context, addr string, q *hostileReq) (o rawOutcome) {
	start := time.Now()
	defer func() { o.elapsed = time.Since(start) }()
	conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		o.timeout, o.err = true, "dial: "+err.Error()
		return o
	}
	defer conn.Close()
	_ = conn.SetDeadline(start.Add(q.wait))
	stopDrip := make(chan struct{})
	var dripping sync.WaitGroup
	for i, p := range q.parts {
		if i > 0 && q.pause > 0 {
			time.Sleep(q.pause)
		}
		if _, err := conn.Write(p); err != nil {
			break // the gateway may answer and close before reading it all
		}
	}
	if q.drip > 0 {
		dripping.Go(func() {
			t := time.NewTicker(q.drip)
			defer t.Stop()
			for {
				select {
				case <-stopDrip:
					return
				case <-t.C:
					if _, err := conn.Write([]byte("a")); err != nil {
						return
					}
				}
			}
		})
	}
	if q.closeWrite {
		_ = conn.(*net.TCPConn).CloseWrite()
	}
	defer func() {
		close(stopDrip)
		dripping.Wait()
	}()
	br := bufio.NewReader(conn)
	method := q.method
	if method == "" {
		method = http.MethodPost
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		// An interim answer (100 Continue): the final one follows.
		resp, err = http.ReadResponse(br, &http.Request{Method: method})
	}
	if err != nil {
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			o.timeout = true
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, os.ErrClosed) || isReset(err):
			o.closed = true
		default:
			o.notHTTP1 = true
		}
		o.err = err.Error()
		return o
	}
	defer resp.Body.Close()
	o.status, o.replica = resp.StatusCode, resp.Header.Get(openai.HeaderReplica)
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			o.timeout = true
		}
		o.err = "body: " + err.Error()
	}
	if q.valid && o.status == http.StatusOK {
		if err := stress.CheckFull(body, 4); err != nil {
			o.bad = err.Error()
		}
	}
	return o
}

// isReset reports a connection reset by the peer.
func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && strings.Contains(oe.Err.Error(), "connection reset")
}

// clientExchange sends valid chat i with a net/http client.
func clientExchange(ctx context.Context, c *http.Client, base string, i int) rawOutcome {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	status, replica, err := postChat(ctx, c, base+"/v1/chat/completions", gwChatBody("sim", i, 4), "", 4)
	o := rawOutcome{status: status, replica: replica, elapsed: time.Since(start)}
	if err != nil {
		o.err = err.Error()
		switch {
		case status == http.StatusOK:
			o.bad = err.Error()
		case status == 0 && ctx.Err() != nil:
			o.timeout = true
		case status == 0:
			o.closed = true
		}
	}
	return o
}

// hostileTimeouts gives gw-hostile's gateway its short header and request
// timeouts.
func hostileTimeouts(c *Config, cfg *config.Config) {
	cfg.Server.HeaderReadTimeout = config.Duration(c.Hostile.HeaderTimeout)
	cfg.Server.RequestTimeout = config.Duration(c.Hostile.RequestTimeout)
}
