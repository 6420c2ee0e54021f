package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/openai"
)

// FuzzClientPort sends arbitrary methods, paths, headers and bodies to a
// gateway in front of a healthy engine: every answer is the engine's or a
// well-formed error of the gateway's own, never a gateway failure; a
// request the engine answers reaches it once, byte for byte but for the
// model's name, and its
// answer reaches the client unchanged.
func FuzzClientPort(f *testing.F) {
	e := newEchoEngine(f)
	e.reply = []byte(`{"ok":true}`)
	cfg := echoConfig(f, e)
	cfg.Server.MaxBodyBytes = 1 << 16
	gw := startGateway(f, cfg)
	seeds := []struct {
		method, path, ctype, body string
	}{
		{"POST", "/v1/chat/completions", "application/json", `{"model":"sim","messages":[]}`},
		{"POST", "/v1/completions", "application/json", `{"prompt":"x"}`},
		{"POST", "/v1/chat/completions", "text/plain", `{"model":null}`},
		{"GET", "/v1/models", "", ``},
		{"HEAD", "/health", "", ``},
		{"PUT", "/v1/chat/completions", "", `x`},
		{"POST", "/v1/chat/completions", "application/json", `{"model":{"a":1}}`},
		{"POST", "/%2e%2e/etc", "", ``},
		{"POST", "/v1/completions", "application/json", `{"model":"` + testModel + `","prompt":"x"}`},
		{"POST", "/v1/completions", "application/json", `{"prompt":"x", "model" : "sim" ,"max_tokens":1}`},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.ctype, []byte(s.body))
	}
	client := &http.Client{Timeout: 5 * time.Second}
	f.Fuzz(func(t *testing.T, method, path, ctype string, body []byte) {
		req, err := http.NewRequest(method, gw.url+"/", bytes.NewReader(body))
		if err != nil {
			return // not a request a client can send
		}
		req.URL.Path = path
		if !strings.HasPrefix(path, "/") {
			req.URL.Path = "/" + path
		}
		req.Header.Set("Content-Type", ctype)
		e.mu.Lock()
		e.bodies = nil
		e.mu.Unlock()
		resp, err := client.Do(req)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err) {
				t.Fatalf("%s %q %q: no answer within 5 s", method, path, body)
			}
			return // rejected by the client library before it left
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		switch {
		case resp.StatusCode >= 500:
			t.Fatalf("%s %q: gateway failure %d %s", method, path, resp.StatusCode, got)
		case resp.StatusCode == 200 || method == http.MethodHead:
		default:
			var e struct {
				Error struct {
					Code int `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(got, &e); err != nil || e.Error.Code != resp.StatusCode {
				t.Fatalf("%s %q: %d with a body not in vLLM's error shape: %s", method, path, resp.StatusCode, got)
			}
		}
		if resp.Header.Get("X-Request-Id") == "" {
			t.Fatalf("%s %q: no x-request-id", method, path)
		}
		e.mu.Lock()
		forwarded := e.bodies
		e.mu.Unlock()
		switch {
		case len(forwarded) > 1:
			t.Fatalf("%s %q: the engine got %d requests for one", method, path, len(forwarded))
		case len(forwarded) == 1 && !bytes.Equal(forwarded[0], body) && !bytes.Equal(forwarded[0], withModel(body)):
			t.Fatalf("%s %q: the engine got %q, the client sent %q", method, path, forwarded[0], body)
		case len(forwarded) == 1 && method != http.MethodHead && !bytes.Equal(got, e.reply):
			t.Fatalf("%s %q: the client got %d %q, the engine answered %q", method, path, resp.StatusCode, got, e.reply)
		}
	})
}

// withModel is sent as the gateway forwards it when it names the model
// by an alias or not at all: with the model's own name spliced in.
func withModel(sent []byte) []byte {
	f, err := openai.FindModel(sent)
	if err != nil {
		return nil
	}
	return openai.SpliceModel(sent, f, testModel)
}
