package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/harness"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/progress"
	"github.com/inferrail/inferrail/internal/workload"
)

// errKindNotSent marks a request the run was stopped before it was due.
// Open-loop requests fail with the kinds of package measure, except that a
// status other than 200 counts as "status_<code>".
const errKindNotSent = "not_sent"

// Outcome is what happened to one request of an open-loop run. Times are
// offsets from the run's start; TTFT and E2E count from Sched, the time the
// request was scheduled to leave, not from when it left.
type Outcome struct {
	Index int
	Kind  string
	// Session is the request's conversation (workload.Request.Session);
	// empty for none.
	Session string
	// Target is the place in OpenLoopOptions.URLs of the gateway the
	// request went to; 0 with a single URL.
	Target int
	Sched  time.Duration
	// Dispatched is when the scheduler handed the request to its goroutine;
	// Sent when its body was written to the connection. Sent − Sched is the
	// send lag: a blocked scheduler or a client out of connections shows
	// up there. Sent is zero if the request was never written.
	Dispatched, Sent time.Duration
	// TTFT is from Sched to the first chunk with content (or usage); E2E
	// from Sched to the end of the response. Zero when not reached.
	TTFT, E2E time.Duration
	// ITL are the gaps between successive content chunks.
	ITL []time.Duration

	Status  int
	ErrKind string // "" when the request succeeded
	Err     string // the error's text, when ErrKind is set

	// From usage.
	PromptTokens, CachedTokens, CompletionTokens int
	HasUsage                                     bool

	// From the gateway's response headers; Replica is empty without a
	// gateway. Predicted is set when the gateway tokenized the request.
	// RequestID is the ID the gateway (or engine) answered with.
	RequestID, Replica, Policy       string
	Predicted                        bool
	PredPromptTokens, PredCachedToks int
	// Estimated is the gateway's estimate of the time to first token,
	// from its sending the request on; zero without one.
	Estimated time.Duration
}

// OK reports whether the request succeeded.
func (o *Outcome) OK() bool { return o.ErrKind == "" }

// OpenLoopOptions say where and how an open-loop run sends its requests.
type OpenLoopOptions struct {
	// URL is the base URL requests go to: a gateway's client port or an
	// engine. Required unless URLs is set.
	URL string
	// URLs, when set, are several gateways in front of the same engines,
	// sent to in turn: request i goes to URLs[i mod len(URLs)] (round
	// robin over the requests' order) and URL is not used.
	URLs []string
	// Client sends the requests. Nil means a client with its own transport
	// and no connection limit (see NewLoadClient).
	Client *http.Client
	// Timeout bounds each request, from its dispatch to its last byte.
	// Zero means 5 minutes.
	Timeout time.Duration
	// OnSchedule, when not nil, is called by the scheduler at each
	// request's scheduled time, before dispatching it. It exists so tests
	// can stall the scheduler; it must not block otherwise.
	OnSchedule func(i int)
	// Progress, when not nil, counts the requests sent, done and failed
	// as the run goes.
	Progress *progress.Counts
	// made are the requests being made ahead already (Measure starts
	// before the run); nil starts making them with the run.
	made *ahead
}

// NewLoadClient returns an HTTP client for open-loop load: keep-alive
// connections without a cap, none of net/http's timeouts (the driver sets
// its own per request), and no compression.
func NewLoadClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 4096,
		DisableCompression:  true,
		IdleConnTimeout:     90 * time.Second,
	}}
}

