package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Export protocols, named as OTEL_EXPORTER_OTLP_PROTOCOL names them.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// tracesPath is where an OTLP/HTTP collector takes spans.
const tracesPath = "/v1/traces"

// Options configure a Tracer. Zero sizes and durations take the defaults
// given with each.
type Options struct {
	// Endpoint is the collector: an http or https URL. With ProtocolHTTP
	// it is the URL spans are posted to, /v1/traces when it has no path;
	// with ProtocolGRPC the collector's address, without a path (http is
	// plaintext, https TLS). Required unless Exporter is set.
	Endpoint string
	// Protocol is ProtocolHTTP or ProtocolGRPC; empty means ProtocolHTTP.
	Protocol string
	// SampleRatio is the share of new traces (spans without a parent)
	// sampled, 0 to 1; spans with a parent follow its sampled flag.
	SampleRatio float64
	// Service is the service.name of the spans' resource;
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override it.
	Service string
	// Logger is told when export starts failing and when it recovers. Nil
	// discards.
	Logger *slog.Logger
	// QueueSize is the most ended spans held for export, beyond the batch
	// being exported; more are dropped and counted. Default 4096.
	QueueSize int
	// BatchSize is the most spans exported at once. Default 512.
	BatchSize int
	// BatchTimeout is the longest a span waits for its batch to fill.
	// Default 1 s.
	BatchTimeout time.Duration
	// ExportTimeout bounds one export, retries included. Default 10 s.
	ExportTimeout time.Duration
	// FailureBackoff is how long batches are given up without being sent
	// after an export failed, so that a collector that is down costs no
	// encoding; it doubles while exports keep failing, up to 30 times
	// itself. Default 1 s.
	FailureBackoff time.Duration
	// Exporter, if not nil, replaces the OTLP exporter (Endpoint and
	// Protocol are then ignored): tests pass an in-memory one.
	Exporter sdktrace.SpanExporter
}

func (o *Options) withDefaults() {
	if o.QueueSize <= 0 {
		o.QueueSize = 4096
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 512
	}
	o.BatchSize = min(o.BatchSize, o.QueueSize)
	if o.BatchTimeout <= 0 {
		o.BatchTimeout = time.Second
	}
	if o.ExportTimeout <= 0 {
		o.ExportTimeout = 10 * time.Second
	}
	if o.FailureBackoff <= 0 {
		o.FailureBackoff = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Tracer creates spans and exports them. Build it with New and end it
// with Shutdown. Safe for concurrent use.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TraceContext
	queue    *admission
	export   *counting
}

// New builds a tracer exporting to o's collector. It dials nothing: the
// first export connects.
func New(ctx context.Context, o Options) (*Tracer, error) {
	o.withDefaults()
	exp := o.Exporter
	if exp == nil {
		var err error
		if exp, err = newExporter(ctx, &o); err != nil {
			return nil, err
		}
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(o.Service)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	t := &Tracer{queue: &admission{limit: int64(o.QueueSize)}}
	t.export = &counting{next: exp, held: &t.queue.held, log: o.Logger, backoff: backoff{first: o.FailureBackoff, most: 30 * o.FailureBackoff}}
	// The SDK's queue has room for every span admitted and for the
	// markers ForceFlush puts in it, so it never drops one itself: every
	// drop is admission's, and counted.
	t.queue.next = sdktrace.NewBatchSpanProcessor(t.export,
		sdktrace.WithMaxQueueSize(o.QueueSize+flushRoom),
		sdktrace.WithMaxExportBatchSize(o.BatchSize),
		sdktrace.WithBatchTimeout(o.BatchTimeout),
		sdktrace.WithExportTimeout(o.ExportTimeout))
	limits := sdktrace.NewSpanLimits()
	limits.AttributeValueLengthLimit = 1024 // a client's path or header cannot make a span of a megabyte
	t.provider = sdktrace.NewTracerProvider(
		sdktrace.WithRawSpanLimits(limits),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.SampleRatio))),
		sdktrace.WithSpanProcessor(t.queue))
	t.tracer = t.provider.Tracer("github.com/inferrail/inferrail")
	return t, nil
}

// flushRoom is the room left in the SDK's queue for ForceFlush's markers.
const flushRoom = 16

