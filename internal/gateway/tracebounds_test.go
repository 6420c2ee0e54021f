package gateway

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestTraceClientChosenValuesBounded: a client's method and path never
// name a span or fill an attribute past a bound: spans are kept until
// their export, and a path or query of a megabyte held by every queued
// span took a gateway from 50 MB to 1.9 GB and failed every export batch
// (found by a review); a method of the client's own named a span of its
// own, without bound on how many.
func TestTraceClientChosenValuesBounded(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	gw := startObserved(t, testConfig(t, fleetOf(t, 1, true)), exp)
	long := strings.Repeat("a", 100<<10)
	for _, req := range []string{
		"BREW /zzz HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/" + long + " HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
		"POST /v1/completions?q=" + long + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 47\r\n\r\n" +
			`{"model":"sim","prompt":"hello","max_tokens":1}`,
	} {
		resp := rawRequest(t, gw.url, req)
		resp.Body.Close()
	}
	if err := gw.g.obs.tracer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range exp.GetSpans() {
		names[s.Name] = true
		if len(s.Name) > 64 {
			t.Errorf("a span named with %d bytes", len(s.Name))
		}
		for _, kv := range s.Attributes {
			v := kv.Value.String()
			switch {
			case kv.Key == "url.path" && len(v) > 256:
				t.Errorf("span %q: url.path of %d bytes", s.Name, len(v))
			case len(v) > 1024:
				t.Errorf("span %q: %s of %d bytes", s.Name, kv.Key, len(v))
			case kv.Key == "http.request.method" && v != "POST" && v != "_OTHER":
				t.Errorf("span %q: http.request.method %q", s.Name, v)
			}
		}
	}
	for _, want := range []string{"HTTP", "POST", "POST /v1/completions", spanRoute, spanUpstream} {
		if !names[want] {
			t.Errorf("no span named %q among %v", want, names)
		}
	}
}
