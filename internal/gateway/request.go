package gateway

// The request path of a chat or completion request, in the order it runs:
// read → resolve the model → tokenize and predict → decide → attempt →
// relay. Deciding is shared with /admin/explain (decide.go); what a
// refused request is told comes from one place (refusal.go).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/index"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/policy"
	"github.com/zeebo/xxh3"
)

// exchange is one client request on its way through the gateway.
type exchange struct {
	w        http.ResponseWriter
	r        *http.Request
	arrived  time.Time
	id       string
	gen      *generation // the config it reads for its whole life
	model    string
	body     []byte        // what engines are sent
	arm      int           // its policy's place in the model's arms
	policy   policy.Policy // the arm's policy
	shadowed bool          // the model has shadow policies
	deadline time.Time
	pred     *prediction // nil: routed without a prediction
	// readable: body with zeros for Python's NaN and infinities, nil when
	// it holds none (see parseable); unreadable: readableBody's.
	readable   []byte
	unreadable bool
	// sessionKey is the conversation the request names (x-session-id,
	// else the body's user field; "" when none), bounded in size by
	// sessionKey: what the session tables and logs keep of it.
	sessionKey string
	route      policy.Request
	// outputCap is the most output tokens its body asks for (outputCap);
	// 0 when it states no maximum.
	outputCap int64
	// arrayPrompt is a completion's prompt tokens estimated from its
	// content when its prompt is an array (a batch, or token ids), 0
	// otherwise: what routes it when the tokenizer gives no count.
	arrayPrompt int
	bill        *bill      // what the rate limits charged; nil when none apply
	adm         *admission // its priority class and TTFT target; nil until classified
	// fair and slot: fair sharing knows the request (it must leave), and
	// it holds a slot. Guarded by its model queue's mu once set.
	fair, slot bool
	// attempts counts its attempts holding a lease. The request's slot
	// goes with the last: a 502, 503 or 504 kept while a retry streams
	// holds one slot with it, not none once the kept answer is let go.
	attempts  int
	queuedFor time.Duration // time spent in the flow queue so far, over all its waits
	// pace: its key's prefills are paced (pacing.go), as judged when it was
	// last let try the replicas; stream: its body asks for a stream;
	// pacedOut: its last decision found room only where pacing held it,
	// and pacedCounted: that was counted.
	pace, stream, pacedOut, pacedCounted bool
	// tokenized is the tokenizer's outcome (tokOK, or why there is no
	// prediction); "" when the model has no tokenizer.
	tokenized string
	obs       *observed // its trace and logged decisions; nil when it has neither
	captured  bool      // the traffic capture records it
	// meter counts the relayed response's output, when an output budget
	// applies to it or it is captured; nil otherwise.
	meter *outputMeter
}

// serveGenerate proxies a chat or completion request: the whole path.
func (g *Gateway) serveGenerate(w http.ResponseWriter, r *http.Request) {
	ex, err := g.readRequest(w, r)
	defer g.observe(ex)()
	if err != nil {
		g.refuse(ex, err)
		return
	}
	if ex.gen.cfg.Logging.LogPrompts {
		g.log.Info("request", "request_id", ex.id, "model", ex.model, "body", string(ex.body))
	}
	if err := g.shedEarly(ex); err != nil {
		g.refuse(ex, err)
		return
	}
	ex.pred = g.predict(ex, isChatPath(r.URL.Path))
	ex.route = g.routeRequest(ex)
	if err := g.admit(ex); err != nil {
		g.refuse(ex, err)
		return
	}
	defer g.finish(ex)
	g.proxy(ex)
}

