package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
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
	var errs []error
	errs = append(errs, positiveInt("hostile", l.Hostile), positiveInt("concurrency", l.Concurrency),
		positiveDuration("header_timeout", l.HeaderTimeout), positiveDuration("request_timeout", l.RequestTimeout))
	if l.Valid < 0 {
		errs = append(errs, fmt.Errorf("valid: must not be negative, got %d", l.Valid))
	}
	if l.IdleWindow < 0 {
		errs = append(errs, fmt.Errorf("idle_window: must not be negative, got %v", l.IdleWindow))
	}
	return errors.Join(errs...)
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

// hostileShares are the kinds of hostile requests and their share of
// them, per 3,000.
var hostileShares = []struct {
	kind  string
	share int
}{
	{"malformed-json", 460}, {"huge-json", 60}, {"nested-json", 100}, {"wrong-method", 300}, {"odd-path", 400},
	{"content-type", 300}, {"invalid-utf8", 250}, {"absurd-headers", 400}, {"cut-body", 300}, {"garbage", 200},
	{"h2-garbage", 100}, {"stalled-body", 40}, {"slowloris", 60}, {"idle-conn", 10}, {"slow-complete", 20},
}

func runGWHostile(ctx context.Context, r *gwRun) error {
	l := r.c.Hostile
	r.res.Description = fmt.Sprintf("%d hostile requests (malformed, huge and deeply nested JSON, wrong methods, odd paths, bad content types, "+
		"invalid UTF-8, absurd headers, bodies cut off or stalled half-way, garbage and HTTP/2 garbage, slowloris partial headers, idle "+
		"connections) mixed with %d valid chats, over raw TCP connections (valid ones also over the net/http client, keep-alive and h2c), "+
		"%d at a time, the slow ones all at once. The gateway (over three --zero-latency simulator children) runs with "+
		"server.header_read_timeout %v and server.request_timeout %v. It must never answer a 5xx of its own that the protocol does not call for, "+
		"never leave a connection hanging, answer every valid request, and stay healthy with its memory and open files back where they were.",
		l.Hostile, l.Valid, l.Concurrency, l.HeaderTimeout, l.RequestTimeout)
	r.res.Parameters = map[string]any{"hostile": l.Hostile, "valid": l.Valid, "concurrency": l.Concurrency,
		"header_read_timeout": l.HeaderTimeout.String(), "request_timeout": l.RequestTimeout.String(), "seed": l.Seed}
	sims, err := r.simChildren(ctx, 3, []string{"--zero-latency"})
	if err != nil {
		return err
	}
	cfg := gwConfig(sims, healthDefault)
	cfg.Server.HeaderReadTimeout = config.Duration(l.HeaderTimeout)
	cfg.Server.RequestTimeout = config.Duration(l.RequestTimeout)
	gw, err := r.gateway(ctx, cfg)
	if err != nil {
		return err
	}
	admin := procs.AdminClient()
	defer admin.CloseIdleConnections()
	addr := strings.TrimPrefix(gw.URL, "http://")

	reqs := hostileMix(l, addr)
	f := &HostileFigures{Requests: len(reqs), Valid: l.Valid, Hostile: len(reqs) - l.Valid}

	// Warm up, then take the idle baseline.
	warm := gwClient(8)
	for i := range 50 {
		_, _, _ = postChat(ctx, warm, gw.URL+"/v1/chat/completions", gwChatBody("sim", i, 4), "", 4)
	}
	warm.CloseIdleConnections()
	idleWindow := stress.OrDefault(l.IdleWindow, 2*time.Second)
	f.RSSBeforeBytes = idleRSS(ctx, gw.Pid, idleWindow)
	f.FDsBefore, _ = procs.OpenFDs(gw.Pid)

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

	sampler := startRSSSampler(ctx, gw.Pid, 100*time.Millisecond)
	began := time.Now()
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
	work := make(chan int)
	for range l.Concurrency {
		wg.Go(func() {
			for i := range work {
				q := &reqs[i]
				switch {
				case q.h2c:
					outcomes[i] = clientExchange(ctx, h2c, gw.URL, i)
				case q.keepAlive:
					outcomes[i] = clientExchange(ctx, keep, gw.URL, i)
				default:
					outcomes[i] = rawExchange(ctx, addr, q)
				}
			}
		})
	}
	for _, i := range fast {
		work <- i
	}
	close(work)
	wg.Wait()
	f.Seconds = time.Since(began).Seconds()
	samples := sampler.stop()
	f.RSSPeakBytes = peak(samples)
	if err := ctx.Err(); err != nil {
		return err
	}

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
		fail := ""
		switch {
		case o.timeout:
			f.Hangs++
			fail = "no answer and no close within " + q.wait.String()
		case q.valid && (o.status != http.StatusOK || o.bad != ""):
			f.ValidFailures++
			fail = fmt.Sprintf("valid request: status %d %s %s", o.status, o.bad, o.err)
		case o.status >= 500 && o.replica != "":
			f.Upstream5xx++
			fail = fmt.Sprintf("engine %s answered %d", o.replica, o.status)
		case o.status == http.StatusBadGateway || o.status == http.StatusServiceUnavailable || o.status == http.StatusGatewayTimeout:
			f.Upstream5xx++
			fail = fmt.Sprintf("gateway answered %d for want of an engine", o.status)
		case o.status >= 500 && o.status != q.expect5xx:
			f.GatewayFailures++
			fail = fmt.Sprintf("gateway answered %d", o.status)
		case o.notHTTP1 && q.kind != "h2-garbage":
			fail = "answer is not HTTP/1.x: " + o.err
		}
		if fail != "" {
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

	// The gateway afterwards: healthy, memory and files back.
	_, st := waitIdle(ctx, admin, gw, sims, 10*time.Second)
	f.HealthyAfter, f.HealthDetail = gatewayServes(ctx, gw)
	if !st.idle() {
		f.HealthDetail = strings.TrimSpace(f.HealthDetail + fmt.Sprintf(" still in flight: %+v", st))
	}
	f.RSSAfterBytes = idleRSS(ctx, gw.Pid, idleWindow)
	f.FDsAfter, _ = procs.OpenFDs(gw.Pid)
	f.ClientConnsAfter, _ = gw.ClientConns()
	f.GatewayErrors = map[string]float64{}
	if p, err := gw.Metrics(ctx, admin); err == nil {
		maps.Copy(f.GatewayErrors, p.ByLabel("inferrail_request_errors_total", "reason"))
	}
	r.res.Hostile = f
	log := gw.Log()
	r.check("5xx answers of the gateway itself (beyond the 505/501 HTTP/1.1 calls for)", "0", strconv.Itoa(f.GatewayFailures), f.GatewayFailures == 0)
	r.check("5xx for want of an engine (502/503/504, or relayed)", "0: should not happen here", strconv.Itoa(f.Upstream5xx), f.Upstream5xx == 0)
	r.check("hangs (no answer, connection not closed)", "0", strconv.Itoa(f.Hangs), f.Hangs == 0)
	r.check("valid requests answered 200", fmt.Sprintf("%d of %d", l.Valid, l.Valid), fmt.Sprintf("%d failed", f.ValidFailures), f.ValidFailures == 0)
	r.check("handler panics in the gateway log", "0", strconv.Itoa(len(log.Panics)), len(log.Panics) == 0)
	r.check("gateway healthy afterwards", "/health 200 and a chat served", stress.OrText(f.HealthDetail, "yes"), f.HealthyAfter && st.idle())
	r.check("client connections the gateway still holds afterwards", "0", strconv.Itoa(f.ClientConnsAfter), f.ClientConnsAfter == 0)
	r.check("gateway idle memory afterwards", "within 64 MiB of the baseline (the Go runtime returns freed heap lazily)",
		fmt.Sprintf("%s → %s (peak %s); open files %d → %d", stress.MiB(f.RSSBeforeBytes), stress.MiB(f.RSSAfterBytes), stress.MiB(f.RSSPeakBytes), f.FDsBefore, f.FDsAfter),
		f.RSSAfterBytes-f.RSSBeforeBytes < 64<<20)
	r.note("Idle memory is read in the %v after the last request. A Go process that falls idle runs no garbage collection until the "+
		"runtime forces one (every two minutes), and even then returns freed pages to the kernel slowly, so the bodies of the burst can stay "+
		"resident for minutes without being held by anything; a leak would show in gw-soak's idle-to-idle growth instead.", idleWindow)
	r.check("partial headers closed by the header timeout", fmt.Sprintf("about %v", l.HeaderTimeout),
		fmt.Sprintf("p50 %s, max %s (%d connections)", stress.Secs(f.SlowClose.P50), stress.Secs(f.SlowClose.Max), f.SlowClose.N),
		f.SlowClose.N > 0 && f.SlowClose.Max < (l.HeaderTimeout+time.Second).Seconds())
	return nil
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

// hostileMix builds the shuffled list of exchanges: the hostile kinds in
// their shares, and the valid chats (a tenth over keep-alive net/http, a
// tenth over h2c, the rest raw).
func hostileMix(l HostileLoad, addr string) []hostileReq {
	b := &hostileBuilder{host: addr, l: l}
	var reqs []hostileReq
	counts := make([]int, len(hostileShares))
	assigned := 0
	for i, s := range hostileShares {
		counts[i] = max(1, s.share*l.Hostile/3000)
		assigned += counts[i]
	}
	counts[0] = max(1, counts[0]+l.Hostile-assigned)
	for i, s := range hostileShares {
		variants := b.variants(s.kind)
		for n := range counts[i] {
			q := variants[n%len(variants)]
			q.kind = s.kind
			if q.wait == 0 {
				q.wait = l.RequestTimeout + 5*time.Second
			}
			reqs = append(reqs, q)
		}
	}
	for n := range l.Valid {
		q := b.valid()
		switch n % 10 {
		case 0:
			q.keepAlive = true
		case 1:
			q.h2c = true
		}
		reqs = append(reqs, q)
	}
	rng := rand.New(rand.NewPCG(l.Seed, 11))
	rng.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	return reqs
}

// hostileBuilder writes the raw requests.
type hostileBuilder struct {
	host string
	l    HostileLoad
}

const hostileChat = `{"model":"sim","messages":[{"role":"user","content":"Hello there, gateway."}],"max_tokens":4}`

// request writes a request with a Content-Length body; headers are whole
// lines without CRLF. Every request asks to close the connection.
func (b *hostileBuilder) request(method, target string, body []byte, headers ...string) []byte {
	var w bytes.Buffer
	fmt.Fprintf(&w, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, target, b.host)
	for _, h := range headers {
		w.WriteString(h + "\r\n")
	}
	if body != nil {
		fmt.Fprintf(&w, "Content-Length: %d\r\n", len(body))
	}
	w.WriteString("\r\n")
	w.Write(body)
	return w.Bytes()
}

func (b *hostileBuilder) post(variant, target, contentType string, body []byte, headers ...string) hostileReq {
	if contentType != "" {
		headers = append([]string{"Content-Type: " + contentType}, headers...)
	}
	return hostileReq{variant: variant, parts: [][]byte{b.request(http.MethodPost, target, body, headers...)}}
}

func (b *hostileBuilder) chat(variant string, body []byte, headers ...string) hostileReq {
	return b.post(variant, "/v1/chat/completions", "application/json", body, headers...)
}

func (b *hostileBuilder) raw(variant string, data []byte, closeWrite bool) hostileReq {
	return hostileReq{variant: variant, parts: [][]byte{data}, closeWrite: closeWrite}
}

// valid is a valid chat.
func (b *hostileBuilder) valid() hostileReq {
	q := b.chat("valid", []byte(hostileChat))
	q.kind, q.valid, q.wait = "valid", true, b.l.RequestTimeout+5*time.Second
	return q
}

// bigBodies are the large bodies of huge-json, built once per process.
var bigBodies = sync.OnceValue(func() map[string][]byte {
	var keys strings.Builder
	for i := range 50000 {
		if i > 0 {
			keys.WriteByte(',')
		}
		keys.WriteString(`"k` + strconv.Itoa(i) + `":` + strconv.Itoa(i))
	}
	padded := []byte(`{"model":"sim","messages":[{"role":"user","content":"hi"}],"max_tokens":4`)
	padded = append(append(padded, bytes.Repeat([]byte(" "), 30<<20)...), '}')
	return map[string][]byte{
		"long":   []byte(`{"model":"sim","messages":[{"role":"user","content":"` + strings.Repeat("tokens ", 600<<10) + `"}],"max_tokens":4}`),
		"array":  chatWith(`"x":[` + strings.Repeat("0,", 200000) + `0]`),
		"keys":   chatWith(`"metadata":{` + keys.String() + `}`),
		"padded": padded,
	}
})

func chatWith(extra string) []byte {
	return []byte(`{"model":"sim","messages":[{"role":"user","content":"hi"}],"max_tokens":4,` + extra + `}`)
}

// variants lists the requests of one hostile kind.
func (b *hostileBuilder) variants(kind string) []hostileReq {
	header := b.l.HeaderTimeout
	switch kind {
	case "malformed-json":
		var out []hostileReq
		for i, body := range []string{
			`{`, `{"model":"sim","messages":[`, `nul`, `{"model":"sim",}`, `{"messages":[{"role":"user","content":"hi"}]}}`,
			"\x00\x01\x02", `{"model":1e999999}`, ``, `[]`, `"just a string"`, `{"model":"sim","messages":"not a list"}`,
			`{"model":"sim","messages":[{"role":"user","content":"hi"}],"max_tokens":-1}`,
			`{"model":"sim","messages":[{"role":"user","content":"hi"}],"max_tokens":1e100}`,
			`{"model":"no-such-model","messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"sim","model":"inferrail/sim-8b","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`,
			`{"model":["sim"],"messages":[]}`, `{"model":"sim","messages":[{"role":"user"}]}`, `{"model":"sim","prompt":"hi"}`,
			`{"model":"sim","messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`,
			`{"model":"sim","messages":[{"role":"user","content":"hi"}],"n":5}`, `{"model":"sim","messages":[]}`,
			`{"model":null,"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`, `{"model":"sim"} {"model":"sim"}`,
		} {
			out = append(out, b.chat(fmt.Sprintf("malformed-%d %.30q", i, body), []byte(body)))
		}
		return out
	case "huge-json":
		big := bigBodies()
		long, array, keys, padded := big["long"], big["array"], big["keys"], big["padded"]
		tooBig := b.request(http.MethodPost, "/v1/chat/completions", nil, "Content-Type: application/json", "Content-Length: 41943040")
		return []hostileReq{
			b.chat("4 MiB prompt", long), b.chat("200k-element array", array), b.chat("50k-key object", keys),
			b.chat("200k-element array", array), b.chat("50k-key object", keys), b.chat("4 MiB prompt", long),
			b.chat("200k-element array", array), b.chat("50k-key object", keys), b.chat("4 MiB prompt", long),
			{variant: "40 MiB declared, 1 MiB sent", parts: [][]byte{tooBig, bytes.Repeat([]byte(" "), 1<<20)}},
			b.chat("30 MiB padded body (under the 32 MiB limit)", padded),
			{variant: "40 MiB declared, 1 MiB sent", parts: [][]byte{tooBig, bytes.Repeat([]byte(" "), 1<<20)}},
		}
	case "nested-json":
		deep := func(n int, open, close string) string { return strings.Repeat(open, n) + strings.Repeat(close, n) }
		return []hostileReq{
			b.chat("arrays 100000 deep", chatWith(`"x":`+deep(100000, "[", "]"))),
			b.chat("arrays 9000 deep", chatWith(`"x":`+deep(9000, "[", "]"))),
			b.chat("objects 9000 deep", chatWith(`"x":`+strings.Repeat(`{"a":`, 9000)+"1"+strings.Repeat("}", 9000))),
			b.chat("arrays 300 deep", chatWith(`"x":`+deep(300, "[", "]"))),
			b.chat("messages 100000 deep", []byte(`{"model":"sim","messages":`+deep(100000, "[", "]")+`}`)),
			b.chat("model 100000 deep", []byte(`{"model":`+deep(100000, "[", "]")+`}`)),
		}
	case "wrong-method":
		var out []hostileReq
		for _, m := range []string{"GET", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "FOO", "get", "HEAD"} {
			for _, p := range []string{"/v1/chat/completions", "/v1/completions"} {
				out = append(out, hostileReq{variant: m + " " + p, method: m, parts: [][]byte{b.request(m, p, []byte(hostileChat), "Content-Type: application/json")}})
			}
		}
		for _, mp := range [][2]string{{"POST", "/v1/models"}, {"POST", "/health"}, {"DELETE", "/v1/models"}, {"PUT", "/health"}} {
			out = append(out, hostileReq{variant: mp[0] + " " + mp[1], method: mp[0], parts: [][]byte{b.request(mp[0], mp[1], []byte(hostileChat), "Content-Type: application/json")}})
		}
		return out
	case "odd-path":
		var out []hostileReq
		for _, p := range []string{
			"/v1/chat/completions/", "//v1/chat/completions", "/v1/../v1/chat/completions", "/V1/CHAT/COMPLETIONS",
			"/v1/chat%2Fcompletions", "/%00", "/v1/chat/completions?stream=true&%zz", "/" + strings.Repeat("a", 6000), "*",
			"http://example.com/v1/chat/completions", "/v1/chat/completions#frag", "/\xff\xfe", "/v1/chat/completions%00",
			"/./v1/./chat/completions", "/v1/chat/completions;x=1", "/metrics", "/admin", "/v1", "/v2/chat/completions",
			"/v1/chat/completions?" + strings.Repeat("q=1&", 2000),
		} {
			out = append(out, b.post(fmt.Sprintf("path %.40q", p), p, "application/json", []byte(hostileChat)))
		}
		return out
	case "content-type":
		var out []hostileReq
		for _, ct := range []string{"text/plain", "", "multipart/form-data; boundary=x", "application/json; charset=utf-16",
			"application/x-www-form-urlencoded", "application/JSON", "*/*", "application/json; " + strings.Repeat("x=y; ", 60),
			"application/json\x01", "image/png"} {
			out = append(out, b.post(fmt.Sprintf("content type %.30q", ct), "/v1/chat/completions", ct, []byte(hostileChat)))
		}
		return out
	case "invalid-utf8":
		return []hostileReq{
			b.chat("invalid UTF-8 in content", []byte("{\"model\":\"sim\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\xc3\x28 bad\"}],\"max_tokens\":4}")),
			b.chat("invalid UTF-8 model", []byte("{\"model\":\"\xff\xfe\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4}")),
			b.chat("invalid UTF-8 role", []byte("{\"model\":\"sim\",\"messages\":[{\"role\":\"\xc0\xaf\",\"content\":\"hi\"}],\"max_tokens\":4}")),
			b.chat("lone surrogate escape", []byte(`{"model":"sim","messages":[{"role":"user","content":"\ud800 hi"}],"max_tokens":4}`)),
			b.chat("invalid UTF-8 key", []byte("{\"model\":\"sim\",\"\xff\":1,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4}")),
			b.chat("invalid UTF-8 request id", []byte(hostileChat), "X-Request-Id: \xff\xfe\xfd"),
			b.chat("invalid UTF-8 header value", []byte(hostileChat), "X-Anything: \xc3\x28\xa0\xa1"),
			b.chat("NUL in content", []byte(`{"model":"sim","messages":[{"role":"user","content":"a\u0000b"}],"max_tokens":4}`)),
		}
	case "absurd-headers":
		var many []string
		for i := range 300 {
			many = append(many, fmt.Sprintf("X-Pad-%d: %s", i, strings.Repeat("a", 1000)))
		}
		body := []byte(hostileChat)
		return []hostileReq{
			b.chat("300 headers of 1 KB", body, many...),
			b.chat("one 900 KiB header", body, "X-Big: "+strings.Repeat("b", 900<<10)),
			b.chat("one 2 MiB header", body, "X-Huge: "+strings.Repeat("c", 2<<20)),
			b.raw("header without colon", []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: "+b.host+"\r\nNoColonHere\r\nContent-Length: 2\r\n\r\n{}"), true),
			b.raw("two different Content-Length", []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: "+b.host+"\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"), true),
			b.raw("negative Content-Length", []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: "+b.host+"\r\nContent-Length: -5\r\n\r\n{}"), true),
			b.raw("Content-Length past int64", []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: "+b.host+"\r\nContent-Length: 99999999999999999999\r\n\r\n{}"), true),
			{variant: "Transfer-Encoding gzip, chunked", expect5xx: http.StatusNotImplemented, closeWrite: true,
				parts: [][]byte{[]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: " + b.host + "\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")}},
			b.raw("chunked and Content-Length", []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: "+b.host+"\r\nContent-Type: application/json\r\nConnection: close\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"+fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(hostileChat), hostileChat)), true),
			b.raw("no Host", []byte("POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(hostileChat))+"\r\n\r\n"+hostileChat), true),
			b.chat("two Host headers", body, "Host: other.example"),
			b.chat("5000-byte request id", body, "X-Request-Id: "+strings.Repeat("r", 5000)),
			b.chat("Connection naming Content-Type", body, "Connection: keep-alive, Content-Type, X-Inferrail-Replica"),
			b.chat("h2c upgrade", body, "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA", "Connection: Upgrade, HTTP2-Settings"),
			{variant: "Expect 100-continue, 100 MiB declared", parts: [][]byte{b.request(http.MethodPost, "/v1/chat/completions", nil,
				"Content-Type: application/json", "Expect: 100-continue", "Content-Length: 104857600")}},
			b.chat("Expect 100-continue with its body", body, "Expect: 100-continue"),
			b.chat("Expect something else", body, "Expect: teapot"),
			{variant: "HTTP/9.9", expect5xx: http.StatusHTTPVersionNotSupported, closeWrite: true,
				parts: [][]byte{[]byte("POST /v1/chat/completions HTTP/9.9\r\nHost: " + b.host + "\r\nContent-Length: 2\r\n\r\n{}")}},
			b.raw("HTTP/1.0 without Host", []byte("POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(hostileChat))+"\r\n\r\n"+hostileChat), false),
			b.raw("obsolete line folding", []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: "+b.host+"\r\nX-Folded: a\r\n  b\r\nContent-Length: 2\r\n\r\n{}"), true),
			b.raw("extra spaces in the request line", []byte("POST  /v1/chat/completions  HTTP/1.1\r\nHost: "+b.host+"\r\nContent-Length: 2\r\n\r\n{}"), true),
			b.chat("header name with a space", body, "X Bad: 1"),
			b.chat("Content-Encoding gzip on plain JSON", body, "Content-Encoding: gzip"),
		}
	case "cut-body":
		half := []byte(hostileChat)[:len(hostileChat)/2]
		return []hostileReq{
			{variant: "Content-Length body cut in half", closeWrite: true, parts: [][]byte{b.request(http.MethodPost, "/v1/chat/completions", nil,
				"Content-Type: application/json", "Content-Length: "+strconv.Itoa(len(hostileChat))), half}},
			{variant: "chunk cut short", closeWrite: true, parts: [][]byte{[]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: " + b.host +
				"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n100\r\n" + string(half))}},
			{variant: "bad chunk size", closeWrite: true, parts: [][]byte{[]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: " + b.host +
				"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")}},
			{variant: "Content-Length shorter than the body", closeWrite: true, parts: [][]byte{b.request(http.MethodPost, "/v1/chat/completions", nil,
				"Content-Type: application/json", "Content-Length: 10"), []byte(hostileChat)}},
			{variant: "headers only, body never sent", closeWrite: true, parts: [][]byte{b.request(http.MethodPost, "/v1/chat/completions", nil,
				"Content-Type: application/json", "Content-Length: 500")}},
			{variant: "request line only", closeWrite: true, parts: [][]byte{[]byte("POST /v1/chat/completions HTTP/1.1\r\n")}},
		}
	case "garbage":
		rng := rand.New(rand.NewPCG(3, 4))
		junk := make([]byte, 512)
		for i := range junk {
			junk[i] = byte(rng.UintN(256))
		}
		return []hostileReq{
			b.raw("512 random bytes", append(junk, "\r\n\r\n"...), true),
			b.raw("TLS ClientHello", append([]byte("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"), junk[:200]...), true),
			b.raw("blank lines", []byte("\r\n\r\n\r\n"), true),
			b.raw("NUL bytes", bytes.Repeat([]byte{0}, 300), true),
			b.raw("SSH banner", []byte("SSH-2.0-OpenSSH_9.6\r\n\r\n"), true),
			b.raw("request line without version", []byte("POST /v1/chat/completions\r\n\r\n"), true),
		}
	case "h2-garbage":
		preface := "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
		settings := "\x00\x00\x00\x04\x00\x00\x00\x00\x00"
		return []hostileReq{
			b.raw("h2 preface, SETTINGS, garbage frame", []byte(preface+settings+"\x00\x00\x05\xff\x00\x00\x00\x00\x01hello"), true),
			b.raw("h2 preface, HEADERS with bad HPACK", []byte(preface+settings+"\x00\x00\x04\x01\x05\x00\x00\x00\x01\xff\xff\xff\xff"), true),
			b.raw("h2 preface only", []byte(preface), true),
			b.raw("h2 preface, 100 KiB DATA on stream 0", append([]byte(preface+settings+"\x01\x90\x00\x00\x00\x00\x00\x00\x00"), make([]byte, 100<<10)...), true),
		}
	case "stalled-body":
		head := b.request(http.MethodPost, "/v1/chat/completions", nil, "Content-Type: application/json", "Content-Length: "+strconv.Itoa(len(hostileChat)))
		return []hostileReq{{variant: "body stops half-way", slow: true, wait: b.l.RequestTimeout + 5*time.Second,
			parts: [][]byte{head, []byte(hostileChat)[:len(hostileChat)/2]}}}
	case "slowloris":
		return []hostileReq{
			{variant: "a header byte every 500 ms", slow: true, wait: header + 5*time.Second, drip: 500 * time.Millisecond,
				parts: [][]byte{[]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: " + b.host + "\r\nX-Slow: ")}},
			{variant: "request line, then a byte every 200 ms", slow: true, wait: header + 5*time.Second, drip: 200 * time.Millisecond,
				parts: [][]byte{[]byte("POST /v1/chat/completions HTTP/1.1\r\n")}},
		}
	case "idle-conn":
		return []hostileReq{{variant: "connect and send nothing", slow: true, wait: header + 5*time.Second}}
	case "slow-complete":
		// A whole valid request, dribbled out within the header timeout.
		full := b.request(http.MethodPost, "/v1/chat/completions", []byte(hostileChat), "Content-Type: application/json")
		var parts [][]byte
		for i := 0; i < len(full); i += 20 {
			parts = append(parts, full[i:min(i+20, len(full))])
		}
		return []hostileReq{{variant: "valid request in 20-byte pieces within half the header timeout", slow: true, parts: parts,
			pause: header / time.Duration(2*len(parts)), wait: b.l.RequestTimeout + 5*time.Second, valid: true}}
	}
	panic("unknown hostile kind " + kind)
}
