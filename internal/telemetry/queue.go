package telemetry

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// admission is the span processor in front of the SDK's batch span
// processor: it admits an ended span while fewer than limit are held for
// export, and drops and counts it otherwise. The batch processor would drop
// a span it has no room for too, but without a count anyone can read.
type admission struct {
	next  sdktrace.SpanProcessor
	limit int64
	// held counts the spans admitted and not yet handed to the exporter:
	// never fewer than the batch processor's queue holds, so while it is at
	// most limit that queue has room.
	held    atomic.Int64
	dropped atomic.Uint64
}

func (a *admission) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (a *admission) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	if a.held.Add(1) > a.limit {
		a.held.Add(-1)
		a.dropped.Add(1)
		return
	}
	a.next.OnEnd(s)
}

func (a *admission) Shutdown(ctx context.Context) error   { return a.next.Shutdown(ctx) }
func (a *admission) ForceFlush(ctx context.Context) error { return a.next.ForceFlush(ctx) }

// counting is the exporter the batch processor calls: it hands batches
// to the OTLP exporter, counts what they became, gives their room in the
// queue back, and logs when export starts failing and when it recovers.
// While exports fail it gives batches up unsent until its backoff has
// passed: the OTLP exporter does not retry a collector that refuses
// connections, and would encode every batch only to fail again.
type counting struct {
	next sdktrace.SpanExporter
	held *atomic.Int64 // admission's

	exported, failed atomic.Uint64
	log              *slog.Logger

	mu      sync.Mutex
	failing bool      // guarded by mu
	backoff backoff   // guarded by mu
	retryAt time.Time // guarded by mu; while failing, no batch is sent before it
}

// backoff is the wait after a failed export: first, doubling up to most.
type backoff struct{ first, most, next time.Duration }

func (b *backoff) failed() time.Duration {
	b.next = min(max(2*b.next, b.first), b.most)
	return b.next
}

func (c *counting) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	n := uint64(len(spans))
	c.held.Add(-int64(n)) // out of the queue: the batch processor holds them as its batch
	c.mu.Lock()
	skip := c.failing && time.Now().Before(c.retryAt)
	c.mu.Unlock()
	if skip {
		c.failed.Add(n)
		return nil
	}
	err := c.next.ExportSpans(ctx, spans)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.failed.Add(n)
		c.retryAt = time.Now().Add(c.backoff.failed())
		if !c.failing {
			c.failing = true
			c.log.Warn("trace export failing; spans are lost until it recovers", "spans", n, "error", err)
		}
		// Counted and logged here; returned, the SDK would hand it to the
		// process-wide OpenTelemetry error handler on every batch.
		return nil
	}
	c.exported.Add(n)
	c.backoff.next = 0
	if c.failing {
		c.failing = false
		c.log.Info("trace export recovered", "spans", n)
	}
	return nil
}

func (c *counting) Shutdown(ctx context.Context) error { return c.next.Shutdown(ctx) }