// readRequest checks a request's admission headers, then reads its body
// within its deadline and size limit, checks it is JSON and resolves the
// model it names, splicing the model's own name over an alias so the
// engine sees a name it serves. The exchange is returned, with its ID
// answered, whether or not the request is good.
func (g *Gateway) readRequest(w http.ResponseWriter, r *http.Request) (*exchange, error) {
	ex := &exchange{w: w, r: r, arrived: time.Now(), id: requestIDFor(r), gen: g.current()}
	w.Header().Set(openai.HeaderRequestID, ex.id)
	ex.deadline = ex.arrived.Add(time.Duration(g.cfg.Server.RequestTimeout))
	if err := classify(ex); err != nil {
		skipBody(w, r)
		return ex, err
	}
	body, err := g.readBody(w, r, ex.deadline)
	if err != nil {
		return ex, err
	}
	// vLLM reads a body that starts with UTF-8's byte order mark (Python's
	// json.loads of bytes skips it); the engine gets the body without it.
	body = bytes.TrimPrefix(body, utf8BOM)
	readable, zeroed, unreadable, ok := readableBody(body)
	if !ok {
		return ex, refusedNotJSON
	}
	mf, err := openai.FindModel(readable)
	switch {
	case errors.Is(err, openai.ErrModelNotUTF8):
		// vLLM's answer to any body that is not UTF-8.
		return ex, refusedNotUTF8
	case errors.Is(err, openai.ErrNotObject):
		return ex, newRefusal(openai.BadRequest(err.Error(), ""), reasonBadRequest)
	case err != nil:
		return ex, newRefusal(openai.BadRequest(err.Error(), "model"), reasonBadRequest)
	}
	if id := mf.RequestID; !openai.ValidRequestID(r.Header.Get(openai.HeaderRequestID)) && openai.ValidRequestID(id) {
		// vLLM names a request by its body's request_id when no header
		// does; the header the engine gets from us must say the same. A
		// header we cannot pass on counts as none.
		ex.id = id
		w.Header().Set(openai.HeaderRequestID, id)
	}
	// Read before the model's name is spliced in, which moves the prompt.
	ex.arrayPrompt = arrayPrompt(r, readable, mf)
	ex.outputCap = outputCap(mf, readable, isChatPath(r.URL.Path))
	model, ok := ex.gen.resolveModel(mf.Name)
	switch {
	case !ok && mf.Name == "":
		return ex, refusedNoModel
	case !ok:
		return ex, newRefusal(openai.ModelNotFound(mf.Name), reasonUnknownModel)
	case model != mf.Name:
		body = openai.SpliceModel(body, mf, model)
		if zeroed { // the copy, whose offsets were body's
			readable = openai.SpliceModel(readable, mf, model)
		}
	}
	ex.model, ex.body, ex.stream = model, body, mf.Stream
	if zeroed {
		ex.readable, ex.unreadable = readable, unreadable
	}
	ex.sessionKey = sessionKey(r.Header.Get(openai.HeaderSession), mf.User)
	if ex.adm.target == 0 {
		ex.adm.target = g.modelTarget(ex)
	}
	mp := ex.gen.routing[model]
	ex.arm = mp.armOf(ex.conversation())
	ex.policy, ex.shadowed = mp.arms[ex.arm].policy, len(mp.shadows) > 0
	return ex, nil
}

// conversation is the request's conversation key (x-session-id, else the
// body's user field), or its ID when it names none: what its split arm
// follows.
func (ex *exchange) conversation() string {
	if s := ex.sessionKey; s != "" {
		return s
	}
	return ex.id
}

// maxSessionKey is the longest conversation name kept as sent. A client
// may send one of a megabyte in a header or many in a body's user field,
// and the session tables keep tens of thousands of names: a longer one is
// kept as a 128-bit digest of it, which names the same conversation.
const maxSessionKey = 256

// sessionKey is the conversation named by an x-session-id header, else by
// a body's user field, bounded by maxSessionKey. A name that is not UTF-8
// is named by its digest too: logs write strings as UTF-8, and two such
// names written with U+FFFD for their bad bytes would be one.
func sessionKey(header, user string) string {
	s := header
	if s == "" {
		s = user
	}
	if len(s) <= maxSessionKey && utf8.ValidString(s) {
		return s
	}
	d := xxh3.HashString128(s).Bytes()
	return "xxh3:" + hex.EncodeToString(d[:])
}

