package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/openai"
)

// startServer runs a simulator in process behind an httptest server.
func startServer(t testing.TB, cfg Config) (*Server, string) {
	t.Helper()
	srv, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return srv, serve(t, srv)
}

// startLockstepServer is startServer with an engine that, after each step,
// waits until the handlers have taken every token the step generated, so
// that each token goes out in an event of its own however busy the machine.
// Without it a handler that the machine keeps off its core for longer than
// a step takes two tokens at once and writes them in one event, as vLLM
// merges the outputs a slow reader has not collected.
func startLockstepServer(t testing.TB, cfg Config) (*Server, string) {
	t.Helper()
	srv, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.engine.afterStep = func(plan []work) {
		// Bounded, so that a handler that left without taking its
		// tokens cannot hold the engine for good.
		deadline := time.Now().Add(10 * time.Second)
		for _, w := range plan {
			for w.r.out.pending() > 0 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	return srv, serve(t, srv)
}

// serve runs srv behind an httptest server until the test ends.
func serve(t testing.TB, srv *Server) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = srv.Run(ctx) }()
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		cancel()
		<-srv.Engine().Done()
	})
	return ts.URL
}

// pacedConfig has vLLM-like step times: a 3-token stream takes ~60 ms.
func pacedConfig() Config {
	cfg := zeroLatencyConfig()
	cfg.ZeroLatency = false
	return cfg
}

func zeroLatencyConfig() Config {
	cfg := DefaultConfig()
	cfg.ServedModelNames = []string{"m", "m-alias"}
	cfg.ZeroLatency = true
	cfg.MaxModelLen = 2048
	cfg.NumGPUBlocks = 1024
	return cfg
}

// post sends a JSON body and returns status, content type and body.
func post(t testing.TB, url, body string, header ...string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// shape reduces a JSON document to its structure: key order, nulls and
// booleans kept, every string "s" and every number 0. Two documents of the
// same shape differ only in values.
func shape(t testing.TB, doc string) string {
	t.Helper()
	v, err := decodeJSON([]byte(doc))
	if err != nil {
		t.Fatalf("not JSON: %v\n%s", err, doc)
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case string:
			return "s"
		case json.Number:
			return 0
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				out[i] = walk(e)
			}
			return out
		case *object:
			o := &object{keys: x.keys}
			for _, e := range x.vals {
				o.vals = append(o.vals, walk(e))
			}
			return o
		}
		return v
	}
	return string(compactJSON(walk(v)))
}

