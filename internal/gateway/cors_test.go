package gateway

import (
	"net/http"
	"testing"

	"github.com/inferrail/inferrail/internal/openai"
)

// TestCORS: a browser's preflight is answered before keys are asked for,
// and the answers carry the origin's permission; an origin not listed gets
// none, and with no origins listed the client port knows no CORS.
func TestCORS(t *testing.T) {
	secret, key := newKey("web", nil)
	preflight := func(t *testing.T, url, origin string) *http.Response {
		req, _ := http.NewRequest(http.MethodOptions, url+"/v1/chat/completions", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization, content-type, x-stainless-os")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	type want struct {
		preflight                   int
		allowOrigin, vary, exposeOK string
	}
	tests := []struct {
		name, origin string
		origins      []string
		want         want
	}{
		{"any", "https://app.example.com", []string{"*"}, want{http.StatusNoContent, "*", "", "*"}},
		{"listed", "https://app.example.com", []string{"https://app.example.com"}, want{http.StatusNoContent, "https://app.example.com", "Origin", "*"}},
		{"not_listed", "https://evil.example", []string{"https://app.example.com"}, want{http.StatusBadRequest, "", "Origin", ""}},
		{"none", "https://app.example.com", nil, want{http.StatusUnauthorized, "", "", ""}}, // keys are asked for first
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _ := keyedConfig(t, 1, key)
			cfg.Server.CORSAllowedOrigins = tt.origins
			gw := startGateway(t, cfg)
			resp := preflight(t, gw.url, tt.origin)
			if resp.StatusCode != tt.want.preflight || resp.Header.Get("Access-Control-Allow-Origin") != tt.want.allowOrigin {
				t.Errorf("preflight: %d, allow-origin %q; want %d, %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), tt.want.preflight, tt.want.allowOrigin)
			}
			if len(resp.Header.Get(openai.HeaderRequestID)) != 32 {
				t.Errorf("preflight's request ID %q, want 32 hex digits as every answer has", resp.Header.Get(openai.HeaderRequestID))
			}
			if tt.want.preflight == http.StatusNoContent {
				if got := resp.Header.Get("Access-Control-Allow-Headers"); got != "authorization, content-type, x-stainless-os" {
					t.Errorf("preflight allows headers %q, want those asked for", got)
				}
				if got := resp.Header.Get("Access-Control-Allow-Methods"); got != corsMethods {
					t.Errorf("preflight allows methods %q, want %q", got, corsMethods)
				}
			}
			resp, body := chat(t, gw.url, chatBody("from a page", ""), append(bearer(secret), "Origin", tt.origin)...)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("request from the page: %d %s", resp.StatusCode, body)
			}
			h := resp.Header
			if h.Get("Access-Control-Allow-Origin") != tt.want.allowOrigin || h.Get("Vary") != tt.want.vary || h.Get("Access-Control-Expose-Headers") != tt.want.exposeOK {
				t.Errorf("answer: allow-origin %q, vary %q, expose %q; want %q, %q, %q", h.Get("Access-Control-Allow-Origin"), h.Get("Vary"),
					h.Get("Access-Control-Expose-Headers"), tt.want.allowOrigin, tt.want.vary, tt.want.exposeOK)
			}
			// A refusal carries the permission too, so a page can read
			// why: here a request without its key.
			resp, _ = chat(t, gw.url, chatBody("no key", ""), "Origin", tt.origin)
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Access-Control-Allow-Origin") != tt.want.allowOrigin {
				t.Errorf("refusal: %d, allow-origin %q; want 401, %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), tt.want.allowOrigin)
			}
		})
	}
}
