package gateway

// The spans of a request: a server span for the whole request, and for
// each attempt a route span (the decision) and an upstream client span
// (the engine's answer), whose context the engine receives as its
// parent in traceparent.

import (
	"cmp"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/policy"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys of the gateway's own spans.
const (
	attrModel         = attribute.Key("gen_ai.request.model") // OpenTelemetry's GenAI conventions
	attrRequestID     = attribute.Key("inferrail.request_id")
	attrPolicy        = attribute.Key("inferrail.policy")
	attrArm           = attribute.Key("inferrail.arm")
	attrAttempt       = attribute.Key("inferrail.attempt")
	attrCandidates    = attribute.Key("inferrail.candidates")
	attrWinner        = attribute.Key("inferrail.winner")
	attrInFlight      = attribute.Key("inferrail.winner.in_flight")
	attrRunning       = attribute.Key("inferrail.winner.running")
	attrKVUsage       = attribute.Key("inferrail.winner.kv_usage")
	attrEstimatedTTFT = attribute.Key("inferrail.estimated_ttft_seconds")
	attrPrefill       = attribute.Key("inferrail.prefill_seconds")
	attrPromptTokens  = attribute.Key("inferrail.prompt_tokens")
	attrCachedTokens  = attribute.Key("inferrail.cached_tokens")
	attrGuards        = attribute.Key("inferrail.guards")
	attrSteered       = attribute.Key("inferrail.steered")
	attrTokenized     = attribute.Key("inferrail.tokenized")
	attrDecision      = attribute.Key("inferrail.decision_seconds")
	attrReplica       = attribute.Key("inferrail.replica")
	attrFirstByte     = attribute.Key("inferrail.time_to_first_byte_seconds")
	attrOutcome       = attribute.Key("inferrail.outcome")
)

// Span names.
const (
	spanRoute    = "route"
	spanUpstream = "upstream"
)

// The span kinds, made once: an option is allocated each time it is made.
var (
	serverKind = trace.WithSpanKind(trace.SpanKindServer)
	clientKind = trace.WithSpanKind(trace.SpanKindClient)
)

// traceServer starts ex's server span, at its arrival and in the trace of
// the client's traceparent when it sent one, and returns what ends it.
// From here on ex.r's context holds the span and ex.w notes the status.
func (g *Gateway) traceServer(ex *exchange, o *observed) func() {
	tr := g.obs.tracer
	ctx := tr.Extract(ex.r.Context(), ex.r.Header)
	ctx, span := tr.Start(ctx, ex.r.Method+" "+ex.r.URL.Path, serverKind, trace.WithTimestamp(ex.arrived),
		trace.WithAttributes(semconv.HTTPRequestMethodKey.String(methodAttr(ex.r.Method)), semconv.URLPath(clip(ex.r.URL.Path)), attrRequestID.String(ex.id)))
	o.server = span
	ex.r = ex.r.WithContext(ctx)
	// The client port's handler already notes the status (cutIfUnanswered);
	// a writer that does not is wrapped here.
	sw, ok := ex.w.(*statusWriter)
	if !ok {
		sw = &statusWriter{ResponseWriter: ex.w}
		ex.w = sw
	}
	return func() {
		v := recover()
		if span.IsRecording() {
			if ex.model != "" {
				span.SetAttributes(attrModel.String(ex.model))
			}
			switch {
			case v != nil:
				// The engine broke a response that had started (relay's
				// http.ErrAbortHandler): the client saw it broken.
				span.SetAttributes(attrOutcome.String(outcomeAborted))
				if sw.status != 0 {
					span.SetAttributes(semconv.HTTPResponseStatusCode(sw.status))
				}
				span.SetStatus(codes.Error, outcomeAborted)
			case sw.status == 0:
				span.SetAttributes(attrOutcome.String(outcomeCancelled))
			case ex.r.Context().Err() != nil:
				// The client left after the head: what it got was cut.
				span.SetAttributes(semconv.HTTPResponseStatusCode(sw.status), attrOutcome.String(outcomeCancelled))
			default:
				span.SetAttributes(semconv.HTTPResponseStatusCode(sw.status))
				if sw.status >= 500 {
					span.SetStatus(codes.Error, http.StatusText(sw.status))
				}
			}
		}
		span.End()
		if v != nil {
			panic(v)
		}
	}
}

// traceOwn gives a request the gateway answered itself before any route
// (a 404, 405 or 401) its server span, named by its method alone: a path
// no route has is the client's to choose, and span names must stay few.
func (g *Gateway) traceOwn(r *http.Request, id string, status int) {
	tr := g.obs.tracer
	if tr == nil {
		return
	}
	_, span := tr.Start(tr.Extract(r.Context(), r.Header), spanMethod(r.Method), serverKind, trace.WithAttributes(
		semconv.HTTPRequestMethodKey.String(methodAttr(r.Method)), semconv.URLPath(clip(r.URL.Path)), attrRequestID.String(id),
		semconv.HTTPResponseStatusCode(status)))
	span.End()
}

// traceLocal gives a request the gateway answers on a route of its own
// (/v1/models) its server span, named by the route, from its arrival to
// its answer. Without tracing it is h itself.
func (g *Gateway) traceLocal(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tr := g.obs.tracer
		if tr == nil {
			h(w, r)
			return
		}
		ctx, span := tr.Start(tr.Extract(r.Context(), r.Header), r.Method+" "+r.URL.Path, serverKind, trace.WithAttributes(
			semconv.HTTPRequestMethodKey.String(methodAttr(r.Method)), semconv.URLPath(clip(r.URL.Path))))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w}
		h(sw, r.WithContext(ctx))
		span.SetAttributes(attrRequestID.String(sw.Header().Get(openai.HeaderRequestID)), semconv.HTTPResponseStatusCode(cmp.Or(sw.status, http.StatusOK)))
	}
}

