package main

// End-to-end tests: the real inferrail-sim, started as a separate process on
// a loopback port, driven by the official OpenAI Go SDK. Nothing is mocked.
//
// The test binary doubles as the simulator: TestMain runs main.go's run
// instead of the tests when simAsBinaryEnv is set, so each test can exec
// os.Args[0] with simulator flags and get a real server without a separate
// build step.
//
// Timing: the functional cases share one instance with the default latency
// model, so streams arrive token by token as from vLLM; they ask for at most
// 8 tokens (20 ms each), run in parallel and each uses its own prompt, so
// none sees another's prefix cache hits (the chat pair shares one on
// purpose). A second instance with --zero-latency, where the server sends a
// whole reply in one chunk, repeats the streaming check. The cancellation
// case needs a request that is still decoding when the client leaves
// (max_tokens 2000 takes ~40 s under the default model) and a /metrics page
// no other request moves, so it starts a third instance of its own.
// The whole file runs in about a second.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/inferrail/inferrail/internal/openai/sdktest"
	"github.com/inferrail/inferrail/internal/procs"
)

// simAsBinaryEnv makes the test binary run as inferrail-sim.
const simAsBinaryEnv = "INFERRAIL_SIM_AS_BINARY"

// servedModel is the --served-model-name every test instance gets.
const servedModel = "inferrail-sdk-e2e"

func TestMain(m *testing.M) {
	if os.Getenv(simAsBinaryEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		// The parent holds our stdin open: if it dies without stopping us
		// (a test timeout, a kill), EOF shuts us down, so no simulator
		// outlives its test.
		ctx, orphaned := context.WithCancel(ctx)
		go func() { _, _ = io.Copy(io.Discard, os.Stdin); orphaned() }()
		err := run(ctx, os.Args[1:], os.Stderr)
		orphaned()
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "inferrail-sim:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// simProcess is one running simulator.
type simProcess struct {
	base string // http://127.0.0.1:port
}

// freePort asks the kernel for a free loopback port. Another process may
// take it before the simulator binds it; startSim retries once for that.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		t.Fatalf("closing the port probe: %v", err)
	}
	return port
}

// startSim runs the simulator with the given flags on a free loopback port,
// waits until GET /health answers 200 and stops it when the test ends.
func startSim(t *testing.T, flags ...string) *simProcess {
	t.Helper()
	for attempt := 1; ; attempt++ {
		p, err := trySim(t, freePort(t), flags)
		if err == nil {
			return p
		}
		if attempt == 1 && errors.Is(err, errPortTaken) {
			t.Logf("retrying with another port: %v", err)
			continue
		}
		t.Fatal(err)
	}
}

var errPortTaken = errors.New("port taken before the simulator could bind it")

