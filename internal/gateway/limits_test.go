package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/auth"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/ratelimit"
)

// resetHeader reads an x-ratelimit-reset header, which must be in the
// form OpenAI sends: a Go duration to the millisecond ("1s", "6m0s",
// "17ms").
func resetHeader(t *testing.T, resp *http.Response, name string) time.Duration {
	t.Helper()
	v := resp.Header.Get(name)
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d%time.Millisecond != 0 || d.String() != v {
		t.Fatalf("%s = %q, want a duration to the millisecond as Go writes it", name, v)
	}
	return d
}

func intHeader(t *testing.T, resp *http.Response, name string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(resp.Header.Get(name), 10, 64)
	if err != nil {
		t.Fatalf("%s = %q, want an integer", name, resp.Header.Get(name))
	}
	return n
}

func TestRateLimitRequests(t *testing.T) {
	secret, k := newKey("rpm-2", func(k *auth.Key) { k.Limits.RequestsPerMinute = 2 })
	cfg, _ := keyedConfig(t, 1, k)
	gw := startGateway(t, cfg)
	for i, wantLeft := range []int64{1, 0} {
		resp, body := chat(t, gw.url, chatBody("rpm", ""), bearer(secret)...)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
		if got := intHeader(t, resp, "X-Ratelimit-Limit-Requests"); got != 2 {
			t.Errorf("request %d: limit %d, want 2", i, got)
		}
		if got := intHeader(t, resp, "X-Ratelimit-Remaining-Requests"); got != wantLeft {
			t.Errorf("request %d: remaining %d, want %d", i, got, wantLeft)
		}
		// Full again after 30 s a request used, less what passed since.
		if d := resetHeader(t, resp, "X-Ratelimit-Reset-Requests"); d > time.Duration(2-wantLeft)*30*time.Second || d < time.Duration(2-wantLeft)*29*time.Second {
			t.Errorf("request %d: reset %v", i, d)
		}
		if resp.Header.Get("X-Ratelimit-Limit-Tokens") != "" {
			t.Errorf("token headers without a token limit")
		}
	}
	resp, body := chat(t, gw.url, chatBody("rpm", ""), bearer(secret)...)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third request: %d %s", resp.StatusCode, body)
	}
	e := decodeError(t, body)
	if e.Error.Type != "requests" || e.Error.Code != "rate_limit_exceeded" || !strings.Contains(e.Error.Message, "key `rpm-2` on requests per minute: limit 2") {
		t.Errorf("429 body: %s", body)
	}
	ms := intHeader(t, resp, "Retry-After-Ms")
	if ms < 29_000 || ms > 30_001 {
		t.Errorf("retry-after-ms %d, want about 30 s (one request at 2 a minute)", ms)
	}
	if got := intHeader(t, resp, "Retry-After"); got != int64(math.Ceil(float64(ms-1)/1000)) {
		t.Errorf("Retry-After %d with retry-after-ms %d: want the seconds rounded up", got, ms)
	}
	if intHeader(t, resp, "X-Ratelimit-Remaining-Requests") != 0 || resp.Header.Get("X-Should-Retry") != "" {
		t.Errorf("429 headers: %v", resp.Header)
	}
	page := scrape(t, gw.admin)
	if got := metricValue(page, `inferrail_rate_limited_total{key="rpm-2",limit="key_requests",model="`+testModel+`"}`); got != 1 {
		t.Errorf("rate limited count %v, want 1", got)
	}
	if got := metricValue(page, `inferrail_request_errors_total{model="`+testModel+`",reason="rate_limited"}`); got != 1 {
		t.Errorf("request errors rate_limited %v, want 1", got)
	}
}

// promptTokens returns what the edge tokenizer counts for body's prompt.
func promptTokens(t *testing.T, gw *running, body string, header ...string) int64 {
	t.Helper()
	resp, b := chat(t, gw.url, body, header...)
	if resp.StatusCode != 200 {
		t.Fatalf("measuring the prompt: %d %s", resp.StatusCode, b)
	}
	return intHeader(t, resp, "X-Inferrail-Prompt-Tokens")
}

