package stress

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/openai"
)

// StreamsLoad is a burst of concurrent streamed chat requests, all sent at
// once.
type StreamsLoad struct {
	// Streams is how many requests are open at the same time. It must be
	// positive.
	Streams int
	// MaxTokens is each request's max_tokens; every stream must report
	// exactly this many completion tokens. It must be positive.
	MaxTokens int
	// Timeout bounds each stream, connection included. Zero means 2 min.
	Timeout time.Duration
}

// Validate reports every setting that cannot run.
func (l StreamsLoad) Validate() error {
	return errors.Join(Positive("streams", l.Streams), Positive("max_tokens", l.MaxTokens), NotNegative("timeout", l.Timeout))
}

// StreamsFigures is what RunStreams measured.
type StreamsFigures struct {
	Streams   int `json:"streams"`
	Completed int `json:"completed"` // streams that passed every check
	Failures
	// WallSeconds runs from the first request sent to the last [DONE] read.
	WallSeconds float64 `json:"wall_seconds"`
	// Stream is the time from sending a request to reading its [DONE];
	// TTFT from sending it to its first content chunk. Completed streams only.
	Stream Latency `json:"stream"`
	TTFT   Latency `json:"ttft"`
}

// WithDefaults is l with a zero timeout at its default, 2 min.
func (l StreamsLoad) WithDefaults() StreamsLoad {
	l.Timeout = OrDefault(l.Timeout, 2*time.Minute)
	return l
}

// RunStreams opens l.Streams streamed chat requests to the simulator at
// baseURL at once (stream_options.include_usage set) and reads every stream
// to its end. Failed streams are counted, not returned: the error is only for
// a load that cannot run.
func RunStreams(ctx context.Context, baseURL string, l StreamsLoad) (StreamsFigures, error) {
	if err := l.Validate(); err != nil {
		return StreamsFigures{}, err
	}
	l = l.WithDefaults()
	client := NewClient(l.Streams)
	defer client.CloseIdleConnections()
	url := baseURL + "/v1/chat/completions"

	out := StreamBurst(ctx, client, url, l.Streams, l.MaxTokens, l.Timeout, func(i int) []byte { return streamsBody(i, l.MaxTokens) })
	t := TallyStreams(out)
	f := StreamsFigures{Streams: l.Streams, Completed: t.Completed, WallSeconds: t.WallSeconds,
		Stream: summarize(t.StreamTimes), TTFT: summarize(t.TTFTs)}
	f.Errors, f.ErrorKinds, f.ErrorSamples = t.Errors.Result()
	return f, nil
}

// StreamOutcome is one stream of a burst: when it was sent, when its first
// content chunk and its end arrived, the replica that served it (through a
// gateway) and why it failed, if it did.
type StreamOutcome struct {
	Sent, First, Done time.Time
	Replica           string
	Err               error
}

// StreamTally is what a burst of streams came to.
type StreamTally struct {
	Completed   int
	Errors      ErrorTally
	WallSeconds float64 // from the first stream sent to the last one done
	// streamTimes run from sending to the end, ttfts to the first content
	// chunk; completed streams only.
	StreamTimes, TTFTs []time.Duration
	PerReplica         map[string]int // completed streams
}

// TallyStreams sums up a burst of streams.
func TallyStreams(out []StreamOutcome) *StreamTally {
	t := &StreamTally{PerReplica: map[string]int{}}
	var firstSent, lastDone time.Time
	for _, o := range out {
		if firstSent.IsZero() || o.Sent.Before(firstSent) {
			firstSent = o.Sent
		}
		if o.Err != nil {
			var le *measure.RequestError
			errors.As(o.Err, &le)
			t.Errors.Add(le)
			continue
		}
		t.Completed++
		t.PerReplica[o.Replica]++
		lastDone = Later(lastDone, o.Done)
		t.StreamTimes = append(t.StreamTimes, o.Done.Sub(o.Sent))
		if !o.First.IsZero() {
			t.TTFTs = append(t.TTFTs, o.First.Sub(o.Sent))
		}
	}
	if t.Completed > 0 {
		t.WallSeconds = lastDone.Sub(firstSent).Seconds()
	}
	return t
}

// Later is the later of a and b.
func Later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// StreamBurst sends n streamed chats to url at once, body(i) the request of
// stream i (built before any is sent), each bounded by timeout, and checks
// every stream: maxTokens completion tokens exactly and a usage chunk. A
// failed stream's error is classified (measure.Classify). The replica of an
// outcome is the answer's X-Inferrail-Replica header, empty when there is
// none (an engine answering straight).
func StreamBurst(ctx context.Context, client *http.Client, url string, n, maxTokens int, timeout time.Duration, body func(i int) []byte) []StreamOutcome {
	out := make([]StreamOutcome, n)
	Burst(n, func(i int) func() {
		b := body(i)
		return func() {
			o := &out[i]
			rctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			o.Sent = time.Now()
			o.Replica, o.Err = streamOnce(rctx, client, url, b, maxTokens, &o.First)
			o.Done = time.Now()
			if o.Err != nil {
				o.Err = measure.Classify(rctx, o.Err)
			}
		}
	})
	return out
}

// streamOnce sends one streamed chat, checks its stream and returns the
// replica that served it, as the answer names it.
func streamOnce(ctx context.Context, client *http.Client, url string, body []byte, maxTokens int, first *time.Time) (string, error) {
	resp, err := Post(ctx, client, url, body, "text/event-stream")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	replica := resp.Header.Get(openai.HeaderReplica)
	return replica, ReadStream(resp.Body, StreamCheck{MaxTokens: maxTokens, Exact: true, WantUsage: true, FirstChunk: first})
}

// streamsBody is the chat request of stream i: a short prompt of its own.
func streamsBody(i, maxTokens int) []byte {
	b := AppendChat(nil, "", "Stream "+strconv.Itoa(i)+": tell me how the router picks an engine for this prompt.", maxTokens)
	return append(b, StreamWithUsage...)
}

// AppendChat appends to b a chat request of one user message asking for
// maxTokens, for model unless it is empty, left open for more fields.
func AppendChat(b []byte, model, content string, maxTokens int) []byte {
	b = append(b, '{')
	if model != "" {
		b = append(b, `"model":`...)
		b = openai.AppendString(b, model)
		b = append(b, ',')
	}
	b = append(b, `"messages":[{"role":"user","content":`...)
	b = openai.AppendString(b, content)
	b = append(b, `}],"max_tokens":`...)
	return strconv.AppendInt(b, int64(maxTokens), 10)
}

// StreamWithUsage closes a request that AppendChat left open as a
// streamed one asking for the usage chunk.
const StreamWithUsage = `,"stream":true,"stream_options":{"include_usage":true}}`