// Wire examples from vllm-spec §1, as vLLM serialises them.
const (
	specChatFull       = `{"id":"chatcmpl-0123456789abcdef","object":"chat.completion","created":1755000000,"model":"Qwen/Qwen3-0.6B","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there!","refusal":null,"annotations":null,"audio":null,"function_call":null,"reasoning":null},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":null,"routed_experts":null}],"service_tier":null,"system_fingerprint":"vllm-0.28.0.dev0-1a2b3c4d","usage":{"prompt_tokens":12,"total_tokens":15,"completion_tokens":3,"prompt_tokens_details":null},"prompt_logprobs":null,"prompt_token_ids":null,"prompt_text":null,"kv_transfer_params":null,"ec_transfer_params":null,"metrics":null}`
	specChatDetails    = `{"prompt_tokens":12,"total_tokens":15,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":0,"created_cache_tokens":0,"multimodal_tokens":null}}`
	specRoleChunk      = `{"id":"chatcmpl-0123456789abcdef","object":"chat.completion.chunk","created":1755000000,"model":"Qwen/Qwen3-0.6B","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}`
	specContentChunk   = `{"id":"chatcmpl-0123456789abcdef","object":"chat.completion.chunk","created":1755000000,"model":"Qwen/Qwen3-0.6B","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null,"token_ids":null}]}`
	specFinishChunk    = `{"id":"chatcmpl-0123456789abcdef","object":"chat.completion.chunk","created":1755000000,"model":"Qwen/Qwen3-0.6B","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":null}],"system_fingerprint":"vllm-0.28.0.dev0-1a2b3c4d"}`
	specUsageChunk     = `{"id":"chatcmpl-0123456789abcdef","object":"chat.completion.chunk","created":1755000000,"model":"Qwen/Qwen3-0.6B","choices":[],"usage":{"prompt_tokens":12,"total_tokens":15,"completion_tokens":3},"system_fingerprint":"vllm-0.28.0.dev0-1a2b3c4d"}`
	specUsageDetails   = `{"prompt_tokens":12,"total_tokens":15,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":0,"created_cache_tokens":0}}`
	specCompletionFull = `{"id":"cmpl-0123456789abcdef","object":"text_completion","created":1755000000,"model":"Qwen/Qwen3-0.6B","choices":[{"index":0,"text":" world","logprobs":null,"finish_reason":"length","stop_reason":null,"token_ids":null,"prompt_logprobs":null,"prompt_token_ids":null,"routed_experts":null}],"service_tier":null,"system_fingerprint":"vllm-0.28.0.dev0-1a2b3c4d","usage":{"prompt_tokens":2,"total_tokens":18,"completion_tokens":16,"prompt_tokens_details":null},"kv_transfer_params":null,"ec_transfer_params":null,"metrics":null}`
	specCompletionDet  = `{"cached_tokens":0,"created_cache_tokens":null,"multimodal_tokens":null}`
	specCompChunk      = `{"id":"cmpl-0123456789abcdef","object":"text_completion","created":1755000000,"model":"Qwen/Qwen3-0.6B","choices":[{"index":0,"text":" world","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}`
	specCompUsageChunk = `{"id":"cmpl-0123456789abcdef","object":"text_completion","created":1755000000,"model":"Qwen/Qwen3-0.6B","choices":[],"usage":{"prompt_tokens":2,"total_tokens":18,"completion_tokens":16},"system_fingerprint":"vllm-0.28.0.dev0-1a2b3c4d"}`
	specError          = `{"error":{"message":"The model ` + "`foo`" + ` does not exist.","type":"NotFoundError","param":"model","code":404}}`
	specModels         = `{"object":"list","data":[{"id":"Qwen/Qwen3-0.6B","object":"model","created":1755000000,"owned_by":"vllm","root":"Qwen/Qwen3-0.6B","parent":null,"max_model_len":4096,"permission":[{"id":"modelperm-0123456789abcdef","object":"model_permission","created":1755000000,"allow_create_engine":false,"allow_sampling":true,"allow_logprobs":true,"allow_search_indices":false,"allow_view":true,"allow_fine_tuning":false,"organization":"*","group":null,"is_blocking":false}]}]}`
)

// sseData splits an SSE body into its data payloads.
func sseData(t testing.TB, body string) []string {
	t.Helper()
	if !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("stream does not end with data: [DONE]:\n%s", body)
	}
	var out []string
	for _, ev := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(data, "\n") {
			t.Fatalf("malformed event %q", ev)
		}
		out = append(out, data)
	}
	return out
}

func usageOf(t testing.TB, doc string) string {
	t.Helper()
	var v struct{ Usage json.RawMessage }
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatal(err)
	}
	return string(v.Usage)
}

func sameShape(t *testing.T, what, got, want string) {
	t.Helper()
	if g, w := shape(t, got), shape(t, want); g != w {
		t.Errorf("%s has the wrong shape:\n got %s\nwant %s\n(body %s)", what, g, w, got)
	}
}

