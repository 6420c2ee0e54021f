package bench

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/workload"
)

func TestReadChunks(t *testing.T) {
	chat := func(content string) string {
		return `data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + content + `"},"finish_reason":null}]}` + "\n\n"
	}
	usage := `data: {"id":"x","choices":[],"usage":{"prompt_tokens":40,"completion_tokens":3,"total_tokens":43,"prompt_tokens_details":{"cached_tokens":32}}}` + "\n\n"
	done := "data: [DONE]\n\n"
	tests := []struct {
		name                     string
		stream                   string
		wantKind                 string
		prompt, cached, complete int
		gaps                     int
	}{
		{"chat", `data: {"choices":[{"delta":{"role":"assistant","content":""}}]}` + "\n\n" + chat("a") + chat("b") + chat("c") + usage + done, "", 40, 32, 3, 2},
		{"completion", `data: {"choices":[{"text":"a"}]}` + "\n\n" + `data: {"choices":[{"text":"b"}]}` + "\n\n" + usage + done, "", 40, 32, 3, 1},
		{"crlf", strings.ReplaceAll(chat("a")+usage+done, "\n", "\r\n"), "", 40, 32, 3, 0},
		{"no_details", chat("a") + `data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":1}}` + "\n\n" + done, "", 7, 0, 1, 0},
		{"no_usage", chat("a") + done, measure.KindUsage, 0, 0, 0, 0},
		{"cut", chat("a") + `data: {"choi`, measure.KindSSE, 0, 0, 0, 0},
		{"no_done", chat("a"), measure.KindNoDone, 0, 0, 0, 0},
		// Cut after its usage chunk: the usage claims tokens never streamed.
		{"usage_no_done", chat("a") + `data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":300}}` + "\n\n", measure.KindNoDone, 0, 0, 0, 0},
		{"error_event", chat("a") + `data: {"error":{"message":"boom","code":500}}` + "\n\n", measure.KindErrorEvent, 0, 0, 0, 0},
		{"not_json", "data: {nope}\n\n", measure.KindJSON, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := time.Duration(0)
			now := func() time.Duration { clock += 10 * time.Millisecond; return clock }
			o := &Outcome{Sched: 0}
			err := readChunks(strings.NewReader(tt.stream), now, o)
			kind := ""
			if err != nil {
				kind = measure.Classify(t.Context(), err).Kind
			}
			if kind != tt.wantKind {
				t.Fatalf("error kind %q (%v), want %q", kind, err, tt.wantKind)
			}
			if err != nil {
				return
			}
			if o.PromptTokens != tt.prompt || o.CachedTokens != tt.cached || o.CompletionTokens != tt.complete {
				t.Errorf("usage %d/%d/%d, want %d/%d/%d", o.PromptTokens, o.CachedTokens, o.CompletionTokens, tt.prompt, tt.cached, tt.complete)
			}
			if len(o.ITL) != tt.gaps {
				t.Errorf("%d gaps %v, want %d", len(o.ITL), o.ITL, tt.gaps)
			}
			if o.TTFT <= 0 {
				t.Errorf("no TTFT")
			}
		})
	}
}

// sseBody is a streamed chat answer of n tokens with usage.
func sseBody(n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(`data: {"choices":[{"index":0,"delta":{"content":"x"}}]}` + "\n\n")
	}
	fmt.Fprintf(&b, `data: {"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":0}}}`+"\n\n", n)
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

