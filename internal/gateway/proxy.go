package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/clock"
	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/index"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/policy"
)

// hopHeaders are meaningful for one connection only and never forwarded
// (RFC 9110 §7.6.1).
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// Errors that end an attempt before the engine answered.
var (
	errReplicaDown = errors.New("replica failed its health checks while the request waited")
	errHeadTimeout = errors.New("no response head within the request timeout")
)

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// exchange is one client request on its way through the gateway.
type exchange struct {
	w        http.ResponseWriter
	r        *http.Request
	arrived  time.Time
	id       string
	model    string
	body     []byte
	policy   policy.Policy
	deadline time.Time
	pred     *prediction // nil: routed without a prediction
	user     string      // the body's top-level user field, a conversation key
	route    policy.Request
}

// serveGenerate proxies a chat or completion request.
func (g *Gateway) serveGenerate(w http.ResponseWriter, r *http.Request) {
	ex := &exchange{w: w, r: r, arrived: time.Now()}
	ex.id = r.Header.Get(openai.HeaderRequestID)
	if !openai.ValidRequestID(ex.id) {
		ex.id = newRequestID()
	}
	w.Header().Set(openai.HeaderRequestID, ex.id)
	ex.deadline = ex.arrived.Add(time.Duration(g.cfg.Server.RequestTimeout))

	body, e, reason := g.readBody(w, r, ex.deadline)
	if e != nil {
		g.fail(ex, e, reason)
		return
	}
	if !json.Valid(body) {
		g.fail(ex, openai.BadRequest("The request body is not valid JSON.", ""), reasonBadRequest)
		return
	}
	mf, err := openai.FindModel(body)
	if err != nil {
		g.fail(ex, openai.BadRequest(err.Error(), "model"), reasonBadRequest)
		return
	}
	model, ok := g.resolveModel(mf.Name)
	if !ok {
		if mf.Name == "" {
			g.fail(ex, openai.BadRequest("The request names no model and the gateway serves several.", "model"), reasonBadRequest)
		} else {
			g.fail(ex, openai.ModelNotFound(mf.Name), reasonUnknownModel)
		}
		return
	}
	if model != mf.Name {
		body = openai.SpliceModel(body, mf, model)
	}
	ex.model, ex.body, ex.policy, ex.user = model, body, g.policies[model], mf.User
	if g.cfg.Logging.LogPrompts {
		g.log.Info("request", "request_id", ex.id, "model", model, "body", string(body))
	}
	ex.pred = g.predict(ex, isChatPath(r.URL.Path))
	ex.route = g.routeRequest(ex)
	g.proxy(ex)
}

// routeRequest is what the policy learns of the request: its prompt's
// length and blocks when tokenized (else a length estimated from the body at
// four bytes a token) and the conversation it names.
func (g *Gateway) routeRequest(ex *exchange) policy.Request {
	req := policy.Request{Model: ex.model, ID: ex.id, PromptTokens: len(ex.body) / bytesPerToken}
	if p := ex.pred; p != nil {
		req.PromptTokens, req.Blocks, req.BlockSize = p.tokens, p.hashes, g.tokenizers[ex.model].blockSize
	}
	req.Session = ex.r.Header.Get(openai.HeaderSession)
	if req.Session == "" {
		req.Session = ex.user
	}
	return req
}

// bytesPerToken estimates a prompt's tokens from its body without a
// tokenizer.
const bytesPerToken = 4

// resolveModel maps a requested name or alias to a configured model. An
// empty name resolves when the gateway serves exactly one model.
func (g *Gateway) resolveModel(name string) (string, bool) {
	if name == "" {
		if len(g.cfg.Models) == 1 {
			return g.cfg.Models[0].Name, true
		}
		return "", false
	}
	m, ok := g.models[name]
	return m, ok
}

