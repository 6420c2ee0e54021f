package main

// The binary's traces and decision log, end to end: the gateway process
// exports its spans over OTLP (HTTP, then gRPC) to a receiver this test
// runs, which decodes the protobuf it gets; an engine process exports its
// own span over gRPC, as vLLM does by default; and the three hops, client,
// gateway and engine, share one trace.

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/telemetry/otlptest"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

func TestTracesAcrossGatewayAndEngine(t *testing.T) {
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(strings.ReplaceAll(protocol, "/", "_"), func(t *testing.T) {
			testTraces(t, protocol)
		})
	}
}

func testTraces(t *testing.T, protocol string) {
	const (
		traceID = "5b8efff798038103d269b633813fc60c"
		parent  = "eee19b7ec3c1b174"
		model   = "inferrail-traces-e2e"
	)
	engineRcv := otlptest.NewGRPC(t)
	gatewayRcv := otlptest.NewHTTP(t) // a bare address: the gateway adds /v1/traces
	if protocol == "grpc" {
		gatewayRcv = otlptest.NewGRPC(t)
	}
	var engine string
	err := launch(t, "inferrail-sim", childSim, func() ([]string, func() (bool, string), error) {
		port, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		engine = "http://127.0.0.1:" + strconv.Itoa(port)
		args := []string{"--host", "127.0.0.1", "--port", strconv.Itoa(port), "--served-model-name", model, "--zero-latency",
			"--otlp-traces-endpoint", "grpc://" + strings.TrimPrefix(engineRcv.Endpoint, "http://")}
		return args, func() (bool, string) { return getOK(engine + "/health") }, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	decisions := filepath.Join(dir, "decisions.jsonl")
	var gateway string
	err = launch(t, "inferrail-gateway", childGateway, func() ([]string, func() (bool, string), error) {
		ports, err := freePorts(2)
		if err != nil {
			return nil, nil, err
		}
		client, admin := ports[0], ports[1]
		gateway = "http://127.0.0.1:" + strconv.Itoa(client)
		cfg := fmt.Sprintf("server:\n  listen: 127.0.0.1:%d\n  admin_listen: 127.0.0.1:%d\n  shutdown_timeout: 1s\n", client, admin) +
			fmt.Sprintf("models:\n  - name: %s\n    tokenizer: builtin:sim\n    policy: cost_model\n", model) +
			fmt.Sprintf("replicas:\n  - id: engine-1\n    url: %s\n    models: [%s]\n", engine, model) +
			fmt.Sprintf("observability:\n  otlp_endpoint: %s\n  otlp_protocol: %s\n  decision_log:\n    path: %s\n    sample_rate: 1\n",
				gatewayRcv.Endpoint, protocol, decisions) +
			"logging:\n  level: warn\n"
		path := filepath.Join(dir, "gateway.yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			return nil, nil, err
		}
		return []string{"--config", path}, func() (bool, string) { return getOK(gateway + "/health") }, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	body := `{"model":"` + model + `","messages":[{"role":"user","content":"follow me"}],"max_tokens":2}`
	req, _ := http.NewRequest(http.MethodPost, gateway+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+parent+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}

	gwSpans := gatewayRcv.WaitFor(t, "the gateway's three spans", 20*time.Second, func(s []otlptest.Span) bool { return len(s) >= 3 })
	byName := map[string]otlptest.Span{}
	for _, s := range gwSpans {
		if s.TraceID != traceID || s.Service != "inferrail-gateway" {
			t.Errorf("gateway span %+v: want trace %s of service inferrail-gateway", s, traceID)
		}
		byName[s.Name] = s
	}
	server, route, up := byName["POST /v1/chat/completions"], byName["route"], byName["upstream"]
	if len(gwSpans) != 3 || server.ParentID != parent || route.ParentID != server.SpanID || up.ParentID != server.SpanID {
		t.Fatalf("gateway spans %+v: want server (child of the client's span), route and upstream (its children)", gwSpans)
	}
	if server.Kind != tracepb.Span_SPAN_KIND_SERVER || server.Attributes["http.response.status_code"] != int64(200) ||
		route.Attributes["inferrail.winner"] != "engine-1" || route.Attributes["inferrail.policy"] != "cost_model" ||
		up.Kind != tracepb.Span_SPAN_KIND_CLIENT || up.Attributes["inferrail.replica"] != "engine-1" {
		t.Errorf("gateway spans' attributes: server %v, route %v, upstream %v", server.Attributes, route.Attributes, up.Attributes)
	}
	engSpans := engineRcv.WaitFor(t, "the engine's span", 20*time.Second, func(s []otlptest.Span) bool { return len(s) >= 1 })
	if e := engSpans[0]; len(engSpans) != 1 || e.Name != "llm_request" || e.Service != "inferrail-sim" || e.TraceID != traceID || e.ParentID != up.SpanID {
		t.Errorf("engine spans %+v: want llm_request in trace %s, child of the gateway's upstream span %s", engSpans, traceID, up.SpanID)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		data, _ := os.ReadFile(decisions)
		if strings.Count(string(data), "\n") == 1 && strings.Contains(string(data), `"winner":"engine-1"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("decision log %q: want one decision", data)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
