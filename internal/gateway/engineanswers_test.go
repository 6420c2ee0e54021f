package gateway

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/sim"
)

// rawEngine is an engine that answers every generation request with the
// bytes answer writes on the bare connection, after reading the body, and
// closes it; /health and other GETs get a 200, other POSTs (the gateway's
// tokenizer check) a 404.
func rawEngine(t *testing.T, answer func(w *bufio.Writer)) string {
	t.Helper()
	return chatEngine(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		answer(rw.Writer)
		_ = rw.Flush()
	})
}

// chatEngine is an engine that answers chat requests with handle: GETs
// (/health) get a 200, other POSTs (the gateway's tokenizer check) a 404.
func chatEngine(t *testing.T, handle http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method != http.MethodPost:
			return
		case r.URL.Path != "/v1/chat/completions":
			http.NotFound(w, r)
			return
		}
		handle(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// withEngineFirst is the test config with the engine at url first, ahead
// of one simulator: round robin sends it the first request.
func withEngineFirst(t *testing.T, url string) *config.Config {
	cfg := testConfig(t, fleetOf(t, 1, true))
	cfg.Replicas = slices.Insert(cfg.Replicas, 0, config.Replica{ID: "odd", URL: url, Models: []string{testModel}, MaxConcurrency: 8, MaxPending: 8})
	return cfg
}

// onlyEngine is the test config with the engine at url its only replica.
func onlyEngine(t *testing.T, url string) *config.Config {
	cfg := testConfig(t, nil)
	cfg.Replicas = []config.Replica{{ID: "odd", URL: url, Models: []string{testModel}, MaxConcurrency: 8, MaxPending: 8}}
	return cfg
}

// TestEngineAnswersThatAreNoAnswer: an engine that switches protocols,
// sends a status outside HTTP's 100-599, or sends a head larger than a
// client may send the gateway, has not answered: the request goes to
// another replica.
func TestEngineAnswersThatAreNoAnswer(t *testing.T) {
	for name, answer := range map[string]string{
		"switching protocols": "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		"oversized head":      "HTTP/1.1 200 OK\r\nX-Huge: " + strings.Repeat("a", 2<<20) + "\r\nContent-Length: 2\r\n\r\n{}",
		// A review's finding: below 100 the handler panicked in
		// WriteHeader and the client got no answer at all.
		"status 099": "HTTP/1.1 099 Odd\r\nContent-Length: 2\r\n\r\n{}",
		"status 000": "HTTP/1.1 000 Zero\r\nContent-Length: 2\r\n\r\n{}",
		"status 600": "HTTP/1.1 600 Odd\r\nContent-Length: 2\r\n\r\n{}",
		"status 999": "HTTP/1.1 999 Odd\r\nContent-Length: 2\r\n\r\n{}",
	} {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			url := rawEngine(t, func(w *bufio.Writer) { _, _ = w.WriteString(answer) })
			gw := startGateway(t, withEngineFirst(t, url))
			resp, body := chat(t, gw.url, chatBody("hi", ""))
			if resp.StatusCode != 200 || resp.Header.Get("X-Inferrail-Replica") != "sim-1" {
				t.Errorf("status %d from %q, want 200 from sim-1: %.200s", resp.StatusCode, resp.Header.Get("X-Inferrail-Replica"), body)
			}
		})
	}
}

// TestEngineStatusOutsideHTTP: an engine's status outside 100-599, with
// no other replica to try, is the gateway's 502 in OpenAI's shape, counted
// as such: never a connection closed without an answer (below 100), nor
// the engine's status relayed and counted under a 6xx or 9xx class.
func TestEngineStatusOutsideHTTP(t *testing.T) {
	for _, code := range []string{"099", "000", "600", "999"} {
		t.Run(code, func(t *testing.T) {
			url := rawEngine(t, func(w *bufio.Writer) {
				_, _ = w.WriteString("HTTP/1.1 " + code + " Odd\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
			})
			cfg := onlyEngine(t, url)
			cfg.Retry.MaxAttempts = 1
			gw := startGateway(t, cfg)
			resp, err := http.Post(gw.url+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("hi", "")))
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), `"code":502`) {
				t.Errorf("status %d, body %.200s; want the gateway's 502", resp.StatusCode, body)
			}
			page := scrape(t, gw.admin)
			if got := countedWith(page, "inferrail_requests_total", `status="5xx"`); got != 1 {
				t.Errorf("counted %v 5xx, want 1:\n%s", got, grep(page, "inferrail_requests_total"))
			}
			if got := countedWith(page, "inferrail_request_errors_total", `reason="upstream_failed"`); got != 1 {
				t.Errorf("counted %v upstream errors, want 1:\n%s", got, grep(page, "inferrail_request_errors_total"))
			}
		})
	}
}

