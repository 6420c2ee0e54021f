package sim

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// traceService is the service.name of the simulator's spans.
const traceService = "inferrail-sim"

// traceProtocol is the export protocol of c's traces.
func (c *Config) traceProtocol() string {
	if c.OTLPTracesProtocol == "" {
		return telemetry.ProtocolGRPC
	}
	return c.OTLPTracesProtocol
}

// traceEndpoint reads --otlp-traces-endpoint as vLLM's exporters do: a
// grpc:// URL or a bare host:port is a plaintext collector address.
func traceEndpoint(s string) string {
	if rest, ok := strings.CutPrefix(s, "grpc://"); ok {
		return "http://" + rest
	}
	if !strings.Contains(s, "://") {
		return "http://" + s
	}
	return s
}

// newTracer builds the tracer of c; nil when c sends no traces.
func newTracer(c *Config) (*telemetry.Tracer, error) {
	if c.OTLPTracesEndpoint == "" {
		return nil, nil
	}
	return telemetry.New(context.Background(), telemetry.Options{Endpoint: traceEndpoint(c.OTLPTracesEndpoint),
		Protocol: c.traceProtocol(), SampleRatio: 1, Service: traceService})
}

// Attributes of a request's span, vLLM's names where vLLM has one.
const (
	attrRequestID    = attribute.Key("gen_ai.request.id")
	attrModel        = attribute.Key("gen_ai.response.model")
	attrMaxTokens    = attribute.Key("gen_ai.request.max_tokens")
	attrPromptTokens = attribute.Key("gen_ai.usage.prompt_tokens")
	attrOutput       = attribute.Key("gen_ai.usage.completion_tokens")
	attrTTFT         = attribute.Key("gen_ai.latency.time_to_first_token")
	attrE2E          = attribute.Key("gen_ai.latency.e2e")
	attrCached       = attribute.Key("inferrail.sim.cached_tokens")
	attrStatus       = attribute.Key("http.response.status_code")
)

// requestSpan is a generation request's span, llm_request as vLLM names
// it. A nil one traces nothing.
type requestSpan struct {
	span  trace.Span
	start time.Time
}

// traceRequest starts the span of a generation request, in the trace of
// its traceparent; nil without tracing.
func (s *Server) traceRequest(r *http.Request) *requestSpan {
	if s.tracer == nil {
		return nil
	}
	_, span := s.tracer.Start(s.tracer.Extract(r.Context(), r.Header), "llm_request", trace.WithSpanKind(trace.SpanKindServer))
	return &requestSpan{span: span, start: time.Now()}
}

// refused records an error answer.
func (sp *requestSpan) refused(e *openai.Error) {
	if sp == nil {
		return
	}
	sp.span.SetAttributes(attrStatus.Int(e.Status))
	sp.span.SetStatus(codes.Error, e.Message)
}

// finished records what the engine did for req, once its stream has
// ended; a request whose client left is recorded as such.
func (sp *requestSpan) finished(p *prepared, req *request) {
	if sp == nil {
		return
	}
	// The stream's lock orders this after the engine's last writes.
	_, total, finish := req.out.take(nil)
	sp.span.SetAttributes(attrRequestID.String(p.id), attrModel.String(p.model), attrMaxTokens.Int(p.max),
		attrPromptTokens.Int(req.prompt))
	if finish == "" || finish == "abort" {
		sp.span.SetAttributes(attribute.String("inferrail.sim.outcome", "cancelled"))
		return
	}
	sp.span.SetAttributes(attrOutput.Int(total), attrCached.Int(req.cached), attrStatus.Int(200),
		attrTTFT.Float64(req.firstToken-req.arrival), attrE2E.Float64(time.Since(sp.start).Seconds()))
}

func (sp *requestSpan) end() {
	if sp != nil {
		sp.span.End()
	}
}

// flushTraces exports the spans still queued when the engine stops, for
// at most a few seconds.
func (s *Server) flushTraces() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := s.tracer.Shutdown(ctx); err != nil {
		s.log.Warn("spans not exported at shutdown", "error", err)
	}
}