// newExporter builds the OTLP exporter o names.
func newExporter(ctx context.Context, o *Options) (sdktrace.SpanExporter, error) {
	endpoint, err := Endpoint(o.Endpoint, o.Protocol)
	if err != nil {
		return nil, err
	}
	// Retries stop when the export's time is up; the SDK's defaults retry
	// for a minute, while spans pile up behind.
	retry := struct{ first, most time.Duration }{250 * time.Millisecond, 2 * time.Second}
	if o.Protocol == ProtocolGRPC {
		return otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(endpoint), otlptracegrpc.WithTimeout(o.ExportTimeout),
			otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: true, InitialInterval: retry.first, MaxInterval: retry.most, MaxElapsedTime: o.ExportTimeout}))
	}
	return otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint), otlptracehttp.WithTimeout(o.ExportTimeout),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: true, InitialInterval: retry.first, MaxInterval: retry.most, MaxElapsedTime: o.ExportTimeout}))
}

// Endpoint returns the URL the exporter of protocol sends to for the
// collector endpoint: for ProtocolHTTP, endpoint with /v1/traces when it
// has no path; for ProtocolGRPC, endpoint itself, which must have none.
func Endpoint(endpoint, protocol string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("otlp endpoint %q: must be an absolute http or https URL", endpoint)
	}
	switch protocol {
	case "", ProtocolHTTP:
		if strings.Trim(u.Path, "/") == "" {
			u.Path = tracesPath
		}
	case ProtocolGRPC:
		if strings.Trim(u.Path, "/") != "" {
			return "", fmt.Errorf("otlp endpoint %q: a gRPC collector is named by its address, without a path", endpoint)
		}
		u.Path = ""
	default:
		return "", fmt.Errorf("otlp protocol %q: must be %s or %s", protocol, ProtocolHTTP, ProtocolGRPC)
	}
	return u.String(), nil
}

// Start starts a span as trace.Tracer.Start does.
func (t *Tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, name, opts...)
}

// Extract returns ctx with the remote span context of h's traceparent and
// tracestate, when they are well formed; else ctx.
func (t *Tracer) Extract(ctx context.Context, h http.Header) context.Context {
	return t.prop.Extract(ctx, w3cCarrier(h))
}

// w3cCarrier reads repeated trace headers as W3C Trace Context says: two
// traceparent values are no parent (the request starts a new trace), and
// the values of a list header (tracestate, baggage) are one list, joined
// with commas.
type w3cCarrier http.Header

func (c w3cCarrier) Get(key string) string {
	vs := http.Header(c).Values(key)
	switch {
	case len(vs) <= 1:
		return http.Header(c).Get(key)
	case strings.EqualFold(key, "traceparent"):
		return ""
	default:
		return strings.Join(vs, ",")
	}
}

func (c w3cCarrier) Set(key, value string) { http.Header(c).Set(key, value) }

func (c w3cCarrier) Keys() []string { return propagation.HeaderCarrier(c).Keys() }

// Inject sets h's traceparent (and tracestate, when there is one) to the
// span context of ctx, so that whoever h goes to continues its trace.
func (t *Tracer) Inject(ctx context.Context, h http.Header) {
	t.prop.Inject(ctx, propagation.HeaderCarrier(h))
}

// Flush exports every span ended so far, waiting for the export within
// ctx.
func (t *Tracer) Flush(ctx context.Context) error { return t.provider.ForceFlush(ctx) }

// Shutdown exports what is queued, within ctx, and stops the exporter.
// Spans ended afterwards are not exported.
func (t *Tracer) Shutdown(ctx context.Context) error {
	err := t.provider.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("trace export at shutdown: %w", err)
	}
	return err
}

// Stats counts what became of the sampled spans ended so far.
type Stats struct {
	// Exported spans reached the collector; Failed ones were in batches
	// the collector did not take, retries included, or given up unsent
	// while exports were failing (Options.FailureBackoff).
	Exported, Failed uint64
	// Dropped spans found the queue full and were never sent.
	Dropped uint64
	// Queued spans wait for export now.
	Queued int64
}

// Stats returns the tracer's counts.
func (t *Tracer) Stats() Stats {
	return Stats{Exported: t.export.exported.Load(), Failed: t.export.failed.Load(),
		Dropped: t.queue.dropped.Load(), Queued: max(t.queue.held.Load(), 0)}
}