// RunOpenLoop sends each request at start + its At, to o.URL or to each of
// o.URLs in turn, whatever the earlier ones are doing, through the
// harness's open-loop driver (harness.Loop): the scheduler only sleeps and
// starts goroutines, one per request in flight, and never waits on a
// response. Requests are made ahead of their time by a goroutine of
// their own (see ahead), so a trace's prompts need not all be held at
// once. It returns when every request has finished or failed, in the
// order of reqs. Requests not yet due when ctx ends are reported with
// ErrKind "not_sent".
func RunOpenLoop(ctx context.Context, start time.Time, reqs *workload.Requests, o OpenLoopOptions) []Outcome {
	if o.Client == nil {
		o.Client = NewLoadClient()
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	urls := o.URLs
	if len(urls) == 0 {
		urls = []string{o.URL}
	}
	out := make([]Outcome, reqs.Len())
	for i := range out {
		h := reqs.Head(i)
		out[i] = Outcome{Index: i, Kind: h.Kind, Session: h.Session, Target: i % len(urls), Sched: h.At}
	}
	loop := harness.Loop{Start: start, N: len(out), At: func(i int) time.Duration { return reqs.Head(i).At }, OnSchedule: o.OnSchedule}
	count := o.Progress
	if count == nil {
		count = new(progress.Counts)
	}
	next := o.made
	if next == nil {
		next = startAhead(ctx, reqs, aheadBytes)
		defer next.stop()
	}
	sent := loop.Run(ctx, func(i int, dispatched time.Duration) {
		out[i].Dispatched = dispatched
		r, ok := next.take(i)
		if !ok {
			out[i].ErrKind, out[i].Err = errKindNotSent, "run stopped before the request was made"
			return
		}
		count.Sent.Add(1)
		var once sync.Once
		written := func() { once.Do(func() { next.written(len(r.Body)) }) }
		s := sender{client: o.Client, url: urls[out[i].Target], timeout: o.Timeout, start: start, wrote: written}
		s.send(ctx, &r, &out[i])
		written() // if it failed before it was
		count.Done.Add(1)
		if !out[i].OK() {
			count.Errors.Add(1)
		}
	})
	for j := sent; j < len(out); j++ {
		out[j].ErrKind, out[j].Err = errKindNotSent, "run stopped before the request was due"
	}
	return out
}

// sender sends one request of an open-loop run and fills in its outcome.
type sender struct {
	client  *http.Client
	url     string
	timeout time.Duration
	start   time.Time
	wrote   func() // called once the body is written; may be nil
}

func (s sender) since() time.Duration { return time.Since(s.start) }

func (s sender) send(ctx context.Context, r *workload.Request, o *Outcome) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	err := s.exchange(ctx, r, o)
	if o.E2E == 0 {
		o.E2E = s.since() - o.Sched
	}
	if err != nil {
		le := measure.Classify(ctx, err)
		o.ErrKind, o.Err = le.Kind, le.Error()
		if ctx.Err() != nil {
			o.ErrKind = measure.KindTimeout
		}
	}
}