// requestIDFor is the client's request ID when well formed, else a new one.
func requestIDFor(r *http.Request) string {
	if id := r.Header.Get(openai.HeaderRequestID); openai.ValidRequestID(id) {
		return id
	}
	return newRequestID()
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// routeRequest is what the policy learns of the request: its prompt's
// length and blocks when tokenized (else a length estimated: from the
// content of a completion's prompt array, or from the body at four bytes
// a token) and the conversation it names.
func (g *Gateway) routeRequest(ex *exchange) policy.Request {
	req := policy.Request{Model: ex.model, ID: ex.id, PromptTokens: len(ex.body) / bytesPerToken}
	switch p := ex.pred; {
	case p != nil:
		req.PromptTokens, req.BlockSize = p.tokens, g.tokenizers[ex.model].blockSize
		if !p.noRead { // a prompt computed whole has no prefix to hash or credit
			req.Blocks = p.hashes
		}
	case ex.arrayPrompt > 0:
		req.PromptTokens = ex.arrayPrompt
	}
	req.Session = ex.sessionKey
	return req
}

// bytesPerToken estimates a prompt's tokens from its body without a
// tokenizer.
const bytesPerToken = 4

// proxy sends the request to replicas until one answers or attempts run
// out. A replica that answers 502, 503 or 504 did not take the request: its
// answer is kept and passed on only if no other replica answers better. An
// engine's own answer is better than none: it stays kept through the next
// attempt (its unread body and the request's fair-share slot held
// meanwhile, its lease on the replica let go), and is let go
// only when that attempt gets an answer too (one the client is given, or a
// later 502, 503 or 504 kept instead); a
// transport failure (a refused or broken connection, a timeout) never
// replaces it, and is what the client is told only when no engine
// answered at all.
func (g *Gateway) proxy(ex *exchange) {
	defer g.leave(ex)
	tried := map[*fleet.Replica]bool{}
	var kept *attempt
	var lastErr error
	for n := 1; ; n++ {
		var lease *fleet.Lease
		var cached int
		var err error
		if n == 1 {
			lease, cached, err = g.enter(ex)
		} else {
			ex.pace = false // a retry does not wait for room: held back, it would fail
			if lease, cached, err = g.choose(ex, tried); err == nil {
				g.flow.queues[ex.model].retook(ex)
			} else if kept == nil && errors.Is(err, errFleetFull) && ex.gen.cfg.Flow.Enabled() {
				// The failed attempt's room went to a waiter: with a
				// queue, the retry waits for room as a first attempt does,
				// rather than being told the fleet is full.
				lease, cached, err = g.wait(ex, g.flow.queues[ex.model], tried)
			}
		}
		if errors.Is(err, errQueueLeft) {
			kept.discardIfAny(g.index)
			g.cancelled(ex, "")
			return
		}
		if err != nil {
			if kept != nil {
				g.relay(ex, kept)
				return
			}
			g.refuse(ex, err)
			return
		}
		if n > 1 {
			// Counted once it has a replica: a retry that found none, or
			// whose client left during the backoff, moved nothing.
			g.metrics.retries.WithLabelValues(ex.model).Inc()
		}
		rep := lease.Replica()
		tried[rep] = true
		a := g.begin(ex, lease, cached)
		err = g.send(ex, a)
		switch {
		case err == nil && !retryable(a.resp.StatusCode):
			kept.discardIfAny(g.index)
			if a.resp.StatusCode/100 != 2 {
				// A 2xx counts as served only once its body has come whole
				// (relay): an engine that sends heads and breaks every body
				// must not reset its failure streak at each head.
				g.health.Report(rep, a.resp.StatusCode < 500)
			}
			g.relay(ex, a)
			return
		case ex.r.Context().Err() != nil:
			g.leftBeforeAnswer(ex, a, kept)
			return
		}
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			g.health.Refused(rep) // nothing listens there: out at once
		case lostConnection(err):
			// Most often an engine that exited while the gateway held a
			// pooled connection to it: probes tell at once.
			g.health.Report(rep, false)
			g.health.Suspect(rep)
		default:
			g.health.Report(rep, false)
		}
		if err != nil {
			lastErr = err
			a.discard(g.index)
			g.log.Debug("attempt failed", "request_id", ex.id, "replica", rep.ID, "attempt", n, "error", err)
		} else {
			kept.discardIfAny(g.index)
			kept = a
			a.shelve(g.index)
			// Its span ends with the answer's head, which is all of the
			// attempt that took time; relaying the kept body, if it comes
			// to that, adds nothing to the ended span.
			a.trace.end()
		}
		if lastTry(ex, n, err) {
			if kept != nil {
				g.relay(ex, kept)
			} else {
				g.refuse(ex, lastErr)
			}
			return
		}
		if !g.sleep(ex, n) {
			if kept != nil {
				kept.discard(g.index)
			}
			g.cancelled(ex, "")
			return
		}
	}
}

