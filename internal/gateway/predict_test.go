package gateway

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/policy"
	"github.com/inferrail/inferrail/internal/sim"
	"github.com/inferrail/inferrail/internal/syncbuf"
	"github.com/inferrail/inferrail/internal/tokenize"
	"github.com/inferrail/inferrail/internal/tokenize/chattemplate"
	"github.com/inferrail/inferrail/internal/tokenize/hf"
)

// engineUsage is what an engine reported of a response's prompt.
type engineUsage struct {
	Prompt int
	Cached int
}

// send posts body to path and returns the gateway's prediction headers and
// the engine's usage, from the full body or the stream's usage chunk.
func send(t *testing.T, url, path, body string) (predPrompt, predCached int, got engineUsage, replica string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
	}
	predPrompt, err1 := strconv.Atoi(resp.Header.Get("X-Inferrail-Prompt-Tokens"))
	predCached, err2 := strconv.Atoi(resp.Header.Get("X-Inferrail-Cached-Tokens"))
	if err1 != nil || err2 != nil {
		t.Fatalf("prediction headers missing: %v", resp.Header)
	}
	var usage struct {
		Usage *struct {
			PromptTokens        int `json:"prompt_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if resp.Header.Get("Content-Type") == openai.SSEContentType {
		r := openai.NewSSEReader(bufio.NewReader(resp.Body), 0)
		for {
			ev, err := r.Next()
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			if string(ev) == "[DONE]" {
				break
			}
			_ = json.Unmarshal(ev, &usage)
		}
	} else if err := json.NewDecoder(resp.Body).Decode(&usage); err != nil {
		t.Fatal(err)
	}
	if usage.Usage == nil {
		t.Fatal("no usage in the response")
	}
	return predPrompt, predCached, engineUsage{usage.Usage.PromptTokens, usage.Usage.PromptTokensDetails.CachedTokens}, resp.Header.Get("X-Inferrail-Replica")
}

// TestPredictionsExact sends 300 requests, one at a time, over three
// simulators whose small caches keep evicting: chat and completions,
// streamed and not, over shared prefixes of many lengths. The prompt length
// and the cached tokens the gateway predicts for the replica it chose equal
// what that engine then reports, on every request.
func TestPredictionsExact(t *testing.T) {
	sims := simsWith(t, 3, func(_ int, cfg *sim.Config) {
		cfg.ZeroLatency = true
		cfg.MaxModelLen = 1024
		cfg.NumGPUBlocks = 80 // 79 usable blocks of 16 tokens: constant eviction
		cfg.EnablePromptTokensDetails = true
	})
	cfg := testConfig(t, sims)
	cfg.Routing.DefaultPolicy = "random"
	gw := startGateway(t, cfg)
	waitFor(t, "capacities learned from the engines", 3*time.Second, func() bool {
		st := gw.g.index.Stats()
		return len(st.Replicas) == 3 && st.Replicas[0].Capacity == 79 && st.Replicas[2].Capacity == 79
	})

	rng := rand.New(rand.NewPCG(7, 7))
	var prefixes []string
	for i := range 8 {
		prefixes = append(prefixes, strings.Repeat(fmt.Sprintf("shared context %d says hello. ", i), 5+rng.IntN(40)))
	}
	hits, mismatches := 0, 0
	for i := range 300 {
		prefix := prefixes[rng.IntN(len(prefixes))]
		question := fmt.Sprintf("question %d %s", i, strings.Repeat("why ", rng.IntN(20)))
		stream := rng.IntN(2) == 0
		extra := `,"max_tokens":1`
		if stream {
			extra += `,"stream":true,"stream_options":{"include_usage":true}`
		}
		var path, body string
		if rng.IntN(2) == 0 {
			path = "/v1/chat/completions"
			body = `{"model":"sim","messages":[{"role":"system","content":` + strconv.Quote(prefix) + `},{"role":"user","content":` + strconv.Quote(question) + `}]` + extra + `}`
		} else {
			path = "/v1/completions"
			body = `{"model":"sim","prompt":` + strconv.Quote(prefix+question) + extra + `}`
		}
		predPrompt, predCached, got, rep := send(t, gw.url, path, body)
		if predPrompt != got.Prompt {
			t.Fatalf("request %d (%s): predicted %d prompt tokens, %s counted %d", i, path, predPrompt, rep, got.Prompt)
		}
		if predCached != got.Cached {
			mismatches++
			t.Errorf("request %d (%s, stream %v) on %s: predicted %d cached tokens, the engine had %d", i, path, stream, rep, predCached, got.Cached)
		}
		if got.Cached > 0 {
			hits++
		}
	}
	if hits < 50 {
		t.Errorf("only %d of 300 requests hit a cache: the test exercises too little", hits)
	}
	evicted := false
	for _, r := range gw.g.index.Stats().Replicas {
		evicted = evicted || r.Held >= r.Capacity-1 // one slot may hold the last partial block
	}
	if !evicted {
		t.Error("no replica's cache filled up: no eviction pressure")
	}
	t.Logf("%d of 300 requests found cached tokens; %d mispredicted", hits, mismatches)
}

// TestPredictionFallbacks: requests the tokenizer cannot follow are routed
// without a prediction and counted by reason; a failed attempt takes back
// what it recorded.
func TestPredictionFallbacks(t *testing.T) {
	sims := fleetOf(t, 1, true)
	gw := startGateway(t, testConfig(t, sims))
	for _, body := range []string{
		`{"model":"sim","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`,
		`{"model":"sim","messages":[{"role":"user","content":"x"}],"chat_template":"{{x}}"}`,
	} {
		resp, _ := chat(t, gw.url, body)
		if resp.Header.Get("X-Inferrail-Cached-Tokens") != "" {
			t.Errorf("a prediction for a request the tokenizer cannot follow: %s", body)
		}
	}
	// A batch of prompts: routed as before, without a prediction.
	resp, err := http.Post(gw.url+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"sim","prompt":["first prompt","second prompt"],"max_tokens":1}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Header.Get("X-Inferrail-Replica") == "" || resp.Header.Get("X-Inferrail-Cached-Tokens") != "" {
		t.Errorf("a batch of prompts: replica %q, cached tokens %q; want routed without a prediction",
			resp.Header.Get("X-Inferrail-Replica"), resp.Header.Get("X-Inferrail-Cached-Tokens"))
	}
	// The image and the batch are unsupported, the request's own template
	// is counted apart.
	for result, want := range map[string]float64{"unsupported": 2, "template": 1} {
		if got := counterValue(t, gw, "inferrail_tokenized_requests_total", "model", testModel, "result", result); got != want {
			t.Errorf("inferrail_tokenized_requests_total{result=%q} = %v, want %v", result, got, want)
		}
	}
	// The engine refuses: what routing recorded is taken back.
	sims[0].SetFault(sim.Fault{Kind: sim.FaultFail, Status: 400, SparesHealth: true})
	chat(t, gw.url, chatBody(strings.Repeat("refused prompt ", 50), ""))
	if st := gw.g.index.Stats(); st.Entries != 0 {
		t.Errorf("the index holds %d blocks of a prompt the engine refused", st.Entries)
	}
	sims[0].SetFault(sim.Fault{})
	chat(t, gw.url, chatBody(strings.Repeat("served prompt ", 50), ""))
	if st := gw.g.index.Stats(); st.Entries == 0 {
		t.Error("the index holds nothing of a prompt the engine served")
	}
}

// TestAdminTokenize: the admin port tokenizes as routing does and sends
// nothing to any engine.
func TestAdminTokenize(t *testing.T) {
	sims := fleetOf(t, 1, true)
	gw := startGateway(t, testConfig(t, sims))
	body := `{"model":"sim","messages":[{"role":"user","content":"` + strings.Repeat("tokens ", 30) + `"}]}`
	resp, err := http.Post(gw.admin+"/admin/tokenize/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Count  int      `json:"count"`
		Tokens []int    `json:"tokens"`
		Blocks []string `json:"blocks"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	// The simulator's own /tokenize agrees.
	direct, err := http.Post(sims[0].URL()+"/tokenize", "application/json", strings.NewReader(strings.Replace(body, `"sim"`, `"`+testModel+`"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Count  int   `json:"count"`
		Tokens []int `json:"tokens"`
	}
	_ = json.NewDecoder(direct.Body).Decode(&want)
	direct.Body.Close()
	if out.Count != want.Count || fmt.Sprint(out.Tokens) != fmt.Sprint(want.Tokens) || len(out.Blocks) != out.Count/16 {
		t.Errorf("admin tokenize %d tokens, %d blocks; the engine %d tokens", out.Count, len(out.Blocks), want.Count)
	}
	var page strings.Builder
	_, _ = sims[0].Server().Metrics().WriteTo(&page)
	if !strings.Contains(page.String(), `vllm:prompt_tokens_total{engine="0",model_name="inferrail/sim-8b"} 0.0`) {
		t.Error("tokenizing at the admin port reached the engine")
	}
	idx, err := http.Get(gw.admin + "/admin/index")
	if err != nil || idx.StatusCode != 200 {
		t.Fatalf("GET /admin/index: %v %v", idx, err)
	}
	idx.Body.Close()
	// A truncate_prompt_tokens that cuts the prompt is refused, as routing
	// goes without a prediction for it: the engine keeps other tokens
	// (found by a review: the whole prompt's tokens and blocks were
	// answered). One that keeps the whole prompt is tokenized, as is -1
	// (the context length) for a prompt within the engine's.
	for _, tc := range []struct {
		keep string
		want int
	}{{"2", 400}, {"-2", 400}, {"-1", 200}, {"10000", 200}} {
		waitFor(t, "the engine's context length", 3*time.Second, func() bool { return gw.g.contextLen(testModel) > 0 })
		body := `{"model":"sim","prompt":"` + strings.Repeat("tokens ", 30) + `","truncate_prompt_tokens":` + tc.keep + `}`
		resp, err := http.Post(gw.admin+"/admin/tokenize/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || tc.want == 400 && !strings.Contains(string(b), "truncate") {
			t.Errorf("truncate_prompt_tokens %s: %d %s, want %d", tc.keep, resp.StatusCode, b, tc.want)
		}
	}
}

// qwen3Dir is where make tokenizers puts the pinned Qwen3 tokenizer files.
const qwen3Dir = "../../.cache/tokenizers/qwen3"

// TestHFTokenizer: a model whose tokenizer is a Hugging Face directory, or
// a repository in the local Hugging Face cache, tokenizes completions as
// that tokenizer does, and chats as its chat template renders them.
func TestHFTokenizer(t *testing.T) {
	if raceEnabled {
		t.Skip("loads Qwen3's tokenizer four times, about 50 s under the race detector; make norace runs it")
	}
	if _, err := os.Stat(qwen3Dir + "/tokenizer.json"); err != nil {
		t.Fatalf("%v: run make tokenizers (make test does) to fetch the pinned tokenizer files", err)
	}
	tok, err := hf.Load(qwen3Dir)
	if err != nil {
		t.Fatal(err)
	}
	// The same files laid out as the Hugging Face hub caches them.
	hub := t.TempDir()
	snap := filepath.Join(hub, "models--Qwen--Qwen3-8B", "snapshots", "0123abcd")
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join(qwen3Dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(snap, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(hub, "models--Qwen--Qwen3-8B", "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hub, "models--Qwen--Qwen3-8B", "refs", "main"), []byte("0123abcd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HF_HUB_CACHE", hub)

	for _, setting := range []string{qwen3Dir, "Qwen/Qwen3-8B", "Qwen/Qwen3-8B@0123abcd"} {
		sims := fleetOf(t, 1, true)
		cfg := testConfig(t, sims)
		cfg.Models[0].Tokenizer = setting
		cfg.Tokenizer.Verify = false // the simulators stand in for Qwen3 with their own tokenizer
		if problems := TokenizerProblems(cfg); len(problems) != 0 {
			t.Fatalf("%s: %v", setting, problems)
		}
		gw := startGateway(t, cfg)
		text := "Grüße, 世界! The quick brown fox jumps over the lazy dog 12345."
		resp, err := http.Post(gw.admin+"/admin/tokenize/v1/completions", "application/json",
			strings.NewReader(`{"model":"sim","prompt":`+strconv.Quote(text)+`}`))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Tokens []int `json:"tokens"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if want := tok.Encode(nil, text, true); fmt.Sprint(out.Tokens) != fmt.Sprint(want) {
			t.Errorf("%s: gateway tokens %v, the tokenizer's %v", setting, out.Tokens, want)
		}
		// A chat is rendered with the model's chat template, then
		// tokenized without special tokens.
		body := chatBody("hi", `,"chat_template_kwargs":{"enable_thinking":false}`)
		resp, err = http.Post(gw.admin+"/admin/tokenize/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		out.Tokens = nil
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		prompt := "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
		if want := tok.Encode(nil, prompt, false); fmt.Sprint(out.Tokens) != fmt.Sprint(want) {
			t.Errorf("%s: gateway chat tokens %v, the template's %v", setting, out.Tokens, want)
		}
		if r, _ := chat(t, gw.url, body); r.StatusCode != 200 || r.Header.Get("X-Inferrail-Cached-Tokens") == "" {
			t.Errorf("%s: chat %d without a prediction", setting, r.StatusCode)
		}
		// A template refusing a request is counted as such.
		chat(t, gw.url, `{"model":"sim","messages":[],"max_tokens":4}`)
		if countedWith(scrape(t, gw.admin), "inferrail_tokenized_requests_total", `result="template"`) == 0 {
			t.Errorf("%s: a request the template refuses not counted as template", setting)
		}
	}
	cfg := testConfig(t, nil)
	cfg.Models[0].Tokenizer = "Qwen/NotCached"
	if p := TokenizerProblems(cfg); len(p) != 1 || !strings.Contains(p[0], "not in the local Hugging Face cache") {
		t.Errorf("a repository missing from the cache: %v", p)
	}
	// A template the engine cannot compile is named before any request
	// finds it out (a review found --check saying the model predicted).
	cfg.Models[0].Tokenizer = qwen3Dir
	cfg.Models[0].ChatTemplate = "{{ f(*a, *b) }}"
	if p := TokenizerProblems(cfg); len(p) != 1 || !strings.Contains(p[0], ": chat template does not compile: jinja parse") {
		t.Errorf("a chat template that does not compile: %v", p)
	}
}

// logLine returns the first line of a text log with message msg and
// model=model among its attributes, or "" when there is none.
func logLine(logs, msg, model string) string {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, " msg="+strconv.Quote(msg)+" ") && strings.Contains(l+" ", " model="+model+" ") {
			return l
		}
	}
	return ""
}

// TestStartupNotesModelsWithoutPredictions: at startup the gateway says
// which models route without cache predictions and why, at Info for a model
// configured without a tokenizer and at Warn, with the error, for one whose
// tokenizer fails to load; both still route.
func TestStartupNotesModelsWithoutPredictions(t *testing.T) {
	const plain, broken = "plain-model", "broken-model"
	scfg := sim.DefaultConfig()
	scfg.ZeroLatency = true
	scfg.MaxModelLen = 4096
	scfg.NumGPUBlocks = 1024
	scfg.ServedModelNames = []string{testModel, plain, broken}
	s, err := sim.StartLocal(scfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	cfg := patientProbes(testConfig(t, []*sim.Local{s}))
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "tokenizer.json"), []byte(`{"model": `), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Models = append(cfg.Models, config.Model{Name: plain}, config.Model{Name: broken, Tokenizer: bad})
	cfg.Replicas[0].Models = []string{testModel, plain, broken}
	_, loadErr := loadTokenizer(&cfg.Models[2], 0)
	if loadErr == nil {
		t.Fatal("a truncated tokenizer.json loaded")
	}
	gw := startGateway(t, cfg)
	logs := gw.logs.String()

	const noTokenizer = "model routes without cache predictions: no tokenizer configured"
	const failed = "model routes without cache predictions"
	if l := logLine(logs, noTokenizer, plain); !strings.Contains(l, "level=INFO ") {
		t.Errorf("no Info line naming %s, which has no tokenizer: %q\n%s", plain, l, logs)
	}
	if l := logLine(logs, failed, broken); !strings.Contains(l, "level=WARN ") || !strings.Contains(l, " error="+strconv.Quote(loadErr.Error())) {
		t.Errorf("no Warn line naming %s and its error %q: %q\n%s", broken, loadErr, l, logs)
	}
	for _, tt := range []struct{ msg, model string }{{noTokenizer, broken}, {noTokenizer, testModel}, {failed, plain}, {failed, testModel}} {
		if l := logLine(logs, tt.msg, tt.model); l != "" {
			t.Errorf("model %s logged as %q: %s", tt.model, tt.msg, l)
		}
	}

	for _, model := range []string{plain, broken} {
		resp, body := chat(t, gw.url, `{"model":"`+model+`","messages":[{"role":"user","content":"hello"}],"max_tokens":4}`)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Inferrail-Replica") != "sim-1" {
			t.Errorf("%s: %d from %q: %s", model, resp.StatusCode, resp.Header.Get("X-Inferrail-Replica"), body)
		}
		if h := resp.Header.Get("X-Inferrail-Cached-Tokens"); h != "" {
			t.Errorf("%s: a cache prediction (%s) without a tokenizer", model, h)
		}
	}
}

// TestSGLangCacheKeysKeepChainsApart: SGLang's extra_key and lora_path
// salt a prompt as cache_salt does, so the bare prompt is not promised
// what a keyed one cached, and the keyed one finds its own blocks (a
// review's finding: SGLang missed what the gateway predicted). The
// simulator is vLLM, which ignores both, so only predictions are checked.
func TestSGLangCacheKeysKeepChainsApart(t *testing.T) {
	sims := fleetOf(t, 1, true)
	gw := startGateway(t, testConfig(t, sims))
	content := strings.Repeat("a keyed prompt of several blocks ", 20)
	for i, s := range []struct {
		extra string
		hit   bool
	}{
		{`,"extra_key":"tenant-a"`, false},
		{``, false},
		{`,"lora_path":"tenant-a"`, false},
		{`,"extra_key":"tenant-b"`, false},
		{`,"extra_key":"tenant-a"`, true},
		{`,"extra_key":null`, true}, // the bare prompt's, cached by the second request
	} {
		resp, body := chat(t, gw.url, chatBody(content, s.extra))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, body)
		}
		if predicted, _ := strconv.Atoi(resp.Header.Get("X-Inferrail-Cached-Tokens")); (predicted > 0) != s.hit {
			t.Errorf("request %d (%s): predicted %d cached tokens, want a hit %v", i, s.extra, predicted, s.hit)
		}
	}
}

// TestCacheSaltKeepsChainsApart: the same prompt under another cache_salt
// shares no block with it, in the gateway's prediction and in the engine's
// cache alike, and under its own salt it finds its blocks again.
func TestCacheSaltKeepsChainsApart(t *testing.T) {
	sims := fleetOf(t, 1, true)
	gw := startGateway(t, testConfig(t, sims))
	content := strings.Repeat("a salted prompt of several blocks ", 20)
	send := func(salt string) (predicted, engine int) {
		t.Helper()
		resp, body := chat(t, gw.url, chatBody(content, `,"cache_salt":"`+salt+`"`))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("salt %q: status %d: %s", salt, resp.StatusCode, body)
		}
		predicted, _ = strconv.Atoi(resp.Header.Get("X-Inferrail-Cached-Tokens"))
		var out struct {
			Usage struct {
				Details struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatal(err)
		}
		return predicted, out.Usage.Details.Cached
	}
	steps := []struct {
		salt     string
		cachedOK func(int) bool
		want     string
	}{
		{"first", func(n int) bool { return n == 0 }, "nothing cached"},
		{"second", func(n int) bool { return n == 0 }, "nothing cached: another salt"},
		{"first", func(n int) bool { return n > 0 }, "its own blocks again"},
	}
	for i, s := range steps {
		predicted, engine := send(s.salt)
		if predicted != engine || !s.cachedOK(predicted) {
			t.Errorf("request %d (salt %q): predicted %d, engine %d cached; want %s, and the two equal", i, s.salt, predicted, engine, s.want)
		}
	}
}

// TestPromptLogprobsReadNoCache: a request that asks for prompt logprobs
// (prompt_logprobs, or echo with the logprobs member vLLM then takes them
// at) is computed whole by vLLM, so routing and explain predict it
// nothing cached on a replica that holds its prompt; the same prompt
// without them is predicted a hit there.
func TestPromptLogprobsReadNoCache(t *testing.T) {
	sims := fleetOf(t, 1, true)
	gw := startGateway(t, testConfig(t, sims))
	content := strings.Repeat("a prompt asked for its logprobs ", 20)
	chat(t, gw.url, chatBody(content, ""))
	complete(t, gw.url, `{"model":"sim","prompt":`+strconv.Quote(content)+`,"max_tokens":1}`)
	tests := []struct {
		path, extra string
		hit         bool
	}{
		{"/v1/chat/completions", ``, true},
		{"/v1/chat/completions", `,"prompt_logprobs":1`, false},
		{"/v1/chat/completions", `,"prompt_logprobs":null`, true},
		{"/v1/chat/completions", `,"echo":true`, false}, // top_logprobs defaults to 0
		{"/v1/chat/completions", `,"echo":"yes","top_logprobs":2`, false},
		{"/v1/chat/completions", `,"echo":true,"top_logprobs":null`, true},
		{"/v1/chat/completions", `,"echo":false,"top_logprobs":2`, true},
		{"/v1/completions", ``, true},
		{"/v1/completions", `,"prompt_logprobs":0`, false},
		{"/v1/completions", `,"echo":true,"logprobs":1`, false},
		{"/v1/completions", `,"echo":true`, true}, // logprobs defaults to null
		{"/v1/completions", `,"logprobs":1`, true},
	}
	for _, tt := range tests {
		body := chatBody(content, tt.extra)
		if tt.path == "/v1/completions" {
			body = `{"model":"sim","prompt":` + strconv.Quote(content) + `,"max_tokens":1` + tt.extra + `}`
		}
		ans := explainAt(t, gw.admin, tt.path, body)
		if len(ans.Replicas) != 1 || ans.Replicas[0].CachedTokens == nil || ans.Replicas[0].PricedCachedTokens == nil {
			t.Fatalf("%s %s: no prediction: %+v", tt.path, tt.extra, ans.Replicas)
		}
		r := ans.Replicas[0]
		if (*r.CachedTokens > 0) != tt.hit || (*r.PricedCachedTokens > 0) != tt.hit {
			t.Errorf("%s %s: predicted %d cached tokens, priced %d; want a hit %v", tt.path, tt.extra, *r.CachedTokens, *r.PricedCachedTokens, tt.hit)
		}
	}
}

// TestPredictGivesUpOnSlowTokenizing: a request whose tokens take longer
// than tokenizer.max_wait is routed without a prediction while the worker
// may still be tokenizing it; the worker's late result must not reach the
// request (the race detector catches a shared write), and every request is
// counted under one result.
func TestPredictGivesUpOnSlowTokenizing(t *testing.T) {
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: testModel, Tokenizer: "builtin:sim"}}
	cfg.Replicas = []config.Replica{{ID: "r0", URL: "http://127.0.0.1:1", Models: []string{testModel}}}
	cfg.Tokenizer.Workers = 1
	cfg.Tokenizer.MaxWait = config.Duration(time.Microsecond)
	g, err := New(&cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	const senders, each = 4, 25
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				words := strings.Repeat(fmt.Sprintf("word%d ", s*each+i), 400) // well past inlineBytes
				body := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":1}`, testModel, words)
				ex := &exchange{model: testModel, body: []byte(body)}
				if pred := g.predict(ex, false); pred != nil && pred.tokens == 0 {
					t.Errorf("a prediction of no tokens for %d bytes", len(body))
				}
			}
		})
	}
	wg.Wait()
	var total float64
	for _, result := range []string{tokOK, tokBusy, tokSlow} {
		total += counterValue(t, &running{g: g}, "inferrail_tokenized_requests_total", "model", testModel, "result", result)
	}
	if total != senders*each {
		t.Errorf("%v requests counted, want %d", total, senders*each)
	}
	if counterValue(t, &running{g: g}, "inferrail_tokenized_requests_total", "model", testModel, "result", tokSlow) == 0 {
		t.Error("no request gave up waiting: the test did not reach the case it is for")
	}
}

// TestTokResult: why a request got no prediction, by the tokenizer's error.
// A chat template stopped because the request stopped waiting is slow, like
// an encoding stopped for it, not the template refusing the request (which
// vLLM answers with 400); a rendering too long to follow is unsupported.
func TestTokResult(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{chattemplate.ErrStopped, tokSlow},
		{fmt.Errorf("messages: %w", chattemplate.ErrStopped), tokSlow},
		{hf.ErrStopped, tokSlow},
		{&chattemplate.Error{Err: errors.New("Conversation roles must alternate")}, tokTemplate},
		{&tokenize.UnsupportedError{Reason: tokenize.ReasonTemplate}, tokTemplate},
		{&tokenize.UnsupportedError{Reason: tokenize.ReasonSize}, tokUnsupported},
		{chattemplate.ErrMissing, tokUnavailable},
		{&chattemplate.RequestError{Msg: "bad"}, tokInvalid},
	} {
		if got := tokResult(tc.err); got != tc.want {
			t.Errorf("tokResult(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// panickyTokenizer is a tokenizer with a defect: it panics on every prompt.
type panickyTokenizer struct{}

func (panickyTokenizer) PromptIDs(*tokenize.Prompt, *atomic.Bool) ([]int, error) {
	panic("tokenizer defect")
}

func (panickyTokenizer) CacheStats() (hits, misses uint64) { return 0, 0 }

// TestPredictSurvivesTokenizerPanic: a tokenizer (or chat template engine)
// that panics on a request costs that request its prediction, inline or on
// the one pool worker, and says so in the log; the worker lives on.
func TestPredictSurvivesTokenizerPanic(t *testing.T) {
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: testModel, Tokenizer: "builtin:sim"}}
	cfg.Replicas = []config.Replica{{ID: "r0", URL: "http://127.0.0.1:1", Models: []string{testModel}}}
	cfg.Tokenizer.Workers = 1
	cfg.Tokenizer.MaxWait = config.Duration(10 * time.Second)
	logs := &syncbuf.Buffer{}
	g, err := New(&cfg, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	mt := g.tokenizers[testModel]
	real := mt.tok
	small := fmt.Sprintf(`{"model":%q,"prompt":"hello","max_tokens":1}`, testModel)
	large := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":1}`, testModel, strings.Repeat("word ", 1000)) // past inlineBytes
	mt.tok = panickyTokenizer{}
	for _, body := range []string{small, large, large} {
		if pred := g.predict(&exchange{model: testModel, body: []byte(body)}, false); pred != nil {
			t.Fatalf("a prediction from a panicking tokenizer: %+v", pred)
		}
	}
	if got := counterValue(t, &running{g: g}, "inferrail_tokenized_requests_total", "model", testModel, "result", tokUnavailable); got != 3 {
		t.Errorf("%v requests counted unavailable, want 3", got)
	}
	if n := strings.Count(logs.String(), "tokenizing a request failed"); n != 3 || !strings.Contains(logs.String(), "tokenizer defect") {
		t.Errorf("%d error lines, want 3 naming the panic:\n%s", n, logs.String())
	}
	mt.tok = real
	if pred := g.predict(&exchange{model: testModel, body: []byte(large)}, false); pred == nil || pred.tokens == 0 {
		t.Errorf("after the panics, the pool's worker gave no prediction: %+v", pred)
	}
}

// TestHubTokenizerName: a tokenizer found in the Hugging Face cache loads
// under its repository id, as transformers loads it there, which for a few
// repositories changes the class (the DeepSeek R1 Llama distills read
// tokenizer.json as it is); the same files in a directory do not.
func TestHubTokenizerName(t *testing.T) {
	const llama2Dir = "../../.cache/tokenizers/llama2"
	hub := t.TempDir()
	repo := filepath.Join(hub, "models--deepseek-ai--DeepSeek-R1-Distill-Llama-8B")
	snap := filepath.Join(repo, "snapshots", "abc")
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join(llama2Dir, f))
		if err != nil {
			t.Fatalf("%v: run make tokenizers (make test does)", err)
		}
		if err := os.WriteFile(filepath.Join(snap, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(snap, "config.json"), []byte(`{"model_type": "llama"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HF_HUB_CACHE", hub)
	for _, tt := range []struct{ setting, class string }{
		{"deepseek-ai/DeepSeek-R1-Distill-Llama-8B@abc", "TokenizersBackend"},
		{snap, "LlamaTokenizer"},
	} {
		mt, err := loadTokenizer(&config.Model{Name: "m", Tokenizer: tt.setting}, 0)
		if err != nil {
			t.Fatalf("%s: %v", tt.setting, err)
		}
		if mt.class != tt.class {
			t.Errorf("%s: tokenizer class %s, want %s", tt.setting, mt.class, tt.class)
		}
	}
}

// TestAdminTokenizeBounded: tokenizing on the admin port stops at the
// request's deadline, as routing's stops at its wait: a 4 MiB prompt takes
// Qwen3's tokenizer seconds and gigabytes. /admin/tokenize answers 504;
// /admin/explain, which tokenizes as routing does, explains the decision
// without a prediction ("slow") once tokenizer.max_wait has passed.
func TestAdminTokenizeBounded(t *testing.T) {
	if raceEnabled {
		t.Skip("loads Qwen3's tokenizer, about 12 s under the race detector; make norace runs it")
	}
	cfg := testConfig(t, fleetOf(t, 1, true))
	cfg.Models[0].Tokenizer = qwen3Dir
	cfg.Tokenizer.Verify = false
	cfg.Server.RequestTimeout = config.Duration(100 * time.Millisecond)
	cfg.Tokenizer.MaxWait = config.Duration(100 * time.Millisecond) // explain, as routing, waits this long
	gw := startGateway(t, cfg)
	body := `{"model":"sim","prompt":"` + strings.Repeat("tokens, more tokens; ", 200_000) + `"}`
	resp, err := http.Post(gw.admin+"/admin/tokenize/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(b), "request timeout") {
		t.Errorf("a 4 MiB prompt past the request timeout: %d %.200s, want 504", resp.StatusCode, b)
	}
	resp, err = http.Post(gw.admin+"/admin/explain/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Tokenized string `json:"tokenized"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if resp.StatusCode != 200 || out.Tokenized != tokSlow {
		t.Errorf("explaining a 4 MiB prompt past tokenizer.max_wait: %d, tokenized %q; want 200, %q", resp.StatusCode, out.Tokenized, tokSlow)
	}
	// An empty prompt's tokens are [], not null, as vLLM writes them.
	resp, err = http.Post(gw.admin+"/admin/tokenize/v1/completions", "application/json", strings.NewReader(`{"model":"sim","prompt":""}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"tokens": []`) {
		t.Errorf("an empty prompt: %s", b)
	}
}

// TestPredictedHitRatePerDecision: the two sides of the predicted hit rate
// count the same events, decisions: a retried request adds its prompt to
// both once per attempt, and a request refused before any decision (here
// by a rate limit, after it was tokenized) adds to neither. Counted
// otherwise, a dashboard read 149%.
func TestPredictedHitRatePerDecision(t *testing.T) {
	sims := fleetOf(t, 2, true)
	cfg := testConfig(t, sims)
	cfg.Models[0].Limits.RequestsPerMinute = 4
	gw := startGateway(t, cfg)
	sims[0].SetFault(sim.Fault{Kind: sim.FaultFail, Status: 503, SparesHealth: true}) // probes pass: requests still try it
	decisions := func() float64 {
		return counterValue(t, gw, "inferrail_routing_decisions_total", "model", testModel, "policy", "round_robin", "replica", "sim-1") +
			counterValue(t, gw, "inferrail_routing_decisions_total", "model", testModel, "policy", "round_robin", "replica", "sim-2")
	}
	var tokens float64
	for i := range 4 {
		resp, body := chat(t, gw.url, chatBody(fmt.Sprint("per decision ", i), ""))
		n, err := strconv.Atoi(resp.Header.Get(openai.HeaderPromptTokens))
		if resp.StatusCode != 200 || err != nil {
			t.Fatalf("request %d: %d, prompt tokens %q: %s", i, resp.StatusCode, resp.Header.Get(openai.HeaderPromptTokens), body)
		}
		tokens = float64(n) // every prompt here is as long
	}
	if resp, body := chat(t, gw.url, chatBody("per decision 9", "")); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("past the limit: %d %s, want 429", resp.StatusCode, body)
	}
	d := decisions()
	prompt := counterValue(t, gw, "inferrail_prompt_tokens_total", "model", testModel)
	predicted := counterValue(t, gw, "inferrail_predicted_cached_tokens_total", "model", testModel)
	if d <= 4 || prompt != d*tokens || predicted > prompt {
		t.Errorf("%v decisions of %v-token prompts (some retried): prompt tokens %v, predicted %v; want %v prompt tokens and no more predicted", d, tokens, prompt, predicted, d*tokens)
	}
}

// TestTruncatedPromptNotPredicted: a prompt truncate_prompt_tokens cuts is
// one the engine sees other tokens of, so it is routed without a
// prediction; one it leaves whole is predicted as any other. -1 cuts to
// the engine's context length: a six-token prompt fits 4,096 tokens, not
// four.
func TestTruncatedPromptNotPredicted(t *testing.T) {
	for _, ctx := range []int{4096, 4} {
		sims := simsWith(t, 1, func(_ int, cfg *sim.Config) { cfg.ZeroLatency, cfg.MaxModelLen = true, ctx })
		gw := startGateway(t, testConfig(t, sims))
		waitFor(t, "the engine's context length", 3*time.Second, func() bool { return gw.g.contextLen(testModel) == ctx })
		minusOne := tokOK
		if ctx < 6 {
			minusOne = tokUnsupported
		}
		for truncate, want := range map[string]string{"2": tokUnsupported, "100000": tokOK, "null": tokOK, "-1": minusOne, "-2": tokUnsupported} {
			var ans struct {
				Tokenized string `json:"tokenized"`
			}
			body := `{"model":"sim","prompt":"one two three four five six","truncate_prompt_tokens":` + truncate + `}`
			if code := adminDo(t, http.MethodPost, gw.admin+"/admin/explain/v1/completions", body, &ans); code != http.StatusOK || ans.Tokenized != want {
				t.Errorf("context %d, truncate_prompt_tokens %s: %d, tokenized %q; want %q", ctx, truncate, code, ans.Tokenized, want)
			}
		}
	}
}

// TestExplainTokenizesAsRouting: an explanation tokenizes as routing does,
// on the pool within tokenizer.max_wait, so when routing would go without a
// prediction (here every pooled prompt outlasts a microsecond), so does
// the explanation, and it names the same winner. It tokenized inline
// within the request timeout, and explained a prediction and a winner
// routing did not use (found by a review). A prompt small enough to be
// tokenized inline is predicted by both.
func TestExplainTokenizesAsRouting(t *testing.T) {
	cfg := testConfig(t, fleetOf(t, 1, true))
	cfg.Tokenizer.Workers = 1
	cfg.Tokenizer.MaxWait = config.Duration(time.Microsecond)
	gw := startGateway(t, cfg)
	var ans struct {
		Tokenized string `json:"tokenized"`
		Replicas  []struct {
			Cached *int `json:"cached_tokens"`
		} `json:"replicas"`
	}
	// Past inlineBytes, and long enough to outlast the timer's own delay
	// (tens of microseconds, more on a busy machine): 2 KB of one word
	// repeated was tokenized before the timer fired in most runs.
	var words strings.Builder
	for i := range 50_000 {
		fmt.Fprintf(&words, "w%d ", i)
	}
	pooled := fmt.Sprintf(`{"model":"sim","prompt":%q,"max_tokens":1}`, words.String())
	postExplain(t, gw.admin+"/admin/explain/v1/completions", pooled, &ans)
	if ans.Tokenized != tokSlow || len(ans.Replicas) != 1 || ans.Replicas[0].Cached != nil {
		t.Errorf("a pooled prompt past max_wait explained as tokenized %q with %+v, want %q and no prediction", ans.Tokenized, ans.Replicas, tokSlow)
	}
	postExplain(t, gw.admin+"/admin/explain/v1/completions", `{"model":"sim","prompt":"a few words","max_tokens":1}`, &ans)
	if ans.Tokenized != tokOK || len(ans.Replicas) != 1 || ans.Replicas[0].Cached == nil {
		t.Errorf("a small prompt explained as tokenized %q with %+v, want %q and a prediction", ans.Tokenized, ans.Replicas, tokOK)
	}
}

// TestExplainWithNothingOffered: an explanation with no replica offered
// (here the only one is full) says so with a null decision; a zero one
// read as the first replica answering at once (found by a review).
func TestExplainWithNothingOffered(t *testing.T) {
	url, arrived, release := heldStreamEngine(t)
	gw := startGateway(t, flowConfig(url, 0))
	held := make(chan struct{})
	go func() {
		defer close(held)
		chat(t, gw.url, `{"model":"sim","messages":[{"role":"user","content":"hold"}],"max_tokens":1}`)
	}()
	<-arrived
	var ans map[string]json.RawMessage
	postExplain(t, gw.admin+"/admin/explain/v1/chat/completions", `{"model":"sim","messages":[{"role":"user","content":"hi"}]}`, &ans)
	if string(ans["decision"]) != "null" || string(ans["winner"]) != `""` {
		t.Errorf("nothing offered: decision %s, winner %s; want null and none", ans["decision"], ans["winner"])
	}
	release()
	<-held
	postExplain(t, gw.admin+"/admin/explain/v1/chat/completions", `{"model":"sim","messages":[{"role":"user","content":"hi"}]}`, &ans)
	var d struct {
		Index *int `json:"index"`
	}
	if err := json.Unmarshal(ans["decision"], &d); err != nil || d.Index == nil || *d.Index != 0 || string(ans["winner"]) != `"one"` {
		t.Errorf("one replica offered: decision %s, winner %s; want index 0, one", ans["decision"], ans["winner"])
	}
}

// TestPromptLogprobsHaveNoPrefix: a request its engine computes whole
// (prompt logprobs) shows the policy no prefix: prefix_hash draws for it
// as for a prompt without blocks, and no hot prefix can be credited for
// it (found by a review: predicted nothing cached, it could still be
// steered by a hot-prefix owner's credit).
func TestPromptLogprobsHaveNoPrefix(t *testing.T) {
	cfg := testConfig(t, fleetOf(t, 2, true))
	cfg.Routing.DefaultPolicy = policy.PrefixHash
	gw := startGateway(t, cfg)
	content := strings.Repeat("a prompt of several blocks ", 20)
	for _, tc := range []struct {
		extra, steered string
	}{{"", ""}, {`,"prompt_logprobs":1`, policy.SteerNoPrefix}} {
		ans := explainAt(t, gw.admin, "/v1/chat/completions", chatBody(content, tc.extra))
		if ans.Decision == nil || ans.Decision.Steered != tc.steered {
			t.Errorf("%q: decision %+v, want steered %q", tc.extra, ans.Decision, tc.steered)
		}
	}
}