// traceDecision records the decision that sent ex's attempt to cands[i],
// started at start, as a route span.
func (g *Gateway) traceDecision(ex *exchange, o *observed, cands []policy.Candidate, i int, d *policy.Decision, start, now time.Time) {
	_, span := g.obs.tracer.Start(ex.r.Context(), spanRoute, trace.WithTimestamp(start))
	if span.IsRecording() {
		w := &cands[i]
		attrs := []attribute.KeyValue{
			attrModel.String(ex.model), attrPolicy.String(ex.policy.Name()), attrArm.String(armName(ex)), attrAttempt.Int(o.attempt),
			attrCandidates.Int(len(cands)), attrWinner.String(w.ID), attrInFlight.Int64(w.InFlight),
			attrEstimatedTTFT.Float64(d.EstimatedTTFT), attrPrefill.Float64(d.PrefillSecs), attrPromptTokens.Int(ex.route.PromptTokens),
			attrTokenized.String(tokenOutcome(ex)), attrDecision.Float64(now.Sub(start).Seconds()),
			attrGuards.StringSlice(d.Guards), attrSteered.String(d.Steered),
		}
		if w.Cached >= 0 {
			attrs = append(attrs, attrCachedTokens.Int(w.Cached))
		}
		if w.Running >= 0 {
			attrs = append(attrs, attrRunning.Int64(w.Running))
		}
		if w.KVUsage >= 0 {
			attrs = append(attrs, attrKVUsage.Float64(w.KVUsage))
		}
		span.SetAttributes(attrs...)
	}
	span.End(trace.WithTimestamp(now))
}

// tokenOutcome is how ex's prompt fared with the tokenizer: tokenized, or
// why it got no prediction.
func tokenOutcome(ex *exchange) string {
	if ex.tokenized == "" {
		return "no_tokenizer"
	}
	return ex.tokenized
}

// upstreamTrace is an attempt's client span. A nil one traces nothing,
// so the attempt calls its methods without checking.
type upstreamTrace struct {
	span      trace.Span
	start     time.Time
	firstByte bool
}