// leftBeforeAnswer ends a request whose client left before any answer,
// its attempt a (and a kept answer, if any) let go. Only a request written
// whole to an engine was worked on: it counts as cancelled there, and its
// bill as abandoned. One whose client left before (while the gateway
// tokenized, admitted or sent it) is on no replica, and gets its tokens
// back.
func (g *Gateway) leftBeforeAnswer(ex *exchange, a, kept *attempt) {
	on := ""
	if a.wrote.Load() {
		on = a.lease.Replica().ID
		if ex.bill != nil {
			ex.bill.abandoned = true
		}
	}
	a.discard(g.index)
	kept.discardIfAny(g.index)
	g.cancelled(ex, on)
}

// lostConnection reports whether an attempt failed at its connection
// before the engine's answer arrived (a reset, a close, a broken pipe, a
// name that no longer resolves) rather than by waiting too long or by an
// answer no client can be given (a 101, a status outside 100-599).
func lostConnection(err error) bool {
	if err == nil || errors.Is(err, errHeadTimeout) || errors.Is(err, errReplicaDown) ||
		errors.Is(err, errSwitched) || errors.Is(err, errBadStatus) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	return !errors.As(err, &ne) || !ne.Timeout()
}

// retryable reports whether an engine status means it did not take the
// request, so another replica may.
func retryable(code int) bool {
	return code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout
}

// cancelled counts a request whose client left; replica is "" when it
// left between attempts or before its request reached an engine.
func (g *Gateway) cancelled(ex *exchange, replica string) {
	g.metrics.disconnects.WithLabelValues(ex.model).Inc()
	if replica == "" || g.memberID(replica) {
		g.metrics.requests.WithLabelValues(ex.model, replica, outcomeCancelled).Inc()
	}
}

// lastTry reports whether attempt n, which ended with err, is the
// request's last: the retries are spent, or its deadline has passed. A
// whole answer waits past the deadline, as long as its generation takes,
// and one whose replica probes take out then is moved all the same.
func lastTry(ex *exchange, n int, err error) bool {
	moved := !ex.stream && errors.Is(err, errReplicaDown)
	return n >= ex.gen.cfg.Retry.MaxAttempts || (!time.Now().Before(ex.deadline) && !moved)
}