// TestRateLimitPromptTokensExact: prompt tokens are taken as the edge
// tokenizer counts them, to the token, and given back when no engine
// computed the prompt.
func TestRateLimitPromptTokensExact(t *testing.T) {
	probeSecret, probe := newKey("probe", nil)
	body := chatBody("count these prompt tokens exactly, please", "")
	cfg, path := keyedConfig(t, 1, probe)
	gw := startGateway(t, cfg)
	p := promptTokens(t, gw, body, bearer(probeSecret)...)

	secret, k := newKey("tokens", func(k *auth.Key) { k.Limits.PromptTokensPerMinute = 2*p + 1 })
	tooBigSecret, tooBig := newKey("too-big", func(k *auth.Key) { k.Limits.PromptTokensPerMinute = p - 1 })
	writeKeys(t, path, probe, k, tooBig)
	waitFor(t, "the new keys", 10*time.Second, func() bool {
		resp, _ := get(t, gw.url+"/v1/models", bearer(secret)...)
		return resp.StatusCode == 200
	})

	// An engine's 400 (n > 1 is refused by the simulator) gives the prompt
	// tokens back.
	if resp, b := chat(t, gw.url, chatBody("count these prompt tokens exactly, please", `,"n":2`), bearer(secret)...); resp.StatusCode != 400 {
		t.Fatalf("n=2: %d %s", resp.StatusCode, b)
	}
	for i, left := range []int64{p + 1, 1} {
		resp, b := chat(t, gw.url, body, bearer(secret)...)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
		// Refill adds 2p+1 tokens a minute; no more than one can come in
		// between.
		if got := intHeader(t, resp, "X-Ratelimit-Remaining-Tokens"); got != left && got != left+1 {
			t.Errorf("request %d: %d tokens left, want %d (%d a prompt)", i, got, left, p)
		}
		if got := intHeader(t, resp, "X-Ratelimit-Limit-Tokens"); got != 2*p+1 {
			t.Errorf("limit %d", got)
		}
	}
	resp, b := chat(t, gw.url, body, bearer(secret)...)
	if resp.StatusCode != 429 || decodeError(t, b).Error.Type != "tokens" {
		t.Fatalf("third prompt: %d %s", resp.StatusCode, b)
	}

	resp, b = chat(t, gw.url, body, bearer(tooBigSecret)...)
	if resp.StatusCode != 429 || resp.Header.Get("X-Should-Retry") != "false" || resp.Header.Get("Retry-After") != "" {
		t.Fatalf("a prompt over the whole budget: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	if !strings.Contains(b, "Request too large for key `too-big` on prompt tokens per minute") {
		t.Errorf("message: %s", b)
	}
	page := scrape(t, gw.admin)
	for _, series := range []string{
		`inferrail_rate_limited_total{key="tokens",limit="key_prompt_tokens",model="` + testModel + `"}`,
		`inferrail_rate_limited_total{key="too-big",limit="key_prompt_tokens",model="` + testModel + `"}`,
	} {
		if metricValue(page, series) != 1 {
			t.Errorf("%s: %v, want 1", series, metricValue(page, series))
		}
	}
}

// TestModelLimitsWithoutKeys: a model's limits hold with no keys at all.
func TestModelLimitsWithoutKeys(t *testing.T) {
	cfg := testConfig(t, fleetOf(t, 1, true))
	cfg.Models[0].Limits = config.Limits{RequestsPerMinute: 1}
	gw := startGateway(t, cfg)
	if resp, b := chat(t, gw.url, chatBody("m", "")); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	resp, b := chat(t, gw.url, chatBody("m", ""))
	if resp.StatusCode != 429 || !strings.Contains(b, "model `"+testModel+"` on requests per minute") {
		t.Fatalf("second request: %d %s", resp.StatusCode, b)
	}
	if got := metricValue(scrape(t, gw.admin), `inferrail_rate_limited_total{key="",limit="model_requests",model="`+testModel+`"}`); got != 1 {
		t.Errorf("model-limited count %v", got)
	}
}

// TestOutputTokenLimits: a request takes its max_tokens from the output
// budget when admitted and is trued up to the engine's usage when its
// response ends; one whose max_tokens the budget does not hold is
// refused, the 429 naming what it asked for; a stream without usage is
// charged an estimate from its events.
func TestOutputTokenLimits(t *testing.T) {
	secret, k := newKey("out", func(k *auth.Key) { k.Limits.OutputTokensPerMinute = 10 })
	streamSecret, sk := newKey("streams", func(k *auth.Key) { k.Limits.OutputTokensPerMinute = 1000 })
	cfg := testConfig(t, fleetOf(t, 1, false)) // real decode steps: a token an event
	path := t.TempDir() + "/keys.yaml"
	writeKeys(t, path, k, sk)
	cfg.Auth.KeysFile = path
	gw := startGateway(t, cfg)
	eight := `{"model":"sim","messages":[{"role":"user","content":"output"}],"max_tokens":8,"ignore_eos":true}`
	// An engine's 400 (the simulator refuses n > 1) gives back what was
	// taken (16 asked, the whole budget of 10 taken at admission) before
	// it leaves, and its headers say the budget is whole again.
	resp, b := chat(t, gw.url, strings.Replace(eight, `"max_tokens":8`, `"max_tokens":8,"n":2`, 1), bearer(secret)...)
	if resp.StatusCode != 400 || intHeader(t, resp, "X-Ratelimit-Remaining-Tokens") != 10 {
		t.Fatalf("n=2: %d, %s output tokens left; want 400 with the whole budget of 10 back: %s", resp.StatusCode, resp.Header.Get("X-Ratelimit-Remaining-Tokens"), b)
	}
	resp, b = chat(t, gw.url, eight, bearer(secret)...)
	if resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, b)
	}
	if left := intHeader(t, resp, "X-Ratelimit-Remaining-Tokens"); left != 2 {
		t.Errorf("%d output tokens left after admitting max_tokens 8 of 10, want 2", left)
	}
	// 8 used of 10: 8 tokens need 6 more, at 10 a minute 36 s.
	resp, b = chat(t, gw.url, eight, bearer(secret)...)
	if resp.StatusCode != 429 || decodeError(t, b).Error.Type != "tokens" || !strings.Contains(b, "remaining 2, requested 8.") {
		t.Fatalf("8 more with 2 left: %d %s", resp.StatusCode, b)
	}
	if ms := intHeader(t, resp, "Retry-After-Ms"); ms < 35_000 || ms > 36_001 {
		t.Errorf("retry-after-ms %d, want about 36 s", ms)
	}
	two := strings.Replace(eight, `"max_tokens":8`, `"max_tokens":2`, 1)
	if resp, b := chat(t, gw.url, two, bearer(secret)...); resp.StatusCode != 200 {
		t.Fatalf("2 with 2 left: %d %s", resp.StatusCode, b)
	}
	if got := metricValue(scrape(t, gw.admin), `inferrail_rate_limit_output_tokens_total{source="usage"}`); got != 10 {
		t.Errorf("output tokens charged from usage: %v, want 10", got)
	}
	// Asking more than a whole budget takes the budget, and the refusal
	// names what was asked (a review's finding: it named the budget).
	twenty := strings.Replace(eight, `"max_tokens":8`, `"max_tokens":20`, 1)
	if resp, b := chat(t, gw.url, twenty, bearer(secret)...); resp.StatusCode != 429 || !strings.Contains(b, "remaining 0, requested 20.") {
		t.Errorf("20 with 0 left: %d %s", resp.StatusCode, b)
	}

	streamBody := func(extra string) string {
		return `{"model":"sim","messages":[{"role":"user","content":"stream"}],"max_tokens":5,"ignore_eos":true,"stream":true` + extra + `}`
	}
	for _, tc := range []struct{ extra, source string }{
		{"", "stream_chunks"},
		{`,"stream_options":{"include_usage":true}`, "usage"},
	} {
		before := metricValue(scrape(t, gw.admin), `inferrail_rate_limit_output_tokens_total{source="`+tc.source+`"}`)
		resp, b := chat(t, gw.url, streamBody(tc.extra), bearer(streamSecret)...)
		if resp.StatusCode != 200 || !bytes.Contains([]byte(b), []byte("[DONE]")) {
			t.Fatalf("stream: %d %s", resp.StatusCode, b)
		}
		after := metricValue(scrape(t, gw.admin), `inferrail_rate_limit_output_tokens_total{source="`+tc.source+`"}`)
		// Without usage the charge is an estimate, a token an event: a
		// busy machine's engine merges tokens into fewer events (as
		// vLLM's output collector does), so it is the events that carried
		// text to the client.
		want := 5.0
		if tc.source == "stream_chunks" {
			want = float64(textEvents(t, b))
		}
		if after-max(before, 0) != want {
			t.Errorf("a 5-token stream %s charged %v from %s, want %v", tc.extra, after-max(before, 0), tc.source, want)
		}
	}
}