// TestWireParity checks every response shape against vLLM's, as the spec
// gives them.
func TestWireParity(t *testing.T) {
	// Streams need each token taken before the next, or tokens merge into
	// fewer chunks (as they do on vLLM when a client reads slowly).
	cfg := pacedConfig()
	_, url := startLockstepServer(t, cfg)
	cfgDetails := cfg
	cfgDetails.EnablePromptTokensDetails = true
	_, urlDetails := startLockstepServer(t, cfgDetails)
	chat := `{"model":"m","messages":[{"role":"user","content":"Hello"}],"max_tokens":3`
	comp := `{"model":"m","prompt":"Hello world"`

	t.Run("chat_full", func(t *testing.T) {
		status, ct, body := post(t, url+"/v1/chat/completions", chat+`}`)
		if status != 200 || ct != "application/json" {
			t.Fatalf("status %d, content type %q", status, ct)
		}
		sameShape(t, "chat response", body, specChatFull)
		_, _, body = post(t, urlDetails+"/v1/chat/completions", chat+`}`)
		sameShape(t, "usage with details", usageOf(t, body), specChatDetails)
	})
	t.Run("chat_stream", func(t *testing.T) {
		status, ct, body := post(t, url+"/v1/chat/completions", chat+`,"stream":true}`)
		if status != 200 || ct != "text/event-stream; charset=utf-8" {
			t.Fatalf("status %d, content type %q", status, ct)
		}
		ev := sseData(t, body)
		if len(ev) != 5 { // role, 2 content, finish, [DONE]
			t.Fatalf("%d events, want 5:\n%s", len(ev), body)
		}
		sameShape(t, "role chunk", ev[0], specRoleChunk)
		sameShape(t, "content chunk", ev[1], specContentChunk)
		sameShape(t, "finish chunk", ev[3], specFinishChunk)
	})
	t.Run("chat_stream_usage", func(t *testing.T) {
		_, _, body := post(t, url+"/v1/chat/completions", chat+`,"stream":true,"stream_options":{"include_usage":true}}`)
		ev := sseData(t, body)
		last := ev[len(ev)-2]
		sameShape(t, "usage chunk", last, specUsageChunk)
		finish := ev[len(ev)-3]
		if strings.Contains(finish, "system_fingerprint") {
			t.Errorf("finish chunk carries the fingerprint although a usage chunk follows: %s", finish)
		}
		_, _, body = post(t, urlDetails+"/v1/chat/completions", chat+`,"stream":true,"stream_options":{"include_usage":true}}`)
		ev = sseData(t, body)
		sameShape(t, "usage chunk with details", usageOf(t, ev[len(ev)-2]), specUsageDetails)
	})
	t.Run("chat_stream_continuous", func(t *testing.T) {
		_, _, body := post(t, url+"/v1/chat/completions", chat+`,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`)
		ev := sseData(t, body)
		want := []string{
			`"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":`,
			`"usage":{"prompt_tokens":`, `"usage":{"prompt_tokens":`, `"usage":{"prompt_tokens":`,
		}
		for i, w := range want {
			if !strings.Contains(ev[i], w) {
				t.Errorf("event %d lacks %s: %s", i, w, ev[i])
			}
		}
		if !strings.Contains(ev[3], `"completion_tokens":3}`) {
			t.Errorf("finish chunk's running usage wrong: %s", ev[3])
		}
	})
	t.Run("completion_full", func(t *testing.T) {
		status, _, body := post(t, url+"/v1/completions", comp+`}`)
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		sameShape(t, "completion", body, specCompletionFull)
		_, _, body = post(t, urlDetails+"/v1/completions", comp+`}`)
		var v struct {
			Usage struct {
				PromptTokensDetails json.RawMessage `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		_ = json.Unmarshal([]byte(body), &v)
		sameShape(t, "completion details", string(v.Usage.PromptTokensDetails), specCompletionDet)
	})
	t.Run("completion_stream", func(t *testing.T) {
		_, _, body := post(t, url+"/v1/completions", comp+`,"max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`)
		ev := sseData(t, body)
		if len(ev) != 4 {
			t.Fatalf("%d events, want 4:\n%s", len(ev), body)
		}
		sameShape(t, "completion chunk", ev[0], specCompChunk)
		sameShape(t, "completion usage chunk", ev[2], specCompUsageChunk)
		_, _, body = post(t, url+"/v1/completions", comp+`,"max_tokens":2,"stream":true}`)
		ev = sseData(t, body)
		if !strings.Contains(ev[1], `"finish_reason":"length"`) || !strings.HasSuffix(ev[1], `"system_fingerprint":"`+fingerprint(&cfg)+`"}`) {
			t.Errorf("completion finish chunk without usage should end with the fingerprint: %s", ev[1])
		}
	})
	t.Run("errors_and_models", func(t *testing.T) {
		status, _, body := post(t, url+"/v1/chat/completions", `{"model":"foo","messages":[]}`)
		if status != 404 || body != specError {
			t.Errorf("unknown model: %d %s, want 404 %s", status, body, specError)
		}
		resp, err := http.Get(url + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var models struct{ Data []json.RawMessage }
		_ = json.Unmarshal(b, &models)
		if len(models.Data) != 2 {
			t.Fatalf("%d model cards, want one per served name: %s", len(models.Data), b)
		}
		var spec struct{ Data []json.RawMessage }
		_ = json.Unmarshal([]byte(specModels), &spec)
		sameShape(t, "model card", string(models.Data[1]), string(spec.Data[0]))
	})
}

var (
	createdRE = regexp.MustCompile(`"created":\d+`)
	permRE    = regexp.MustCompile(`modelperm-[0-9a-f]{16}`)
	// A render's request id is random, whatever the client sent.
	requestIDRE = regexp.MustCompile(`"request_id":"(chatcmpl|cmpl)-[0-9a-f]{16}"`)
)

// TestWireGolden pins complete responses byte for byte (ids fixed by
// X-Request-Id, creation times masked). Refresh with -update.
func TestWireGolden(t *testing.T) {
	cfg := zeroLatencyConfig()
	cfg.EnablePromptTokensDetails = true
	_, fast := startServer(t, cfg)
	paced := pacedConfig()
	paced.EnablePromptTokensDetails = true
	_, slow := startLockstepServer(t, paced)
	cases := []struct {
		name, method, path, body, contentType string
	}{
		{"chat_full", "POST", "/v1/chat/completions", `{"model":"m-alias","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":"there"}]}],"max_tokens":4}`, ""},
		{"chat_continue", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hel"}],"add_generation_prompt":false,"continue_final_message":true,"max_tokens":2}`, ""},
		{"chat_stream", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`, ""},
		{"chat_eos", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":400,"min_tokens":2}`, ""},
		{"completion_full", "POST", "/v1/completions", `{"prompt":"Once upon a time","max_tokens":5}`, ""},
		{"completion_ids", "POST", "/v1/completions", `{"prompt":[[1,300,301]],"max_tokens":2,"stream":true}`, ""},
		{"err_model", "POST", "/v1/completions", `{"model":"nope","prompt":"x"}`, ""},
		{"err_json", "POST", "/v1/chat/completions", `{"messages":`, ""},
		{"err_types", "POST", "/v1/chat/completions", `{"messages":"hi","max_tokens":"many","stream":"perhaps"}`, ""},
		{"err_missing", "POST", "/v1/chat/completions", `{"model":"m"}`, ""},
		{"err_content_type", "POST", "/v1/chat/completions", `{}`, "text/plain"},
		{"err_stream_options", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}}`, ""},
		{"err_n", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"n":2}`, ""},
		{"err_logprobs", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"logprobs":true}`, ""},
		{"err_echo", "POST", "/v1/completions", `{"prompt":"x","echo":true}`, ""},
		{"err_best_of", "POST", "/v1/completions", `{"prompt":"x","best_of":3}`, ""},
		{"err_too_long", "POST", "/v1/completions", `{"prompt":"x","max_tokens":5000}`, ""},
		{"err_both_prompts", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"continue_final_message":true}`, ""},
		{"err_template", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"chat_template":"{{ 1 }}"}`, ""},
		{"err_path", "GET", "/v2/nothing", ``, ""},
		{"err_method", "GET", "/v1/chat/completions", ``, ""},
		{"models", "GET", "/v1/models", ``, ""},
		{"version", "GET", "/version", ``, ""},
		{"tokenize", "POST", "/tokenize", `{"prompt":"Hello world"}`, ""},
		{"tokenize_chat", "POST", "/tokenize", `{"messages":[{"role":"user","content":"Hi"}]}`, ""},
		{"detokenize", "POST", "/detokenize", `{"tokens":[1,2,300,65900]}`, ""},
		{"render_chat", "POST", "/v1/chat/completions/render", `{"model":"m-alias","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none","max_tokens":4}`, ""},
		{"render_completion", "POST", "/v1/completions/render", `{"prompt":"Once upon a time","max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`, ""},
		{"err_render_model", "POST", "/v1/chat/completions/render", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url := fast
			if strings.Contains(tc.body, `"stream":true`) {
				url = slow
			}
			req, err := http.NewRequest(tc.method, url+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			ct := tc.contentType
			if ct == "" {
				ct = "application/json"
			}
			req.Header.Set("Content-Type", ct)
			req.Header.Set("X-Request-Id", "golden-"+tc.name)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			masked := permRE.ReplaceAll(createdRE.ReplaceAll(body, []byte(`"created":0`)), []byte("modelperm-0000000000000000"))
			masked = requestIDRE.ReplaceAll(masked, []byte(`"request_id":"$1-0000000000000000"`))
			var got bytes.Buffer
			got.WriteString("status: " + resp.Status + "\n")
			for _, h := range []string{"Content-Type", "Allow"} {
				if v := resp.Header.Get(h); v != "" {
					got.WriteString(h + ": " + v + "\n")
				}
			}
			got.WriteString("\n")
			got.Write(masked)
			checkGolden(t, filepath.Join("testdata", "wire", tc.name+".golden"), got.Bytes())
		})
	}
}

func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// TestPrefixCacheReported checks that a repeated prompt reports cached
// tokens, that a different cache_salt keeps requests apart, and that reset
// empties the cache.
func TestPrefixCacheReported(t *testing.T) {
	cfg := zeroLatencyConfig()
	cfg.EnablePromptTokensDetails = true
	_, url := startServer(t, cfg)
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40)
	body := `{"messages":[{"role":"user","content":"` + long + `"}],"max_tokens":2%s}`
	cached := func(extra string) int {
		status, _, b := post(t, url+"/v1/chat/completions", strings.Replace(body, "%s", extra, 1))
		if status != 200 {
			t.Fatalf("status %d: %s", status, b)
		}
		var v struct {
			Usage struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(b), &v); err != nil {
			t.Fatal(err)
		}
		return v.Usage.PromptTokensDetails.CachedTokens
	}
	if c := cached(""); c != 0 {
		t.Errorf("cold prompt reports %d cached tokens", c)
	}
	if c := cached(""); c == 0 || c%cfg.BlockSize != 0 {
		t.Errorf("repeated prompt reports %d cached tokens, want a positive multiple of %d", c, cfg.BlockSize)
	}
	if c := cached(`,"cache_salt":"tenant-b"`); c != 0 {
		t.Errorf("salted prompt reports %d cached tokens, want 0", c)
	}
	if _, _, b := post(t, url+"/reset_prefix_cache", ``); b != `{"success":true}` {
		t.Errorf("reset_prefix_cache = %s", b)
	}
	if c := cached(""); c != 0 {
		t.Errorf("after reset %d cached tokens, want 0", c)
	}
}

// TestIdleTTFTIsP checks, through HTTP, that an idle engine answers after the
// latency model's prefill time.
func TestIdleTTFTIsP(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Latency.PrefillFixed = 40 * time.Millisecond
	srv, url := startServer(t, cfg)
	body := `{"prompt":"` + strings.Repeat("word ", 300) + `","max_tokens":1}`
	start := time.Now()
	status, _, b := post(t, url+"/v1/completions", body)
	took := time.Since(start)
	if status != 200 {
		t.Fatalf("status %d: %s", status, b)
	}
	n := 1 + srv.tok.Count(strings.Repeat("word ", 300))
	p := time.Duration(cfg.Latency.Prefill(n, 0) * float64(time.Second))
	if took < p {
		t.Errorf("answered in %v, before the prefill time P = %v", took, p)
	}
	// The engine's own TTFT histogram holds the virtual TTFT: P to the
	// nanosecond, the step starting when the request arrived rather than
	// when the engine's loop woke (5 to 19 µs later, which calibrating
	// against the simulator read as part of d). The engine records a step
	// just after delivering its outputs.
	var page bytes.Buffer
	for deadline := time.Now().Add(2 * time.Second); ; {
		page.Reset()
		if _, err := srv.metrics.WriteTo(&page); err != nil {
			t.Fatal(err)
		}
		if metricValue(t, page.String(), `vllm:time_to_first_token_seconds_count{engine="0",model_name="inferrail/sim-8b"}`) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	sum := metricValue(t, page.String(), `vllm:time_to_first_token_seconds_sum{engine="0",model_name="inferrail/sim-8b"}`)
	if d := sum - cfg.Latency.Prefill(n, 0); math.Abs(d) > 1e-9 {
		t.Errorf("engine TTFT %.9fs, want P = %.9fs", sum, cfg.Latency.Prefill(n, 0))
	}
}

func metricValue(t testing.TB, page, series string) float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(page))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			var f float64
			if err := json.Unmarshal([]byte(v), &f); err != nil {
				t.Fatalf("series %s value %q: %v", series, v, err)
			}
			return f
		}
	}
	t.Fatalf("series %s not on the page", series)
	return 0
}

