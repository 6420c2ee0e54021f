package sim

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRequestLargerThanPoolIsRefused: should a request outgrow the KV
// cache (startup refuses such configs, so the engine is altered behind
// its back here), it gets a 400 rather than a place in the queue it would
// hold for good, and the requests after it are served.
func TestRequestLargerThanPoolIsRefused(t *testing.T) {
	cfg := zeroLatencyConfig()
	cfg.NumGPUBlocks, cfg.MaxModelLen = 64, 1008 // 63 usable blocks of 16
	srv, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.cfg.MaxModelLen, srv.engine.cfg.MaxModelLen = 1<<40, 1<<40
	url := serve(t, srv) + "/v1/completions"

	big := `{"model":"m","max_tokens":1,"prompt":"` + strings.Repeat("abc", 1100) + `"}`
	// A guard, not a measure: without the check the request never ends.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(big))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("a request larger than the pool: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a request larger than the pool: status %d, want 400", resp.StatusCode)
	}
	if code, _, body := post(t, url, `{"model":"m","max_tokens":1,"prompt":"hi"}`); code != http.StatusOK {
		t.Errorf("the next request: %d %s", code, body)
	}
}

// errorOf decodes an error body.
func errorOf(t *testing.T, body string) (msg, typ string, param any) {
	t.Helper()
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Param   any    `json:"param"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("not an error body: %s", body)
	}
	return e.Error.Message, e.Error.Type, e.Error.Param
}

// TestUnimitatedParametersRefused: what the simulator cannot answer as
// vLLM would is a 400 naming the parameter, as the README promises.
func TestUnimitatedParametersRefused(t *testing.T) {
	_, url := startServer(t, zeroLatencyConfig())
	tests := []struct {
		path, body, param string
	}{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"return_token_ids":true}`, "return_token_ids"},
		{"/v1/completions", `{"prompt":"hi","return_token_ids":true}`, "return_token_ids"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"prompt_logprobs":1}`, "prompt_logprobs"},
		{"/v1/completions", `{"prompt":"hi","prompt_logprobs":0}`, "prompt_logprobs"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"use_beam_search":true}`, "use_beam_search"},
		{"/v1/completions", `{"prompt":"hi","use_beam_search":true}`, "use_beam_search"},
	}
	for _, tt := range tests {
		code, _, body := post(t, url+tt.path, tt.body)
		msg, typ, param := errorOf(t, body)
		if code != http.StatusBadRequest || typ != "BadRequestError" || param != tt.param || !strings.Contains(msg, "not supported by inferrail-sim") {
			t.Errorf("%s %s: %d %s, want a 400 naming %s", tt.path, tt.body, code, body, tt.param)
		}
	}
	// Their defaults are served.
	for _, b := range []string{`"return_token_ids":false`, `"prompt_logprobs":null`, `"use_beam_search":false`} {
		if code, _, body := post(t, url+"/v1/completions", `{"prompt":"hi",`+b+`}`); code != http.StatusOK {
			t.Errorf("%s: %d %s", b, code, body)
		}
	}
}