// textEvents counts a chat stream's events whose delta carries text.
func textEvents(t *testing.T, stream string) int {
	t.Helper()
	n := 0
	for _, ev := range strings.Split(stream, "\n\n") {
		data, ok := strings.CutPrefix(strings.TrimSpace(ev), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("stream event %q: %v", data, err)
		}
		if len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != "" {
			n++
		}
	}
	return n
}

func TestOutputMeterEstimates(t *testing.T) {
	tests := []struct {
		name         string
		stream, chat bool
		reads        []string
		want         int64
		source       string
	}{
		{"usage", false, true, []string{`{"choices":[],"usage":{"prompt_tokens":5,"total_tokens":12,"completion_tokens":7}}`}, 7, "usage"},
		{"chat_events", true, true, []string{"data: {role}\n\ndata: {a}\n", "\ndata: {b}\n\ndata: [DONE]\n\n"}, 2, "stream_chunks"},
		{"completion_events", true, false, []string{"data: {a}\n\n", "data: {b}\n\ndata: {c}\n\ndata: [DONE]\n\n"}, 3, "stream_chunks"},
		{"split_blank_line", true, false, []string{"data: {a}\n", "\n", "data: [DONE]\n", "\n"}, 1, "stream_chunks"},
		{"crlf_events", true, true, []string{"data: {role}\r\n\r\ndata: {a}\r\n\r\ndata: {b}\r\n\r\ndata: [DONE]\r\n\r\n"}, 2, "stream_chunks"},
		{"crlf_split_blank_line", true, false, []string{"data: {a}\r", "\n", "\r", "\ndata: [DONE]\r\n\r", "\n"}, 1, "stream_chunks"},
		{"no_usage_whole", false, false, []string{strings.Repeat("x", 41)}, 10, "bytes"},
		// Comments and blank lines with no data before them are not events
		// (found by a review: three keep-alive comments charged three tokens).
		{"comments", true, false, []string{"data: {a}\n\n: keep-alive\n\n: keep-alive\n\n: keep-alive\n\ndata: [DONE]\n\n"}, 1, "stream_chunks"},
		{"extra_blank_lines", true, false, []string{"\n\ndata: {a}\n\n\n\n\ndata: {b}\n\ndata: [DONE]\n\n"}, 2, "stream_chunks"},
		{"event_without_data", true, false, []string{"event: ping\nid: 7\n\ndata: {a}\n\ndata: [DONE]\n\n"}, 1, "stream_chunks"},
		{"data_field_forms", true, false, []string{"data\n\ndata:{a}\n\ndatum: {x}\n\ndata: [DONE]\n\n"}, 2, "stream_chunks"},
		{"multi_line_event", true, false, []string{"data: {a\ndata: a}\n\ndata: [DONE]\n\n"}, 1, "stream_chunks"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &outputMeter{stream: tc.stream, chat: tc.chat}
			for _, r := range tc.reads {
				m.write([]byte(r))
			}
			if n, src := m.tokens(); n != tc.want || src != tc.source {
				t.Errorf("tokens() = %d, %s; want %d, %s", n, src, tc.want, tc.source)
			}
		})
	}
}

// TestOutputMeterSplits: a stream's events count the same however its
// bytes are split into reads, here into three at every pair of positions,
// with CRLF lines, and with extra blank lines and comments (found by a
// review: an extra blank line counted as an event or not by where a read
// ended).
func TestOutputMeterSplits(t *testing.T) {
	for _, stream := range []string{
		"data: {role}\r\n\r\ndata: {a}\r\n\r\ndata: {b}\r\n\r\ndata: [DONE]\r\n\r\n",
		"data: {role}\n\n\ndata: {a}\n\n: ping\n\ndata: {b}\n\n\r\ndata: [DONE]\n\n",
	} {
		for i := range len(stream) + 1 {
			for j := i; j <= len(stream); j++ {
				m := &outputMeter{stream: true, chat: true}
				for _, r := range []string{stream[:i], stream[i:j], stream[j:]} {
					m.write([]byte(r))
				}
				if n, src := m.tokens(); n != 2 || src != sourceChunks {
					t.Fatalf("%q split at %d and %d: tokens() = %d, %s; want 2, %s", stream, i, j, n, src, sourceChunks)
				}
			}
		}
	}
}

