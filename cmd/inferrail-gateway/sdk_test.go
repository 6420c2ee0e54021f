package main

// End-to-end tests: the real inferrail-gateway in front of three real
// inferrail-sim engines, each a separate process on a loopback port, driven
// by the official OpenAI Go SDK. Nothing is mocked.
//
// The test binary doubles as both servers: TestMain runs this package's run
// (the gateway) or internal/sim (an engine) instead of the tests when
// childRoleEnv names one, so the test can exec os.Args[0] and get real
// servers without a separate build step. Every child exits when its stdin,
// a pipe the parent holds, closes, so none outlives the test binary.
//
// The fleet: three engines with the default latency model (a decode step
// costs 20 ms) and --enable-prompt-tokens-details, all serving sdkModel, and
// one gateway routing sdkModel (alias sdkAlias) with cost_model over the
// builtin:sim tokenizer, so it predicts the engines' prompt tokens and
// caches exactly. The functional cases run in parallel, ask for at most 8
// tokens and each use their own prompt, so none sees another's prefix cache
// hits (a case that sends one prompt twice does so on purpose). Two cases
// run alone afterwards: the prefix cache case, because bounded load may set
// the replica holding a prompt aside while other requests keep it busy, and
// the cancellation case, because it reads gauges every request moves.
// TestSDK takes about a second, starting the four children included (a
// little more under -race).

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
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
	"github.com/inferrail/inferrail/internal/sim"
)

// childRoleEnv makes the test binary run as a server: childGateway or
// childSim.
const childRoleEnv = "INFERRAIL_GATEWAY_TEST_CHILD"

const (
	childGateway = "gateway"
	childSim     = "sim"
)

// sdkModel is the engines' --served-model-name and the gateway's model;
// sdkAlias is the alias the gateway also accepts for it.
const (
	sdkModel = "inferrail-gateway-sdk-e2e"
	sdkAlias = "sdk-e2e"
)

// replicaIDs are the gateway's names for the three engines.
var replicaIDs = []string{"sim-a", "sim-b", "sim-c"}

func TestMain(m *testing.M) {
	switch role := os.Getenv(childRoleEnv); role {
	case childGateway:
		os.Exit(serveChild("inferrail-gateway", func(ctx context.Context) error {
			return run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		}))
	case childSim:
		os.Exit(serveChild("inferrail-sim", runSim))
	case "":
		os.Exit(m.Run())
	default:
		fmt.Fprintf(os.Stderr, "%s=%q: want %q or %q\n", childRoleEnv, role, childGateway, childSim)
		os.Exit(2)
	}
}

// serveChild runs a server until SIGTERM, SIGINT or the end of stdin and
// returns its exit status.
func serveChild(name string, serve func(context.Context) error) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The parent holds our stdin open: if it dies without stopping us (a
	// test timeout, a kill), EOF shuts us down.
	ctx, orphaned := context.WithCancel(ctx)
	defer orphaned()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); orphaned() }()
	if err := serve(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 2
	}
	return 0
}

// runSim is cmd/inferrail-sim's run, on internal/sim directly.
func runSim(ctx context.Context) error {
	opts, err := sim.ParseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := sim.New(opts.Config, logger)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port)))
	if err != nil {
		return err
	}
	return srv.Serve(ctx, ln)
}

// child is one running server process.
type child struct {
	name     string
	cmd      *exec.Cmd
	out      *procs.TailBuffer
	lifeline io.WriteCloser // its stdin
	done     chan struct{}  // closed when it exited
	waitErr  error          // how it exited, once done is closed
}

// spawn starts the test binary as a server of the given role.
func spawn(name, role string, args []string) (*child, error) {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), childRoleEnv+"="+role)
	if gorace := os.Getenv("GORACE"); !strings.Contains(gorace, "atexit_sleep_ms") {
		// Under -race a child sleeps 1 s before exiting, for late race
		// reports; after a clean shutdown there are none left. A race the
		// child does report still fails the test: it exits with status 66.
		cmd.Env = append(cmd.Env, "GORACE="+strings.TrimSpace(gorace+" atexit_sleep_ms=0"))
	}
	c := &child{name: name, cmd: cmd, out: procs.NewTailBuffer(1 << 20), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = c.out, c.out
	lifeline, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("%s: making its stdin: %v", name, err)
	}
	c.lifeline = lifeline
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: starting it: %v", name, err)
	}
	go func() { c.waitErr = cmd.Wait(); close(c.done) }()
	return c, nil
}