// readBody reads the whole body within the deadline and the size limit.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, deadline time.Time) ([]byte, *openai.Error, string) {
	limit := g.cfg.Server.MaxBodyBytes
	tooLarge := func() *openai.Error {
		return openai.HTTPError(http.StatusRequestEntityTooLarge, fmt.Sprintf("The request body is larger than %d bytes.", limit))
	}
	if r.ContentLength > limit {
		return nil, tooLarge(), reasonBodyTooLarge
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(deadline)
	n := r.ContentLength // sizes the buffer; a chunked body starts small
	if n < 0 {
		n = 4 << 10
	}
	n = min(n, 1<<20)
	buf := bytes.NewBuffer(make([]byte, 0, n+1))
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		// The deadline stays: clearing it after a timeout wedges the
		// connection, and the connection is closed after this answer.
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return nil, tooLarge(), reasonBodyTooLarge
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, openai.HTTPError(http.StatusRequestTimeout, "The request body did not arrive within the request timeout."), reasonBodyTimeout
		default:
			return nil, openai.HTTPError(http.StatusBadRequest, "Reading the request body failed."), reasonBadRequest
		}
	}
	// Lift the deadline so a long response is not cut when it passes.
	_ = rc.SetReadDeadline(time.Time{})
	return buf.Bytes(), nil, ""
}

// fail answers an error the gateway decided itself and counts it.
func (g *Gateway) fail(ex *exchange, e *openai.Error, reason string) {
	if e.Status == http.StatusServiceUnavailable {
		ex.w.Header().Set("Retry-After", "1")
	}
	e.Write(ex.w)
	g.metrics.errors.WithLabelValues(ex.model, reason).Inc()
	g.metrics.requests.WithLabelValues(ex.model, "", statusClass(e.Status)).Inc()
}

func statusClass(code int) string {
	return strconv.Itoa(code/100) + "xx"
}

// retryable reports whether an engine status means it did not take the
// request, so another replica may.
func retryable(code int) bool {
	return code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout
}

// answer is an engine's response head with what must be let go after it.
type answer struct {
	resp   *http.Response
	lease  *fleet.Lease
	cancel context.CancelCauseFunc
	record index.Token // what routing recorded in the KV index for this attempt
	cached int         // prompt tokens predicted cached on the replica; -1 without a prediction
}

// drop discards a response the client will not see, frees its lease and
// takes back what the attempt recorded, since the engine computed nothing.
func (g *Gateway) drop(a *answer) {
	_, _ = io.Copy(io.Discard, io.LimitReader(a.resp.Body, 64<<10))
	a.resp.Body.Close()
	a.cancel(nil)
	a.lease.Release()
	g.index.TakeBack(a.record)
}

// abandon frees an attempt that got no response head and takes back what
// it recorded.
func (g *Gateway) abandon(a *answer) {
	a.cancel(nil)
	a.lease.Release()
	g.index.TakeBack(a.record)
}