// TestCRLFStreamCharged: an event stream whose lines end in CRLF (valid
// SSE, and what a proxy in between may send) without usage is charged a
// token an event, as an LF stream is.
func TestCRLFStreamCharged(t *testing.T) {
	stream := chatEvents(5, "\r\n")
	url := rawEngine(t, func(w *bufio.Writer) {
		fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(stream), stream)
	})
	cfg := onlyEngine(t, url)
	cfg.Models[0].Limits = config.Limits{OutputTokensPerMinute: 1_000_000}
	gw := startGateway(t, cfg)
	resp, b := chat(t, gw.url, chatBody("hi", `,"stream":true`))
	if resp.StatusCode != 200 || !strings.Contains(b, "[DONE]") {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
	// The stream's end reaches the client after the request settled.
	if got := metricValue(scrape(t, gw.admin), `inferrail_rate_limit_output_tokens_total{source="stream_chunks"}`); got != 5 {
		t.Errorf("a CRLF stream of 5 content events charged %v tokens, want 5", got)
	}
}

// TestStreamChargedWhateverTheCase: an event stream is known by its media
// type in any case, as the relay knows it (media types are
// case-insensitive, RFC 9110 §8.3.1): one sent as Text/Event-Stream
// without usage is charged a token an event, not its bytes over four (a
// review's finding: 573 tokens charged for 39 events).
func TestStreamChargedWhateverTheCase(t *testing.T) {
	stream := chatEvents(39, "\n")
	for _, ctype := range []string{"text/event-stream", "Text/Event-Stream", "TEXT/EVENT-STREAM; charset=utf-8", " text/event-stream ;charset=utf-8"} {
		t.Run(strings.NewReplacer(" ", "_", ";", "", "/", "_", "=", "_").Replace(ctype), func(t *testing.T) {
			url := rawEngine(t, func(w *bufio.Writer) {
				fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", ctype, len(stream), stream)
			})
			cfg := onlyEngine(t, url)
			cfg.Models[0].Limits = config.Limits{OutputTokensPerMinute: 1_000_000}
			gw := startGateway(t, cfg)
			resp, b := chat(t, gw.url, chatBody("hi", `,"stream":true`))
			if resp.StatusCode != 200 || !strings.Contains(b, "[DONE]") {
				t.Fatalf("%d %q", resp.StatusCode, b)
			}
			// The stream's end reaches the client after the request settled.
			page := scrape(t, gw.admin)
			chunks := metricValue(page, `inferrail_rate_limit_output_tokens_total{source="stream_chunks"}`)
			bytes := metricValue(page, `inferrail_rate_limit_output_tokens_total{source="bytes"}`)
			if chunks != 39 || bytes != 0 {
				t.Errorf("a stream of 39 content events charged %v tokens by events and %v by bytes, want 39 and 0", chunks, bytes)
			}
		})
	}
}

func TestResetString(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {-time.Second, "0s"}, {time.Nanosecond, "1ms"}, {17 * time.Millisecond, "17ms"},
		{time.Second, "1s"}, {1500*time.Millisecond + 1, "1.501s"}, {6 * time.Minute, "6m0s"},
	} {
		if got := resetString(tc.d); got != tc.want {
			t.Errorf("resetString(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestRateHeadersPickTheTightest(t *testing.T) {
	costs := []ratelimit.Cost{
		{ID: ratelimit.ID{Scope: ratelimit.ScopeKey, Kind: ratelimit.Requests}, Rate: ratelimit.PerMinute(100), Remaining: 50, Reset: time.Second},
		{ID: ratelimit.ID{Scope: ratelimit.ScopeModel, Kind: ratelimit.Requests}, Rate: ratelimit.PerMinute(1000), Remaining: 10, Reset: 2 * time.Second},
		{ID: ratelimit.ID{Scope: ratelimit.ScopeKey, Kind: ratelimit.PromptTokens}, Rate: ratelimit.PerMinute(5000), Remaining: 4000, Reset: 3 * time.Second},
		{ID: ratelimit.ID{Scope: ratelimit.ScopeKey, Kind: ratelimit.OutputTokens}, Rate: ratelimit.PerMinute(900), Remaining: 800, Reset: 4 * time.Second},
	}
	h := http.Header{}
	rateHeaders(h, costs)
	want := map[string]string{
		"X-Ratelimit-Limit-Requests": "1000", "X-Ratelimit-Remaining-Requests": "10", "X-Ratelimit-Reset-Requests": "2s",
		"X-Ratelimit-Limit-Tokens": "900", "X-Ratelimit-Remaining-Tokens": "800", "X-Ratelimit-Reset-Tokens": "4s",
	}
	for k, v := range want {
		if h.Get(k) != v {
			t.Errorf("%s = %q, want %q", k, h.Get(k), v)
		}
	}
}

// TestAbandonedWholeAnswerKeepsItsPromptCharge: a client that leaves while
// an engine computes its whole answer does not get its prompt tokens back
// (the engine computed them); otherwise leaving before the answer would
// dodge the prompt budget entirely.
func TestAbandonedWholeAnswerKeepsItsPromptCharge(t *testing.T) {
	probeSecret, probe := newKey("probe", nil)
	cfg := testConfig(t, fleetOf(t, 1, false)) // 20 ms a token: answers take time
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeKeys(t, path, probe)
	cfg.Auth.KeysFile, cfg.Auth.ReloadInterval = path, config.Duration(20*time.Millisecond)
	gw := startGateway(t, cfg)
	body := chatBody(strings.Repeat("a long prompt for the budget ", 60), "")
	p := promptTokens(t, gw, body, bearer(probeSecret)...)

	secret, k := newKey("leaver", func(k *auth.Key) { k.Limits.PromptTokensPerMinute = 3 * p })
	writeKeys(t, path, probe, k)
	waitFor(t, "the new key", 10*time.Second, func() bool {
		resp, _ := get(t, gw.url+"/v1/models", bearer(secret)...)
		return resp.StatusCode == 200
	})
	long := strings.Replace(body, `"max_tokens":4`, `"max_tokens":200,"ignore_eos":true`, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw.url+"/v1/chat/completions", strings.NewReader(long))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+secret)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a 4 s answer came in 300 ms: %d", resp.StatusCode)
	}
	waitFor(t, "the abandoned request to end", 5*time.Second, func() bool {
		return metricValue(scrape(t, gw.admin), `inferrail_client_disconnects_total{model="`+testModel+`"}`) == 1
	})
	resp, b := chat(t, gw.url, body, bearer(secret)...)
	if resp.StatusCode != 200 {
		t.Fatalf("the next request: %d %s", resp.StatusCode, b)
	}
	// 3p less two prompts, plus what refilled since (3p a minute: under
	// p/10 in the seconds this takes). Given back, it would be about 2p.
	if left := intHeader(t, resp, "X-Ratelimit-Remaining-Tokens"); left > p+p/10 {
		t.Errorf("%d tokens left of %d after two %d-token prompts, one abandoned: the abandoned one was given back", left, 3*p, p)
	}
}