// stop ends the child: SIGTERM, a bounded wait, then SIGKILL. It reports
// how the child ended.
func (c *child) stop() (clean bool, how string) {
	defer c.lifeline.Close()
	select {
	case <-c.done:
		return false, fmt.Sprintf("had already exited: %v", c.waitErr)
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		if c.waitErr != nil {
			return false, fmt.Sprintf("exited on SIGTERM with %v", c.waitErr)
		}
		return true, ""
	case <-time.After(8 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		return false, "ignored SIGTERM for 8 s and was killed"
	}
}

var errPortTaken = errors.New("port taken before the child could bind it")

// waitReady polls ready until it reports true, the child exits or 20 s
// pass. ready's text describes what it saw, for the timeout's message.
func (c *child) waitReady(ready func() (bool, string)) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-c.done:
			out := c.out.String()
			if strings.Contains(out, "address already in use") {
				return fmt.Errorf("%s: %w: %s", c.name, errPortTaken, out)
			}
			return fmt.Errorf("%s exited before it was ready (%v); its output:\n%s", c.name, c.waitErr, out)
		default:
		}
		ok, saw := ready()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			_, how := c.stop()
			return fmt.Errorf("%s was not ready within 20 s (%s; it %s); its output:\n%s", c.name, saw, how, c.out.String())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// launch starts a child and waits until it is ready, with one retry on a
// fresh port when another process took the one it was given. prepare picks
// the ports and returns the child's arguments and readiness check. The
// child is stopped when the test ends; a child that does not exit cleanly
// fails the test. launch may run on any goroutine.
func launch(t *testing.T, name, role string, prepare func() ([]string, func() (bool, string), error)) error {
	for attempt := 1; ; attempt++ {
		args, ready, err := prepare()
		if err != nil {
			return err
		}
		c, err := spawn(name, role, args)
		if err != nil {
			return err
		}
		err = c.waitReady(ready)
		if err == nil {
			t.Cleanup(func() {
				if clean, how := c.stop(); !clean {
					t.Errorf("%s did not shut down cleanly: it %s; its output:\n%s", name, how, c.out.String())
				} else if out := c.out.String(); t.Failed() && out != "" {
					t.Logf("%s output:\n%s", name, out)
				}
			})
			return nil
		}
		c.stop()
		if attempt == 1 && errors.Is(err, errPortTaken) {
			t.Logf("retrying with other ports: %v", err)
			continue
		}
		return err
	}
}

// freePort asks the kernel for a free loopback port. Another process may
// take it before the child binds it; launch retries once for that.
func freePort() (int, error) { return procs.FreePort() }

// freePorts is n distinct free ports, as a gateway's client and admin
// ports must be.
func freePorts(n int) ([]int, error) { return procs.FreePorts(n) }

// probe is the readiness checks' HTTP client.
var probe = &http.Client{Timeout: time.Second}

