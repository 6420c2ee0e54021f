package gateway

// Rate limits of keys and models. A request is admitted (admit) once its
// model is known and its prompt counted: it takes one request, its prompt
// tokens and, from every output budget, the most output it asks for (at
// most the whole budget; one token when it states no maximum) from every
// bucket of its key and its model, all or none, as OpenAI's limiter counts
// max_tokens when a request arrives. When the response ends (settle), the
// output tokens the engine reports in its usage, or an estimate when it
// reports none, true the output up: the rest is charged or the unused part
// given back. A request no engine answered with a 2xx gets its prompt and
// output tokens back, and one refused before any attempt began on a
// replica its request too. Refused requests get 429 with OpenAI's headers, so
// the official SDKs wait as told and retry.
//
// Limits hold per gateway instance (ratelimit.Local).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/auth"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/ratelimit"
)

// maxCosts is the most buckets one request touches: three kinds, of its
// key and of its model.
const maxCosts = 6

// bill is what a request took from the rate limits, and what it still
// owes when its response ends.
type bill struct {
	key     *auth.Key // nil without keys
	costs   [maxCosts]ratelimit.Cost
	n       int
	outputs bool  // an output budget applies
	asked   int64 // the output asked for, which an output cost holds at most a whole budget of
	prompts bool  // a prompt budget applies
	// estimated: the prompt tokens taken were estimated from the body's
	// bytes (no exact count in time, or none possible); the engine's usage
	// trues them up when the answer reports it.
	estimated bool
	status    int // the engine's status; 0 when none answered
	// abandoned: the client left while an engine worked on the request
	// (it was written whole to one), before its answer's head. The prompt was computed and output
	// generated until the gateway hung up, how much is never seen: the
	// prompt and the output taken at admission stay charged.
	abandoned bool
	// tried: an attempt began on a replica. A request refused before any
	// (shed by flow control, or the gateway's 503 when no replica can take
	// it) reached no engine, and gets its request back with its tokens:
	// whether it was admitted before or after a queue filled is a race,
	// and a client's retries of a 503 would otherwise pay once each.
	tried   bool
	settled bool            // settle has run: a bill is settled once
	ctx     context.Context // for the limiter's calls after the client may have left
}

// add adds the buckets of one set of limits: a request, prompt tokens and
// output tokens taken (output at most a whole budget: a full bucket can
// always hold it).
func (b *bill) add(scope ratelimit.Scope, name string, l config.Limits, prompt, output int64) {
	b.asked = output
	for _, c := range []struct {
		kind  ratelimit.Kind
		limit int64
		n     int64
	}{
		{ratelimit.Requests, l.RequestsPerMinute, 1},
		{ratelimit.PromptTokens, l.PromptTokensPerMinute, prompt},
		{ratelimit.OutputTokens, l.OutputTokensPerMinute, min(output, l.OutputTokensPerMinute)},
	} {
		if c.limit == 0 {
			continue
		}
		b.costs[b.n] = ratelimit.Cost{ID: ratelimit.ID{Scope: scope, Name: name, Kind: c.kind}, Rate: ratelimit.PerMinute(c.limit), N: c.n}
		b.n++
		b.outputs = b.outputs || c.kind == ratelimit.OutputTokens
		b.prompts = b.prompts || c.kind == ratelimit.PromptTokens
	}
}

// began notes that an attempt began on a replica: the request is spent,
// whatever the answer. A nil bill (no limits apply) notes nothing.
func (b *bill) began() {
	if b != nil {
		b.tried = true
	}
}

// trueUp returns what settling the bill's costs of one kind at n tokens
// moves: the costs that took less than n, each N set to the rest to
// charge, and those that took more, each N set to the part to give back;
// a cost that took exactly n is in neither. It reorders and rewrites the
// bill's costs in place: settle, its one caller, is their last use, and
// each call looks only at costs of its kind.
func (b *bill) trueUp(kind ratelimit.Kind, n int64) (charge, refund []ratelimit.Cost) {
	cs := b.costs[:b.n]
	moved := 0
	for i := range cs {
		if cs[i].ID.Kind == kind && cs[i].N != n {
			cs[moved], cs[i] = cs[i], cs[moved]
			moved++
		}
	}
	short := 0
	for i := range cs[:moved] {
		if cs[i].N < n {
			cs[short], cs[i] = cs[i], cs[short]
			short++
		}
	}
	for i := range cs[:moved] {
		cs[i].N = max(n-cs[i].N, cs[i].N-n)
	}
	return cs[:short], cs[short:moved]
}