// handRequests are n chat requests every gap, bodies the server ignores.
func handRequests(n int, gap time.Duration) []workload.Request {
	reqs := make([]workload.Request, n)
	for i := range reqs {
		reqs[i] = workload.Request{At: time.Duration(i) * gap, Path: "/v1/chat/completions", Kind: "test",
			Body: []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`), MaxTokens: 4}
	}
	return reqs
}

// A server that serves one request at a time, each taking 200 ms before
// its first byte, falls behind a schedule of one request every 20 ms. The
// queueing must show in TTFT counted from the scheduled time, not hide
// behind a late send (coordinated omission).
func TestOpenLoopCountsFromSchedule(t *testing.T) {
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		time.Sleep(200 * time.Millisecond)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set(openai.HeaderReplica, "r1")
		fmt.Fprint(w, sseBody(3))
	}))
	defer srv.Close()
	reqs := handRequests(5, 20*time.Millisecond)
	start := time.Now().Add(20 * time.Millisecond)
	outs := RunOpenLoop(t.Context(), start, workload.NewRequests(reqs), OpenLoopOptions{URL: srv.URL, Timeout: 10 * time.Second})
	var firstBytes []time.Duration // from the schedule's start
	for i, o := range outs {
		if !o.OK() {
			t.Fatalf("request %d failed: %s", i, o.String())
		}
		// Sent on time (the scheduler never waits on the server)...
		if lag := o.Sent - o.Sched; lag > 150*time.Millisecond {
			t.Errorf("request %d left %v late; the scheduler must not wait on responses", i, lag)
		}
		if o.Replica != "r1" || o.CompletionTokens != 3 {
			t.Errorf("request %d: replica %q, %d completion tokens", i, o.Replica, o.CompletionTokens)
		}
		firstBytes = append(firstBytes, o.Sched+o.TTFT)
	}
	// ...and the k-th served waited for the k before it: its first byte,
	// its scheduled time plus its TTFT, is (k+1)·200 ms after the schedule
	// started or later. The server's lock is not FIFO, so the k-th served
	// need not be the k-th scheduled.
	slices.Sort(firstBytes)
	for k, fb := range firstBytes {
		if want := time.Duration(k+1) * 200 * time.Millisecond; fb < want {
			t.Errorf("the request served %d-th had its first byte %v after the schedule's start (scheduled time plus TTFT), want at least %v", k+1, fb, want)
		}
	}
}

// A scheduler that stalls (a blocked client loop) shows up as send lag,
// and the stall counts in TTFT too.
func TestOpenLoopBlockedSenderShowsAsLag(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, sseBody(2))
	}))
	defer srv.Close()
	reqs := handRequests(4, 10*time.Millisecond)
	stall := 300 * time.Millisecond
	outs := RunOpenLoop(t.Context(), time.Now().Add(10*time.Millisecond), workload.NewRequests(reqs), OpenLoopOptions{
		URL: srv.URL, Timeout: 10 * time.Second,
		OnSchedule: func(i int) {
			if i == 1 {
				time.Sleep(stall)
			}
		},
	})
	for i, o := range outs {
		if !o.OK() {
			t.Fatalf("request %d failed: %s", i, o.String())
		}
		lag := o.Sent - o.Sched
		if i >= 1 && lag < stall-time.Duration(i-1)*10*time.Millisecond {
			t.Errorf("request %d: send lag %v, want the %v stall to show", i, lag, stall)
		}
		if i >= 1 && o.TTFT < lag {
			t.Errorf("request %d: TTFT %v shorter than its send lag %v", i, o.TTFT, lag)
		}
	}
	m := measureOutcomes(outs, 0, DefaultSLO())
	if m.SendLag.Max < (stall - 20*time.Millisecond).Seconds() {
		t.Errorf("send lag max %v s, want the stall", m.SendLag.Max)
	}
}

// A client out of connections is a blocked sender too: its requests are
// written late, and the lag says so.
func TestOpenLoopConnectionLimitShowsAsLag(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(100 * time.Millisecond)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, sseBody(1))
	}))
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	outs := RunOpenLoop(t.Context(), time.Now().Add(10*time.Millisecond), workload.NewRequests(handRequests(3, 0)), OpenLoopOptions{URL: srv.URL, Client: client})
	lags := 0
	for _, o := range outs {
		if !o.OK() {
			t.Fatalf("request failed: %s", o.String())
		}
		if o.Sent-o.Sched >= 90*time.Millisecond {
			lags++
		}
	}
	if lags < 2 {
		t.Errorf("%d of 3 requests sent late over one connection, want 2: %v", lags, outs)
	}
}

func TestOpenLoopErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/busy":
			http.Error(w, `{"error":{"message":"busy"}}`, http.StatusServiceUnavailable)
		case "/v1/slow":
			_, _ = io.Copy(io.Discard, r.Body) // so the server notices the client leave
			select {
			case <-time.After(5 * time.Second):
			case <-r.Context().Done():
			}
		}
	}))
	defer srv.Close()
	reqs := handRequests(2, 0)
	reqs[0].Path, reqs[1].Path = "/v1/busy", "/v1/slow"
	outs := RunOpenLoop(t.Context(), time.Now(), workload.NewRequests(reqs), OpenLoopOptions{URL: srv.URL, Timeout: 200 * time.Millisecond})
	if outs[0].ErrKind != "status_503" || outs[0].Status != 503 {
		t.Errorf("busy: %s", outs[0].String())
	}
	if outs[1].ErrKind != measure.KindTimeout || outs[1].E2E < 200*time.Millisecond {
		t.Errorf("slow: %s", outs[1].String())
	}
}

// With several URLs, the driver sends the requests to each in turn, in the
// order of the schedule, and says where each went.
func TestOpenLoopAlternatesGateways(t *testing.T) {
	var srvs []*httptest.Server
	var mu sync.Mutex
	got := map[string][]int{}
	for _, name := range []string{"a", "b"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got[name] = append(got[name], len(got["a"])+len(got["b"]))
			mu.Unlock()
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set(openai.HeaderReplica, name)
			fmt.Fprint(w, sseBody(1))
		}))
		defer srv.Close()
		srvs = append(srvs, srv)
	}
	outs := RunOpenLoop(t.Context(), time.Now(), workload.NewRequests(handRequests(6, 5*time.Millisecond)),
		OpenLoopOptions{URLs: []string{srvs[0].URL, srvs[1].URL}, Timeout: 10 * time.Second})
	for i, o := range outs {
		want := []string{"a", "b"}[i%2]
		if !o.OK() || o.Target != i%2 || o.Replica != want {
			t.Errorf("request %d: target %d, served by %q (%s); want %d, %q", i, o.Target, o.Replica, o.String(), i%2, want)
		}
	}
	if len(got["a"]) != 3 || len(got["b"]) != 3 {
		t.Errorf("requests by server: %v, want 3 each", got)
	}
	m := measureOutcomes(outs, 2, DefaultSLO())
	m.setGateways(outs, 2, 2)
	if len(m.Gateways) != 2 || m.Gateways[0].Measured != 2 || m.Gateways[1].Succeeded != 2 ||
		m.Gateways[0].Replicas["a"] != 2 || m.Gateways[1].Replicas["b"] != 2 {
		t.Errorf("per gateway: %+v", m.Gateways)
	}
}