// compactJSON writes a decoded value back as compact JSON in its key order.
func compactJSON(v any) []byte {
	var b []byte
	var walk func(v any)
	walk = func(v any) {
		switch t := v.(type) {
		case nil:
			b = append(b, "null"...)
		case bool:
			b = strconv.AppendBool(b, t)
		case json.Number:
			b = append(b, t...)
		case string:
			b = openai.AppendString(b, t)
		case []any:
			b = append(b, '[')
			for i, e := range t {
				if i > 0 {
					b = append(b, ',')
				}
				walk(e)
			}
			b = append(b, ']')
		case *object:
			b = append(b, '{')
			for i, k := range t.keys {
				if i > 0 {
					b = append(b, ',')
				}
				b = openai.AppendString(b, k)
				b = append(b, ':')
				walk(t.vals[i])
			}
			b = append(b, '}')
		}
	}
	walk(v)
	return b
}

// The stand-in model's own length never ties with vLLM's default
// completion max_tokens of 16: a default completion must end with "length"
// whatever the prompt. Every value from 17 to 256 is reachable.
func TestNaturalLengthRange(t *testing.T) {
	seen := map[int]bool{}
	for top := uint64(0); top < 1<<12; top++ {
		for _, low := range []uint64{0, 1<<40 - 1, 0xdeadbeef} {
			n := naturalLength(top<<40 | low)
			if n < 17 || n > 256 {
				t.Fatalf("naturalLength(%#x<<40|%#x) = %d, want 17..256", top, low, n)
			}
			seen[n] = true
		}
	}
	if len(seen) != 240 {
		t.Fatalf("reached %d distinct lengths, want all 240 of 17..256", len(seen))
	}
}

// TestStopEndsStreamsWithAnError: a simulator told to stop (SIGTERM) while
// a stream runs ends it with an error event, never as a finished answer.
func TestStopEndsStreamsWithAnError(t *testing.T) {
	srv, err := New(pacedConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() { stop(); <-served })

	resp, err := http.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"go on"}],"max_tokens":2000,"ignore_eos":true,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	stop()
	rest, _ := io.ReadAll(r)
	if !bytes.Contains(rest, []byte(`"error"`)) || !openai.EndsWithDone(rest) {
		t.Errorf("the stream after the stop: %q; want an error event, then [DONE]", rest)
	}
}
