package main

// The official OpenAI Go SDK against a real inferrail-gateway process with
// API keys and TLS on its client port (a CA this test makes), in front of
// one real inferrail-sim: accepted, rejected and rate-limited, where the
// SDK's own retry honours the gateway's Retry-After and succeeds. The keys
// come from `inferrail-gateway keygen`, run as an operator would.

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/inferrail/inferrail/internal/certs/certstest"
	"github.com/inferrail/inferrail/internal/openai/sdktest"
)

// keygen runs `inferrail-gateway keygen` with args and returns the secret
// it printed and the entry for the keys file.
func keygen(t *testing.T, args ...string) (secret, entry string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := run(context.Background(), append([]string{"keygen"}, args...), &out, &errOut); err != nil {
		t.Fatalf("keygen %v: %v %s", args, err, errOut.String())
	}
	lines := strings.SplitAfter(out.String(), "\n")
	if len(lines) < 4 || !strings.HasPrefix(lines[1], "irk-") || !strings.HasPrefix(lines[2], "#") {
		t.Fatalf("keygen printed:\n%s", out.String())
	}
	return strings.TrimSpace(lines[1]), strings.Join(lines[3:], "")
}

// openAIError unwraps err to the SDK's *openai.Error with the given
// status, as the gateway's own key and limit errors are: OpenAI's string
// code, not vLLM's status, and an x-request-id.
func openAIError(t *testing.T, err error, status int) *openai.Error {
	t.Helper()
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("error %T %v is not an *openai.Error", err, err)
	}
	if apiErr.StatusCode != status || apiErr.Message == "" || !strings.HasPrefix(apiErr.JSON.Code.Raw(), `"`) {
		t.Fatalf("status %d, want %d, with a message and a string code: %s", apiErr.StatusCode, status, apiErr.RawJSON())
	}
	if apiErr.Response.Header.Get("X-Request-Id") == "" {
		t.Error("no x-request-id on the error")
	}
	return apiErr
}

// withLimits adds a limits block to a keygen entry.
func withLimits(entry, limits string) string {
	return strings.TrimSuffix(entry, "\n") + "\n    limits: {" + limits + "}\n"
}

// attempts records the status of every HTTP attempt an SDK client makes,
// with when it came back.
type attempts struct {
	mu  sync.Mutex
	got []attempt
}

type attempt struct {
	status  int
	at      time.Time
	retryMs int64 // the response's retry-after-ms; 0 when absent
}

func (a *attempts) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	resp, err := next(req)
	if resp != nil {
		ms, _ := strconv.ParseInt(resp.Header.Get("Retry-After-Ms"), 10, 64)
		a.mu.Lock()
		a.got = append(a.got, attempt{status: resp.StatusCode, at: time.Now(), retryMs: ms})
		a.mu.Unlock()
	}
	return resp, err
}

func (a *attempts) statuses() []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []int
	for _, x := range a.got {
		out = append(out, x.status)
	}
	return out
}

func TestSDKAuthTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "sdk-test-ca")
	certFile, keyFile := ca.WriteFiles(t, dir, "gateway", certstest.Localhost("inferrail-gateway"))

	fullSecret, full := keygen(t, "--name", "sdk-full")
	otherSecret, other := keygen(t, "--name", "sdk-other", "--models", sdkAlias+"-other")
	debtSecret, debt := keygen(t, "--name", "sdk-debt")
	debt = withLimits(debt, "output_tokens_per_minute: 60")
	smallSecret, small := keygen(t, "--name", "sdk-small")
	small = withLimits(small, "prompt_tokens_per_minute: 3")
	keysFile := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(keysFile, []byte("keys:\n"+full+other+debt+small), 0o600); err != nil {
		t.Fatal(err)
	}

	var simURL string
	err := launch(t, "inferrail-sim", childSim, func() ([]string, func() (bool, string), error) {
		port, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		simURL = "http://127.0.0.1:" + strconv.Itoa(port)
		return []string{"--host", "127.0.0.1", "--port", strconv.Itoa(port), "--served-model-name", sdkModel, "--decode-token-ms", "2"},
			func() (bool, string) { return getOK(simURL + "/health") }, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	httpsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}, Timeout: 5 * time.Second}
	defer httpsClient.CloseIdleConnections()
	var base string
	err = launch(t, "inferrail-gateway", childGateway, func() ([]string, func() (bool, string), error) {
		ports, err := freePorts(2)
		if err != nil {
			return nil, nil, err
		}
		client, admin := ports[0], ports[1]
		base = "https://127.0.0.1:" + strconv.Itoa(client)
		cfg := fmt.Sprintf(`server:
  listen: 127.0.0.1:%d
  admin_listen: 127.0.0.1:%d
  shutdown_timeout: 1s
  tls: {cert_file: %q, key_file: %q}
auth:
  keys_file: %q
models:
  - name: %s
    aliases: [%s]
    tokenizer: builtin:sim
  - name: %s-other
replicas:
  - {id: sim, url: %q, models: [%s, %s-other]}
tokenizer:
  verify: false
logging:
  level: warn
`, client, admin, certFile, keyFile, keysFile, sdkModel, sdkAlias, sdkAlias, simURL, sdkModel, sdkAlias)
		path := filepath.Join(dir, "gateway.yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			return nil, nil, err
		}
		return []string{"--config", path}, func() (bool, string) {
			res, err := httpsClient.Get(base + "/health")
			if err != nil {
				return false, err.Error()
			}
			res.Body.Close()
			return res.StatusCode == 200, res.Status
		}, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	sdk := func(key string, retries int, rec *attempts) *openai.Client {
		opts := []option.RequestOption{
			option.WithBaseURL(base + "/v1/"),
			option.WithAPIKey(key),
			option.WithMaxRetries(retries),
			option.WithHTTPClient(&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}),
		}
		if rec != nil {
			opts = append(opts, option.WithMiddleware(rec.middleware))
		}
		c := openai.NewClient(opts...)
		return &c
	}

	t.Run("Accepted", func(t *testing.T) {
		var raw *http.Response
		res, err := sdk(fullSecret, 0, nil).Chat.Completions.New(sdktest.Context(t, 15*time.Second), chat(sdkAlias, sdktest.Words("keyed", 8), 4), option.WithResponseInto(&raw))
		if err != nil {
			t.Fatal(err)
		}
		sdktest.CheckUsage(t, "usage", res.Usage, 4)
		if raw.TLS == nil || raw.TLS.PeerCertificates[0].Subject.CommonName != "inferrail-gateway" {
			t.Errorf("not served over TLS with the test certificate: %+v", raw.TLS)
		}
		stream := sdk(fullSecret, 0, nil).Chat.Completions.NewStreaming(sdktest.Context(t, 15*time.Second), chat(sdkModel, sdktest.Words("keyed-stream", 8), 4))
		chunks := 0
		for stream.Next() {
			chunks++
		}
		if err := stream.Err(); err != nil || chunks == 0 {
			t.Errorf("a keyed stream over TLS: %d chunks, %v", chunks, err)
		}
	})

	t.Run("Rejected", func(t *testing.T) {
		for _, tc := range []struct {
			name, key string
			model     string
			status    int
			code      string
		}{
			{"wrong_key", "irk-" + strings.Repeat("A", 43), sdkModel, 401, "invalid_api_key"},
			{"model_not_allowed", otherSecret, sdkModel, 403, "model_not_allowed"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var rec attempts
				_, err := sdk(tc.key, 3, &rec).Chat.Completions.New(sdktest.Context(t, 15*time.Second), chat(tc.model, "hello", 2))
				apiErr := openAIError(t, err, tc.status)
				if apiErr.Code != tc.code || apiErr.Type != "invalid_request_error" {
					t.Errorf("code %q type %q, want %q invalid_request_error", apiErr.Code, apiErr.Type, tc.code)
				}
				if got := rec.statuses(); len(got) != 1 {
					t.Errorf("attempts %v: the SDK must not retry a %d", got, tc.status)
				}
			})
		}
	})

	t.Run("RateLimitedThenRetried", func(t *testing.T) {
		// 61 output tokens at 60 a minute leave the key a token in debt:
		// the next request, which reserves its 2 tokens of output at
		// admission, waits three seconds.
		params := chat(sdkModel, sdktest.Words("debt", 4), 61)
		params.SetExtraFields(map[string]any{"ignore_eos": true})
		if _, err := sdk(debtSecret, 0, nil).Chat.Completions.New(sdktest.Context(t, 15*time.Second), params); err != nil {
			t.Fatal(err)
		}
		var rec attempts
		start := time.Now()
		res, err := sdk(debtSecret, 2, &rec).Chat.Completions.New(sdktest.Context(t, 30*time.Second), chat(sdkModel, sdktest.Words("after-debt", 4), 2))
		if err != nil {
			t.Fatalf("the SDK's retry did not succeed: %v (attempts %v)", err, rec.statuses())
		}
		sdktest.CheckUsage(t, "usage", res.Usage, 2)
		got := rec.statuses()
		if len(got) != 2 || got[0] != 429 || got[1] != 200 {
			t.Fatalf("attempts %v, want a 429 then a 200", got)
		}
		first, second := rec.got[0], rec.got[1]
		if first.retryMs < 2000 || first.retryMs > 3100 {
			t.Errorf("retry-after-ms %d, want about 3 s", first.retryMs)
		}
		// The SDK waited as told (a lower bound: load only makes it later).
		if waited := second.at.Sub(first.at); waited < time.Duration(first.retryMs)*time.Millisecond {
			t.Errorf("the SDK retried %v after the 429, sooner than its retry-after-ms %d", waited, first.retryMs)
		}
		t.Logf("429 then 200 after %v (retry-after-ms %d)", time.Since(start).Round(time.Millisecond), first.retryMs)
	})

	t.Run("TooLargeNotRetried", func(t *testing.T) {
		var rec attempts
		_, err := sdk(smallSecret, 3, &rec).Chat.Completions.New(sdktest.Context(t, 15*time.Second), chat(sdkModel, sdktest.Words("large", 20), 2))
		apiErr := openAIError(t, err, http.StatusTooManyRequests)
		if apiErr.Code != "rate_limit_exceeded" || apiErr.Type != "tokens" || !strings.Contains(apiErr.Message, "Request too large") {
			t.Errorf("429: %s", apiErr.RawJSON())
		}
		if got := rec.statuses(); len(got) != 1 {
			t.Errorf("attempts %v: x-should-retry: false must stop the SDK's retries", got)
		}
	})
}