// TestLeftBeforeSendKeepsNothing: a client that leaves before its request
// is written to any engine (here, before the gateway even read it: its
// context is done when the handler starts, as when a client hangs up
// while its prompt is tokenized) gets its prompt and output tokens back,
// and is counted cancelled on no replica (found by a review: the prompt
// was kept and a replica that never saw the request counted it).
func TestLeftBeforeSendKeepsNothing(t *testing.T) {
	cfg := testConfig(t, fleetOf(t, 1, true))
	prompt, output := ratelimit.PerMinute(100_000), ratelimit.PerMinute(1000)
	cfg.Models[0].Limits = config.Limits{PromptTokensPerMinute: prompt.Limit, OutputTokensPerMinute: output.Limit}
	gw := startGateway(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	body := chatBody(strings.Repeat("a prompt nobody will compute ", 100), "")
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	gw.g.serveGenerate(httptest.NewRecorder(), req)

	left := []ratelimit.Cost{
		{ID: ratelimit.ID{Scope: ratelimit.ScopeModel, Name: testModel, Kind: ratelimit.PromptTokens}, Rate: prompt},
		{ID: ratelimit.ID{Scope: ratelimit.ScopeModel, Name: testModel, Kind: ratelimit.OutputTokens}, Rate: output},
	}
	if _, err := gw.g.access.limiter.Admit(context.Background(), time.Now(), left); err != nil {
		t.Fatal(err)
	}
	for _, c := range left {
		if c.Remaining != c.Rate.Limit {
			t.Errorf("%s: %d left of %d after a request no engine received", c.ID, c.Remaining, c.Rate.Limit)
		}
	}
	page := scrape(t, gw.admin)
	if got := metricValue(page, `inferrail_requests_total{model="`+testModel+`",replica="",status="cancelled"}`); got != 1 {
		t.Errorf("cancelled on no replica: %v, want 1:\n%s", got, grep(page, "inferrail_requests_total"))
	}
	if got := metricValue(page, `inferrail_requests_total{model="`+testModel+`",replica="sim-1",status="cancelled"}`); got > 0 {
		t.Errorf("cancelled on sim-1, which never received it: %v", got)
	}
}

// TestEstimatedPromptTruedUp: a prompt charged by estimate (here a model
// with no tokenizer, so four bytes a token) is corrected to the engine's
// usage.prompt_tokens when the answer ends.
func TestEstimatedPromptTruedUp(t *testing.T) {
	secret, k := newKey("estimated", func(k *auth.Key) { k.Limits.PromptTokensPerMinute = 60_000 })
	cfg, _ := keyedConfig(t, 1, k)
	cfg.Models[0].Tokenizer = "" // no edge count: the prompt is estimated
	gw := startGateway(t, cfg)
	// Named as the engine names it: an alias is rewritten, and the estimate
	// is of the body the engine gets.
	body := strings.Replace(chatBody(strings.Repeat("x ", 3000), ""), `"model":"sim"`, `"model":"`+testModel+`"`, 1)
	estimate := int64(len(body) / bytesPerToken)
	resp, b := chat(t, gw.url, body, bearer(secret)...)
	if resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, b)
	}
	var ans struct {
		Usage struct {
			PromptTokens int64 `json:"prompt_tokens"`
		}
	}
	if err := json.Unmarshal([]byte(b), &ans); err != nil || ans.Usage.PromptTokens == 0 {
		t.Fatalf("no usage in %s", b)
	}
	exact := ans.Usage.PromptTokens
	if exact == estimate {
		t.Fatalf("the prompt's estimate %d equals its count: the test cannot tell a true-up", estimate)
	}
	resp, b = chat(t, gw.url, body, bearer(secret)...)
	if resp.StatusCode != 200 {
		t.Fatalf("second: %d %s", resp.StatusCode, b)
	}
	// The first trued up to its count, the second taken by estimate; a
	// thousand tokens a second refill in between at most.
	left := intHeader(t, resp, "X-Ratelimit-Remaining-Tokens")
	if want := 60_000 - exact - estimate; left < want || left > want+1000 {
		t.Errorf("%d tokens left, want %d: 60000 less the first's %d (engine count) and the second's %d (estimate)", left, want, exact, estimate)
	}
	waitFor(t, "both true-ups", 5*time.Second, func() bool {
		return metricValue(scrape(t, gw.admin), "inferrail_rate_limit_prompt_trueups_total") == 2
	})
}