// sleep waits the backoff before the next attempt; false when the client
// left. The wait never runs past the request's deadline.
func (g *Gateway) sleep(ex *exchange, attempt int) bool {
	rc := ex.gen.cfg.Retry
	d := time.Duration(rc.Backoff)
	for i := 1; i < attempt && d < time.Duration(rc.MaxBackoff); i++ {
		d *= 2
	}
	d = min(d, time.Duration(rc.MaxBackoff), time.Until(ex.deadline))
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

// attempt is one try of a request on one replica. It owns what the try
// holds until it is let go, once, by discard or by relay: the lease on the
// replica, what routing recorded in the KV index for it, and the cancel of
// its upstream request.
type attempt struct {
	lease  *fleet.Lease
	mq     *modelQueue // the model's queue, woken when the lease frees room
	ex     *exchange   // the request it is a try of
	record index.Token // the prompt's blocks recorded on the replica
	cached int         // prompt tokens predicted cached there; -1 without a prediction
	cancel context.CancelCauseFunc
	resp   *http.Response // the engine's response head; nil until it came
	sent   time.Time      // when the attempt was sent
	trace  *upstreamTrace // its client span; nil without tracing
	// holding: its prompt is held as awaiting its first token, for
	// pacing its key (pacing.go), until letGoPrefill or, not streamed,
	// holdUntil.
	holding   bool
	holdUntil time.Time
	// wrote is set once the transport wrote the whole request to the
	// engine (httptrace's WroteRequest without an error).
	wrote atomic.Bool
}

// wroteRequest notes that the transport wrote the whole request.
func (a *attempt) wroteRequest(info httptrace.WroteRequestInfo) {
	if info.Err == nil {
		a.wrote.Store(true)
	}
}

// begin starts an attempt on the leased replica: the prompt's blocks are
// recorded there, as the engine will hold them once it computes them.
func (g *Gateway) begin(ex *exchange, lease *fleet.Lease, cached int) *attempt {
	a := &attempt{lease: lease, mq: g.flow.queues[ex.model], ex: ex, cached: cached, cancel: func(error) {}}
	ex.attempts++
	ex.bill.began()
	if ex.pred != nil {
		g.reveal(lease.Replica().ID, ex.pred) // first: what it reveals is the engine's, not speculation
		a.record = g.index.RecordPrompt(lease.Replica().ID, ex.pred.hashes, ex.pred.partial)
		// Both sides of the predicted hit rate count per decision: a retry
		// adds to each, a request refused before any decision to neither.
		g.metrics.promptTokens.WithLabelValues(ex.model).Add(float64(ex.pred.tokens))
		g.metrics.predicted.WithLabelValues(ex.model).Add(float64(cached))
		if mt := g.tokenizers[ex.model]; g.kv != nil && mt != nil && ex.pred.tokens-cached >= 2*mt.blockSize {
			g.kv.expect(lease.Replica().ID) // it must store at least one new block
		}
	}
	a.holdPrefill()
	return a
}

// discard lets go of an attempt whose answer the client will not see, or
// that got none: the engine computed nothing for it, so what it recorded
// is taken back. Its request is cancelled, never its body read: a kept
// 502, 503 or 504 whose body stalls must not hold back the answer another
// replica gave (its connection is not reused).
func (a *attempt) discard(ix index.Index) {
	a.cancel(nil)
	if a.resp != nil {
		a.resp.Body.Close()
	}
	a.letGoPrefill()
	a.freeSlot()
	ix.TakeBack(a.record)
	a.trace.end()
}

// freeSlot lets go of the attempt's place on its replica and, with the
// request's last attempt, of its slot in its key's fair share, and wakes
// the dispatcher. The share goes first: a dispatcher that finds the
// replica free must find the key's slot free too, or it would serve
// another key out of turn in between.
func (a *attempt) freeSlot() {
	if a.ex.attempts--; a.ex.attempts == 0 {
		a.mq.freed(a.ex)
	}
	a.lease.Release()
	a.mq.kick()
}

// shelve lets go of what a kept 502, 503 or 504 holds on its replica: the
// engine did not take the request, so it neither runs there nor will hold
// its blocks, and routing (the retry's decision among others) must not
// count it in the replica's load. The attempt keeps its response, its
// cancel and its place among the request's attempts, and with it the
// request's fair-share slot, until relay or discard.
func (a *attempt) shelve(ix index.Index) {
	a.letGoPrefill()
	a.lease.Release()
	ix.TakeBack(a.record)
	a.record = index.Token{}
	a.mq.kick()
}

// discardIfAny is discard of an attempt that may be nil.
func (a *attempt) discardIfAny(ix index.Index) {
	if a != nil {
		a.discard(ix)
	}
}

// send sends the request to the attempt's replica and waits for the
// response head, which it sets on the attempt.
func (g *Gateway) send(ex *exchange, a *attempt) error {
	rep := a.lease.Replica()
	ctx, cancel := context.WithCancelCause(ex.r.Context())
	a.cancel = cancel
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: a.wroteRequest})
	target := rep.URL.JoinPath(ex.r.URL.Path)
	target.RawQuery = ex.r.URL.RawQuery // as sent, like the body: vLLM reads none, a proxy before it may
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target.String(), bytes.NewReader(ex.body))
	if err != nil {
		return err
	}
	copyHeaders(req.Header, ex.r.Header)
	req.Header.Del("Expect")
	// The gateway reads what engines send ([DONE], usage): it asks for no
	// content coding, whatever the client accepts.
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set(openai.HeaderRequestID, ex.id)
	req.ContentLength = int64(len(ex.body))
	a.trace = g.traceUpstream(ex, a, req)
	a.sent = time.Now()

	// Until the head arrives, the request gives up when probes take the
	// replica out, and a stream when its deadline passes too; never after
	// (headWait). A whole answer's head comes only once it is generated,
	// however long that takes: waiting for it is neither late nor pending
	// (AnswersWhole).
	hw := newHeadWait(cancel)
	down := rep.Down()
	stopTimer := func() bool { return false }
	if ex.stream {
		stopTimer = time.AfterFunc(time.Until(ex.deadline), func() { hw.giveUp(errHeadTimeout) }).Stop
	} else {
		a.lease.AnswersWhole()
		a.mq.kick() // no longer pending: a replica at max_pending has room
	}
	go func() {
		select {
		case <-down:
			hw.giveUp(errReplicaDown)
		case <-hw.came:
		case <-ctx.Done():
		}
	}()
	resp, err := g.transport.RoundTrip(req)
	testHookRoundTripped(ctx, rep)
	stopTimer()
	gaveUp := hw.done()
	if err == nil && gaveUp != nil {
		// Given up as the head came: its body is cut already.
		resp.Body.Close()
		resp, err = nil, gaveUp
	}
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && ex.r.Context().Err() == nil {
			err = cause
		}
	}
	a.trace.headed(resp, err, ex.r.Context().Err() != nil)
	if err != nil {
		return err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body.Close()
		return errSwitched
	}
	if resp.StatusCode < 100 || resp.StatusCode > 599 {
		resp.Body.Close()
		return fmt.Errorf("%w: %d", errBadStatus, resp.StatusCode)
	}
	a.lease.Started()
	a.mq.kick() // no longer pending: a replica at max_pending has room
	a.resp = resp
	return nil
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// relay streams the engine's response to the client as it arrives, frame by
// frame, records the request's outcome and lets the attempt go.
func (g *Gateway) relay(ex *exchange, a *attempt) {
	resp, rep := a.resp, a.lease.Replica()
	g.meter(ex, resp)
	if resp.StatusCode/100 != 2 {
		// The engine refused: it computed none of the prompt.
		g.index.TakeBack(a.record)
	}
	defer func() {
		resp.Body.Close()
		a.cancel(nil)
		a.letGoPrefill()
		a.freeSlot()
		a.trace.end()
		if rep.Removed() && g.fleet.Snapshot().Get(rep.ID) == nil {
			g.metrics.forget(rep.ID)
		}
	}()
	setResponseHeaders(ex, a)
	g.refundBefore(ex, resp.StatusCode, ex.w.Header())
	ex.w.WriteHeader(resp.StatusCode)
	// A response of unknown length (a stream) goes out as the engine sends
	// it: its head at once, then every chunk. One of known length is most
	// often a whole answer in one read: its head and body then leave
	// together when the handler ends, one write instead of two; what
	// arrives of it in parts goes out as it arrives.
	streamed := resp.ContentLength < 0
	rc := http.NewResponseController(ex.w)
	if streamed {
		_ = rc.Flush()
	}
	var relayed int64

	bufp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bufp)
	buf := *bufp
	first := true
	policyName := ex.policy.Name()
	// The engine's usage says how many cached tokens it found, to check
	// the prediction against.
	check := ex.pred != nil && resp.StatusCode/100 == 2 && identity(resp.Header)
	// An engine's event stream that ends without [DONE] was cut short,
	// though its connection closed cleanly (an engine that stops aborts
	// what it runs): the client must not take it for a whole answer.
	events := ex.stream && streamed && resp.StatusCode/100 == 2 && isEventStream(resp.Header) && identity(resp.Header)
	var tail usageTail
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 && (check || events) {
			tail.write(buf[:n])
		}
		if n > 0 {
			if first {
				first = false
				g.firstByte(ex, a, streamed, policyName)
			}
			if _, werr := ex.w.Write(buf[:n]); werr != nil {
				a.trace.clientLeft()
				g.cancelled(ex, rep.ID)
				return
			}
			if relayed += int64(n); streamed || relayed < resp.ContentLength {
				_ = rc.Flush()
			}
		}
		if rerr == io.EOF && events && !tail.endsWithDone() {
			rerr = errNoDone
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil && events && tail.endsWithDone() {
			// The client has the whole answer: a client that closes on
			// [DONE], or an engine that does, only ends the connection
			// before the stream's last chunk marker.
			break
		}
		if rerr != nil {
			if ex.r.Context().Err() != nil {
				a.trace.clientLeft()
				g.cancelled(ex, rep.ID)
				return
			}
			// The engine broke it (it most often died): its record goes, as
			// a failed attempt's does; its events will say what it holds.
			g.index.TakeBack(a.record)
			g.broke(ex, a, rerr)
		}
	}
	if resp.StatusCode/100 == 2 {
		g.health.Report(rep, true)
	}
	if g.member(rep) {
		g.metrics.duration.WithLabelValues(ex.model, policyName, rep.ID).Observe(time.Since(ex.arrived).Seconds())
		g.metrics.requests.WithLabelValues(ex.model, rep.ID, statusClass(resp.StatusCode)).Inc()
	}
	if check && g.member(rep) { // a replica gone is forgotten, checks and all
		g.answered(ex, a, &tail)
	}
}