// outputCap is the most output tokens a request's body asks for: n
// choices of max_completion_tokens, else of max_tokens, in a chat (vLLM's
// chat reads max_completion_tokens first), of max_tokens for each prompt of
// a completion's batch (openai.Prompts of its prompt in body, which mf was
// read from); 0 when it states no maximum, whatever its n.
func outputCap(mf openai.ModelField, body []byte, chat bool) int64 {
	most := mf.MaxTokens
	if chat && mf.MaxCompletionTokens > 0 {
		most = mf.MaxCompletionTokens
	}
	n := max(mf.N, 1)
	if !chat && mf.PromptEnd > 0 {
		prompts := int64(openai.Prompts(body[mf.PromptStart:mf.PromptEnd]))
		if n > math.MaxInt64/prompts {
			return math.MaxInt64
		}
		n *= prompts
	}
	if most > math.MaxInt64/n {
		return math.MaxInt64
	}
	return most * n
}

// admit checks that the request's key may use its model and takes its
// costs from the rate limits. A limiter that fails admits the request.
func (g *Gateway) admit(ex *exchange) error {
	key := auth.FromContext(ex.r.Context())
	if key != nil && !key.Allows(ex.model, ex.gen.resolveModel) {
		g.access.metrics.failures.WithLabelValues(portClient, string(auth.ModelDenied)).Inc()
		return modelDenied(key.Name, ex.model)
	}
	ml := ex.gen.limits[ex.model] // live config: the request's generation's
	var kl config.Limits
	if key != nil {
		kl = key.Limits
	}
	if kl.IsZero() && ml.IsZero() {
		return nil
	}
	b := &bill{key: key, ctx: context.WithoutCancel(ex.r.Context()), estimated: ex.pred == nil}
	prompt, output := int64(ex.route.PromptTokens), max(ex.outputCap, 1)
	if key != nil {
		b.add(ratelimit.ScopeKey, key.Name, kl, prompt, output)
	}
	b.add(ratelimit.ScopeModel, ex.model, ml, prompt, output)
	v, err := g.access.limiter.Admit(b.ctx, time.Now(), b.costs[:b.n])
	if err != nil {
		g.access.metrics.limitErrors.Inc()
		g.log.Warn("rate limiter failed; the request is admitted", "request_id", ex.id, "error", err)
		return nil
	}
	if !v.OK {
		denied := &b.costs[v.Denied]
		keyName := ""
		if key != nil {
			keyName = key.Name
		}
		g.access.metrics.limited.WithLabelValues(ex.model, keyName, denied.ID.Limit()).Inc()
		return b.refusal(v)
	}
	rateHeaders(ex.w.Header(), b.costs[:b.n])
	ex.bill = b
	return nil
}

// refusal is the 429 of a refused bill, in OpenAI's shape: its message
// names the limit, the x-ratelimit headers say where every budget stands,
// and Retry-After (and retry-after-ms, which the SDKs read first) when it
// will admit the request. A request larger than a full budget is told
// not to retry.
func (b *bill) refusal(v ratelimit.Verdict) *refusal {
	c := &b.costs[v.Denied]
	typ := "tokens"
	if c.ID.Kind == ratelimit.Requests {
		typ = "requests"
	}
	whose := "model `" + c.ID.Name + "`"
	if c.ID.Scope == ratelimit.ScopeKey {
		whose = "key `" + c.ID.Name + "`"
	}
	what := strings.ReplaceAll(c.ID.Kind.String(), "_", " ") + " per minute"
	h := http.Header{}
	rateHeaders(h, b.costs[:b.n])
	asked := c.N
	if c.ID.Kind == ratelimit.OutputTokens {
		asked = b.asked
	}
	var msg string
	if v.Never {
		msg = fmt.Sprintf("Request too large for %s on %s: limit %d, requested %d. It can never be admitted: shorten it or raise the limit.",
			whose, what, c.Rate.Limit, asked)
		h.Set("X-Should-Retry", "false")
	} else {
		msg = fmt.Sprintf("Rate limit reached for %s on %s: limit %d, remaining %d, requested %d. Please try again in %s.",
			whose, what, c.Rate.Limit, c.Remaining, max(asked, 1), resetString(v.Wait))
		h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(v.Wait.Seconds())), 10))
		h.Set("Retry-After-Ms", strconv.FormatInt(v.Wait.Milliseconds()+1, 10))
	}
	rf := newRefusal(openai.OpenAIError(http.StatusTooManyRequests, typ, "rate_limit_exceeded", msg, ""), reasonRateLimited)
	rf.header = h
	return rf
}

