// Package otlptest is an OTLP trace receiver for tests: a real collector
// endpoint, over HTTP (protobuf) or gRPC on a loopback port, that decodes
// the spans it is sent and keeps them for the test to read.
package otlptest

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Span is one span a Receiver was sent, decoded.
type Span struct {
	Service  string // its resource's service.name
	Name     string
	Kind     tracepb.Span_SpanKind
	TraceID  string // hex
	SpanID   string // hex
	ParentID string // hex; "" for a root span
	// TraceState is the W3C tracestate the span carries.
	TraceState string
	Start, End time.Time
	// Attributes holds string, int64, float64, bool and []string values.
	Attributes map[string]any
	Events     []string
	Status     tracepb.Status_StatusCode
	StatusMsg  string
}

// Receiver is a running OTLP trace receiver. Safe for concurrent use.
type Receiver struct {
	// Endpoint is what an exporter is pointed at: for HTTP the base URL
	// (spans are taken at /v1/traces), for gRPC http://host:port.
	Endpoint string

	refuse   atomic.Bool  // answer every export with an error
	attempts atomic.Int64 // export requests received, refused ones too
	mu       sync.Mutex
	spans    []Span
	posts    int // export requests taken
}

// NewHTTP starts an OTLP/HTTP receiver taking protobuf at /v1/traces; the
// test's cleanup stops it.
func NewHTTP(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want application/x-protobuf", http.StatusUnsupportedMediaType)
			return
		}
		var msg collectorpb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &msg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.attempts.Add(1)
		if r.refuse.Load() {
			// 400 is not retried, so a refused export fails at once.
			http.Error(w, "refused by the test", http.StatusBadRequest)
			return
		}
		r.take(&msg)
		out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	r.Endpoint = srv.URL
	return r
}

// NewGRPC starts an OTLP/gRPC receiver; the test's cleanup stops it.
func NewGRPC(t testing.TB) *Receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{Endpoint: "http://" + ln.Addr().String()}
	srv := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(srv, grpcService{r: r})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return r
}

type grpcService struct {
	collectorpb.UnimplementedTraceServiceServer
	r *Receiver
}

func (s grpcService) Export(_ context.Context, msg *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	s.r.attempts.Add(1)
	if s.r.refuse.Load() {
		return nil, status.Error(codes.InvalidArgument, "refused by the test")
	}
	s.r.take(msg)
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// Refuse makes the receiver answer every export with an error (refuse) or
// take them again.
func (r *Receiver) Refuse(refuse bool) { r.refuse.Store(refuse) }

// take keeps the spans of one export request.
func (r *Receiver) take(msg *collectorpb.ExportTraceServiceRequest) {
	var got []Span
	for _, rs := range msg.GetResourceSpans() {
		service, _ := value(attrValue(rs.GetResource().GetAttributes(), "service.name")).(string)
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{Service: service, Name: s.GetName(), Kind: s.GetKind(), TraceID: hex.EncodeToString(s.GetTraceId()),
					SpanID: hex.EncodeToString(s.GetSpanId()), TraceState: s.GetTraceState(),
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano())),
					Attributes: map[string]any{}, Status: s.GetStatus().GetCode(), StatusMsg: s.GetStatus().GetMessage()}
				if p := s.GetParentSpanId(); len(p) > 0 {
					sp.ParentID = hex.EncodeToString(p)
				}
				for _, kv := range s.GetAttributes() {
					sp.Attributes[kv.GetKey()] = value(kv.GetValue())
				}
				for _, e := range s.GetEvents() {
					sp.Events = append(sp.Events, e.GetName())
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, got...)
	r.posts++
}

func attrValue(kvs []*commonpb.KeyValue, key string) *commonpb.AnyValue {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}

// value turns an OTLP value into a Go one.
func value(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_ArrayValue:
		var out []string
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, e.GetStringValue())
		}
		return out
	}
	return nil
}

// Spans returns a copy of the spans received so far, in arrival order.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Attempts is the number of export requests received, refused or taken.
func (r *Receiver) Attempts() int { return int(r.attempts.Load()) }

// Exports is the number of export requests taken.
func (r *Receiver) Exports() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.posts
}

// WaitFor polls until done holds for the spans received, and returns
// them; after limit it fails the test with what it has.
func (r *Receiver) WaitFor(t testing.TB, what string, limit time.Duration, done func([]Span) bool) []Span {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		spans := r.Spans()
		if done(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s; received %d spans: %+v", limit, what, len(spans), spans)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Named returns the spans of spans with the given name.
func Named(spans []Span, name string) []Span {
	var out []Span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}