// heldStreamEngine streams every chat answer with usage whose
// completion_tokens is the request's max_tokens. A request whose message
// is "hold" first says it arrived and waits for release.
func heldStreamEngine(t *testing.T) (url string, arrived <-chan struct{}, release func()) {
	return holdingEngine(t, func(w http.ResponseWriter, maxTokens int) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n"+
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"total_tokens\":%d,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n",
			1+maxTokens, maxTokens)
	})
}

// holdingEngine answers every chat with reply, given the request's
// max_tokens; a request whose first message is "hold" first says it
// arrived and waits for release.
func holdingEngine(t *testing.T, reply func(w http.ResponseWriter, maxTokens int)) (url string, arrived <-chan struct{}, release func()) {
	t.Helper()
	got, gate := make(chan struct{}, 1), make(chan struct{})
	url = chatEngine(t, func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			MaxTokens int `json:"max_tokens"`
			Messages  []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		if req.Messages[0].Content == "hold" {
			got <- struct{}{}
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		reply(w, req.MaxTokens)
	})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	return url, got, release
}

// TestLoweredLimitSurvivesAnOlderRequest: a request admitted before a
// reload lowered the model's output budget settles after it; its charge
// must not put the old, higher rate back, which refilled the debt the
// lowered budget held at once.
func TestLoweredLimitSurvivesAnOlderRequest(t *testing.T) {
	url, arrived, release := heldStreamEngine(t)
	cfg := testConfig(t, nil)
	cfg.Replicas = []config.Replica{{ID: "held", URL: url, Models: []string{testModel}, MaxConcurrency: 8, MaxPending: 8}}
	// The old rate refills the debt below in a microsecond.
	cfg.Models[0].Limits = config.Limits{OutputTokensPerMinute: config.MaxPerMinute}
	gw := startGateway(t, cfg)
	stream := func(content string, maxTokens int) string {
		return fmt.Sprintf(`{"model":"sim","messages":[{"role":"user","content":%q}],"max_tokens":%d,"stream":true}`, content, maxTokens)
	}
	// A streamed answer's end reaches the client after its request settled.
	done := make(chan string, 1)
	go func() {
		resp, err := http.Post(gw.url+"/v1/chat/completions", "application/json", strings.NewReader(stream("hold", 1)))
		if err != nil {
			done <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- fmt.Sprintf("%d %s %v", resp.StatusCode, b, err)
	}()
	<-arrived // admitted under the old limit
	set := fmt.Sprintf(`{"models":[{"name":%q,"aliases":["sim"],"tokenizer":"builtin:sim","block_size":0,"limits":{"output_tokens_per_minute":60}}]}`, testModel)
	if code, _, problems := patch(t, gw.admin, set); code != http.StatusOK {
		t.Fatalf("patch: %d %v", code, problems)
	}
	if resp, b := chat(t, gw.url, stream("b", 120)); resp.StatusCode != 200 || !strings.Contains(b, "[DONE]") {
		t.Fatalf("B: %d %s", resp.StatusCode, b)
	}
	// 120 charged at 60 a minute: about 60 in debt, a minute to refill.
	if resp, b := chat(t, gw.url, stream("c", 1)); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("C, with the budget in debt: %d %s", resp.StatusCode, b)
	}
	release()
	if a := <-done; !strings.HasPrefix(a, "200 ") || !strings.HasSuffix(a, "data: [DONE]\n\n <nil>") {
		t.Fatalf("A: %q", a)
	}
	if resp, b := chat(t, gw.url, stream("d", 1)); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("D, after A (admitted before the reload) settled: %d %s; want 429, the budget of 60 a minute still in debt", resp.StatusCode, b)
	}
}

// vllmAnswerWithTokenIDs is vLLM's whole chat answer to a request with
// return_token_ids: prompt_token_ids, and more, after usage.
func vllmAnswerWithTokenIDs(promptLen, completion, cached int) string {
	ids := make([]string, promptLen)
	for i := range ids {
		ids[i] = strconv.Itoa(1000 + i)
	}
	return `{"id":"chatcmpl-x","object":"chat.completion","created":1755000000,"model":"` + testModel + `","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there!","refusal":null,"annotations":null,"audio":null,"function_call":null,"reasoning":null},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":[1,2,3],"routed_experts":null}],"service_tier":null,"system_fingerprint":"vllm-0.28.0",` +
		fmt.Sprintf(`"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d,"created_cache_tokens":0,"multimodal_tokens":null}},`, promptLen, promptLen+completion, completion, cached) +
		`"prompt_logprobs":null,"prompt_token_ids":[` + strings.Join(ids, ",") + `],"prompt_text":null,"kv_transfer_params":null,"ec_transfer_params":null,"metrics":null}`
}