// errNoDone is why an event stream that ended without [DONE] is broken.
var errNoDone = errors.New("the event stream ended without [DONE]")

// broke ends a response the engine broke after it had started: the
// client must see a broken response, never a clean end. It does not
// return.
func (g *Gateway) broke(ex *exchange, a *attempt, err error) {
	rep := a.lease.Replica()
	a.trace.aborted(err)
	if g.member(rep) {
		g.metrics.requests.WithLabelValues(ex.model, rep.ID, outcomeAborted).Inc()
	}
	g.health.Report(rep, false)
	g.log.Warn("engine broke a started response", "request_id", ex.id, "replica", rep.ID, "error", err)
	panic(http.ErrAbortHandler)
}

// firstByte notes that the first byte of a's response reaches the client.
func (g *Gateway) firstByte(ex *exchange, a *attempt, streamed bool, policyName string) {
	now, rep := time.Now(), a.lease.Replica()
	a.lease.FirstByte(now)
	// Only an event stream's first byte, sent without a length to a
	// streaming request, is its first token: the pace and the TTFT
	// histogram learn from it alone. An error's is none, and a whole
	// answer's comes with its last, however it is framed (chunked,
	// HTTP/1.0's ended by the close) and whatever the request asked for
	// (JSON to a stream, or events a buffering proxy sent with a length).
	firstToken := streamed && ex.stream && a.resp.StatusCode/100 == 2 && isEventStream(a.resp.Header)
	if firstToken {
		a.lease.FirstToken(now)
	}
	a.letGoPrefill()
	a.trace.markFirstByte()
	ttft := now.Sub(ex.arrived)
	if firstToken && g.member(rep) {
		g.metrics.ttft.WithLabelValues(ex.model, policyName, rep.ID).Observe(ttft.Seconds())
	}
	g.flow.firstByte(ex, a.resp.StatusCode, ttft)
}

func statusClass(code int) string {
	return strconv.Itoa(code/100) + "xx"
}
