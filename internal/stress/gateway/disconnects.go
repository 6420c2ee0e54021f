package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/inferrail/inferrail/internal/stress"

	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/procs"
)

// DisconnectsLoad is gw-disconnects: long streams through the gateway, most
// of which the client leaves at a random moment.
type DisconnectsLoad struct {
	// Streams are opened at once. Must be positive.
	Streams int
	// MaxTokens is each stream's max_tokens (with ignore_eos, so every
	// stream that is not left produces all of them). Must be positive.
	MaxTokens int
	// Percent of the streams, drawn at random, are left by the client.
	// 0 to 100.
	Percent int
	// MaxDelay bounds the moment a stream is left, drawn uniformly from
	// [0, MaxDelay) after it was sent. Must be positive.
	MaxDelay time.Duration
	// Seed draws which streams are left and when.
	Seed uint64
	// Timeout bounds each stream. Zero means 2 min.
	Timeout time.Duration
}

// Validate reports every setting that cannot run.
func (l DisconnectsLoad) Validate() error {
	var percent error
	if l.Percent < 0 || l.Percent > 100 {
		percent = fmt.Errorf("percent: must be within 0..100, got %d", l.Percent)
	}
	return errors.Join(stress.Positive("streams", l.Streams), stress.Positive("max_tokens", l.MaxTokens),
		stress.Positive("max_delay", l.MaxDelay), percent, stress.NotNegative("timeout", l.Timeout))
}

// DisconnectsFigures is what gw-disconnects measured.
type DisconnectsFigures struct {
	Streams int `json:"streams"`
	// Planned streams were drawn to be left by the client.
	Planned int `json:"planned"`
	// Left counts the planned streams the client left before it had read
	// their finish_reason; LeftBeforeHead those it left before the
	// response head. FinishedFirst ended before their moment came.
	Left           int `json:"left"`
	LeftBeforeHead int `json:"left_before_head"`
	FinishedFirst  int `json:"finished_first"`
	// Completed streams ran to data: [DONE] and passed every check.
	Completed int `json:"completed"`
	stress.Failures
	WallSeconds float64 `json:"wall_seconds"`
	// SimFinished sums vllm:request_success_total over the simulators by
	// finished_reason; SimReceived is their total, the requests the
	// engines got.
	SimFinished map[string]float64 `json:"sim_finished"`
	SimReceived float64            `json:"sim_received"`
	// ExpectedAborts is Left minus the streams that never reached an
	// engine (Streams - SimReceived): left streams the gateway had already
	// forwarded.
	ExpectedAborts float64 `json:"expected_aborts"`
	// GatewayDisconnects is inferrail_client_disconnects_total.
	GatewayDisconnects float64 `json:"gateway_disconnects"`
	// IdleAfter is how long after the last stream ended the gateway and the
	// simulators had nothing in flight, and what was left then.
	IdleAfter float64   `json:"idle_after_seconds"`
	Idle      idleState `json:"idle"`
}

func runGWDisconnects(ctx context.Context, r *gwRun) error {
	l := r.c.Disconnects
	sims, gw := r.sims, r.gw
	client := gwClient(l.Streams)
	defer client.CloseIdleConnections()
	admin := procs.AdminClient()
	defer admin.CloseIdleConnections()
	out := sendLeaving(ctx, client, gw.URL+"/v1/chat/completions", l)
	f := &DisconnectsFigures{Streams: l.Streams}
	f.tally(out)
	client.CloseIdleConnections()

	idle, st := waitIdle(ctx, admin, gw, sims, 30*time.Second)
	f.IdleAfter, f.Idle = idle.Seconds(), st
	if err := f.readEngines(ctx, admin, sims); err != nil {
		return err
	}
	f.ExpectedAborts = float64(f.Left) - (float64(f.Streams) - f.SimReceived)
	if p, err := gw.Metrics(ctx, admin); err == nil {
		f.GatewayDisconnects = p.Sum("inferrail_client_disconnects_total")
	}
	r.res.Disconnects = f

	r.check("streams not left: completed, all 200 tokens", fmt.Sprintf("%d, 0 errors", l.Streams-f.Left),
		fmt.Sprintf("%d completed, %d errors", f.Completed, f.Errors), f.Errors == 0 && f.Completed == l.Streams-f.Left)
	r.check("aborts in the engines = left streams that reached an engine", fmt.Sprintf("%.0f", f.ExpectedAborts),
		fmt.Sprintf("%.0f (left %d, of which %d before the response head; engines received %.0f of %d)", f.SimFinished["abort"], f.Left, f.LeftBeforeHead, f.SimReceived, f.Streams),
		f.SimFinished["abort"] == f.ExpectedAborts)
	r.check("engines drained, nothing leaked in the gateway", "running 0, waiting 0, gateway in flight 0",
		fmt.Sprintf("running %.0f, waiting %.0f, gateway in flight %.0f, pending %.0f, %.2f s after the last stream",
			st.SimRunning, st.SimWaiting, st.GatewayInFlight, st.GatewayPending, f.IdleAfter), st.idle())
	r.note("A stream counts as left when the client cancelled it before reading its finish_reason; one left after that is an ordinary end " +
		"for the engine. A stream left within the first moments may not have reached an engine yet; the engines' request count tells how many did.")
	return nil
}

