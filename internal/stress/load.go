package stress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/openai"
)

// Failures are the failed requests of a result: how many, how many of each
// kind, and a few samples. Figures embed it untagged, so its fields stand in
// their JSON where the embedding does.
type Failures struct {
	Errors       int            `json:"errors"`
	ErrorKinds   map[string]int `json:"error_kinds,omitempty"`
	ErrorSamples []string       `json:"error_samples,omitempty"`
}

// ErrorTally counts errors by kind and keeps a few samples. Safe for
// concurrent use.
type ErrorTally struct {
	mu      sync.Mutex
	n       int            // guarded by mu
	kinds   map[string]int // guarded by mu
	samples []string       // guarded by mu
}

func (t *ErrorTally) Add(e *measure.RequestError) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n++
	if t.kinds == nil {
		t.kinds = make(map[string]int)
	}
	t.kinds[e.Kind]++
	if len(t.samples) < measure.MaxErrorSamples {
		t.samples = append(t.samples, e.Error())
	}
}

func (t *ErrorTally) Result() (int, map[string]int, []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n, t.kinds, t.samples
}

// NewClient returns a plain HTTP/1.1 client that may hold conns connections
// to one host, with no overall timeout (streams take as long as they take;
// requests carry their own deadlines).
func NewClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns + 16,
		MaxIdleConnsPerHost: conns + 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
}

// Post sends a JSON body and checks the status and content type.
func Post(ctx context.Context, client *http.Client, url string, body []byte, wantType string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, measure.Failf(measure.KindStatus, "status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	got, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if got != wantType {
		resp.Body.Close()
		return nil, measure.Failf(measure.KindContentType, "content type %q, want %s", resp.Header.Get("Content-Type"), wantType)
	}
	return resp, nil
}

// usageJSON is the usage object of a response or of a final stream chunk.
type usageJSON struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// StreamChunk is what the harness reads of one chat or completion chunk.
type StreamChunk struct {
	Choices []struct {
		Delta *struct {
			Content *string `json:"content"`
		} `json:"delta"`
		Text         *string `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usageJSON      `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// StreamCheck says what a stream must hold.
type StreamCheck struct {
	MaxTokens  int  // completion_tokens must not exceed it (and equal it on finish "length")
	Exact      bool // completion_tokens must equal maxTokens
	WantUsage  bool // a usage chunk must come (stream_options.include_usage)
	OnContent  func() bool
	FirstChunk *time.Time // set at the first content chunk, when not nil
}

// ReadStream reads an event stream to its end and checks it: chunks that
// parse, exactly one finish reason, the usage chunk when asked for and
// consistent with max_tokens, and data: [DONE] last. onContent, when set,
// is called after each content chunk; returning false stops reading there
// (a client that leaves mid-stream) and ReadStream returns ErrLeft.
func ReadStream(body io.Reader, c StreamCheck) error {
	r := openai.NewSSEReader(body, 0)
	var (
		finish  string
		usage   *usageJSON
		content bool
		ch      StreamChunk
	)
	for {
		data, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return measure.Failf(measure.KindNoDone, "stream ended without [DONE] (finish %q)", finish)
			}
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, openai.ErrEventTooLarge) {
				return &measure.RequestError{Kind: measure.KindSSE, Err: err}
			}
			return err // transport or timeout; measure.Classify decides
		}
		if bytes.Equal(data, openai.Done) {
			break
		}
		ch = StreamChunk{}
		if err := json.Unmarshal(data, &ch); err != nil {
			return measure.Failf(measure.KindJSON, "chunk %.80q: %v", data, err)
		}
		if len(ch.Error) > 0 && string(ch.Error) != "null" {
			return measure.Failf(measure.KindErrorEvent, "%s", ch.Error)
		}
		if ch.Usage != nil {
			if usage != nil {
				return measure.Failf(measure.KindUsage, "second usage chunk")
			}
			u := *ch.Usage
			usage = &u
		}
		gotContent := false
		for _, choice := range ch.Choices {
			if choice.FinishReason != nil {
				if finish != "" {
					return measure.Failf(measure.KindFinish, "second finish_reason %q after %q", *choice.FinishReason, finish)
				}
				finish = *choice.FinishReason
			}
			if (choice.Delta != nil && choice.Delta.Content != nil && *choice.Delta.Content != "") ||
				(choice.Text != nil && *choice.Text != "") {
				gotContent = true
			}
		}
		if gotContent {
			if !content && c.FirstChunk != nil {
				*c.FirstChunk = time.Now()
			}
			content = true
			if c.OnContent != nil && !c.OnContent() {
				return ErrLeft
			}
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		return measure.Failf(measure.KindAfterDone, "after [DONE]: %v", err)
	}
	if finish != "stop" && finish != "length" {
		return measure.Failf(measure.KindFinish, "finish_reason %q, want stop or length", finish)
	}
	switch {
	case c.WantUsage && usage == nil:
		return measure.Failf(measure.KindUsage, "no usage chunk")
	case !c.WantUsage && usage != nil:
		return measure.Failf(measure.KindUsage, "usage chunk without include_usage")
	case usage != nil:
		if err := checkUsage(*usage, finish, c.MaxTokens, c.Exact); err != nil {
			return err
		}
	}
	return nil
}

// ErrLeft is ReadStream's answer when the client chose to leave.
var ErrLeft = errors.New("client left mid-stream")

// checkUsage checks a usage object against the request's max_tokens.
func checkUsage(u usageJSON, finish string, maxTokens int, exact bool) error {
	switch {
	case u.PromptTokens <= 0:
		return measure.Failf(measure.KindUsage, "prompt_tokens %d", u.PromptTokens)
	case u.TotalTokens != u.PromptTokens+u.CompletionTokens:
		return measure.Failf(measure.KindUsage, "total_tokens %d != %d + %d", u.TotalTokens, u.PromptTokens, u.CompletionTokens)
	case exact && u.CompletionTokens != maxTokens:
		return measure.Failf(measure.KindUsage, "completion_tokens %d, want %d", u.CompletionTokens, maxTokens)
	case u.CompletionTokens < 1 || u.CompletionTokens > maxTokens:
		return measure.Failf(measure.KindUsage, "completion_tokens %d, want 1..%d", u.CompletionTokens, maxTokens)
	case finish == "length" && u.CompletionTokens != maxTokens:
		return measure.Failf(measure.KindUsage, "finish length with completion_tokens %d, max_tokens %d", u.CompletionTokens, maxTokens)
	}
	return nil
}

// Latency summarises durations in seconds.
type Latency struct {
	P50 float64 `json:"p50_seconds"`
	P99 float64 `json:"p99_seconds"`
	Max float64 `json:"max_seconds"`
}

// summarize sorts ds and returns nearest-rank percentiles.
func summarize(ds []time.Duration) Latency {
	p := measure.Summarize(ds)
	return Latency{P50: p.P50, P99: p.P99, Max: p.Max}
}
