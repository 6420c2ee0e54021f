// Package telemetry is the OpenTelemetry tracing of the gateway and the
// simulator: a tracer provider built on the official Go SDK, exporting over
// OTLP (HTTP or gRPC) in batches off the request path, sampling new traces
// by ratio and following the sampling decision of a W3C traceparent the
// client sent, and W3C trace context read from and written to HTTP headers.
//
// Export never holds up whoever ends a span: spans wait in a bounded queue
// for the SDK's batch span processor, and when the queue is full (a slow or
// unreachable collector) a span is dropped and counted instead. Memory
// stays bounded by the queue and one batch being exported.
//
// A program with tracing off builds no Tracer at all and so creates no
// spans; this package has no no-op mode of its own.
package telemetry