func trySim(t *testing.T, port int, flags []string) (*simProcess, error) {
	t.Helper()
	args := append([]string{"--host", "127.0.0.1", "--port", strconv.Itoa(port)}, flags...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), simAsBinaryEnv+"=1")
	if gorace := os.Getenv("GORACE"); !strings.Contains(gorace, "atexit_sleep_ms") {
		// Under -race the child would sleep 1 s before exiting, for
		// goroutines to report late races; after a clean shutdown there
		// are none left, and the second counts against the test's time.
		// A race the child does report still fails the test: it exits
		// with status 66, and the cleanup reports any non-zero exit.
		cmd.Env = append(cmd.Env, "GORACE="+strings.TrimSpace(gorace+" atexit_sleep_ms=0"))
	}
	stderr := procs.NewTailBuffer(1 << 20)
	cmd.Stdout = stderr
	cmd.Stderr = stderr
	// The child exits when this pipe closes, which the kernel does if this
	// process dies; stop closes it after SIGTERM too.
	lifeline, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("making the simulator's stdin: %v", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the simulator: %v", err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()

	// stop ends the child: SIGTERM, a bounded wait, then SIGKILL. It
	// reports how the child ended.
	stop := func() (clean bool, how string) {
		select {
		case <-done:
			return false, fmt.Sprintf("had already exited: %v", waitErr)
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		defer lifeline.Close()
		select {
		case <-done:
			if waitErr != nil {
				return false, fmt.Sprintf("exited on SIGTERM with %v", waitErr)
			}
			return true, ""
		case <-time.After(8 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			return false, "ignored SIGTERM for 8 s and was killed"
		}
	}

	base := "http://127.0.0.1:" + strconv.Itoa(port)
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-done:
			out := stderr.String()
			if strings.Contains(out, "address already in use") {
				return nil, fmt.Errorf("%w (port %d): %s", errPortTaken, port, out)
			}
			return nil, fmt.Errorf("the simulator exited before it was healthy (%v); its stderr:\n%s", waitErr, out)
		default:
		}
		if res, err := hc.Get(base + "/health"); err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			_, how := stop()
			return nil, fmt.Errorf("GET %s/health did not answer 200 within 15 s (the simulator %s); its stderr:\n%s",
				base, how, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	hc.CloseIdleConnections()
	t.Cleanup(func() {
		if clean, how := stop(); !clean {
			t.Errorf("simulator on port %d did not shut down cleanly: it %s; its stderr:\n%s", port, how, stderr.String())
		} else if t.Failed() {
			t.Logf("simulator on port %d stderr:\n%s", port, stderr.String())
		}
	})
	return &simProcess{base: base}, nil
}

// client returns an SDK client for the simulator: no retries, so a failure
// shows as it happened.
func (p *simProcess) client(opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(p.base + "/v1/"),
		option.WithAPIKey("inferrail-sim-test"),
		option.WithMaxRetries(0),
	}, opts...)...)
}

// rawTee records the bytes of every response body the SDK reads, so a test
// can check the wire form (the SDK hides "data: [DONE]").
type rawTee struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (r *rawTee) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	if err == nil && res.Body != nil {
		res.Body = &teeBody{ReadCloser: res.Body, r: r}
	}
	return res, err
}

func (r *rawTee) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

type teeBody struct {
	io.ReadCloser
	r *rawTee
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.r.mu.Lock()
	b.r.buf.Write(p[:n])
	b.r.mu.Unlock()
	return n, err
}

func chatParams(prompt string, maxTokens int64) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:     servedModel,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		MaxTokens: openai.Int(maxTokens),
	}
}