// proxy sends the request to replicas until one answers or attempts run out.
func (g *Gateway) proxy(ex *exchange) {
	tried := map[*fleet.Replica]bool{}
	var kept *answer // a retryable answer, passed on if nothing better comes
	var lastErr error
	for attempt := 1; ; attempt++ {
		lease, cached, e, reason := g.choose(ex, tried)
		if e != nil {
			if kept != nil {
				g.relay(ex, kept)
				return
			}
			g.fail(ex, e, reason)
			return
		}
		if kept != nil {
			g.drop(kept)
			kept = nil
		}
		rep := lease.Replica()
		tried[rep] = true
		var record index.Token
		if ex.pred != nil {
			record = g.index.RecordPrompt(rep.ID, ex.pred.hashes, ex.pred.partial)
			g.metrics.predicted.WithLabelValues(ex.model).Add(float64(cached))
		}
		a, err := g.attempt(ex, lease)
		a.record, a.cached = record, cached
		switch {
		case err == nil && !retryable(a.resp.StatusCode):
			g.health.Report(rep, a.resp.StatusCode < 500)
			g.relay(ex, a)
			return
		case ex.r.Context().Err() != nil: // the client left before any answer
			if err == nil {
				g.drop(a)
			} else {
				g.abandon(a)
			}
			g.metrics.disconnects.WithLabelValues(ex.model).Inc()
			g.metrics.requests.WithLabelValues(ex.model, rep.ID, outcomeCancelled).Inc()
			return
		}
		g.health.Report(rep, false)
		if err != nil {
			lastErr = err
			g.abandon(a)
			g.log.Debug("attempt failed", "request_id", ex.id, "replica", rep.ID, "attempt", attempt, "error", err)
		} else {
			kept = a
		}
		if attempt >= g.cfg.Retry.MaxAttempts || !time.Now().Before(ex.deadline) {
			switch {
			case kept != nil:
				g.relay(ex, kept)
			case errors.Is(lastErr, errHeadTimeout):
				g.fail(ex, openai.HTTPError(http.StatusGatewayTimeout, "No replica answered within the request timeout."), reasonTimeout)
			default:
				g.fail(ex, openai.HTTPError(http.StatusBadGateway, "No replica could take the request."), reasonUpstream)
			}
			return
		}
		g.metrics.retries.WithLabelValues(ex.model).Inc()
		if !g.sleep(ex, attempt) {
			if kept != nil {
				g.drop(kept)
			}
			g.metrics.disconnects.WithLabelValues(ex.model).Inc()
			g.metrics.requests.WithLabelValues(ex.model, "", outcomeCancelled).Inc()
			return
		}
	}
}

// sleep waits the backoff before the next attempt; false when the client
// left. The wait never runs past the request's deadline.
func (g *Gateway) sleep(ex *exchange, attempt int) bool {
	d := time.Duration(g.cfg.Retry.Backoff)
	for i := 1; i < attempt && d < time.Duration(g.cfg.Retry.MaxBackoff); i++ {
		d *= 2
	}
	d = min(d, time.Duration(g.cfg.Retry.MaxBackoff), time.Until(ex.deadline))
	if d <= 0 {
		return ex.r.Context().Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ex.r.Context().Done():
		return false
	}
}

// choose picks a replica for the next attempt and takes a lease on it.
// Replicas not tried yet come first.
func (g *Gateway) choose(ex *exchange, tried map[*fleet.Replica]bool) (*fleet.Lease, int, *openai.Error, string) {
	start := time.Now()
	at := clock.Of(start)
	sc := decisionScratches.Get().(*decisionScratch)
	defer sc.release()
	mr := g.routes().model(ex.model)
	// Offer the usable replicas with room, those this request has not
	// tried first. One pass fills their candidates as it finds them: a
	// decision reads every replica, and reading each once is most of it.
	// Routes are named by their place in the model's routes. The slices
	// are grown once and filled by index: appending, or a call that
	// returned them, kept them in memory and cost more per replica than
	// reading it.
	usable := false
	all := len(mr.routes)
	offered, cands, retried := slices.Grow(sc.offered[:0], all)[:all], slices.Grow(sc.cands[:0], all)[:all], sc.retried[:0]
	n := 0
	for i := range mr.routes {
		rt := &mr.routes[i]
		if !rt.Usable(at) {
			continue
		}
		usable = true
		switch {
		case !rt.HasRoom():
		case len(tried) > 0 && tried[rt.Replica]: // empty on a first attempt
			retried = append(retried, i)
		default:
			g.candidate(&cands[n], rt, at)
			offered[n] = i
			n++
		}
	}
	if n == 0 {
		for _, i := range retried {
			g.candidate(&cands[n], &mr.routes[i], at)
			offered[n] = i
			n++
		}
	}
	offered, cands = offered[:n], cands[:n]
	sc.offered, sc.retried, sc.cands = offered, retried, cands
	if !usable {
		return nil, -1, openai.HTTPError(http.StatusServiceUnavailable, "No healthy replica serves the model."), reasonNoReplica
	}
	if ex.pred != nil && len(offered) > 0 {
		bs := ex.route.BlockSize // the model's, as routeRequest set it with pred
		sc.cached = g.index.MatchHandles(sc.cached, mr.indexHandles(g.index), offered, ex.pred.hashes, ex.pred.tokens, bs)
		for i, blocks := range sc.cached {
			cands[i].Cached = blocks * bs
		}
	}
	ex.route.At = start
	for len(offered) > 0 {
		d := ex.policy.Pick(&ex.route, cands)
		i := d.Index
		rt := &mr.routes[offered[i]]
		if lease, ok := rt.TryAcquire(); ok {
			lease.Queue(start, d.PrefillSecs, ex.route.PromptTokens)
			g.metrics.decided(&mr.series, mr.chosen[offered[i]], d, time.Since(start))
			return lease, cands[i].Cached, nil, ""
		}
		// Lost the race for its last slot: offer the others as they were.
		offered, cands = slices.Delete(offered, i, i+1), slices.Delete(cands, i, i+1)
	}
	return nil, -1, openai.HTTPError(http.StatusServiceUnavailable, "Every replica serving the model is at capacity."), reasonFleetFull
}

