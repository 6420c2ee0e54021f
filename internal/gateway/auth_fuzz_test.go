package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/auth"
	"github.com/inferrail/inferrail/internal/config"
)

// FuzzClientPortKeyed sends arbitrary Authorization headers, paths and
// bodies to a gateway with keys and limits: every answer is the engine's
// (only for the configured key), or a refusal in the error shape (OpenAI's
// string code for keys and limits, vLLM's status code otherwise); never a
// gateway failure, and the engine never sees a credential.
func FuzzClientPortKeyed(f *testing.F) {
	var leaked atomic.Int64
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			leaked.Add(1)
		}
		if r.URL.Path == "/v1/chat/completions" || r.URL.Path == "/v1/completions" {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`)
			return
		}
		if r.URL.Path != "/health" {
			http.NotFound(w, r)
		}
	}))
	f.Cleanup(engine.Close)
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: testModel, Aliases: []string{"sim"}, Limits: config.Limits{PromptTokensPerMinute: 1 << 30, OutputTokensPerMinute: 1 << 30}}}
	cfg.Replicas = []config.Replica{{ID: "e", URL: engine.URL, Models: []string{testModel}, MaxConcurrency: 64, MaxPending: 64}}
	cfg.Server.MaxBodyBytes = 1 << 16
	cfg.Tokenizer.Verify = false
	secret, k := newKey("fuzz", func(k *auth.Key) { k.Limits.RequestsPerMinute = 1 << 30 })
	path := filepath.Join(f.TempDir(), "keys.yaml")
	writeKeys(f, path, k)
	cfg.Auth.KeysFile = path
	gw := startGateway(f, &cfg)

	for _, s := range []struct{ authz, path, body string }{
		{"Bearer " + secret, "v1/chat/completions", `{"model":"sim","messages":[]}`},
		{"bearer  " + secret, "v1/completions", `{"prompt":"x"}`},
		{"Bearer " + secret + "x", "v1/chat/completions", `{}`},
		{"", "v1/models", ``},
		{"Basic " + secret, "health", ``},
		{"Bearer ===", "v1/chat/completions", `{"model":"sim"}`},
	} {
		f.Add(s.authz, s.path, []byte(s.body))
	}
	client := &http.Client{Timeout: 5 * time.Second}
	f.Fuzz(func(t *testing.T, authz, path string, body []byte) {
		req, err := http.NewRequest(http.MethodPost, gw.url+"/", bytes.NewReader(body))
		if err != nil {
			return
		}
		req.URL.Path = "/" + path
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", authz)
		resp, err := client.Do(req)
		if err != nil {
			return // refused by the client library before it left
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		tok, fail := auth.Bearer(http.Header{"Authorization": {authz}})
		good := fail == auth.FailureNone && tok == secret
		switch {
		case resp.StatusCode >= 500:
			t.Fatalf("%q %q: gateway failure %d %s", authz, path, resp.StatusCode, got)
		case resp.StatusCode == 200 && !good && path != "health":
			t.Fatalf("%q %q: 200 without the key", authz, path)
		case resp.StatusCode == 401 && good:
			t.Fatalf("%q %q: the key was refused: %s", authz, path, got)
		case resp.StatusCode != 200:
			var e struct {
				Error struct {
					Message string          `json:"message"`
					Code    json.RawMessage `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(got, &e); err != nil || e.Error.Message == "" || len(e.Error.Code) == 0 {
				t.Fatalf("%q %q: %d with a body not in the error shape: %s", authz, path, resp.StatusCode, got)
			}
			if strings.Contains(string(got), secret) {
				t.Fatalf("the refusal quotes the key: %s", got)
			}
		}
		if leaked.Load() != 0 {
			t.Fatalf("the engine saw an Authorization header")
		}
	})
}
