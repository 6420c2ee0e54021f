package sim

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/tokenize/simtok"
)

var requestSeeds = []string{
	`{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`,
	`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}`,
	`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}]}`,
	`{"prompt":"Hello","max_tokens":"4","stream":"true","stream_options":{"include_usage":1}}`,
	`{"prompt":[[1,2,3]],"n":2}`,
	`{"prompt":[1,-5]}`,
	`{"prompt":[1,2,3],"max_tokens":2,"min_tokens":1}`,
	`{"prompt":[7.0,8,1e1],"stream":true,"stream_options":{"include_usage":true}}`,
	`{"prompt":"a b","truncate_prompt_tokens":"4","stream_options":{}}`,
	`{"model":null,"prompt":["a","b"]}`,
	`[1,2]`, `null`, `{"messages":{}}`, `{"max_tokens":1e400}`, `{"max_tokens":-1}`,
	strings.Repeat("[", 2000),
}

// fuzzParse checks that parsing never panics and that what it accepts is
// coherent.
func fuzzParse(t *testing.T, body []byte, chat bool) {
	tok := simtok.New()
	g, e := parseGenRequest(body, chat, tok)
	if e != nil {
		if g != nil {
			t.Fatal("both a request and an error")
		}
		if e.Status != 400 || e.Message == "" {
			t.Fatalf("error %d %q for %q", e.Status, e.Message, body)
		}
		if !json.Valid(e.AppendJSON(nil)) || !json.Valid(e.AppendStreamJSON(nil)) {
			t.Fatalf("error body is not JSON: %s", e.AppendJSON(nil))
		}
		// What the validator accepts, the prompt reader shared with the
		// gateway must read too.
		for _, prefix := range []string{"chat request:", "completion request:", "prompt:", "messages[", "tools:", "prompt not followed"} {
			if strings.HasPrefix(e.Message, prefix) {
				t.Fatalf("validated body %q refused by the shared prompt reader: %s", body, e.Message)
			}
		}
		return
	}
	if g.maxTokens < 0 || g.minTokens < 0 || (g.maxTokens > 0 && g.minTokens > g.maxTokens) {
		t.Fatalf("accepted max_tokens %d min_tokens %d", g.maxTokens, g.minTokens)
	}
	if g.optionsNoStream {
		t.Fatal("accepted stream_options without stream")
	}
	if chat && (g.prompt.Chat == nil || g.prompt.Chat.AddGenerationPrompt && g.prompt.Chat.ContinueFinalMessage) {
		t.Fatal("accepted both add_generation_prompt and continue_final_message")
	}
	for _, id := range g.prompt.IDs {
		if !tok.Valid(id) {
			t.Fatalf("accepted token id %d", id)
		}
	}
	ids := tok.PromptIDs(g.prompt)
	// A prompt of token ids is the prompt the engine runs, as sent.
	var top struct{ Prompt []float64 }
	if !chat && json.Unmarshal(body, &top) == nil && len(top.Prompt) > 0 {
		if len(ids) != len(top.Prompt) {
			t.Fatalf("prompt %v read as %v", top.Prompt, ids)
		}
		for i, id := range ids {
			if float64(id) != top.Prompt[i] {
				t.Fatalf("prompt %v read as %v", top.Prompt, ids)
			}
		}
	}
}

func FuzzChatRequest(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > 1<<16 {
			return
		}
		fuzzParse(t, body, true)
	})
}

func FuzzCompletionRequest(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > 1<<16 {
			return
		}
		fuzzParse(t, body, false)
	})
}

// FuzzHTTP sends arbitrary bodies to every endpoint of a running simulator:
// every answer is a well-formed success or a well-formed vLLM error, never a
// server failure.
func FuzzHTTP(f *testing.F) {
	paths := []string{"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize", "/v1/models", "/reset_prefix_cache",
		"/v1/chat/completions/render", "/v1/completions/render"}
	for i, s := range requestSeeds {
		f.Add(uint8(i), []byte(s))
	}
	f.Add(uint8(3), []byte(`{"tokens":[1,2,3]}`))
	cfg := zeroLatencyConfig()
	cfg.MaxModelLen = 256
	cfg.NumGPUBlocks = 64
	_, url := startServer(f, cfg)
	client := &http.Client{}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		if len(body) > 1<<16 {
			return
		}
		path := paths[int(which)%len(paths)]
		method := http.MethodPost
		if path == "/v1/models" {
			method = http.MethodGet
		}
		req, err := http.NewRequest(method, url+path, strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case resp.StatusCode >= 500:
			t.Fatalf("%s %q: status %d %s", path, body, resp.StatusCode, got)
		case resp.Header.Get("Content-Type") == openai.SSEContentType:
			if resp.StatusCode != 200 || !strings.HasSuffix(string(got), "data: [DONE]\n\n") {
				t.Fatalf("%s %q: broken stream %d %s", path, body, resp.StatusCode, got)
			}
			for _, ev := range sseData(t, string(got)) {
				if ev != "[DONE]" && !json.Valid([]byte(ev)) {
					t.Fatalf("event is not JSON: %s", ev)
				}
			}
		default:
			if !json.Valid(got) {
				t.Fatalf("%s %q: body is not JSON: %s", path, body, got)
			}
			if resp.StatusCode != 200 {
				var e struct {
					Error struct {
						Code int `json:"code"`
					} `json:"error"`
				}
				if json.Unmarshal(got, &e) != nil || e.Error.Code != resp.StatusCode {
					t.Fatalf("%s %q: error body %s does not carry code %d", path, body, got, resp.StatusCode)
				}
			}
		}
	})
}