// getOK reports whether GET url answers 200.
func getOK(url string) (bool, string) {
	res, err := probe.Get(url)
	if err != nil {
		return false, err.Error()
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res.StatusCode == http.StatusOK, "GET " + url + ": " + res.Status
}

// e2eFleet is the running gateway and its engines.
type e2eFleet struct {
	gateway string            // the client port, http://127.0.0.1:port
	admin   string            // the admin port
	sims    map[string]string // replica id → engine base URL
}

// startFleet starts three engines and a gateway in front of them and waits
// until the gateway holds every replica healthy with an engine report.
func startFleet(t *testing.T) *e2eFleet {
	t.Helper()
	f := &e2eFleet{sims: map[string]string{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, len(replicaIDs))
	for i, id := range replicaIDs {
		wg.Go(func() {
			errs[i] = launch(t, "inferrail-sim "+id, childSim, func() ([]string, func() (bool, string), error) {
				port, err := freePort()
				if err != nil {
					return nil, nil, err
				}
				base := "http://127.0.0.1:" + strconv.Itoa(port)
				mu.Lock()
				f.sims[id] = base
				mu.Unlock()
				args := []string{"--host", "127.0.0.1", "--port", strconv.Itoa(port),
					"--enable-prompt-tokens-details", "--served-model-name", sdkModel}
				return args, func() (bool, string) { return getOK(base + "/health") }, nil
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	err := launch(t, "inferrail-gateway", childGateway, func() ([]string, func() (bool, string), error) {
		ports, err := freePorts(2)
		if err != nil {
			return nil, nil, err
		}
		client, admin := ports[0], ports[1]
		f.gateway = "http://127.0.0.1:" + strconv.Itoa(client)
		f.admin = "http://127.0.0.1:" + strconv.Itoa(admin)
		path := filepath.Join(dir, "gateway.yaml")
		if err := os.WriteFile(path, []byte(f.config(client, admin)), 0o644); err != nil {
			return nil, nil, err
		}
		return []string{"--config", path}, f.ready, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	probe.CloseIdleConnections()
	return f
}

// config is the gateway's YAML: defaults but for the ports, the model, a
// shutdown that does not wait for streams and warnings only in the log.
func (f *e2eFleet) config(client, admin int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server:\n  listen: 127.0.0.1:%d\n  admin_listen: 127.0.0.1:%d\n  shutdown_timeout: 1s\n", client, admin)
	fmt.Fprintf(&b, "models:\n  - name: %s\n    aliases: [%s]\n    policy: cost_model\n    tokenizer: builtin:sim\n", sdkModel, sdkAlias)
	b.WriteString("replicas:\n")
	for _, id := range replicaIDs {
		fmt.Fprintf(&b, "  - id: %s\n    url: %s\n    models: [%s]\n", id, f.sims[id], sdkModel)
	}
	b.WriteString("logging:\n  level: warn\n")
	return b.String()
}

// replicaState is a replica as GET /admin/replicas shows it, the fields
// these tests read.
type replicaState struct {
	ID       string `json:"id"`
	Healthy  bool   `json:"healthy"`
	Ejected  bool   `json:"ejected"`
	InFlight int64  `json:"in_flight"`
	Engine   *struct {
		Running float64 `json:"running"`
	} `json:"engine"`
}

func (f *e2eFleet) replicas() ([]replicaState, error) {
	res, err := probe.Get(f.admin + "/admin/replicas")
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /admin/replicas: %s", res.Status)
	}
	var out struct {
		Replicas []replicaState `json:"replicas"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("GET /admin/replicas: %v", err)
	}
	return out.Replicas, nil
}

// ready reports whether the gateway answers /health and holds every
// replica healthy, not ejected and with an engine report.
func (f *e2eFleet) ready() (bool, string) {
	if ok, saw := getOK(f.gateway + "/health"); !ok {
		return false, saw
	}
	reps, err := f.replicas()
	if err != nil {
		return false, err.Error()
	}
	var ids []string
	for _, r := range reps {
		if !r.Healthy || r.Ejected || r.Engine == nil {
			return false, fmt.Sprintf("replica %s: healthy %v, ejected %v, engine report %v", r.ID, r.Healthy, r.Ejected, r.Engine != nil)
		}
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, replicaIDs) {
		return false, fmt.Sprintf("replicas %v, want %v", ids, replicaIDs)
	}
	return true, ""
}

// client returns an SDK client for the gateway: no retries, so a failure
// shows as it happened.
func (f *e2eFleet) client() openai.Client {
	return openai.NewClient(
		option.WithBaseURL(f.gateway+"/v1/"),
		option.WithAPIKey("inferrail-gateway-test"),
		option.WithMaxRetries(0),
	)
}

func chat(model, text string, maxTokens int64) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
		MaxTokens: openai.Int(maxTokens),
	}
}

func completion(text string, maxTokens int64) openai.CompletionNewParams {
	return openai.CompletionNewParams{
		Model:     sdkModel,
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(text)},
		MaxTokens: openai.Int(maxTokens),
	}
}

// checkRouted checks the headers the gateway puts on a proxied response and
// returns the replica that served it. idPrefix is the response id's prefix
// (chatcmpl- or cmpl-) and id the response's id: the engine takes the
// gateway's request id for it.
func checkRouted(t *testing.T, what string, res *http.Response, idPrefix, id string) string {
	t.Helper()
	if res == nil {
		t.Fatalf("%s: the SDK recorded no HTTP response", what)
	}
	reqID := res.Header.Get("X-Request-Id")
	if reqID == "" {
		t.Errorf("%s: no x-request-id", what)
	} else if id != "" && id != idPrefix+reqID {
		t.Errorf("%s: id %q, want %q from x-request-id", what, id, idPrefix+reqID)
	}
	if got := res.Header.Get("X-Inferrail-Policy"); got != "cost_model" {
		t.Errorf("%s: x-inferrail-policy %q, want cost_model", what, got)
	}
	rep := res.Header.Get("X-Inferrail-Replica")
	if !slices.Contains(replicaIDs, rep) {
		t.Errorf("%s: x-inferrail-replica %q, want one of %v", what, rep, replicaIDs)
	}
	return rep
}

// checkPredicted checks that the gateway's prompt prediction, which uses
// the engines' own tokenizer, matches what the engine reports.
func checkPredicted(t *testing.T, what string, res *http.Response, u openai.CompletionUsage) {
	t.Helper()
	if got := res.Header.Get("X-Inferrail-Prompt-Tokens"); got != strconv.FormatInt(u.PromptTokens, 10) {
		t.Errorf("%s: x-inferrail-prompt-tokens %q, engine's prompt_tokens %d", what, got, u.PromptTokens)
	}
}

// apiError is sdktest.APIError, and the gateway's x-request-id on the
// error response.
func apiError(t *testing.T, err error, status int) *openai.Error {
	t.Helper()
	apiErr := sdktest.APIError(t, err, status)
	if apiErr.Response == nil || apiErr.Response.Header.Get("X-Request-Id") == "" {
		t.Errorf("the error response has no x-request-id")
	}
	return apiErr
}

func TestSDK(t *testing.T) {
	f := startFleet(t)
	client := f.client()

	t.Run("Functional", func(t *testing.T) {
		t.Run("ChatCompletion", func(t *testing.T) {
			t.Parallel()
			var raw *http.Response
			res, err := client.Chat.Completions.New(sdktest.Context(t, 15*time.Second), chat(sdkModel, sdktest.Words("chat", 12), 8), option.WithResponseInto(&raw))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(res.ID, "chatcmpl-") || len(res.ID) == len("chatcmpl-") {
				t.Errorf("id %q, want chatcmpl-<request id>", res.ID)
			}
			checkRouted(t, "response", raw, "chatcmpl-", res.ID)
			if got := res.JSON.Object.Raw(); got != `"chat.completion"` {
				t.Errorf("object %s, want \"chat.completion\"", got)
			}
			if res.Model != sdkModel {
				t.Errorf("model %q, want %q", res.Model, sdkModel)
			}
			if res.Created == 0 {
				t.Errorf("created is 0")
			}
			if len(res.Choices) != 1 {
				t.Fatalf("%d choices, want 1: %s", len(res.Choices), res.RawJSON())
			}
			c := res.Choices[0]
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
			checkPredicted(t, "response", raw, res.Usage)
		})

		t.Run("Alias", func(t *testing.T) {
			t.Parallel()
			var raw *http.Response
			res, err := client.Chat.Completions.New(sdktest.Context(t, 15*time.Second), chat(sdkAlias, sdktest.Words("alias", 10), 3), option.WithResponseInto(&raw))
			if err != nil {
				t.Fatal(err)
			}
			checkRouted(t, "response", raw, "chatcmpl-", res.ID)
			// The gateway rewrites an alias to the model's name before the
			// engine sees the body and passes the answer on untouched, so
			// the engine names the model it was asked for: sdkModel.
			if res.Model != sdkModel {
				t.Errorf("model %q for a request naming the alias %q, want the engine's %q", res.Model, sdkAlias, sdkModel)
			}
			if len(res.Choices) != 1 || res.Choices[0].FinishReason != "length" {
				t.Errorf("choices %s, want one that ends for length", res.RawJSON())
			}
			sdktest.CheckUsage(t, "usage", res.Usage, 3)
		})

		t.Run("ChatCompletionStreamed", func(t *testing.T) {
			t.Parallel()
			testChatStreamed(t, client, sdktest.Words("stream", 12))
		})

		t.Run("Completions", func(t *testing.T) {
			t.Parallel()
			testCompletions(t, client)
		})

		t.Run("Models", func(t *testing.T) {
			t.Parallel()
			page, err := client.Models.List(sdktest.Context(t, 15*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, m := range page.Data {
				ids = append(ids, m.ID)
				if got := m.JSON.Object.Raw(); got != `"model"` {
					t.Errorf("model %s: object %s, want \"model\"", m.ID, got)
				}
			}
			if want := []string{sdkModel, sdkAlias}; !slices.Equal(ids, want) {
				t.Errorf("models %v, want %v: %s", ids, want, page.RawJSON())
			}
		})

		t.Run("UnknownModel", func(t *testing.T) {
			t.Parallel()
			_, err := client.Chat.Completions.New(sdktest.Context(t, 15*time.Second), chat("no-such-model", sdktest.Words("unknown", 5), 4))
			apiErr := apiError(t, err, http.StatusNotFound)
			if want := "The model `no-such-model` does not exist."; apiErr.Message != want {
				t.Errorf("message %q, want vLLM's %q", apiErr.Message, want)
			}
			if apiErr.Type != "NotFoundError" || apiErr.Param != "model" {
				t.Errorf("type %q param %q, want NotFoundError and model", apiErr.Type, apiErr.Param)
			}
			if rep := apiErr.Response.Header.Get("X-Inferrail-Replica"); rep != "" {
				t.Errorf("x-inferrail-replica %q on an error no engine answered", rep)
			}
		})

		t.Run("BadRequest", func(t *testing.T) {
			t.Parallel()
			ctx := sdktest.Context(t, 15*time.Second)

			// The engine refuses it; the gateway passes the answer on.
			_, err := client.Chat.Completions.New(ctx, chat(sdkModel, sdktest.Words("negative", 5), -1))
			apiErr := apiError(t, err, http.StatusBadRequest)
			if apiErr.Type != "BadRequestError" || apiErr.Param != "max_tokens" || !strings.Contains(apiErr.Message, "max_tokens") {
				t.Errorf("negative max_tokens: %s, want the engine's BadRequestError on max_tokens", apiErr.RawJSON())
			}
			if rep := apiErr.Response.Header.Get("X-Inferrail-Replica"); !slices.Contains(replicaIDs, rep) {
				t.Errorf("negative max_tokens: x-inferrail-replica %q, want the engine that refused it", rep)
			}

			// So does a body without messages, in pydantic's words.
			_, err = client.Chat.Completions.New(ctx, chat(sdkModel, sdktest.Words("nomessages", 5), 4), option.WithJSONDel("messages"))
			apiErr = apiError(t, err, http.StatusBadRequest)
			if apiErr.Param != "body.messages" || !strings.Contains(apiErr.Message, "Field required") {
				t.Errorf("no messages: %s, want a validation error on body.messages", apiErr.RawJSON())
			}

			// A body that is not JSON never reaches an engine.
			_, err = client.Chat.Completions.New(ctx, chat(sdkModel, "", 4), option.WithRequestBody("application/json", []byte(`{"model": "`+sdkModel+`", "messages": [`)))
			apiErr = apiError(t, err, http.StatusBadRequest)
			if apiErr.Type != "BadRequestError" || !strings.Contains(apiErr.Message, "JSON") {
				t.Errorf("broken JSON: %s, want the gateway's BadRequestError about JSON", apiErr.RawJSON())
			}
			if rep := apiErr.Response.Header.Get("X-Inferrail-Replica"); rep != "" {
				t.Errorf("broken JSON: x-inferrail-replica %q on an error no engine answered", rep)
			}
		})

		t.Run("Spread", func(t *testing.T) {
			t.Parallel()
			// Distinct prompts at once: no replica holds any of them, so
			// cost_model prices the replicas by their load and bounded
			// load caps each, and the requests cannot all land on one.
			ctx := sdktest.Context(t, 15*time.Second)
			const n = 8
			served := make([]string, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					var raw *http.Response
					what := fmt.Sprintf("request %d", i)
					res, err := client.Chat.Completions.New(ctx, chat(sdkModel, sdktest.Words(fmt.Sprintf("spread%d", i), 16), 4), option.WithResponseInto(&raw))
					if err != nil {
						t.Errorf("%s: %v", what, err)
						return
					}
					sdktest.CheckUsage(t, what, res.Usage, 4)
					served[i] = raw.Header.Get("X-Inferrail-Replica")
				})
			}
			wg.Wait()
			count := map[string]int{}
			for i, rep := range served {
				if !slices.Contains(replicaIDs, rep) {
					t.Errorf("request %d: x-inferrail-replica %q, want one of %v", i, rep, replicaIDs)
				}
				count[rep]++
			}
			if len(count) < 2 {
				t.Errorf("%d distinct prompts all went to %v", n, count)
			}
			t.Logf("replicas served %v", count)
		})
	})

	// Alone: bounded load may set the replica that holds the prompt aside
	// while the others are idle and it is busy with other cases' requests.
	t.Run("PrefixCache", func(t *testing.T) {
		ctx := sdktest.Context(t, 15*time.Second)
		params := chat(sdkModel, sdktest.Words("prefix", 400), 4)
		var res [2]*openai.ChatCompletion
		var reps [2]string
		var raws [2]*http.Response
		for i := range res {
			what := fmt.Sprintf("request %d", i+1)
			r, err := client.Chat.Completions.New(ctx, params, option.WithResponseInto(&raws[i]))
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			res[i] = r
			reps[i] = checkRouted(t, what, raws[i], "chatcmpl-", r.ID)
			sdktest.CheckUsage(t, what, r.Usage, 4)
			checkPredicted(t, what, raws[i], r.Usage)
			if !r.Usage.PromptTokensDetails.JSON.CachedTokens.Valid() {
				t.Fatalf("%s: no prompt_tokens_details.cached_tokens: %s", what, r.Usage.RawJSON())
			}
		}
		promptTokens := res[0].Usage.PromptTokens
		if promptTokens < 400 {
			t.Errorf("prompt_tokens %d for a 400-word prompt", promptTokens)
		}
		if got := res[0].Usage.PromptTokensDetails.CachedTokens; got != 0 {
			t.Errorf("request 1: cached_tokens %d, want 0 for a new prompt", got)
		}
		if got := raws[0].Header.Get("X-Inferrail-Cached-Tokens"); got != "0" {
			t.Errorf("request 1: x-inferrail-cached-tokens %q, want 0", got)
		}
		if reps[1] != reps[0] {
			t.Errorf("the repeated prompt went to %s, the first to %s: cost_model did not follow the cache", reps[1], reps[0])
		}
		if res[1].Usage.PromptTokens != promptTokens {
			t.Errorf("request 2: prompt_tokens %d, request 1 %d", res[1].Usage.PromptTokens, promptTokens)
		}
		cached := res[1].Usage.PromptTokensDetails.CachedTokens
		if cached <= 0 || cached%16 != 0 || cached >= promptTokens {
			t.Errorf("request 2: cached_tokens %d, want a positive multiple of 16 below prompt_tokens %d", cached, promptTokens)
		}
		if got := raws[1].Header.Get("X-Inferrail-Cached-Tokens"); got != strconv.FormatInt(cached, 10) {
			t.Errorf("request 2: the gateway predicted %s cached tokens, the engine found %d", got, cached)
		}
		if a, b := res[0].Choices[0].Message.Content, res[1].Choices[0].Message.Content; a != b {
			t.Errorf("same prompt, different replies: %q, %q", a, b)
		}
	})

	// Alone: it reads gauges every other request moves.
	t.Run("Cancellation", func(t *testing.T) {
		testCancellation(t, f, client)
	})
}

// testChatStreamed streams a chat with include_usage and checks it against
// the same chat unstreamed, which may be served by another replica: the
// stand-in model's words depend on the prompt alone.
func testChatStreamed(t *testing.T, client openai.Client, text string) {
	ctx := sdktest.Context(t, 15*time.Second)
	want, err := client.Chat.Completions.New(ctx, chat(sdkModel, text, 8))
	if err != nil {
		t.Fatal(err)
	}
	params := chat(sdkModel, text, 8)
	params.StreamOptions.IncludeUsage = openai.Bool(true)
	var raw *http.Response
	stream := client.Chat.Completions.NewStreaming(ctx, params, option.WithResponseInto(&raw))
	defer stream.Close()
	var chunks []openai.ChatCompletionChunk
	var content strings.Builder
	var finishes []string
	var usage []openai.CompletionUsage
	for stream.Next() {
		ch := stream.Current()
		chunks = append(chunks, ch)
		for _, c := range ch.Choices {
			content.WriteString(c.Delta.Content)
			if c.FinishReason != "" {
				finishes = append(finishes, c.FinishReason)
			}
		}
		if ch.JSON.Usage.Valid() {
			usage = append(usage, ch.Usage)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream ended with %v after %d chunks", err, len(chunks))
	}
	if len(chunks) < 3 {
		t.Fatalf("%d chunks, want a role chunk, content and usage", len(chunks))
	}
	if ct := raw.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("content-type %q, want text/event-stream", ct)
	}
	checkRouted(t, "stream", raw, "chatcmpl-", chunks[0].ID)
	for i, ch := range chunks {
		if ch.ID != chunks[0].ID {
			t.Errorf("chunk %d id %q, first chunk's %q", i, ch.ID, chunks[0].ID)
		}
		if got := ch.JSON.Object.Raw(); got != `"chat.completion.chunk"` {
			t.Errorf("chunk %d object %s", i, got)
		}
		if ch.Model != sdkModel {
			t.Errorf("chunk %d model %q", i, ch.Model)
		}
	}
	if len(chunks[0].Choices) != 1 || chunks[0].Choices[0].Delta.Role != "assistant" {
		t.Errorf("first chunk does not carry role assistant: %s", chunks[0].RawJSON())
	}
	if !slices.Equal(finishes, []string{"length"}) {
		t.Errorf("finish reasons %q, want one length", finishes)
	}
	if got, want := content.String(), want.Choices[0].Message.Content; got != want || got == "" {
		t.Errorf("streamed content %q, unstreamed %q", got, want)
	}
	if len(usage) != 1 {
		t.Fatalf("%d usage chunks, want 1", len(usage))
	}
	last := chunks[len(chunks)-1]
	if !last.JSON.Usage.Valid() || len(last.Choices) != 0 {
		t.Errorf("usage is not alone in the last chunk: %s", last.RawJSON())
	}
	sdktest.CheckUsage(t, "streamed usage", usage[0], 8)
	if usage[0].PromptTokens != want.Usage.PromptTokens {
		t.Errorf("streamed prompt_tokens %d, unstreamed %d", usage[0].PromptTokens, want.Usage.PromptTokens)
	}
	checkPredicted(t, "stream", raw, usage[0])
}

// testCompletions checks the legacy completions endpoint unstreamed, then
// streamed with include_usage.
func testCompletions(t *testing.T, client openai.Client) {
	ctx := sdktest.Context(t, 15*time.Second)
	params := completion(sdktest.Words("complete", 10), 5)
	var raw *http.Response
	res, err := client.Completions.New(ctx, params, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.ID, "cmpl-") || len(res.ID) == len("cmpl-") {
		t.Errorf("id %q, want cmpl-<request id>", res.ID)
	}
	checkRouted(t, "response", raw, "cmpl-", res.ID)
	if got := res.JSON.Object.Raw(); got != `"text_completion"` {
		t.Errorf("object %s, want \"text_completion\"", got)
	}
	if res.Model != sdkModel {
		t.Errorf("model %q, want %q", res.Model, sdkModel)
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
	checkPredicted(t, "response", raw, res.Usage)

	params.StreamOptions.IncludeUsage = openai.Bool(true)
	var sraw *http.Response
	stream := client.Completions.NewStreaming(ctx, params, option.WithResponseInto(&sraw))
	defer stream.Close()
	var streamed strings.Builder
	var usage []openai.CompletionUsage
	n := 0
	for stream.Next() {
		ch := stream.Current()
		if n == 0 {
			checkRouted(t, "stream", sraw, "cmpl-", ch.ID)
		}
		n++
		if !strings.HasPrefix(ch.ID, "cmpl-") {
			t.Errorf("chunk id %q, want prefix cmpl-", ch.ID)
		}
		for _, c := range ch.Choices {
			streamed.WriteString(c.Text)
		}
		if ch.JSON.Usage.Valid() {
			usage = append(usage, ch.Usage)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream ended with %v after %d chunks", err, n)
	}
	if streamed.String() != text {
		t.Errorf("streamed text %q, unstreamed %q", streamed.String(), text)
	}
	if len(usage) != 1 {
		t.Fatalf("%d usage chunks, want 1", len(usage))
	}
	sdktest.CheckUsage(t, "streamed usage", usage[0], 5)
	if usage[0].PromptTokens != res.Usage.PromptTokens {
		t.Errorf("streamed prompt_tokens %d, unstreamed %d", usage[0].PromptTokens, res.Usage.PromptTokens)
	}
}

// testCancellation leaves a long stream after its first chunk and checks
// that the gateway lets the engine go: no engine runs anything and the
// gateway holds no request in flight within a few seconds.
func testCancellation(t *testing.T, f *e2eFleet, client openai.Client) {
	ctx, cancel := context.WithCancel(sdktest.Context(t, 15*time.Second))
	defer cancel()
	params := chat(sdkModel, sdktest.Words("cancel", 20), 2000) // ~40 s of decoding
	var raw *http.Response
	// ignore_eos keeps the stand-in model from stopping on its own before
	// max_tokens.
	stream := client.Chat.Completions.NewStreaming(ctx, params, option.WithJSONSet("ignore_eos", true), option.WithResponseInto(&raw))
	defer stream.Close()
	if !stream.Next() {
		t.Fatalf("stream ended before its first chunk: %v", stream.Err())
	}
	rep := checkRouted(t, "stream", raw, "chatcmpl-", stream.Current().ID)
	base, ok := f.sims[rep]
	if !ok {
		t.Fatalf("x-inferrail-replica %q names no engine", rep)
	}
	// The engine publishes its gauges after it hands out a step's tokens
	// (as vLLM's output handler does), so a scrape right after the first
	// chunk may still see the step before it: wait for the next one.
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		v, ok := sample(scrape(t, base), "vllm:num_requests_running", `model_name="`+sdkModel+`"`)
		if ok && v == 1 {
			break
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("while streaming: %s's vllm:num_requests_running = %v (found %v) for 2 s, want 1", rep, v, ok)
		}
	}
	if n := inFlight(t, f)[rep]; n != 1 {
		t.Fatalf("while streaming: the gateway has %d requests in flight on %s, want 1", n, rep)
	}

	cancel()
	cancelled := time.Now()
	for stream.Next() {
		// A chunk already buffered may still be delivered; the stream
		// must end right after.
		if time.Since(cancelled) > time.Second {
			t.Fatal("the stream goes on a second after its context was cancelled")
		}
	}
	if err := stream.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("stream error after cancelling %v, want context.Canceled", err)
	}
	_ = stream.Close()

	for {
		busy := map[string]string{}
		for id, base := range f.sims {
			page := scrape(t, base)
			if v, ok := sample(page, "vllm:num_requests_running", `model_name="`+sdkModel+`"`); !ok || v != 0 {
				busy[id] = fmt.Sprintf("engine running %v (found %v)", v, ok)
			}
		}
		for id, n := range inFlight(t, f) {
			if n != 0 {
				busy[id] += fmt.Sprintf(" gateway in flight %d", n)
			}
		}
		if len(busy) == 0 {
			t.Logf("the engine and the gateway let go %v after the cancel", time.Since(cancelled).Round(time.Millisecond))
			return
		}
		if time.Since(cancelled) > 5*time.Second {
			t.Fatalf("5 s after cancelling, still busy: %v", busy)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// inFlight returns the gateway's requests in flight per replica.
func inFlight(t *testing.T, f *e2eFleet) map[string]int64 {
	t.Helper()
	reps, err := f.replicas()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, r := range reps {
		out[r.ID] = r.InFlight
	}
	return out
}

// scrape fetches an engine's /metrics page.
func scrape(t *testing.T, base string) string {
	t.Helper()
	res, err := probe.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET %s/metrics: %v", base, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading %s/metrics: %v", base, err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/metrics: %s\n%s", base, res.Status, body)
	}
	return string(body)
}

// sample returns the value of the first sample of metric in a Prometheus
// text page whose labels include every one of labels (each name="value").
func sample(page, metric string, labels ...string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(page))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric) {
			continue
		}
		rest := line[len(metric):]
		var set string
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				continue
			}
			set, rest = rest[1:end], rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // a longer name that starts with metric
		}
		pairs := strings.Split(set, ",")
		if !allIn(labels, pairs) {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			return v, true
		}
	}
	return 0, false
}

func allIn(want, have []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}
