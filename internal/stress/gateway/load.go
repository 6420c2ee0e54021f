package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/stress"

	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/procs"
)

// gwChatBody is a non-streamed chat of request i asking for maxTokens.
func gwChatBody(model string, i, maxTokens int) []byte {
	b := stress.AppendChat(nil, model, "Request "+strconv.Itoa(i)+": how does the gateway choose an engine?", maxTokens)
	return append(b, '}')
}

// gwStreamBody is a streamed chat of request i asking for maxTokens, with
// the usage chunk; ignoreEOS makes the engine produce all of them.
func gwStreamBody(model string, i, maxTokens int, ignoreEOS bool) []byte {
	b := stress.AppendChat(nil, model, "Stream "+strconv.Itoa(i)+": tell me how the router picks an engine for this prompt.", maxTokens)
	if ignoreEOS {
		b = append(b, `,"ignore_eos":true`...)
	}
	return append(b, stress.StreamWithUsage...)
}

// gwClient is stress.NewClient with idle connections dropped after 5 s. The
// gateway closes client connections idle for server.header_read_timeout
// (10 s by default), and a client that reuses one at that very moment gets
// EOF on its POST, which net/http does not retry; so a client should let
// idle connections go before the server does (the OpenAI Python SDK's
// httpx keeps them 5 s).
func gwClient(conns int) *http.Client {
	c := stress.NewClient(conns)
	c.Transport.(*http.Transport).IdleConnTimeout = 5 * time.Second
	return c
}

// postChat sends a non-streamed chat, reads the whole answer and checks
// it. It returns the status and the replica header whatever happened.
func postChat(ctx context.Context, client *http.Client, url string, body []byte, requestID string, maxTokens int) (int, string, error) {
	return sendChat(ctx, client, url, body, maxTokens, openai.HeaderRequestID, requestID)
}

// sendChat is postChat with the header name set to value, when value is not
// empty.
func sendChat(ctx context.Context, client *http.Client, url string, body []byte, maxTokens int, name, value string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if value != "" {
		req.Header.Set(name, value)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	replica := resp.Header.Get(openai.HeaderReplica)
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, replica, err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, replica, measure.Failf(measure.KindStatus, "status %d: %s", resp.StatusCode, bytes.TrimSpace(data[:min(len(data), 300)]))
	}
	return resp.StatusCode, replica, stress.CheckFull(data, maxTokens)
}

// rssSampler follows a process's resident memory every interval until
// stopped. Safe for concurrent use.
type rssSampler struct {
	pid    int
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	samples []rssSample // guarded by mu
}

// rssSample is one reading, at an offset from the sampler's start.
type rssSample struct {
	At  time.Duration
	RSS int64
}

func startRSSSampler(ctx context.Context, pid int, every time.Duration) *rssSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &rssSampler{pid: pid, cancel: cancel, done: make(chan struct{})}
	go s.run(ctx, every)
	return s
}

func (s *rssSampler) run(ctx context.Context, every time.Duration) {
	defer close(s.done)
	start := time.Now()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if rss, err := procs.ResidentBytes(s.pid); err == nil {
			s.mu.Lock()
			s.samples = append(s.samples, rssSample{At: time.Since(start), RSS: rss})
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// stop ends sampling and returns the samples.
func (s *rssSampler) stop() []rssSample {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.samples)
}

// peak is the largest sample, 0 without samples.
func peak(samples []rssSample) int64 {
	var m int64
	for _, s := range samples {
		m = max(m, s.RSS)
	}
	return m
}

// idleRSS reads pid's resident memory every 50 ms over window and returns
// the least value seen: the idle baseline, with garbage the collector has
// not yet returned given time to go.
func idleRSS(ctx context.Context, pid int, window time.Duration) int64 {
	var best int64
	deadline := time.Now().Add(window)
	for {
		if rss, err := procs.ResidentBytes(pid); err == nil && (best == 0 || rss < best) {
			best = rss
		}
		if !time.Now().Before(deadline) || ctx.Err() != nil {
			return best
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ms formats seconds as milliseconds with three decimals; figures set to
// -1 for "never happened" read "not seen".
func ms(seconds float64) string {
	if seconds <= -0.5 {
		return "not seen"
	}
	return strconv.FormatFloat(seconds*1e3, 'f', 3, 64) + " ms"
}

// warmChats sends n chats for model through gw with client, one after
// another, to open the gateway's connections to its engines before a
// baseline is taken.
func warmChats(ctx context.Context, client *http.Client, gw *procs.Gateway, n int, model string) {
	for i := range n {
		_, _, _ = postChat(ctx, client, gw.URL+"/v1/chat/completions", gwChatBody(model, i, 4), "", 4)
	}
}