// decisionScratch holds the slices one decision fills, so that deciding
// allocates nothing once the pool is warm: allocations and the garbage
// collections they bring are most of a decision's tail at many replicas.
type decisionScratch struct {
	offered, retried []int // places in the model's routes
	cands            []policy.Candidate
	cached           []int
}

var decisionScratches = sync.Pool{New: func() any { return new(decisionScratch) }}

// release drops the replica IDs the candidates point at, so that a pooled
// scratch keeps no departed replica's ID alive, and returns it to the pool.
func (sc *decisionScratch) release() {
	clear(sc.cands[:cap(sc.cands)])
	decisionScratches.Put(sc)
}

// candidate fills c with a replica as policies see it at the instant at:
// the gateway's own counts always, the engine's while its report is fresh. It
// writes c in place: a decision fills one per replica, and building each in
// a local and copying it cost more than the reads.
func (g *Gateway) candidate(c *policy.Candidate, rt *route, at clock.Instant) {
	c.ID, c.InFlight, c.Cached, c.QueuedPrefill = rt.id, rt.InFlight(), -1, rt.QueuedPrefillAt(at)
	c.Running, c.KVUsage, c.KVCapacityBlocks = -1, -1, rt.kvCapacity
	// A retired feed's last report serves while it is fresh; only then is
	// the new feed looked up, so a decision reads one feed per replica.
	rep, ok := rt.feed.FreshRouting(at)
	if !ok && rt.feed.Retired() {
		rep, ok = g.reportFromNewFeed(rt, at)
	}
	if ok {
		c.Running, c.KVUsage = int64(rep.Running), rep.KVUsage
		if rep.CapacityBlocks > 1 {
			c.KVCapacityBlocks = rep.CapacityBlocks - 1 // vLLM's null block is not usable
		}
	}
}

// attempt sends the request to the leased replica and waits for the
// response head. The answer's cancel ends the upstream request; it is
// always set, the response only without error.
func (g *Gateway) attempt(ex *exchange, lease *fleet.Lease) (*answer, error) {
	rep := lease.Replica()
	ctx, cancel := context.WithCancelCause(ex.r.Context())
	a := &answer{lease: lease, cancel: cancel}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rep.URL.JoinPath(ex.r.URL.Path).String(), bytes.NewReader(ex.body))
	if err != nil {
		return a, err
	}
	copyHeaders(req.Header, ex.r.Header)
	req.Header.Del("Expect")
	req.Header.Set(openai.HeaderRequestID, ex.id)
	req.ContentLength = int64(len(ex.body))

	// Until the head arrives, the request gives up when its deadline passes
	// or when probes take the replica out.
	headed := make(chan struct{})
	down := rep.Down()
	timer := time.AfterFunc(time.Until(ex.deadline), func() { cancel(errHeadTimeout) })
	go func() {
		select {
		case <-down:
			cancel(errReplicaDown)
		case <-headed:
		case <-ctx.Done():
		}
	}()
	resp, err := g.transport.RoundTrip(req)
	timer.Stop()
	close(headed)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && ex.r.Context().Err() == nil {
			err = cause
		}
		return a, err
	}
	lease.Started()
	a.resp = resp
	return a, nil
}

