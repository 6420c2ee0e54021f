package gateway

import (
	"io"
	"net/http"
	"strings"
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

// TestEngineCORSHeadersDropped: the gateway alone decides CORS. An
// engine's own Access-Control-* headers, the Vary entries they imply and
// a Connection header naming the gateway's grant never reach the client;
// its other Vary entries do, beside the gateway's (found by a review: an
// engine's "Access-Control-Allow-Origin: *" reached origins not listed,
// and with CORS off, and its "-Allow-Credentials: true" allowed cookies).
func TestEngineCORSHeadersDropped(t *testing.T) {
	url := chatEngine(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("Access-Control-Allow-Credentials", "true")
		h.Set("Access-Control-Expose-Headers", "x-engine-secret")
		h.Set("Access-Control-Max-Age", "86400")
		h.Add("Vary", "Origin, Accept-Encoding")
		h.Add("Vary", "access-control-request-headers")
		h.Set("Connection", "Access-Control-Allow-Origin")
		h.Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[]}`)
	})
	const good, evil = "https://good.example", "https://evil.example"
	tests := []struct {
		name, origin              string
		origins                   []string
		allowOrigin, expose, vary string
	}{
		{"listed", good, []string{good}, good, "*", "Origin, Accept-Encoding"},
		{"not_listed", evil, []string{good}, "", "", "Origin, Accept-Encoding"},
		{"any", evil, []string{"*"}, "*", "*", "Accept-Encoding"},
		{"cors_off", evil, []string{}, "", "", "Accept-Encoding"},
		{"no_origin", "", []string{good}, "", "", "Accept-Encoding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := onlyEngine(t, url)
			cfg.Server.CORSAllowedOrigins = tt.origins
			gw := startGateway(t, cfg)
			var hdr []string
			if tt.origin != "" {
				hdr = []string{"Origin", tt.origin}
			}
			resp, body := chat(t, gw.url, chatBody("from a page", ""), hdr...)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Inferrail-Replica") != "odd" {
				t.Fatalf("%d from %q: %s", resp.StatusCode, resp.Header.Get("X-Inferrail-Replica"), body)
			}
			h := resp.Header
			if got := h.Get("Access-Control-Allow-Origin"); got != tt.allowOrigin {
				t.Errorf("Access-Control-Allow-Origin %q, want %q", got, tt.allowOrigin)
			}
			if got := h.Get("Access-Control-Expose-Headers"); got != tt.expose {
				t.Errorf("Access-Control-Expose-Headers %q, want %q", got, tt.expose)
			}
			for _, k := range []string{"Access-Control-Allow-Credentials", "Access-Control-Max-Age"} {
				if got, ok := h[k]; ok {
					t.Errorf("%s %q from the engine reached the client", k, got)
				}
			}
			if got := strings.Join(h.Values("Vary"), ", "); got != tt.vary {
				t.Errorf("Vary %q, want %q", got, tt.vary)
			}
		})
	}
}