// traceUpstream starts the client span of attempt a, whose request to the
// engine is req, and sets req's traceparent to it; nil without tracing.
func (g *Gateway) traceUpstream(ex *exchange, a *attempt, req *http.Request) *upstreamTrace {
	if ex.obs == nil || ex.obs.server == nil {
		return nil
	}
	tr := g.obs.tracer
	ctx, span := tr.Start(ex.r.Context(), spanUpstream, clientKind,
		trace.WithAttributes(attrReplica.String(a.lease.Replica().ID), attrAttempt.Int(ex.obs.attempt),
			semconv.HTTPRequestMethodKey.String(methodAttr(req.Method)), semconv.URLFull(req.URL.String())))
	// The client's traceparent was copied with the other headers; the
	// engine's parent is this span.
	req.Header.Del("traceparent")
	req.Header.Del("tracestate")
	tr.Inject(ctx, req.Header)
	return &upstreamTrace{span: span, start: time.Now()}
}

// headed records how the engine answered: its status, or the error, which
// is no failure when the client left first (clientLeft).
func (u *upstreamTrace) headed(resp *http.Response, err error, clientLeft bool) {
	if u == nil {
		return
	}
	switch {
	case err != nil && clientLeft:
		// The client left before the head: nothing failed upstream.
		u.span.SetAttributes(attrOutcome.String(outcomeCancelled))
	case err != nil:
		outcome := "failed"
		switch {
		case errors.Is(err, errHeadTimeout):
			outcome = "timeout"
		case errors.Is(err, errReplicaDown):
			outcome = "replica_down"
		}
		u.span.SetAttributes(attrOutcome.String(outcome))
		u.span.SetStatus(codes.Error, err.Error())
	default:
		u.span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
		// A client span's 4xx is an error too (OpenTelemetry's HTTP
		// conventions): the engine refused what the gateway sent. The
		// server span's 4xx is the client's own mistake and stays unset.
		if resp.StatusCode >= 400 {
			u.span.SetStatus(codes.Error, http.StatusText(resp.StatusCode))
		}
	}
}

// markFirstByte records the arrival of the response's first byte.
func (u *upstreamTrace) markFirstByte() {
	if u == nil || u.firstByte {
		return
	}
	u.firstByte = true
	u.span.AddEvent("first_byte")
	u.span.SetAttributes(attrFirstByte.Float64(time.Since(u.start).Seconds()))
}

// clientLeft marks a response the client left while it was relayed.
func (u *upstreamTrace) clientLeft() {
	if u != nil {
		u.span.SetAttributes(attrOutcome.String(outcomeCancelled))
	}
}

// aborted marks a response the engine broke after its head: the span
// failed, though its status code said otherwise.
func (u *upstreamTrace) aborted(err error) {
	if u != nil {
		u.span.SetAttributes(attrOutcome.String(outcomeAborted))
		u.span.SetStatus(codes.Error, err.Error())
	}
}

// end ends the span; calling it again does nothing.
func (u *upstreamTrace) end() {
	if u == nil {
		return
	}
	u.span.End()
}

// spanMethod is r.Method when it is one of HTTP's, else "HTTP", as the
// semantic conventions name a span of an unknown method: a client's
// method is its own to choose, and span names must stay few.
func spanMethod(m string) string {
	for _, k := range [...]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace} {
		if m == k {
			return k // the constant, not m: see methodAttr
		}
	}
	return "HTTP"
}

// methodAttr is the http.request.method of m: one of HTTP's own, as a
// constant (r.Method is a slice of the request line, which a client makes a
// megabyte long), or "_OTHER", as the semantic conventions have it.
func methodAttr(m string) string {
	if n := spanMethod(m); n != "HTTP" {
		return n
	}
	return "_OTHER"
}

// clip is s cut to 256 bytes at a rune boundary, and copied: r.URL.Path is
// a slice of the request line, which a client makes a megabyte long with a
// query, and a span kept until its export would keep all of it.
func clip(s string) string {
	n := len(s)
	if n > 256 {
		n = 256
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
	}
	return strings.Clone(s[:n])
}