func TestSDK(t *testing.T) {
	paced := startSim(t, "--enable-prompt-tokens-details", "--served-model-name", servedModel)
	fast := startSim(t, "--zero-latency", "--enable-prompt-tokens-details", "--served-model-name", servedModel)
	client := paced.client()

	// The chat cases share a prompt: the streamed reply must equal the
	// unstreamed one, since the stand-in model's words depend on the prompt.
	chatPrompt := sdktest.Words("chat", 12)

	t.Run("ChatCompletion", func(t *testing.T) {
		t.Parallel()
		res, err := client.Chat.Completions.New(sdktest.Context(t, 10*time.Second), chatParams(chatPrompt, 8))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(res.ID, "chatcmpl-") || len(res.ID) == len("chatcmpl-") {
			t.Errorf("id %q, want chatcmpl-<random>", res.ID)
		}
		if got := res.JSON.Object.Raw(); got != `"chat.completion"` {
			t.Errorf("object %s, want \"chat.completion\"", got)
		}
		if res.Model != servedModel {
			t.Errorf("model %q, want %q", res.Model, servedModel)
		}
		if res.Created == 0 {
			t.Errorf("created is 0")
		}
		if len(res.Choices) != 1 {
			t.Fatalf("%d choices, want 1: %s", len(res.Choices), res.RawJSON())
		}
		c := res.Choices[0]
		if c.Index != 0 {
			t.Errorf("choice index %d, want 0", c.Index)
		}
		if got := c.Message.JSON.Role.Raw(); got != `"assistant"` {
			t.Errorf("role %s, want \"assistant\"", got)
		}
		if c.Message.Content == "" {
			t.Errorf("content is empty")
		}
		if c.FinishReason != "length" {
			t.Errorf("finish_reason %q, want length", c.FinishReason)
		}
		sdktest.CheckUsage(t, "usage", res.Usage, 8)
	})

	t.Run("ChatCompletionStreamed", func(t *testing.T) {
		t.Parallel()
		testChatStreamed(t, client, chatPrompt)
	})

	// With --zero-latency the engine finishes the whole reply in one step,
	// so the server sends it in one content chunk, decoded in one piece:
	// it must still read the same as token-by-token.
	t.Run("ChatCompletionStreamedZeroLatency", func(t *testing.T) {
		t.Parallel()
		testChatStreamed(t, fast.client(), chatPrompt)
	})

	t.Run("PrefixCache", func(t *testing.T) {
		t.Parallel()
		ctx := sdktest.Context(t, 10*time.Second)
		params := chatParams(sdktest.Words("prefix", 400), 4)
		var res [2]*openai.ChatCompletion
		for i := range res {
			r, err := client.Chat.Completions.New(ctx, params)
			if err != nil {
				t.Fatalf("request %d: %v", i+1, err)
			}
			res[i] = r
			sdktest.CheckUsage(t, fmt.Sprintf("request %d", i+1), r.Usage, 4)
			if !r.Usage.PromptTokensDetails.JSON.CachedTokens.Valid() {
				t.Fatalf("request %d: no prompt_tokens_details.cached_tokens: %s", i+1, r.Usage.RawJSON())
			}
		}
		prompt := res[0].Usage.PromptTokens
		if prompt < 400 {
			t.Errorf("prompt_tokens %d for a 400-word prompt", prompt)
		}
		if got := res[0].Usage.PromptTokensDetails.CachedTokens; got != 0 {
			t.Errorf("first request: cached_tokens %d, want 0", got)
		}
		if res[1].Usage.PromptTokens != prompt {
			t.Errorf("second request: prompt_tokens %d, first %d", res[1].Usage.PromptTokens, prompt)
		}
		cached := res[1].Usage.PromptTokensDetails.CachedTokens
		if cached <= 0 || cached%16 != 0 || cached >= prompt {
			t.Errorf("second request: cached_tokens %d, want a positive multiple of 16 below prompt_tokens %d", cached, prompt)
		}
		// vLLM hits every full block but the one holding the last prompt
		// token, which it must compute again.
		if want := (prompt - 1) / 16 * 16; cached != want {
			t.Errorf("second request: cached_tokens %d, want %d (every full block of %d prompt tokens, leaving the last token)", cached, want, prompt)
		}
		if res[0].Choices[0].Message.Content != res[1].Choices[0].Message.Content {
			t.Errorf("same prompt, different replies: %q, %q", res[0].Choices[0].Message.Content, res[1].Choices[0].Message.Content)
		}
	})

	t.Run("Completions", func(t *testing.T) {
		t.Parallel()
		ctx := sdktest.Context(t, 10*time.Second)
		params := openai.CompletionNewParams{
			Model:     servedModel,
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(sdktest.Words("complete", 10))},
			MaxTokens: openai.Int(5),
		}
		res, err := client.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(res.ID, "cmpl-") || len(res.ID) == len("cmpl-") {
			t.Errorf("id %q, want cmpl-<random>", res.ID)
		}
		if got := res.JSON.Object.Raw(); got != `"text_completion"` {
			t.Errorf("object %s, want \"text_completion\"", got)
		}
		if res.Model != servedModel {
			t.Errorf("model %q, want %q", res.Model, servedModel)
		}
		if len(res.Choices) != 1 {
			t.Fatalf("%d choices, want 1: %s", len(res.Choices), res.RawJSON())
		}
		text := res.Choices[0].Text
		if text == "" {
			t.Errorf("text is empty")
		}
		if res.Choices[0].FinishReason != openai.CompletionChoiceFinishReasonLength {
			t.Errorf("finish_reason %q, want length", res.Choices[0].FinishReason)
		}
		sdktest.CheckUsage(t, "usage", res.Usage, 5)

		params.StreamOptions.IncludeUsage = openai.Bool(true)
		tee := &rawTee{}
		stream := client.Completions.NewStreaming(ctx, params, option.WithMiddleware(tee.middleware))
		defer stream.Close()
		var streamed strings.Builder
		var usage *openai.CompletionUsage
		n := 0
		for stream.Next() {
			ch := stream.Current()
			n++
			if !strings.HasPrefix(ch.ID, "cmpl-") {
				t.Errorf("chunk id %q, want prefix cmpl-", ch.ID)
			}
			for _, c := range ch.Choices {
				streamed.WriteString(c.Text)
			}
			if ch.JSON.Usage.Valid() {
				usage = &ch.Usage
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("stream ended with %v after %d chunks", err, n)
		}
		if !strings.HasSuffix(tee.String(), "data: [DONE]\n\n") {
			t.Errorf("the stream does not end with data: [DONE]; raw:\n%s", tee)
		}
		if streamed.String() != text {
			t.Errorf("streamed text %q, unstreamed %q", streamed.String(), text)
		}
		if usage == nil {
			t.Fatalf("no usage chunk; raw:\n%s", tee)
		}
		sdktest.CheckUsage(t, "streamed usage", *usage, 5)
		if usage.PromptTokens != res.Usage.PromptTokens {
			t.Errorf("streamed prompt_tokens %d, unstreamed %d", usage.PromptTokens, res.Usage.PromptTokens)
		}
	})

	t.Run("Models", func(t *testing.T) {
		t.Parallel()
		ctx := sdktest.Context(t, 10*time.Second)
		page, err := client.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Data) != 1 || page.Data[0].ID != servedModel {
			t.Fatalf("models %s, want exactly %q", page.RawJSON(), servedModel)
		}
		if got := page.Data[0].JSON.Object.Raw(); got != `"model"` {
			t.Errorf("object %s, want \"model\"", got)
		}

		params := chatParams(sdktest.Words("unknown", 5), 4)
		params.Model = "no-such-model"
		_, err = client.Chat.Completions.New(ctx, params)
		apiErr := sdktest.APIError(t, err, http.StatusNotFound)
		if !strings.Contains(apiErr.Message, "no-such-model") {
			t.Errorf("message %q does not name the model", apiErr.Message)
		}
	})

	t.Run("BadRequest", func(t *testing.T) {
		t.Parallel()
		params := chatParams(sdktest.Words("bad", 5), 4)
		params.N = openai.Int(2)
		_, err := client.Chat.Completions.New(sdktest.Context(t, 10*time.Second), params)
		apiErr := sdktest.APIError(t, err, http.StatusBadRequest)
		if !regexp.MustCompile(`\bn\b`).MatchString(apiErr.Message) {
			t.Errorf("message %q does not mention n", apiErr.Message)
		}
		if apiErr.Param != "n" {
			t.Errorf("param %q, want n", apiErr.Param)
		}
	})

	t.Run("Cancellation", func(t *testing.T) {
		t.Parallel()
		// Its own instance with the default latency model: the request must
		// still be decoding when the client leaves, and no other request may
		// move the gauges this case reads.
		slow := startSim(t, "--enable-prompt-tokens-details", "--served-model-name", servedModel)
		slowClient := slow.client()
		running := `vllm:num_requests_running`
		aborted := `vllm:request_success_total`
		modelLabel := `model_name="` + servedModel + `"`
		abortLabel := `finished_reason="abort"`

		ctx, cancel := context.WithCancel(sdktest.Context(t, 10*time.Second))
		defer cancel()
		// ignore_eos keeps the stand-in model from stopping on its own
		// before max_tokens, as it would within a few hundred tokens.
		stream := slowClient.Chat.Completions.NewStreaming(ctx, chatParams(sdktest.Words("cancel", 20), 2000),
			option.WithJSONSet("ignore_eos", true))
		defer stream.Close()
		for i := range 2 {
			if !stream.Next() {
				t.Fatalf("stream ended after %d chunks: %v", i, stream.Err())
			}
		}
		// The engine hands a step's tokens out before it records the
		// step's gauges, as vLLM's output loop does, so the gauge may lag
		// the chunks by a step (or, on a machine with every core busy, by
		// as long as the engine waits for one): it must read 1 soon.
		var page string
		for begun := time.Now(); ; time.Sleep(10 * time.Millisecond) {
			page = scrape(t, slow.base)
			v, ok := metricValue(page, running, modelLabel)
			if ok && v == 1 {
				break
			}
			if !ok || v > 1 || time.Since(begun) > 5*time.Second {
				t.Fatalf("while streaming: %s = %v (found %v), want 1\n%s", running, v, ok, grepMetric(page, running))
			}
		}
		if v, ok := metricValue(page, aborted, modelLabel, abortLabel); !ok || v != 0 {
			t.Fatalf("before cancelling: %s{%s} = %v (found %v), want 0", aborted, abortLabel, v, ok)
		}

		cancel()
		cancelled := time.Now()
		if stream.Next() {
			// A chunk already buffered may still be delivered; the stream
			// must end right after.
			for stream.Next() {
				if time.Since(cancelled) > 5*time.Second {
					t.Fatal("the stream goes on 5 s after its context was cancelled")
				}
			}
		}
		if err := stream.Err(); !errors.Is(err, context.Canceled) {
			t.Logf("stream error after cancel: %v", err)
		}
		_ = stream.Close()

		// The abort count is the simulator's behaviour today. Its own
		// FinishedRequest doc (internal/sim/metrics.go) and vLLM's
		// OutputProcessor.abort_requests say a client disconnect is not
		// counted in request_success_total; if the simulator is brought in
		// line with that, drop the abort half of this check.
		var run, abort float64
		var okRun, okAbort bool
		for {
			page = scrape(t, slow.base)
			run, okRun = metricValue(page, running, modelLabel)
			abort, okAbort = metricValue(page, aborted, modelLabel, abortLabel)
			if okRun && run == 0 && okAbort && abort >= 1 {
				t.Logf("engine saw the cancel %v after it", time.Since(cancelled).Round(time.Millisecond))
				break
			}
			// Generous: a loaded CI machine under the race detector
			// can stall a scrape for a second; the 100 ms the engine
			// really takes is measured by make stress, not here.
			if time.Since(cancelled) > 10*time.Second {
				t.Fatalf("10 s after cancelling: %s = %v (found %v), %s{%s} = %v (found %v); want 0 and >= 1\n%s%s",
					running, run, okRun, aborted, abortLabel, abort, okAbort,
					grepMetric(page, running), grepMetric(page, aborted))
			}
			time.Sleep(25 * time.Millisecond)
		}
	})
}

