package sim

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/telemetry"
	"github.com/inferrail/inferrail/internal/telemetry/otlptest"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

func TestTraceEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"grpc://collector:4317":            "http://collector:4317",
		"collector:4317":                   "http://collector:4317",
		"http://collector:4318/v1/traces":  "http://collector:4318/v1/traces",
		"https://collector.example.com:43": "https://collector.example.com:43",
	} {
		if got := traceEndpoint(in); got != want {
			t.Errorf("traceEndpoint(%q) = %q, want %q", in, got, want)
		}
	}
	c := DefaultConfig()
	c.OTLPTracesEndpoint = "http://collector:4317/v1/traces" // a path, and gRPC by default
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--otlp-traces-endpoint") {
		t.Errorf("Validate() = %v, want an --otlp-traces-endpoint error", err)
	}
	var env Config
	env.ApplyEnv(func(k string) (string, bool) {
		return map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}[k], true
	})
	if env.OTLPTracesProtocol != telemetry.ProtocolHTTP {
		t.Errorf("protocol from the environment %q, want the traces-specific variable's", env.OTLPTracesProtocol)
	}
	// The command line is checked with the environment's protocol: a full
	// OTLP/HTTP URL is what that protocol takes.
	httpEnv := func(k string) (string, bool) {
		return "http/protobuf", k == "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	}
	args := []string{"--otlp-traces-endpoint", "http://collector:4318/v1/traces"}
	if _, err := ParseCommand(args, io.Discard, httpEnv); err != nil {
		t.Errorf("a full URL with OTLP/HTTP set in the environment: %v", err)
	}
	if _, err := ParseFlags(args, io.Discard); err == nil {
		t.Error("a full URL without an OTLP protocol set (gRPC) was taken")
	}
}

// TestRequestSpans: with --otlp-traces-endpoint every generation request
// sends a span, over gRPC (vLLM's default) or HTTP, in the trace of its
// traceparent, with its usage; one the simulator refuses sends one too.
func TestRequestSpans(t *testing.T) {
	const (
		traceID = "0af7651916cd43dd8448eb211c80319c"
		parent  = "b7ad6b7169203331"
	)
	for _, protocol := range []string{telemetry.ProtocolGRPC, telemetry.ProtocolHTTP} {
		t.Run(strings.ReplaceAll(protocol, "/", "_"), func(t *testing.T) {
			rcv := otlptest.NewGRPC(t)
			endpoint := "grpc://" + strings.TrimPrefix(rcv.Endpoint, "http://")
			if protocol == telemetry.ProtocolHTTP {
				rcv = otlptest.NewHTTP(t)
				endpoint = rcv.Endpoint
			}
			cfg := DefaultConfig()
			cfg.ZeroLatency = true
			cfg.OTLPTracesEndpoint, cfg.OTLPTracesProtocol = endpoint, protocol
			l, err := StartLocal(cfg, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			post := func(body string) int {
				req, _ := http.NewRequest(http.MethodPost, l.URL()+"/v1/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("traceparent", "00-"+traceID+"-"+parent+"-01")
				req.Header.Set("x-request-id", "abc")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			if code := post(`{"prompt":"hello there","max_tokens":3}`); code != 200 {
				t.Fatalf("status %d", code)
			}
			if code := post(`{"model":"nope","prompt":"hi","max_tokens":3}`); code != 404 {
				t.Fatalf("status %d for an unknown model", code)
			}
			l.Close() // flushes the spans
			spans := rcv.WaitFor(t, "two llm_request spans", 10*time.Second, func(s []otlptest.Span) bool { return len(s) >= 2 })
			for _, s := range spans {
				if s.Name != "llm_request" || s.Kind != tracepb.Span_SPAN_KIND_SERVER || s.Service != traceService ||
					s.TraceID != traceID || s.ParentID != parent {
					t.Errorf("span %+v: want llm_request, a server span of %s in the client's trace", s, traceService)
				}
			}
			ok, refused := spans[0], spans[1]
			if ok.Attributes["gen_ai.request.id"] != "cmpl-abc" || ok.Attributes["gen_ai.usage.prompt_tokens"] == nil ||
				ok.Attributes["gen_ai.usage.completion_tokens"] != int64(3) || ok.Attributes["http.response.status_code"] != int64(200) {
				t.Errorf("attributes %v", ok.Attributes)
			}
			if refused.Attributes["http.response.status_code"] != int64(404) || refused.Status != tracepb.Status_STATUS_CODE_ERROR {
				t.Errorf("refused request's span %+v", refused)
			}
		})
	}
}
