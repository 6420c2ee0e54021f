package telemetry

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/telemetry/otlptest"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEndpoint(t *testing.T) {
	tests := []struct {
		endpoint, protocol, want, err string
	}{
		{"http://collector:4318", "", "http://collector:4318/v1/traces", ""},
		{"http://collector:4318/", ProtocolHTTP, "http://collector:4318/v1/traces", ""},
		{"https://collector/otlp/v1/traces", ProtocolHTTP, "https://collector/otlp/v1/traces", ""},
		{"http://collector:4317", ProtocolGRPC, "http://collector:4317", ""},
		{"https://collector:4317/", ProtocolGRPC, "https://collector:4317", ""},
		{"http://collector:4317/v1/traces", ProtocolGRPC, "", "without a path"},
		{"collector:4318", ProtocolHTTP, "", "absolute http or https URL"},
		{"grpc://collector:4317", ProtocolGRPC, "", "absolute http or https URL"},
		{"http://collector:4318", "http/json", "", "must be http/protobuf or grpc"},
	}
	for _, tt := range tests {
		got, err := Endpoint(tt.endpoint, tt.protocol)
		if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("Endpoint(%q, %q) = %q, %v; want %q, error with %q", tt.endpoint, tt.protocol, got, err, tt.want, tt.err)
		}
	}
}

// inMemory is a tracer exporting to an in-memory exporter.
func inMemory(t *testing.T, ratio float64) (*Tracer, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tr, err := New(context.Background(), Options{Exporter: exp, SampleRatio: ratio, Service: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr, exp
}

// TestPropagation continues a client's trace: its trace ID, its sampling
// decision whatever the ratio, and its tracestate, which reach the next hop
// with the new span as parent.
func TestPropagation(t *testing.T) {
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		parent  = "00f067aa0ba902b7"
	)
	tests := []struct {
		name        string
		ratio       float64
		traceparent string
		wantSampled bool
		wantTrace   string // "" for a new trace
	}{
		{"sampled_parent_ratio_0", 0, "00-" + traceID + "-" + parent + "-01", true, traceID},
		{"unsampled_parent_ratio_1", 1, "00-" + traceID + "-" + parent + "-00", false, traceID},
		{"no_parent_ratio_1", 1, "", true, ""},
		{"no_parent_ratio_0", 0, "", false, ""},
		{"malformed_parent", 1, "00-xyz-" + parent + "-01", true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, exp := inMemory(t, tt.ratio)
			in := http.Header{}
			if tt.traceparent != "" {
				in.Set("traceparent", tt.traceparent)
				in.Set("tracestate", "vendor=abc")
			}
			ctx := tr.Extract(context.Background(), in)
			ctx, span := tr.Start(ctx, "server", trace.WithSpanKind(trace.SpanKindServer))
			out := http.Header{}
			tr.Inject(ctx, out)
			span.End()
			if err := tr.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			sc := span.SpanContext()
			if sc.IsSampled() != tt.wantSampled {
				t.Errorf("sampled = %v, want %v", sc.IsSampled(), tt.wantSampled)
			}
			if tt.wantTrace != "" && sc.TraceID().String() != tt.wantTrace {
				t.Errorf("trace ID %s, want the client's %s", sc.TraceID(), tt.wantTrace)
			}
			flags := "00"
			if tt.wantSampled {
				flags = "01"
			}
			if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + flags; out.Get("traceparent") != want {
				t.Errorf("injected traceparent %q, want %q", out.Get("traceparent"), want)
			}
			if tt.wantTrace != "" && out.Get("tracestate") != "vendor=abc" {
				t.Errorf("injected tracestate %q, want the client's", out.Get("tracestate"))
			}
			spans := exp.GetSpans()
			if !tt.wantSampled {
				if len(spans) != 0 {
					t.Errorf("exported %d spans of an unsampled trace", len(spans))
				}
				return
			}
			if len(spans) != 1 {
				t.Fatalf("exported %d spans, want 1", len(spans))
			}
			if tt.wantTrace != "" && spans[0].Parent.SpanID().String() != parent {
				t.Errorf("parent %s, want the client's %s", spans[0].Parent.SpanID(), parent)
			}
			if got := spans[0].Resource.Set(); !got.HasValue("service.name") {
				t.Errorf("resource without service.name: %v", got)
			}
		})
	}
}