// TestEngineHeadersNamedInConnection: a header the engine's Connection
// header names is for that connection only and never reaches the client.
func TestEngineHeadersNamedInConnection(t *testing.T) {
	url := rawEngine(t, func(w *bufio.Writer) {
		_, _ = w.WriteString("HTTP/1.1 200 OK\r\nConnection: X-Secret, keep-alive\r\nX-Secret: leak\r\nX-Kept: yes\r\n" +
			"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	})
	gw := startGateway(t, withEngineFirst(t, url))
	resp, _ := chat(t, gw.url, chatBody("hi", ""))
	if resp.StatusCode != 200 || resp.Header.Get("X-Inferrail-Replica") != "odd" {
		t.Fatalf("status %d from %q\n%s", resp.StatusCode, resp.Header.Get("X-Inferrail-Replica"), gw.logs.String())
	}
	if resp.Header.Get("X-Secret") != "" || resp.Header.Get("X-Kept") != "yes" {
		t.Errorf("X-Secret %q, X-Kept %q: want the first dropped, the second kept", resp.Header.Get("X-Secret"), resp.Header.Get("X-Kept"))
	}
}

// TestEngineHeadersTheGatewaySays: the client reads the gateway's word
// in its own headers only. An engine's X-Inferrail-* (another gateway or
// a proxy in front of it) never reach the client, whether or not the
// gateway sets that header itself; an engine's x-ratelimit-* reach it only
// when the gateway limits nothing of the request: when it does, its own
// set wins whole, never mixed with the engine's (a review's finding: an
// inner proxy's Limit and Remaining replaced the gateway's beside the
// gateway's own Reset, and an engine's X-Inferrail-Cached-Tokens read as
// the gateway's prediction when it made none).
func TestEngineHeadersTheGatewaySays(t *testing.T) {
	engineRate := map[string]string{
		"X-Ratelimit-Limit-Requests": "999", "X-Ratelimit-Remaining-Requests": "998", "X-Ratelimit-Reset-Requests": "9s",
		"X-Ratelimit-Limit-Tokens": "99999", "X-Ratelimit-Remaining-Tokens": "99998", "X-Ratelimit-Reset-Tokens": "9s",
	}
	engineOwn := map[string]string{
		"X-Inferrail-Cached-Tokens": "12345", "X-Inferrail-Prompt-Tokens": "54321",
		"X-Inferrail-Estimated-Ttft": "99.9", "X-Inferrail-Replica": "inner", "X-Inferrail-Inner": "engine",
	}
	url := chatEngine(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		for k, v := range engineRate {
			h.Set(strings.ToLower(k), v) // as a Python server sends them
		}
		for k, v := range engineOwn {
			h.Set(k, v)
		}
		h.Set("X-Kept", "yes")
		h.Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[]}`)
	})
	tests := []struct {
		name   string
		limits config.Limits
		want   map[string]string // x-ratelimit-* the client gets; "" for none
	}{
		{"not_limited", config.Limits{}, engineRate},
		{"requests_limited", config.Limits{RequestsPerMinute: 100}, map[string]string{
			"X-Ratelimit-Limit-Requests": "100", "X-Ratelimit-Remaining-Requests": "99",
			"X-Ratelimit-Limit-Tokens": "", "X-Ratelimit-Remaining-Tokens": "", "X-Ratelimit-Reset-Tokens": "",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := onlyEngine(t, url)
			cfg.Models[0].Tokenizer = "" // no prediction: the gateway sets no token counts
			cfg.Models[0].Limits = tt.limits
			gw := startGateway(t, cfg)
			resp, body := chat(t, gw.url, chatBody("hi", ""))
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Inferrail-Replica") != "odd" {
				t.Fatalf("%d from %q: %s", resp.StatusCode, resp.Header.Get("X-Inferrail-Replica"), body)
			}
			h := resp.Header
			for k, v := range engineOwn {
				if got := h.Get(k); got == v {
					t.Errorf("the engine's %s %q reached the client", k, got)
				}
			}
			for k, want := range tt.want {
				if got := h.Get(k); got != want {
					t.Errorf("%s %q, want %q", k, got, want)
				}
			}
			if h.Get("X-Kept") != "yes" {
				t.Error("the engine's other headers were dropped too")
			}
		})
	}
}

// TestPartialAnswerRelayedAsItArrives: an answer of known length whose
// engine sends part of it and stalls reaches the client as far as it
// came, head first, instead of waiting for the rest.
func TestPartialAnswerRelayedAsItArrives(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	part := `{"id":"partial","object":"chat.completion"`
	url := rawEngine(t, func(w *bufio.Writer) {
		_, _ = w.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n" + part)
		_ = w.Flush()
		<-release
	})
	cfg := withEngineFirst(t, url)
	gw := startGateway(t, cfg)
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Post(gw.url+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("hi", "")))
	if err != nil {
		t.Fatalf("no head while the engine stalls: %v", err)
	}
	defer resp.Body.Close()
	got := make([]byte, len(part))
	if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != part {
		t.Errorf("read %q, %v; want the part the engine sent", got, err)
	}
}

// TestWholeAnswersWaitAsLongAsTheyTake: an engine sends the head of an
// answer that does not stream only with the whole answer. Waiting for it
// is generating: it outlasts server.request_timeout and does not count
// against max_pending. A stream's head, which an engine sends at once,
// still must come within the timeout and counts as pending until it does.
func TestWholeAnswersWaitAsLongAsTheyTake(t *testing.T) {
	sims := fleetOf(t, 1, true)
	cfg := testConfig(t, sims)
	cfg.Server.RequestTimeout = config.Duration(300 * time.Millisecond)
	cfg.Replicas[0].MaxConcurrency, cfg.Replicas[0].MaxPending = 8, 1
	cfg.Retry.MaxAttempts = 1
	gw := startGateway(t, cfg)
	sims[0].SetFault(sim.Fault{Kind: sim.FaultDelay, Delay: 600 * time.Millisecond, SparesHealth: true})

	// statuses sends n requests at once, or, one after another, each once
	// the one before is in flight and no longer pending: a request is
	// pending from its lease until it is sent, and another arriving in
	// that moment finds the replica at max_pending whatever it is.
	statuses := func(body string, n int, oneAfterAnother bool) map[int]int {
		var mu sync.Mutex
		got := map[int]int{}
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				resp, _ := chat(t, gw.url, chatBody(fmt.Sprint("whole ", i), body))
				mu.Lock()
				got[resp.StatusCode]++
				mu.Unlock()
			})
			if oneAfterAnother {
				waitFor(t, "the request to be sent", 5*time.Second, func() bool {
					r := gw.g.fleet.Snapshot().Get("sim-1")
					return r.InFlight() == int64(i+1) && r.Pending() == 0
				})
			}
		}
		wg.Wait()
		return got
	}
	if got := statuses("", 3, true); got[200] != 3 {
		t.Errorf("three whole answers that take twice the request timeout, at max_pending 1: %v, want three 200s", got)
	}
	got := statuses(`,"stream":true`, 3, false)
	if got[504] == 0 || got[503] == 0 || got[200] != 0 {
		t.Errorf("three streams whose heads are late, at max_pending 1: %v, want 504s and 503s", got)
	}
}

// TestStreamsEndWithDone: an engine's event stream that ends cleanly but
// without [DONE] was cut short (vLLM and SGLang end every stream with
// it): the client sees a broken response and it counts as aborted. One
// that ends with it, or a body that is no event stream, ends cleanly.
func TestStreamsEndWithDone(t *testing.T) {
	const event = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
	chunked := func(ctype, body string) string {
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", ctype, len(body), body)
	}
	tests := []struct {
		name, answer string
		clean        bool
	}{
		{"done", chunked("text/event-stream; charset=utf-8", event+"data: [DONE]\n\n"), true},
		{"done_crlf_no_space", chunked("text/event-stream", "data:[DONE]\r\n\r\n"), true},
		{"no_done", chunked("text/event-stream; charset=utf-8", event), false},
		{"done_inside_an_event", chunked("Text/Event-Stream", "data: {\"content\":\"data: [DONE]\"}\n\n"), false},
		{"no_done_until_close", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + event, false},
		{"not_an_event_stream", chunked("application/json", `{"id":"x"}`), true},
		// Keep-alive comments after [DONE], past any fixed window of the
		// stream's last bytes (found by a review: 78 of them, 1,014 bytes,
		// made the gateway cut a whole stream and count it aborted).
		{"done_then_comments", chunked("text/event-stream", event+"data: [DONE]\n\n"+strings.Repeat(": keepalive\n\n", 200)), true},
		{"done_then_comments_then_data", chunked("text/event-stream", event+"data: [DONE]\n\n"+strings.Repeat(": keepalive\n\n", 200)+event), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := rawEngine(t, func(w *bufio.Writer) { _, _ = w.WriteString(tt.answer) })
			gw := startGateway(t, withEngineFirst(t, url))
			resp, err := http.Post(gw.url+"/v1/chat/completions", "application/json",
				strings.NewReader(`{"model":"sim","messages":[{"role":"user","content":"hi"}],"stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if got := resp.Header.Get("X-Inferrail-Replica"); got != "odd" {
				t.Fatalf("answered by %q, want the odd engine", got)
			}
			_, err = io.ReadAll(resp.Body)
			if clean := err == nil; clean != tt.clean {
				t.Errorf("read error %v; want a clean end %v", err, tt.clean)
			}
			page := scrape(t, gw.admin)
			aborted := strings.Contains(page, `replica="odd",status="aborted"} 1`)
			if aborted == tt.clean {
				t.Errorf("aborted counted %v, want %v:\n%s", aborted, !tt.clean, grep(page, "inferrail_requests_total"))
			}
		})
	}
}

// TestWholeStreamsEndWhole: a stream whose [DONE] the client has is a
// whole answer, though the connection ends before the stream's last chunk
// marker: the client may close on [DONE] (httpx-based clients do), or the
// engine may. Neither is counted cancelled or aborted.
func TestWholeStreamsEndWhole(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
	const done = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"
	chunk := fmt.Sprintf("%x\r\n%s\r\n", len(done), done)
	tests := []struct {
		name         string
		answer       func(w *bufio.Writer)
		clientCloses bool // on [DONE], before the body's end
	}{
		{"client_closes_on_done", func(w *bufio.Writer) {
			_, _ = w.WriteString(head + chunk)
			_ = w.Flush()
			time.Sleep(300 * time.Millisecond) // the last chunk marker comes late
			_, _ = w.WriteString("0\r\n\r\n")
		}, true},
		{"engine_closes_after_done", func(w *bufio.Writer) { _, _ = w.WriteString(head + chunk) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gw := startGateway(t, withEngineFirst(t, rawEngine(t, tt.answer)))
			resp, err := http.Post(gw.url+"/v1/chat/completions", "application/json",
				strings.NewReader(`{"model":"sim","messages":[{"role":"user","content":"hi"}],"stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Header.Get("X-Inferrail-Replica"); got != "odd" {
				t.Fatalf("answered by %q, want the odd engine", got)
			}
			var got []byte
			buf := make([]byte, 4096)
			for !strings.HasSuffix(string(got), "data: [DONE]\n\n") {
				n, err := resp.Body.Read(buf)
				got = append(got, buf[:n]...)
				if err != nil && !strings.HasSuffix(string(got), "data: [DONE]\n\n") {
					t.Fatalf("read %q, then %v", got, err)
				}
			}
			if !tt.clientCloses {
				if _, err := io.ReadAll(resp.Body); err != nil {
					t.Errorf("the stream ended with %v, want a clean end", err)
				}
			}
			resp.Body.Close()
			want := `inferrail_requests_total{model="` + testModel + `",replica="odd",status="2xx"} 1`
			page := ""
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !strings.Contains(page, want); time.Sleep(10 * time.Millisecond) {
				page = scrape(t, gw.admin)
			}
			if !strings.Contains(page, want) {
				t.Errorf("not counted a 2xx:\n%s", grep(page, "inferrail_requests_total"))
			}
			for _, bad := range []string{`status="cancelled"`, `status="aborted"`} {
				if countedWith(page, "inferrail_requests_total", bad) != 0 {
					t.Errorf("counted %s:\n%s", bad, grep(page, "inferrail_requests_total"))
				}
			}
		})
	}
}

// TestHeadsThenBrokenBodiesEject: an engine that answers every request
// with a head and then breaks the body fails each request, and is ejected
// after unhealthy_threshold of them: its heads are no success.
func TestHeadsThenBrokenBodiesEject(t *testing.T) {
	url := rawEngine(t, func(w *bufio.Writer) {
		_, _ = w.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"10\r\ndata: {\"a\":1}\n\n\r\n") // and no end
	})
	cfg := withEngineFirst(t, url)
	cfg.Health.UnhealthyThreshold = 3
	gw := startGateway(t, cfg)
	for i := range 10 {
		resp, err := http.Post(gw.url+"/v1/chat/completions", "application/json",
			strings.NewReader(fmt.Sprintf(`{"model":"sim","messages":[{"role":"user","content":"hi %d"}],"stream":true}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	page := scrape(t, gw.admin)
	if !strings.Contains(page, `inferrail_ejections_total{replica="odd"} 1`) {
		t.Errorf("the engine that breaks every body was not ejected:\n%s", grep(page, `replica="odd"`))
	}
}

// gzipStreamEngine answers every chat request with a whole event stream,
// gzipped event by event when the request accepts gzip or always, and
// records the Accept-Encoding it was sent.
func gzipStreamEngine(t *testing.T, stream string, always bool) (url string, accepted func() string) {
	t.Helper()
	var mu sync.Mutex
	var got string
	url = chatEngine(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		got = r.Header.Get("Accept-Encoding")
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		if !always && !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			_, _ = io.WriteString(w, stream)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		for _, ev := range strings.SplitAfter(stream, "\n\n") {
			_, _ = io.WriteString(zw, ev)
			_ = zw.Flush()
			w.(http.Flusher).Flush()
		}
		_ = zw.Close()
	})
	return url, func() string {
		mu.Lock()
		defer mu.Unlock()
		return got
	}
}

// TestCompressedEngineStreams: the gateway asks engines for no content
// coding, whatever the client accepts (Python's httpx, under the OpenAI
// SDK, sends Accept-Encoding: gzip, deflate), since it reads their
// streams' [DONE] and usage. An engine that compresses regardless is
// relayed as sent and whole, and charged its bytes over four.
func TestCompressedEngineStreams(t *testing.T) {
	const stream = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"total_tokens\":6,\"completion_tokens\":1}}\n\n" +
		"data: [DONE]\n\n"
	for _, tc := range []struct {
		name   string
		always bool
	}{{"compresses_if_accepted", false}, {"compresses_regardless", true}} {
		t.Run(tc.name, func(t *testing.T) {
			url, accepted := gzipStreamEngine(t, stream, tc.always)
			cfg := onlyEngine(t, url)
			cfg.Models[0].Limits = config.Limits{OutputTokensPerMinute: 1_000_000}
			gw := startGateway(t, cfg)
			req, err := http.NewRequest(http.MethodPost, gw.url+"/v1/chat/completions", strings.NewReader(chatBody("hi", `,"stream":true`)))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept-Encoding", "gzip, deflate")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("a whole stream reached the client cut: %v", err)
			}
			if got := accepted(); got != "identity" {
				t.Errorf("the engine was sent Accept-Encoding %q, want identity", got)
			}
			body := raw
			if tc.always {
				if ce := resp.Header.Get("Content-Encoding"); ce != "gzip" {
					t.Fatalf("Content-Encoding %q, want the engine's gzip", ce)
				}
				zr, err := gzip.NewReader(bytes.NewReader(raw))
				if err != nil {
					t.Fatal(err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatalf("the gzip stream relayed: %v", err)
				}
			}
			if string(body) != stream {
				t.Errorf("the client got %q, want %q", body, stream)
			}
			// The stream's end reaches the client after the request settled.
			page := scrape(t, gw.admin)
			if countedWith(page, "inferrail_requests_total", `status="aborted"`) != 0 {
				t.Errorf("counted aborted:\n%s", grep(page, "inferrail_requests_total"))
			}
			usage := metricValue(page, `inferrail_rate_limit_output_tokens_total{source="usage"}`)
			byBytes := metricValue(page, `inferrail_rate_limit_output_tokens_total{source="bytes"}`)
			if want := float64(len(raw) / bytesPerToken); tc.always && (usage != 0 || byBytes != want) {
				t.Errorf("charged %v from usage and %v from bytes, want the %d bytes relayed over four: %v", usage, byBytes, len(raw), want)
			}
			if !tc.always && usage != 1 {
				t.Errorf("charged %v from usage, want 1", usage)
			}
		})
	}
}

// TestStalledKeptBodyHoldsNoAnswer: an engine that sends a 503's head and
// part of its body, then stalls, does not keep the client from the 200
// another replica answered: the kept 503 is let go at once, its upstream
// request cancelled rather than its body waited for (found by a review:
// the gateway read the kept body first, and the client got nothing until
// it left).
func TestStalledKeptBodyHoldsNoAnswer(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream_", stream), func(t *testing.T) {
			release := make(chan struct{})
			t.Cleanup(func() { close(release) })
			let := make(chan struct{}) // closed once the gateway let the stalled request go
			url := chatEngine(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, `{"error":{"message":"overloa`)
				_ = http.NewResponseController(w).Flush()
				select {
				case <-r.Context().Done():
					close(let)
				case <-release:
				}
			})
			gw := startGateway(t, withEngineFirst(t, url))
			// The timeout only keeps a failing test from hanging: on the
			// old code the answer never comes while the client waits.
			client := &http.Client{Timeout: 10 * time.Second}
			resp, err := client.Post(gw.url+"/v1/chat/completions", "application/json",
				strings.NewReader(chatBody("hi", fmt.Sprintf(`,"stream":%v`, stream))))
			if err != nil {
				t.Fatalf("no answer while the kept 503's body stalls: %v", err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("X-Inferrail-Replica") != "sim-1" {
				t.Fatalf("%d from %q, %v: %.200s; want sim-1's 200", resp.StatusCode, resp.Header.Get("X-Inferrail-Replica"), err, body)
			}
			select {
			case <-let:
			case <-time.After(10 * time.Second):
				t.Error("the stalled engine's request was never cancelled")
			}
		})
	}
}

// TestHeadThenGivenUpIsNoCutAnswer: a replica that probes take out (or a
// stream whose deadline passes) just as the transport returns its head
// must not leave the attempt with a body its cancel cuts: that was a
// broken 200 for the client and a failure for the engine. The hook gives
// up on the request in exactly that moment, deterministically; the
// request then goes to another replica, whole (a review's finding).
func TestHeadThenGivenUpIsNoCutAnswer(t *testing.T) {
	url := chatEngine(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		select { // the body only once the gateway has let the request go, or never
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
		_, _ = io.WriteString(w, `{"id":"odd","object":"chat.completion","choices":[]}`)
	})
	gw := startGateway(t, withEngineFirst(t, url))
	t.Cleanup(func() { testHookRoundTripped = func(context.Context, *fleet.Replica) {} }) // after the gateway stops
	testHookRoundTripped = func(ctx context.Context, rep *fleet.Replica) {
		if rep.ID != "odd" {
			return
		}
		fleet.MarkDown(rep)
		select { // until the down watcher has given up on the request
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Error("marked down, the request was not given up")
		}
	}
	client := &http.Client{Timeout: 20 * time.Second}
	resp, err := client.Post(gw.url+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("hi", "")))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("X-Inferrail-Replica") != "sim-1" {
		t.Errorf("%d from %q, %v: %.200s; want sim-1's whole 200", resp.StatusCode, resp.Header.Get("X-Inferrail-Replica"), err, body)
	}
	page := scrape(t, gw.admin)
	if got := countedWith(page, "inferrail_requests_total", `status="aborted"`); got != 0 {
		t.Errorf("counted %v aborted:\n%s", got, grep(page, "inferrail_requests_total"))
	}
}

// TestWholeAnswerMovedPastTheDeadline: a request that does not stream
// waits on its engine past server.request_timeout, and when probes take
// that replica out then, it moves to another, as the README says, rather
// than failing with a 502 because its deadline has passed (a review's
// finding).
func TestWholeAnswerMovedPastTheDeadline(t *testing.T) {
	url := chatEngine(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done() // hung
	})
	cfg := withEngineFirst(t, url)
	cfg.Server.RequestTimeout = config.Duration(300 * time.Millisecond)
	gw := startGateway(t, cfg)
	go func() {
		time.Sleep(900 * time.Millisecond) // past the deadline
		fleet.MarkDown(gw.g.fleet.Snapshot().Get("odd"))
	}()
	resp, err := http.Post(gw.url+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("hi", "")))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get(openai.HeaderReplica) != "sim-1" {
		t.Errorf("got %d from %q: %s; want sim-1's 200", resp.StatusCode, resp.Header.Get(openai.HeaderReplica), body)
	}
}

// TestQueryStringForwarded: the engine gets the path's query as the client
// sent it, escapes and all, as it gets the body (a review's finding: it
// was dropped).
func TestQueryStringForwarded(t *testing.T) {
	got := make(chan string, 1)
	url := chatEngine(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got <- r.URL.RawQuery
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{}`)
	})
	gw := startGateway(t, onlyEngine(t, url))
	const query = "api-version=2024-06-01&x=%2F&y=a+b"
	resp, body := post(t, gw.url+"/v1/chat/completions?"+query, chatBody("hi", ""))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if q := <-got; q != query {
		t.Errorf("the engine got query %q, want %q", q, query)
	}
}