// rateHeaderNames are OpenAI's x-ratelimit headers, canonical, in the
// order rateHeaders writes their values: limit, remaining, reset of
// requests, then of tokens.
var rateHeaderNames = [2][3]string{
	{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"},
	{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"},
}

// rateHeaders sets OpenAI's x-ratelimit headers from the bill's costs:
// the requests figures of the request budget with the fewest left, the
// tokens figures of the token budget (prompt or output) with the fewest
// left. Budgets a request has none of are left out. Every request that a
// limit applies to gets them, so they cost two allocations: one string of
// all the values, one array of the header slices.
func rateHeaders(h http.Header, costs []ratelimit.Cost) {
	var pick [2]*ratelimit.Cost // requests, tokens
	for i := range costs {
		c := &costs[i]
		k := 1
		if c.ID.Kind == ratelimit.Requests {
			k = 0
		}
		if pick[k] == nil || c.Remaining < pick[k].Remaining {
			pick[k] = c
		}
	}
	var buf [128]byte
	b := buf[:0]
	var ends [6]int
	for k, c := range pick {
		if c == nil {
			continue
		}
		b = strconv.AppendInt(b, c.Rate.Limit, 10)
		ends[3*k] = len(b)
		b = strconv.AppendInt(b, c.Remaining, 10)
		ends[3*k+1] = len(b)
		b = appendReset(b, c.Reset)
		ends[3*k+2] = len(b)
	}
	all := string(b)
	vals := make([]string, 6)
	start := 0
	for k, c := range pick {
		if c == nil {
			continue
		}
		for j := range 3 {
			i := 3*k + j
			vals[i] = all[start:ends[i]]
			start = ends[i]
			h[rateHeaderNames[k][j]] = vals[i : i+1 : i+1]
		}
	}
}

// resetString writes a duration as OpenAI's reset headers do: "1s",
// "6m0s", "17ms", to the millisecond, rounded up.
func resetString(d time.Duration) string { return string(appendReset(nil, d)) }

func appendReset(b []byte, d time.Duration) []byte {
	if d <= 0 {
		return append(b, "0s"...)
	}
	return append(b, (d + time.Millisecond - 1).Truncate(time.Millisecond).String()...)
}

// meter notes the engine's answer to a request and, when an output budget
// applies to a 2xx or the request is captured, counts the output as it is
// relayed.
func (g *Gateway) meter(ex *exchange, resp *http.Response) {
	b := ex.bill
	if b != nil {
		b.status = resp.StatusCode
	}
	if resp.StatusCode/100 != 2 || !ex.captured && (b == nil || !b.outputs && !(b.prompts && b.estimated)) {
		return
	}
	m := meters.Get().(*outputMeter)
	// A stream as the relay knows one: its media type in any case.
	*m = outputMeter{stream: isEventStream(resp.Header), chat: isChatPath(ex.r.URL.Path),
		encoded: !identity(resp.Header)}
	m.body = meteredBody{ReadCloser: resp.Body, m: m}
	resp.Body = &m.body
	ex.meter = m
}

// finish ends an admitted request once its response is relayed: its
// output counted, its bill settled and its capture record queued.
func (g *Gateway) finish(ex *exchange) {
	out, source, prompt := int64(-1), "", int64(-1)
	if m := ex.meter; m != nil {
		out, source = m.tokens()
		if n, ok := m.tail.number(`"prompt_tokens":`); ok && !m.encoded {
			prompt = int64(n)
		}
		meters.Put(m)
		ex.meter = nil
	}
	g.settle(ex, out, source, prompt)
	g.captureRequest(ex, out, source)
}

// settle ends a request's bill: the output taken at admission trued up to
// the output counted (out tokens counted from source; out < 0 when not
// counted, which keeps what was taken) and an estimated prompt trued up to
// the engine's count (prompt; < 0 when the answer gave none), or the prompt
// and output tokens given back when no engine answered it with a 2xx and
// the client did not leave one working on it, and its request too when no
// attempt began.
func (g *Gateway) settle(ex *exchange, out int64, source string, prompt int64) {
	b := ex.bill
	if b == nil || b.settled {
		return
	}
	b.settled = true
	now := time.Now()
	var err error
	switch {
	case b.abandoned:
	case b.status/100 != 2:
		err = g.settleAt(b, now, ratelimit.PromptTokens, 0)
		err = errors.Join(err, g.settleAt(b, now, ratelimit.OutputTokens, 0))
		if !b.tried {
			err = errors.Join(err, g.settleAt(b, now, ratelimit.Requests, 0))
		}
	default:
		if b.prompts && b.estimated && prompt >= 0 && prompt != int64(ex.route.PromptTokens) {
			g.access.metrics.trueUps.Inc()
			err = g.settleAt(b, now, ratelimit.PromptTokens, prompt)
		}
		if b.outputs && out >= 0 {
			g.access.metrics.chargedBy[source].Add(float64(out))
			err = errors.Join(err, g.settleAt(b, now, ratelimit.OutputTokens, out))
		}
	}
	if err != nil {
		g.access.metrics.limitErrors.Inc()
		g.log.Warn("rate limiter failed to settle a request", "request_id", ex.id, "error", err)
	}
}

// refundBefore settles the bill of a request about to be answered with
// status, when that is not a 2xx (the gateway's own refusal, or an
// engine's relayed), so that its tokens are given back before the answer
// leaves, and writes into h where its budgets stand after: the x-ratelimit
// headers written at admission counted a charge the answer refunds.
func (g *Gateway) refundBefore(ex *exchange, status int, h http.Header) {
	b := ex.bill
	if b == nil || b.settled || status/100 == 2 {
		return
	}
	b.status = status
	g.settle(ex, -1, "", -1)
	rateHeaders(h, b.costs[:b.n])
}

// settleAt trues the bill's costs of one kind up to n tokens (trueUp).
func (g *Gateway) settleAt(b *bill, now time.Time, kind ratelimit.Kind, n int64) error {
	charge, refund := b.trueUp(kind, n)
	var err error
	if len(charge) > 0 {
		err = g.access.limiter.Charge(b.ctx, now, charge)
	}
	if len(refund) > 0 {
		err = errors.Join(err, g.access.limiter.Refund(b.ctx, now, refund))
	}
	return err
}

// outputMeter counts a response's output tokens: from the engine's usage
// when the response carries it (a whole answer always does, a stream with
// stream_options.include_usage), else estimated: for a stream as one
// token per event but [DONE] and a chat's role event (vLLM sends an event
// per engine step, a token each unless it speculates), for anything else
// as its bytes over four. A body in a content coding (an engine that
// compresses though asked not to) is counted as its bytes over four: its
// usage and events cannot be read without decoding it.
type outputMeter struct {
	body    meteredBody // the response body it reads through
	tail    usageTail
	stream  bool
	chat    bool
	encoded bool // the body is in a content coding
	bytes   int64
	sse     sseCounter
}

func (m *outputMeter) write(p []byte) {
	m.bytes += int64(len(p))
	if len(p) == 0 || m.encoded {
		return
	}
	m.tail.write(p)
	if m.stream {
		m.sse.write(p)
	}
}

// sseCounter counts a stream's events as an SSE reader dispatches them: at
// a blank line, when a data line came since the last one; lines end in LF
// or CRLF. Comments (": keep-alive", which a proxy in between may add) and
// extra blank lines are not events, and how the stream is split into reads
// does not change the count. (Counting blank lines did both: three
// comments charged three tokens, and an extra blank line counted or not by
// where a read ended.)
type sseCounter struct {
	events  int64
	first   [5]byte // the current line's first bytes: enough to tell a data line
	n       int     // the current line's length so far
	hasData bool    // a data line came since the last event
}

func (c *sseCounter) write(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		line := p
		if i >= 0 {
			line = p[:i]
		}
		if c.n < len(c.first) {
			copy(c.first[c.n:], line)
		}
		c.n += len(line)
		if i < 0 {
			return
		}
		c.endLine()
		p = p[i+1:]
	}
}

// endLine takes the line just ended (its first bytes in first).
func (c *sseCounter) endLine() {
	b := c.first[:min(c.n, len(c.first))]
	switch {
	case c.n == 0 || c.n == 1 && b[0] == '\r': // blank
		if c.hasData {
			c.events++
			c.hasData = false
		}
	case len(b) >= 4 && string(b[:4]) == "data" && (len(b) == 4 || b[4] == ':' || b[4] == '\r'):
		c.hasData = true
	}
	c.n = 0
}

// meters recycles outputMeters, each 1.5 KiB of tail and usage: one per metered
// response would be the largest allocation of a request.
var meters = sync.Pool{New: func() any { return new(outputMeter) }}

// Sources of an output count, as inferrail_rate_limit_output_tokens_total
// labels them.
const (
	sourceUsage  = "usage"
	sourceChunks = "stream_chunks"
	sourceBytes  = "bytes"
)

// tokens returns the output tokens and where the count came from.
func (m *outputMeter) tokens() (int64, string) {
	if m.encoded {
		return m.bytes / bytesPerToken, sourceBytes
	}
	if n, ok := m.tail.number(`"completion_tokens":`); ok {
		return int64(n), sourceUsage
	}
	if m.stream {
		framing := int64(1)
		if m.chat {
			framing = 2
		}
		return max(m.sse.events-framing, 0), sourceChunks
	}
	return m.bytes / bytesPerToken, sourceBytes
}

// meteredBody is a response body whose bytes an outputMeter sees.
type meteredBody struct {
	io.ReadCloser
	m *outputMeter
}

func (b *meteredBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.m.write(p[:n])
	return n, err
}