// TestExport sends spans to real OTLP receivers over HTTP and gRPC and
// reads them back decoded from the protobuf the receiver got.
func TestExport(t *testing.T) {
	for _, protocol := range []string{ProtocolHTTP, ProtocolGRPC} {
		t.Run(strings.ReplaceAll(protocol, "/", "_"), func(t *testing.T) {
			rcv := otlptest.NewHTTP(t)
			if protocol == ProtocolGRPC {
				rcv = otlptest.NewGRPC(t)
			}
			tr, err := New(context.Background(), Options{Endpoint: rcv.Endpoint, Protocol: protocol, SampleRatio: 1, Service: "inferrail-test"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, root := tr.Start(context.Background(), "root", trace.WithSpanKind(trace.SpanKindServer))
			_, child := tr.Start(ctx, "child", trace.WithAttributes(attribute.String("k", "v"), attribute.Int("n", 7),
				attribute.StringSlice("guards", []string{"bounded_load"})))
			child.AddEvent("first_byte")
			child.End()
			root.End()
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			spans := rcv.Spans()
			if len(spans) != 2 {
				t.Fatalf("received %d spans, want 2: %+v", len(spans), spans)
			}
			c, r := otlptest.Named(spans, "child"), otlptest.Named(spans, "root")
			if len(c) != 1 || len(r) != 1 {
				t.Fatalf("received %+v", spans)
			}
			if c[0].ParentID != r[0].SpanID || c[0].TraceID != r[0].TraceID || r[0].ParentID != "" {
				t.Errorf("child %+v is not root %+v's child", c[0], r[0])
			}
			if r[0].Kind != tracepb.Span_SPAN_KIND_SERVER || r[0].Service != "inferrail-test" {
				t.Errorf("root kind %v service %q", r[0].Kind, r[0].Service)
			}
			if c[0].Attributes["k"] != "v" || c[0].Attributes["n"] != int64(7) || len(c[0].Events) != 1 {
				t.Errorf("child attributes %v events %v", c[0].Attributes, c[0].Events)
			}
			if st := tr.Stats(); st.Exported != 2 || st.Failed != 0 || st.Dropped != 0 || st.Queued != 0 {
				t.Errorf("stats %+v, want 2 exported", st)
			}
		})
	}
}

// TestExportFailingAndRecovering counts spans a collector refused, warns
// once when export starts failing and notes when it recovers. The backoff
// is a nanosecond: every batch is tried.
func TestExportFailingAndRecovering(t *testing.T) {
	rcv := otlptest.NewHTTP(t)
	var logs bytes.Buffer
	tr, err := New(context.Background(), Options{Endpoint: rcv.Endpoint, SampleRatio: 1, FailureBackoff: time.Nanosecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	rcv.Refuse(true)
	for range 3 {
		_, s := tr.Start(context.Background(), "refused")
		s.End()
		if err := tr.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	rcv.Refuse(false)
	_, s := tr.Start(context.Background(), "taken")
	s.End()
	if err := tr.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.Failed != 3 || st.Exported != 1 || rcv.Attempts() != 4 {
		t.Errorf("stats %+v after %d attempts, want 3 failed and 1 exported in 4", st, rcv.Attempts())
	}
	out := logs.String()
	if n := strings.Count(out, "trace export failing"); n != 1 {
		t.Errorf("warned %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "level=WARN") || strings.Count(out, "trace export recovered") != 1 {
		t.Errorf("log:\n%s", out)
	}
}

// TestFailingCollectorIsLeftAlone: after a failed export, batches are
// given up unsent until the backoff has passed, so a collector that is
// down costs no encoding; they count as failed.
func TestFailingCollectorIsLeftAlone(t *testing.T) {
	rcv := otlptest.NewHTTP(t)
	tr, err := New(context.Background(), Options{Endpoint: rcv.Endpoint, SampleRatio: 1, FailureBackoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	rcv.Refuse(true)
	for range 5 {
		_, s := tr.Start(context.Background(), "s")
		s.End()
		if err := tr.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	rcv.Refuse(false)
	if st := tr.Stats(); rcv.Attempts() != 1 || st.Failed != 5 || st.Exported != 0 {
		t.Errorf("%d attempts, stats %+v; want 1 attempt and 5 failed", rcv.Attempts(), st)
	}
}

func TestBackoff(t *testing.T) {
	b := backoff{first: time.Second, most: 5 * time.Second}
	var got []time.Duration
	for range 5 {
		got = append(got, b.failed())
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("backoffs %v, want %v", got, want)
	}
}

// blockingExporter holds every export until released.
type blockingExporter struct {
	entered chan struct{} // one value per export that started
	release chan struct{}
	mu      sync.Mutex
	got     int
}

func (e *blockingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.entered <- struct{}{}
	<-e.release
	e.mu.Lock()
	e.got += len(spans)
	e.mu.Unlock()
	return nil
}

func (e *blockingExporter) Shutdown(context.Context) error { return nil }

// TestDropsWhenExportIsStuck: with the exporter stuck on a batch, spans
// beyond the queue's size are dropped and counted, ending a span never
// waits, and every span admitted is exported once the exporter moves:
// admitted plus dropped is every span ended.
func TestDropsWhenExportIsStuck(t *testing.T) {
	const queue, more = 8, 100
	exp := &blockingExporter{entered: make(chan struct{}, 1000), release: make(chan struct{})}
	tr, err := New(context.Background(), Options{Exporter: exp, SampleRatio: 1, QueueSize: queue, BatchSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	end := func() {
		_, s := tr.Start(context.Background(), "s")
		s.End()
	}
	end()
	<-exp.entered // the first span's batch is being exported, and stuck
	for range more {
		end()
	}
	if st := tr.Stats(); st.Dropped != more-queue || st.Queued != queue {
		t.Errorf("stats while stuck %+v, want %d dropped and %d queued", st, more-queue, queue)
	}
	close(exp.release)
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := tr.Stats()
	if exp.got != 1+queue || st.Exported != 1+queue || st.Dropped != more-queue {
		t.Errorf("exporter got %d spans, stats %+v; want %d exported, %d dropped", exp.got, st, 1+queue, more-queue)
	}
}

// TestUnreachableCollector: a collector nobody listens at costs ending a
// span nothing but a place in the queue, and Shutdown gives up within its
// context.
func TestUnreachableCollector(t *testing.T) {
	tr, err := New(context.Background(), Options{Endpoint: "http://127.0.0.1:1", SampleRatio: 1, QueueSize: 16, BatchSize: 4,
		ExportTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		_, s := tr.Start(context.Background(), "s")
		s.End()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tr.Shutdown(ctx)
	st := tr.Stats()
	// How many are dropped rather than failed depends on how fast the
	// refusals come back against how fast spans end (all 100 failed on a
	// quiet machine once); the test above counts drops exactly.
	if st.Exported != 0 || st.Failed+st.Dropped != 100 || st.Failed == 0 {
		t.Errorf("stats %+v: want none exported, some failed, the rest dropped, 100 in all", st)
	}
}

// TestRepeatedTraceHeaders: two traceparent headers are no parent (W3C:
// the request starts a trace of its own), and two tracestate headers are
// one list, passed on whole.
func TestRepeatedTraceHeaders(t *testing.T) {
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	tr, _ := inMemory(t, 1)
	in := http.Header{}
	in.Add("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	in.Add("traceparent", "00-11111111111111111111111111111111-00f067aa0ba902b7-01")
	_, span := tr.Start(tr.Extract(context.Background(), in), "server")
	span.End()
	if got := span.SpanContext().TraceID().String(); got == traceID || got == "11111111111111111111111111111111" {
		t.Errorf("two traceparents: continued trace %s, want a new one", got)
	}

	in = http.Header{}
	in.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	in.Add("tracestate", "a=1")
	in.Add("tracestate", "b=2")
	ctx, span := tr.Start(tr.Extract(context.Background(), in), "server")
	out := http.Header{}
	tr.Inject(ctx, out)
	span.End()
	if got := out.Get("tracestate"); got != "a=1,b=2" {
		t.Errorf("two tracestates passed on as %q, want a=1,b=2", got)
	}
	if got := span.SpanContext().TraceID().String(); got != traceID {
		t.Errorf("trace %s, want the client's", got)
	}
}