func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append([]string(nil), vs...)
	}
	for _, conn := range src.Values("Connection") {
		for _, f := range bytes.Split([]byte(conn), []byte(",")) {
			dst.Del(string(bytes.TrimSpace(f)))
		}
	}
	for _, h := range hopHeaders {
		dst.Del(h)
	}
}

// relay streams the engine's response to the client as it arrives, frame by
// frame, and records the request's outcome.
func (g *Gateway) relay(ex *exchange, a *answer) {
	resp, rep := a.resp, a.lease.Replica()
	if resp.StatusCode/100 != 2 {
		// The engine refused: it computed none of the prompt.
		g.index.TakeBack(a.record)
	}
	defer func() {
		resp.Body.Close()
		a.cancel(nil)
		a.lease.Release()
		if rep.Removed() {
			g.metrics.forget(rep.ID)
		}
	}()
	h := ex.w.Header()
	for k, vs := range resp.Header {
		h[k] = vs
	}
	for _, hh := range hopHeaders {
		h.Del(hh)
	}
	h.Set(openai.HeaderRequestID, ex.id)
	h.Set(openai.HeaderReplica, rep.ID)
	h.Set(openai.HeaderPolicy, ex.policy.Name())
	if ex.pred != nil {
		h.Set(openai.HeaderPromptTokens, strconv.Itoa(ex.pred.tokens))
		h.Set(openai.HeaderCachedTokens, strconv.Itoa(a.cached))
	}
	ex.w.WriteHeader(resp.StatusCode)
	// A response of unknown length (a stream) goes out as the engine sends
	// it: its head at once, then every chunk. One of known length is a
	// whole answer: its head and body leave together when the handler
	// ends (or as the write buffer fills), one write instead of two.
	streamed := resp.ContentLength < 0
	rc := http.NewResponseController(ex.w)
	if streamed {
		_ = rc.Flush()
	}

	bufp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bufp)
	buf := *bufp
	first := true
	policyName := ex.policy.Name()
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if first {
				first = false
				a.lease.FirstByte(time.Now())
				g.metrics.ttft.WithLabelValues(ex.model, policyName, rep.ID).Observe(time.Since(ex.arrived).Seconds())
			}
			if _, werr := ex.w.Write(buf[:n]); werr != nil {
				g.metrics.disconnects.WithLabelValues(ex.model).Inc()
				g.metrics.requests.WithLabelValues(ex.model, rep.ID, outcomeCancelled).Inc()
				return
			}
			if streamed {
				_ = rc.Flush()
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if ex.r.Context().Err() != nil {
				g.metrics.disconnects.WithLabelValues(ex.model).Inc()
				g.metrics.requests.WithLabelValues(ex.model, rep.ID, outcomeCancelled).Inc()
				return
			}
			// The engine broke a response that had started: the client
			// must see a broken response, never a clean end.
			g.metrics.requests.WithLabelValues(ex.model, rep.ID, outcomeAborted).Inc()
			g.health.Report(rep, false)
			g.log.Warn("engine broke a started response", "request_id", ex.id, "replica", rep.ID, "error", rerr)
			panic(http.ErrAbortHandler)
		}
	}
	g.metrics.duration.WithLabelValues(ex.model, policyName, rep.ID).Observe(time.Since(ex.arrived).Seconds())
	g.metrics.requests.WithLabelValues(ex.model, rep.ID, statusClass(resp.StatusCode)).Inc()
}