// testChatStreamed streams a chat with include_usage and checks it against
// the same chat unstreamed.
func testChatStreamed(t *testing.T, client openai.Client, prompt string) {
	ctx := sdktest.Context(t, 10*time.Second)
	want, err := client.Chat.Completions.New(ctx, chatParams(prompt, 8))
	if err != nil {
		t.Fatal(err)
	}
	params := chatParams(prompt, 8)
	params.StreamOptions.IncludeUsage = openai.Bool(true)
	tee := &rawTee{}
	stream := client.Chat.Completions.NewStreaming(ctx, params, option.WithMiddleware(tee.middleware))
	defer stream.Close()
	var chunks []openai.ChatCompletionChunk
	var content strings.Builder
	finish := ""
	for stream.Next() {
		ch := stream.Current()
		chunks = append(chunks, ch)
		for _, c := range ch.Choices {
			content.WriteString(c.Delta.Content)
			if c.FinishReason != "" {
				if finish != "" {
					t.Errorf("a second finish_reason %q after %q", c.FinishReason, finish)
				}
				finish = c.FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream ended with %v after %d chunks", err, len(chunks))
	}
	if len(chunks) == 0 {
		t.Fatalf("no chunks; raw:\n%s", tee)
	}
	first := chunks[0]
	if len(first.Choices) != 1 || first.Choices[0].Delta.Role != "assistant" {
		t.Errorf("first chunk does not carry role assistant: %s", first.RawJSON())
	}
	if len(chunks) < 3 {
		t.Fatalf("%d chunks, want a role chunk, content and usage; raw:\n%s", len(chunks), tee)
	}
	if !strings.HasSuffix(tee.String(), "data: [DONE]\n\n") {
		t.Errorf("the stream does not end with data: [DONE]; raw:\n%s", tee)
	}
	for i, ch := range chunks {
		if i > 0 && len(ch.Choices) > 0 && ch.Choices[0].Delta.JSON.Role.Valid() {
			t.Errorf("chunk %d repeats the role: %s", i, ch.RawJSON())
		}
		if !strings.HasPrefix(ch.ID, "chatcmpl-") {
			t.Errorf("chunk %d id %q, want prefix chatcmpl-", i, ch.ID)
		}
		if ch.ID != first.ID {
			t.Errorf("chunk %d id %q, first chunk's %q", i, ch.ID, first.ID)
		}
		if got := ch.JSON.Object.Raw(); got != `"chat.completion.chunk"` {
			t.Errorf("chunk %d object %s", i, got)
		}
		if ch.Model != servedModel {
			t.Errorf("chunk %d model %q", i, ch.Model)
		}
		if i < len(chunks)-1 && ch.JSON.Usage.Valid() {
			t.Errorf("chunk %d before the last carries usage: %s", i, ch.RawJSON())
		}
	}
	if finish != "length" {
		t.Errorf("finish_reason %q, want length", finish)
	}
	if got, want := content.String(), want.Choices[0].Message.Content; got != want {
		t.Errorf("streamed content %q, unstreamed %q", got, want)
	}
	last := chunks[len(chunks)-1]
	if len(last.Choices) != 0 {
		t.Errorf("usage chunk has %d choices, want 0", len(last.Choices))
	}
	if !last.JSON.Usage.Valid() {
		t.Fatalf("last chunk has no usage: %s", last.RawJSON())
	}
	sdktest.CheckUsage(t, "streamed usage", last.Usage, 8)
	if last.Usage.PromptTokens != want.Usage.PromptTokens {
		t.Errorf("streamed prompt_tokens %d, unstreamed %d", last.Usage.PromptTokens, want.Usage.PromptTokens)
	}
}

// scrape fetches the /metrics page.
func scrape(t *testing.T, base string) string {
	t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	res, err := hc.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading /metrics: %v", err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s\n%s", res.Status, body)
	}
	return string(body)
}

// metricValue returns the value of the first sample of metric whose label
// set contains every one of labels (each written name="value"), reading the
// Prometheus text format: name{labels} value [timestamp].
func metricValue(page, metric string, labels ...string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(page))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		var name, labelSet, rest string
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			name, labelSet, rest = line[:i], line[i+1:j], line[j+1:]
		} else {
			name, rest, _ = strings.Cut(line, " ")
		}
		if name != metric {
			continue
		}
		match := true
		for _, l := range labels {
			if !containsLabel(labelSet, l) {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		return v, true
	}
	return 0, false
}

// containsLabel reports whether a label set holds label as a whole pair.
func containsLabel(set, label string) bool {
	for _, pair := range strings.Split(set, ",") {
		if pair == label {
			return true
		}
	}
	return false
}

// grepMetric returns the page's lines for one metric, for failure messages.
func grepMetric(page, metric string) string {
	var b strings.Builder
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, metric+"{") || strings.HasPrefix(line, metric+" ") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