func (s sender) exchange(ctx context.Context, r *workload.Request, o *Outcome) error {
	var wroteOnce sync.Once
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
		wroteOnce.Do(func() {
			o.Sent = s.since()
			if s.wrote != nil {
				s.wrote()
			}
		})
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, s.url+r.Path, bytes.NewReader(r.Body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if r.Session != "" {
		req.Header.Set(openai.HeaderSession, r.Session)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	o.Status = resp.StatusCode
	readHeaders(resp.Header, o)
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return measure.Failf("status_"+strconv.Itoa(resp.StatusCode), "status %d", resp.StatusCode)
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct == "text/event-stream" {
		err = readChunks(resp.Body, s.since, o)
	} else {
		err = readWhole(resp.Body, s.since, o)
	}
	o.E2E = s.since() - o.Sched
	return err
}

// readHeaders takes the gateway's routing headers into o.
func readHeaders(h http.Header, o *Outcome) {
	o.RequestID = h.Get(openai.HeaderRequestID)
	o.Replica = h.Get(openai.HeaderReplica)
	o.Policy = h.Get(openai.HeaderPolicy)
	p, errP := strconv.Atoi(h.Get(openai.HeaderPromptTokens))
	c, errC := strconv.Atoi(h.Get(openai.HeaderCachedTokens))
	if errP == nil && errC == nil {
		o.Predicted, o.PredPromptTokens, o.PredCachedToks = true, p, c
	}
	if e, err := strconv.ParseFloat(h.Get(openai.HeaderEstimatedTTFT), 64); err == nil && e > 0 && e < 1e6 {
		o.Estimated = time.Duration(e * float64(time.Second))
	}
}

// wireUsage is the usage object of a response or of a stream's last chunk.
type wireUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// wireChunk is the part of a streamed chunk (chat or completion) or of an
// error event the driver reads.
type wireChunk struct {
	Choices []struct {
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
		} `json:"delta"`
		Text string `json:"text"`
	} `json:"choices"`
	Usage *wireUsage      `json:"usage"`
	Error json.RawMessage `json:"error"`
}

func (c *wireChunk) hasContent() bool {
	for _, ch := range c.Choices {
		if ch.Delta.Content != "" || ch.Delta.ReasoningContent != "" || ch.Text != "" {
			return true
		}
	}
	return false
}

func (u *wireUsage) into(o *Outcome) {
	o.HasUsage = true
	o.PromptTokens, o.CompletionTokens = u.PromptTokens, u.CompletionTokens
	if u.PromptTokensDetails != nil {
		o.CachedTokens = u.PromptTokensDetails.CachedTokens
	}
}

// readChunks reads a server-sent event stream of chunks: TTFT at the first
// chunk with content or usage, a gap per later content chunk, usage from
// the chunk that carries it. A stream without data: [DONE] at its end
// failed, whatever came before. now returns the time since the run's start.
func readChunks(body io.Reader, now func() time.Duration, o *Outcome) error {
	sse := openai.NewSSEReader(body, 0)
	var last time.Duration
	done := false
	for {
		data, err := sse.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return measure.Failf(measure.KindSSE, "read stream: %w", err)
		}
		at := now()
		if bytes.Equal(data, openai.Done) {
			done = true
			continue
		}
		var c wireChunk
		if err := json.Unmarshal(data, &c); err != nil {
			return measure.Failf(measure.KindJSON, "chunk %.100q: %w", data, err)
		}
		if len(c.Error) > 0 && !bytes.Equal(c.Error, []byte("null")) {
			return measure.Failf(measure.KindErrorEvent, "error event: %.300s", c.Error)
		}
		switch content := c.hasContent(); {
		case o.TTFT == 0 && (content || c.Usage != nil):
			o.TTFT, last = max(at-o.Sched, 1), at
		case content:
			o.ITL = append(o.ITL, at-last)
			last = at
		}
		if c.Usage != nil {
			c.Usage.into(o)
		}
	}
	if !done {
		// vLLM and SGLang end every stream with [DONE]; one cut after its
		// usage chunk is truncated too, its usage no proof of the tokens.
		return measure.Failf(measure.KindNoDone, "stream truncated: it ended without [DONE]")
	}
	if !o.HasUsage {
		return measure.Failf(measure.KindUsage, "stream carried no usage (ask with stream_options.include_usage)")
	}
	return nil
}

// readWhole reads a response that is not streamed: TTFT is the whole
// response.
func readWhole(body io.Reader, now func() time.Duration, o *Outcome) error {
	data, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err != nil {
		return measure.Failf(measure.KindTransport, "read body: %w", err)
	}
	o.TTFT = max(now()-o.Sched, 1)
	var resp struct {
		Usage *wireUsage `json:"usage"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return measure.Failf(measure.KindJSON, "body %.100q: %w", data, err)
	}
	if resp.Usage == nil {
		return measure.Failf(measure.KindUsage, "response carried no usage")
	}
	resp.Usage.into(o)
	return nil
}

// String describes an outcome in one line, for test failures.
func (o *Outcome) String() string {
	return fmt.Sprintf("#%d sched=%v sent=%v ttft=%v e2e=%v status=%d err=%s %s", o.Index, o.Sched, o.Sent, o.TTFT, o.E2E, o.Status, o.ErrKind, o.Err)
}