// TestUsageAfterLongTrailer: a whole vLLM answer whose usage is followed
// by more than the gateway's tail of bytes (prompt_token_ids) is charged
// from its usage, its cached tokens checked against the prediction, and
// an estimated prompt trued up to its prompt_tokens.
func TestUsageAfterLongTrailer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		promptLen int
		tokenizer string
	}{
		{"short_trailer", 10, "builtin:sim"},
		{"long_trailer", 400, "builtin:sim"},
		{"long_trailer_estimated_prompt", 400, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer := vllmAnswerWithTokenIDs(tc.promptLen, 3, 16)
			url := rawEngine(t, func(w *bufio.Writer) {
				fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
			})
			cfg := onlyEngine(t, url)
			cfg.Models[0].Tokenizer = tc.tokenizer
			cfg.Models[0].Limits = config.Limits{OutputTokensPerMinute: 1_000_000, PromptTokensPerMinute: 1_000_000}
			gw := startGateway(t, cfg)
			if resp, b := chat(t, gw.url, chatBody("hi", `,"return_token_ids":true`)); resp.StatusCode != 200 || b != answer {
				t.Fatalf("%d %.200s", resp.StatusCode, b)
			}
			// A whole answer may reach the client before its request
			// settles: the output charge, whatever its source, is the
			// settle's last step.
			var page string
			waitFor(t, "the output charge", 5*time.Second, func() bool {
				page = scrape(t, gw.admin)
				return metricValue(page, `inferrail_rate_limit_output_tokens_total{source="usage"}`)+
					metricValue(page, `inferrail_rate_limit_output_tokens_total{source="bytes"}`)+
					metricValue(page, `inferrail_rate_limit_output_tokens_total{source="stream_chunks"}`) > 0
			})
			if got := metricValue(page, `inferrail_rate_limit_output_tokens_total{source="usage"}`); got != 3 {
				t.Errorf("charged %v from usage (%v from bytes), want 3 from usage", got,
					metricValue(page, `inferrail_rate_limit_output_tokens_total{source="bytes"}`))
			}
			if tc.tokenizer == "" {
				if got := metricValue(page, "inferrail_rate_limit_prompt_trueups_total"); got != 1 {
					t.Errorf("%v estimated prompts trued up, want 1", got)
				}
				return
			}
			checks := 0
			for _, s := range gw.g.drift.status() {
				checks += int(s.Exact + s.Over + s.Under)
			}
			if checks != 1 {
				t.Errorf("%d prediction checks after one answer reporting cached_tokens, want 1", checks)
			}
		})
	}
}

// idList is n token ids from first, as JSON: two or three bytes an id.
func idList(first, n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa((first + i) % 100)
	}
	return "[" + strings.Join(ids, ",") + "]"
}

// TestArrayPromptEstimated: a completion's prompt array that gets no edge
// count (a batch, which the tokenizer does not take, or token ids on a
// model without a tokenizer) is charged by its content: an id a token, a
// text its bytes over four (found by a review: 4000 ids in 8060 bytes were
// charged 2018 tokens, the body's bytes over four).
func TestArrayPromptEstimated(t *testing.T) {
	tests := []struct {
		name, tokenizer, prompt string
		want                    int64
	}{
		{"batch_of_ids", "builtin:sim", "[" + idList(0, 1000) + "," + idList(7, 1000) + "]", 2000},
		{"batch_of_ids_no_tokenizer", "", "[" + idList(0, 1000) + "," + idList(7, 1000) + "]", 2000},
		{"ids_no_tokenizer", "", idList(0, 1000), 1000},
		{"batch_of_texts", "builtin:sim", `["` + strings.Repeat("a", 401) + `","` + strings.Repeat("b", 400) + `"]`, 101 + 100},
	}
	// An engine that serves batches: a refusal would give the charge back
	// before its headers are written. Its usage names no prompt tokens, so
	// nothing trues the estimate up.
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch {
		case r.Method != http.MethodPost:
		case r.URL.Path != "/v1/completions":
			http.NotFound(w, r)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":"length"}]}`)
		}
	}))
	t.Cleanup(engine.Close)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, fleetOf(t, 1, true))
			cfg.Replicas[0].URL = engine.URL
			cfg.Models[0].Tokenizer = tc.tokenizer
			cfg.Models[0].Limits = config.Limits{PromptTokensPerMinute: 1_000_000}
			gw := startGateway(t, cfg)
			body := `{"model":"sim","max_tokens":1,"prompt":` + tc.prompt + `}`
			resp, b := postCompletion(t, gw.url, body)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			if left := intHeader(t, resp, "X-Ratelimit-Remaining-Tokens"); left != 1_000_000-tc.want {
				t.Errorf("charged %d prompt tokens for %s (%d bytes of body), want %d", 1_000_000-left, tc.name, len(body), tc.want)
			}
		})
	}
}

// TestRefusalAfterAdmissionSaysTheRefund: a request admitted by its budgets
// and then refused (here shed from the flow queue) has its tokens given
// back before its answer leaves, and the answer's x-ratelimit headers say
// where the budget stands after the refund, not at admission (found by a
// review: a client throttling on them waited for tokens it had back). An
// engine's refusal, relayed, says the same.
func TestRefusalAfterAdmissionSaysTheRefund(t *testing.T) {
	const limit = 2000
	url, arrived, release := heldStreamEngine(t)
	cfg := flowConfig(url, 10)
	cfg.Flow.MaxWait = config.Duration(200 * time.Millisecond)
	cfg.Models[0].Limits = config.Limits{OutputTokensPerMinute: limit}
	gw := startGateway(t, cfg)
	held := make(chan struct{})
	go func() {
		defer close(held)
		chat(t, gw.url, `{"model":"sim","messages":[{"role":"user","content":"hold"}],"max_tokens":1}`)
	}()
	<-arrived
	resp, _ := chat(t, gw.url, `{"model":"sim","messages":[{"role":"user","content":"shed"}],"max_tokens":1500}`)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429 from the queue", resp.StatusCode)
	}
	// The held request's one token is still taken, and a few refilled at
	// most since; 1500 is not.
	if left := intHeader(t, resp, "X-Ratelimit-Remaining-Tokens"); left < limit-10 {
		t.Errorf("the refusal says %d tokens left of %d, want the 1500 it took given back", left, limit)
	}
	release()
	<-held
	// An engine's refusal: the same.
	engine := chatEngine(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, `{"error":{"message":"no","type":"BadRequestError","param":null,"code":400}}`, http.StatusBadRequest)
	})
	cfg = flowConfig(engine, 0)
	cfg.Models[0].Limits = config.Limits{OutputTokensPerMinute: limit}
	gw = startGateway(t, cfg)
	resp, _ = chat(t, gw.url, `{"model":"sim","messages":[{"role":"user","content":"refused"}],"max_tokens":1500}`)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want the engine's 400", resp.StatusCode)
	}
	if left := intHeader(t, resp, "X-Ratelimit-Remaining-Tokens"); left < limit-10 {
		t.Errorf("the engine's refusal says %d tokens left of %d, want the 1500 it took given back", left, limit)
	}
}