// leavingStream is one stream of gw-disconnects: whether the client was
// drawn to leave it, whether it did (before the response head or not),
// and how it ended otherwise.
type leavingStream struct {
	planned        bool
	left           bool
	leftBeforeHead bool
	sawFinish      bool
	err            error
	sent, done     time.Time
}

// sendLeaving sends l.Streams streamed chats at once, a random l.Percent
// of which the client leaves at a moment drawn from [0, l.MaxDelay), and
// reads the others to their end.
func sendLeaving(ctx context.Context, client *http.Client, url string, l DisconnectsLoad) []leavingStream {
	rng := rand.New(rand.NewPCG(l.Seed, 7))
	out := make([]leavingStream, l.Streams)
	delays := make([]time.Duration, l.Streams)
	for i := range out {
		if rng.IntN(100) < l.Percent {
			out[i].planned = true
			delays[i] = time.Duration(rng.Int64N(int64(l.MaxDelay)))
		}
	}
	stress.Burst(len(out), func(i int) func() {
		body := gwStreamBody(procs.SimModel, i, l.MaxTokens, true)
		return func() {
			o := &out[i]
			rctx, cancel := context.WithTimeout(ctx, l.Timeout)
			defer cancel()
			lctx, leave := context.WithCancelCause(rctx)
			defer leave(nil)
			if o.planned {
				t := time.AfterFunc(delays[i], func() { leave(stress.ErrPlanned) })
				defer t.Stop()
			}
			o.sent = time.Now()
			head, finish, err := leaveableStream(lctx, client, url, body, l.MaxTokens, o.planned)
			o.done = time.Now()
			o.sawFinish = finish
			switch {
			case err == nil:
			case errors.Is(context.Cause(lctx), stress.ErrPlanned):
				o.left = !finish
				o.leftBeforeHead = !head
			default:
				o.err = measure.Classify(rctx, err)
			}
		}
	})
	return out
}

// tally counts the streams by how they ended.
func (f *DisconnectsFigures) tally(out []leavingStream) {
	var tally stress.ErrorTally
	var first, last time.Time
	for _, o := range out {
		if first.IsZero() || o.sent.Before(first) {
			first = o.sent
		}
		last = stress.Later(last, o.done)
		if o.planned {
			f.Planned++
		}
		switch {
		case o.err != nil:
			var le *measure.RequestError
			errors.As(o.err, &le)
			tally.Add(le)
		case o.left:
			f.Left++
			if o.leftBeforeHead {
				f.LeftBeforeHead++
			}
		case o.planned:
			// Drawn to be left, but it finished first.
			f.FinishedFirst++
			f.Completed++
		default:
			f.Completed++
		}
	}
	f.Errors, f.ErrorKinds, f.ErrorSamples = tally.Result()
	f.WallSeconds = last.Sub(first).Seconds()
}

// readEngines counts the requests the simulators finished, by reason.
func (f *DisconnectsFigures) readEngines(ctx context.Context, admin *http.Client, sims []*gwReplica) error {
	f.SimFinished = map[string]float64{}
	for _, s := range sims {
		p, err := procs.ScrapePage(ctx, admin, s.URL+"/metrics")
		if err != nil {
			return err
		}
		for _, reason := range []string{"abort", "length", "stop", "error", "repetition"} {
			v := p.Sum("vllm:request_success_total", procs.Label("finished_reason", reason))
			f.SimFinished[reason] += v
			f.SimReceived += v
		}
	}
	return nil
}

// leaveableStream reads a streamed chat until its end or until ctx ends.
// It reports whether the response head arrived and whether a finish_reason
// was read. A leaveable stream is only read (the client may leave it at any
// moment); any other is checked fully, max_tokens exact.
func leaveableStream(ctx context.Context, client *http.Client, url string, body []byte, maxTokens int, leaveable bool) (head, finish bool, err error) {
	resp, err := stress.Post(ctx, client, url, body, "text/event-stream")
	if err != nil {
		return false, false, err
	}
	defer resp.Body.Close()
	if !leaveable {
		err := stress.ReadStream(resp.Body, stress.StreamCheck{MaxTokens: maxTokens, Exact: true, WantUsage: true})
		return true, err == nil, err
	}
	r := openai.NewSSEReader(resp.Body, 0)
	for {
		data, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return true, finish, measure.Failf(measure.KindNoDone, "stream ended without [DONE]")
			}
			return true, finish, err
		}
		if bytes.Equal(data, openai.Done) {
			return true, finish, nil
		}
		var ch stress.StreamChunk
		if err := json.Unmarshal(data, &ch); err != nil {
			return true, finish, measure.Failf(measure.KindJSON, "chunk %.80q: %v", data, err)
		}
		for _, c := range ch.Choices {
			if c.FinishReason != nil {
				finish = true
			}
		}
	}
}
