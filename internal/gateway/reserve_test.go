package gateway

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/auth"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/openai"
)

// TestOutputCap: the most output a body asks for, as vLLM reads it: a
// chat's max_completion_tokens before its max_tokens, a completion's
// max_tokens only, times n, and times the prompts of a completion's batch.
func TestOutputCap(t *testing.T) {
	tests := []struct {
		name string
		body string
		chat bool
		want int64
	}{
		{"chat_max_tokens", `{"max_tokens":100}`, true, 100},
		{"chat_max_completion_tokens_first", `{"max_tokens":100,"max_completion_tokens":7}`, true, 7},
		{"chat_null_max_completion_tokens", `{"max_tokens":100,"max_completion_tokens":null}`, true, 100},
		{"completion_reads_max_tokens_only", `{"max_tokens":100,"max_completion_tokens":7}`, false, 100},
		{"n_multiplies", `{"max_tokens":100,"n":3}`, true, 300},
		{"n_as_a_string", `{"max_tokens":"100","n":"2"}`, false, 200},
		{"unreadable_n_is_one", `{"max_tokens":100,"n":[3]}`, true, 100},
		{"no_maximum", `{"n":4}`, true, 0},
		{"no_maximum_in_a_completion", `{"max_completion_tokens":9}`, false, 0},
		{"saturates", `{"max_tokens":9223372036854775807,"n":2}`, true, math.MaxInt64},
		{"batch_of_texts_multiplies", `{"prompt":["a","b","c"],"max_tokens":10,"n":2}`, false, 60},
		{"batch_of_id_lists_multiplies", `{"prompt":[[1,2],[3]],"max_tokens":10}`, false, 20},
		{"one_id_list_is_one_prompt", `{"prompt":[1,2,3],"max_tokens":10}`, false, 10},
		{"one_text_is_one_prompt", `{"prompt":"abc","max_tokens":10}`, false, 10},
		{"a_chat_has_no_batch", `{"prompt":["a","b"],"max_tokens":10}`, true, 10},
		{"batch_saturates", `{"prompt":["a","b"],"max_tokens":10,"n":9223372036854775807}`, false, math.MaxInt64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mf, err := openai.FindModel([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if got := outputCap(mf, []byte(tc.body), tc.chat); got != tc.want {
				t.Errorf("outputCap(%s, chat %v) = %d, want %d", tc.body, tc.chat, got, tc.want)
			}
		})
	}
}

// usageEngine answers every chat request whole, with completion_tokens
// in its usage; a request whose message is "hold" first says it arrived
// and waits for release.
func usageEngine(t *testing.T, completion int) (url string, arrived <-chan struct{}, release func()) {
	return holdingEngine(t, func(w http.ResponseWriter, _ int) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"total_tokens":%d,"completion_tokens":%d}}`,
			1+completion, completion)
	})
}

// TestOutputReservedAtAdmission: a request in flight holds its max_tokens
// of the output budget, so concurrent requests cannot overdraw it (found
// by a review: every request was admitted while the budget held one
// token); when it ends, what it did not generate is given back.
func TestOutputReservedAtAdmission(t *testing.T) {
	url, arrived, release := usageEngine(t, 3)
	cfg := onlyEngine(t, url)
	cfg.Models[0].Limits = config.Limits{OutputTokensPerMinute: 100}
	gw := startGateway(t, cfg)
	ask := func(content string, maxTokens int) string {
		return fmt.Sprintf(`{"model":"sim","messages":[{"role":"user","content":%q}],"max_tokens":%d}`, content, maxTokens)
	}
	held := make(chan sent, 1)
	go func() {
		resp, err := http.Post(gw.url+"/v1/chat/completions", "application/json", strings.NewReader(ask("hold", 80)))
		if err != nil {
			held <- sent{err: err}
			return
		}
		resp.Body.Close()
		held <- sent{status: resp.StatusCode}
	}()
	<-arrived
	resp, b := chat(t, gw.url, ask("b", 30))
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(b, "on output tokens per minute: limit 100, remaining 20, requested 30.") {
		t.Fatalf("30 more while 80 of 100 are held: %d %s; want 429 naming the 30 asked for", resp.StatusCode, b)
	}
	release()
	if s := <-held; s.err != nil || s.status != 200 {
		t.Fatalf("the held request: %d %v", s.status, s.err)
	}
	// It generated 3 of its 80: 77 come back. 90 more fit now, leaving 7
	// (and what refilled meanwhile, under two tokens a second).
	waitFor(t, "the held request to settle", 5*time.Second, func() bool {
		return metricValue(scrape(t, gw.admin), `inferrail_rate_limit_output_tokens_total{source="usage"}`) == 3
	})
	resp, b = chat(t, gw.url, ask("c", 90))
	if resp.StatusCode != 200 {
		t.Fatalf("90 after the held request gave back what it did not use: %d %s", resp.StatusCode, b)
	}
	if left := intHeader(t, resp, "X-Ratelimit-Remaining-Tokens"); left < 7 || left > 17 {
		t.Errorf("%d output tokens left after 3 used and 90 held of 100, want 7 and what refilled", left)
	}
}

// TestAbandonedWholeAnswerKeepsItsOutputReservation: a client that leaves
// while an engine generates its whole answer keeps what it took of the
// output budget (found by a review: such a request was charged no output
// at all, though the engine generated until the hang-up).
func TestAbandonedWholeAnswerKeepsItsOutputReservation(t *testing.T) {
	cfg := testConfig(t, fleetOf(t, 1, false)) // 20 ms a token: 200 take 4 s
	cfg.Models[0].Limits = config.Limits{OutputTokensPerMinute: 1000}
	gw := startGateway(t, cfg)
	long := `{"model":"sim","messages":[{"role":"user","content":"leave"}],"max_tokens":200,"ignore_eos":true}`
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw.url+"/v1/chat/completions", strings.NewReader(long))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a 4 s answer came in 300 ms: %d", resp.StatusCode)
	}
	waitFor(t, "the abandoned request to end", 5*time.Second, func() bool {
		return metricValue(scrape(t, gw.admin), `inferrail_client_disconnects_total{model="`+testModel+`"}`) == 1
	})
	resp, b := chat(t, gw.url, chatBody("next", ""))
	if resp.StatusCode != 200 {
		t.Fatalf("the next request: %d %s", resp.StatusCode, b)
	}
	// 1000 less the abandoned 200 and this one's 4, plus what refilled
	// since (1000 a minute: under 100 in the seconds this takes). Charged
	// nothing, it would be 996.
	if left := intHeader(t, resp, "X-Ratelimit-Remaining-Tokens"); left > 900 {
		t.Errorf("%d output tokens left of 1000 after an abandoned request of max_tokens 200: it was charged nothing", left)
	}
}

// TestOutputTokenLimitsCountBatches: a completion's batch of prompts asks
// for max_tokens for each prompt, as vLLM generates them, and its
// admission takes that much from the output budget (a review's finding:
// a batch of 3 prompts of max_tokens 3 took 3 where vLLM makes 9); one
// list of token ids is one prompt. Each key has 10 a minute and spends 2
// first, so 8 are left.
func TestOutputTokenLimitsCountBatches(t *testing.T) {
	tests := []struct {
		name, prompt string
		status       int
		requested    string
	}{
		{"batch_of_texts", `["a","b","c"]`, 429, "remaining 8, requested 9."},
		{"batch_of_id_lists", `[[1,2],[3],[4]]`, 429, "remaining 8, requested 9."},
		{"one_id_list", `[1,2,3]`, 200, ""},
		{"one_text", `"a b c"`, 200, ""},
	}
	keys := make([]*auth.Key, len(tests))
	secrets := make([]string, len(tests))
	for i, tc := range tests {
		secrets[i], keys[i] = newKey(tc.name, func(k *auth.Key) { k.Limits.OutputTokensPerMinute = 10 })
	}
	cfg := testConfig(t, fleetOf(t, 1, false))
	path := t.TempDir() + "/keys.yaml"
	writeKeys(t, path, keys...)
	cfg.Auth.KeysFile = path
	gw := startGateway(t, cfg)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			first := `{"model":"sim","prompt":"x","max_tokens":2,"ignore_eos":true}`
			if resp, b := postCompletion(t, gw.url, first, bearer(secrets[i])...); resp.StatusCode != 200 {
				t.Fatalf("spending 2: %d %s", resp.StatusCode, b)
			}
			body := `{"model":"sim","prompt":` + tc.prompt + `,"max_tokens":3,"ignore_eos":true}`
			resp, b := postCompletion(t, gw.url, body, bearer(secrets[i])...)
			if resp.StatusCode != tc.status || !strings.Contains(b, tc.requested) {
				t.Errorf("max_tokens 3 for %s with 8 left: %d %s; want %d %q", tc.prompt, resp.StatusCode, b, tc.status, tc.requested)
			}
		})
	}
}