// requestsLeft is how many requests the key's budget holds now, at rate
// requests a minute, read without changing it (a refund of nothing).
func requestsLeft(t *testing.T, gw *running, key string, rate int64) int64 {
	t.Helper()
	c := []ratelimit.Cost{{ID: ratelimit.ID{Scope: ratelimit.ScopeKey, Name: key, Kind: ratelimit.Requests}, Rate: ratelimit.PerMinute(rate)}}
	if err := gw.g.access.limiter.Refund(context.Background(), time.Now(), c); err != nil {
		t.Fatal(err)
	}
	return c[0].Remaining
}

// TestRequestSpentOnlyWhenTried: a request the gateway turns away before
// any attempt began on a replica spends none of its key's
// requests_per_minute, whichever way it was turned away (found by a
// review: a queue_full shed was charged when its request was admitted
// before the queue filled, and not when it found the queue full before
// admission, so equal sheds paid differently; and each of an SDK's retries
// of the gateway's 503 paid a request). A request an engine answered,
// even with an error, spends its request.
func TestRequestSpentOnlyWhenTried(t *testing.T) {
	const rpm = 2 // a request refills in 30 s: the budget read after is exact
	busy503 := func(t *testing.T) string {
		return chatEngine(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			http.Error(w, `{"error":{"message":"busy","type":"ServiceUnavailableError","param":null,"code":503}}`, http.StatusServiceUnavailable)
		})
	}
	for _, tc := range []struct {
		name string
		// maxQueued and maxWait set the flow control; hold is how many
		// requests of another key the engine holds first.
		maxQueued, hold int
		maxWait         time.Duration
		engine          func(t *testing.T) string // nil: an engine that holds what it gets
		header          []string                  // the measured request's, beside its key
		sends           int                       // times the measured request is sent, as an SDK retries
		wantStatus      int
		wantReason      string // inferrail_request_errors_total's reason; "" for an engine's answer
		wantSpent       int64
	}{
		// Shed before admission: the queue was full when it arrived.
		{name: "queue_full_before_admission", maxQueued: 1, hold: 2, sends: 1, wantStatus: http.StatusTooManyRequests, wantReason: shedQueueFull},
		// Shed after admission: it waited and the wait ran out.
		{name: "queue_timeout", maxQueued: 4, hold: 1, maxWait: 50 * time.Millisecond, sends: 1, wantStatus: http.StatusTooManyRequests, wantReason: shedQueueTimeout},
		{name: "slo_unreachable", maxQueued: 4, header: []string{openai.HeaderTTFTTarget, "1"}, sends: 1, wantStatus: http.StatusTooManyRequests, wantReason: shedSLOUnreachable},
		// Without a queue: the gateway's own 503, sent three times as the
		// OpenAI SDKs do (two retries).
		{name: "fleet_full_503", hold: 1, sends: 3, wantStatus: http.StatusServiceUnavailable, wantReason: reasonFleetFull},
		// An engine's 503, relayed: an engine took the request up.
		{name: "engine_503", engine: busy503, sends: 1, wantStatus: http.StatusServiceUnavailable, wantSpent: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var url string
			var e *orderEngine
			if tc.engine != nil {
				url = tc.engine(t)
			} else {
				e = newOrderEngine(t)
				url = e.srv.URL
			}
			cfg := flowConfig(url, tc.maxQueued)
			cfg.Flow.MaxWait = config.Duration(tc.maxWait)
			other, ok := newKey("other", nil)
			measured, mk := newKey("measured", func(k *auth.Key) { k.Limits.RequestsPerMinute = rpm })
			withKeys(t, cfg, ok, mk)
			gw := startGatewayWith(t, cfg, Options{})
			var held []<-chan sent
			if tc.hold > 0 {
				held = append(held, holdSlot(t, gw, e, bearer(other)...))
			}
			for i := 1; i < tc.hold; i++ {
				held = append(held, queue(t, gw, fmt.Sprintf("q%d", i), bearer(other)...))
			}
			before := counterValue(t, gw, "inferrail_request_errors_total", "model", testModel, "reason", tc.wantReason)
			for range tc.sends {
				resp, body := chat(t, gw.url, chatBody("measured", ""), append(bearer(measured), tc.header...)...)
				if resp.StatusCode != tc.wantStatus {
					t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tc.wantStatus)
				}
				// An answer that reports the budget reports it after the refund.
				if v := resp.Header.Get("X-Ratelimit-Remaining-Requests"); v != "" && v != strconv.Itoa(int(rpm-tc.wantSpent)) {
					t.Errorf("x-ratelimit-remaining-requests %s, want %d", v, rpm-tc.wantSpent)
				}
			}
			if tc.wantReason != "" {
				if after := counterValue(t, gw, "inferrail_request_errors_total", "model", testModel, "reason", tc.wantReason); after != before+float64(tc.sends) {
					t.Errorf("inferrail_request_errors_total{reason=%q} went %v → %v, want %d more", tc.wantReason, before, after, tc.sends)
				}
			}
			if got := rpm - requestsLeft(t, gw, "measured", rpm); got != tc.wantSpent {
				t.Errorf("requests spent %d, want %d", got, tc.wantSpent)
			}
			if e != nil {
				e.open()
			}
			expectStatus(t, http.StatusOK, held...)
		})
	}
}

// chatEvents is a chat event stream without usage, each line ending in
// eol: the role's event, n content events and [DONE].
func chatEvents(n int, eol string) string {
	var sb strings.Builder
	sb.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}" + eol + eol)
	for i := range n {
		fmt.Fprintf(&sb, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"}}]}%s%s", i, eol, eol)
	}
	sb.WriteString("data: [DONE]" + eol + eol)
	return sb.String()
}
