package sim

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

var renderIDRE = regexp.MustCompile(`^(\[?)\{"request_id":"(chatcmpl|cmpl)-[0-9a-f]{16}"`)

// tokensOf is the "tokens" list of a /tokenize answer, as written.
func tokensOf(t *testing.T, answer string) string {
	t.Helper()
	_, rest, ok := strings.Cut(answer, `"tokens":`)
	list, _, ok2 := strings.Cut(rest, `]`)
	if !ok || !ok2 {
		t.Fatalf("no tokens in %s", answer)
	}
	return list + "]"
}

// TestRenderAnswers: the render endpoints answer vLLM's GenerateRequest
// byte for byte: the prompt ids /tokenize gives for the same body, and the
// sampling_params vLLM serializes (msgspec, omit_defaults), in declaration
// order. The wanted sampling_params were computed by a scratch replica of
// vLLM's SamplingParams and request models (msgspec 0.22, pydantic 2.14,
// CPython 3.11), which also showed that omit_defaults compares values by
// identity: a default the request model fills in is written.
func TestRenderAnswers(t *testing.T) {
	cfg := zeroLatencyConfig()
	cfg.EnableAutoToolChoice, cfg.ToolCallParser = true, "hermes"
	_, url := startServer(t, cfg)
	const (
		hi   = `"messages":[{"role":"user","content":"hi"}]`
		tool = `{"type":"function","function":{"name":"run_tests","description":"Run them.","parameters":{"type":"object","properties":{}}}}`
		// What a request that sets nothing gets, but for max_tokens and
		// output_kind.
		plain = `{"presence_penalty":0.0,"frequency_penalty":0.0,"repetition_penalty":1.0,"temperature":1.0,"top_p":1.0,"min_p":0.0,"stop":[],"stop_token_ids":[]`
		tail  = `"bad_words":[],"skip_reading_prefix_cache":false}`
	)
	tests := []struct {
		name string
		chat bool
		body string
		sp   string
		// The fields after sampling_params: model to priority.
		rest string
	}{
		{"chat_plain", true, `{` + hi + `}`,
			plain + `,"max_tokens":2037,"output_kind":2,"skip_clone":true,` + tail,
			`"model":null,"stream":false,"stream_options":null,"cache_salt":null,"priority":0`},
		{"chat_tools_streamed", true, `{"model":"m-alias","messages":[{"role":"system","content":"Use tools."},{"role":"user","content":"Run the tests"},` +
			`{"role":"assistant","content":"","tool_calls":[{"id":"call_0","type":"function","function":{"name":"run_tests","arguments":"{}"}}]},` +
			`{"role":"tool","content":"ok","tool_call_id":"call_0"}],"tools":[` + tool + `],"max_tokens":100,"ignore_eos":true,"stream":true,` +
			`"stream_options":{"include_usage":true},"cache_salt":"team-a","priority":3}`,
			// hermes turns skip_special_tokens off for tool calling.
			plain + `,"ignore_eos":true,"max_tokens":100,"skip_special_tokens":false,"output_kind":1,"skip_clone":true,` + tail,
			`"model":"m-alias","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":false},"cache_salt":"team-a","priority":3`},
		{"chat_tool_choice_none_no_generation_prompt", true, `{` + hi + `,"tools":[` + tool + `],"tool_choice":"none","add_generation_prompt":false}`,
			plain + `,"max_tokens":1965,"output_kind":2,"skip_clone":true,` + tail,
			`"model":null,"stream":false,"stream_options":null,"cache_salt":null,"priority":0`},
		{"chat_continue_final_message", true, `{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hel"}],"add_generation_prompt":false,"continue_final_message":true,"max_tokens":16}`,
			plain + `,"output_kind":2,"skip_clone":true,` + tail, // max_tokens 16 is the default object
			`"model":null,"stream":false,"stream_options":null,"cache_salt":null,"priority":0`},
		{"chat_sampling", true, `{` + hi + `,"temperature":0.7,"top_p":"0.9","top_k":40,"min_p":0.05,"seed":42,"presence_penalty":0.5,"frequency_penalty":-0.5,` +
			`"repetition_penalty":1.1,"stop":["</s>","é»"],"min_tokens":5,"max_tokens":10,"max_completion_tokens":64}`,
			`{"presence_penalty":0.5,"frequency_penalty":-0.5,"repetition_penalty":1.1,"temperature":0.7,"top_p":0.9,"top_k":40,"min_p":0.05,"seed":42,` +
				`"stop":["</s>","é»"],"stop_token_ids":[],"max_tokens":64,"min_tokens":5,"output_kind":2,"skip_clone":true,"output_text_buffer_length":3,` + tail,
			`"model":null,"stream":false,"stream_options":null,"cache_salt":null,"priority":0`},
		{"chat_greedy_nulls", true, `{` + hi + `,"temperature":0,"top_p":0.5,"top_k":5,"min_p":0.2,"presence_penalty":null,"frequency_penalty":null,` +
			`"repetition_penalty":null,"seed":-1,"stream":true,"stream_options":{"include_usage":null}}`,
			`{"repetition_penalty":1.0,"temperature":0.0,"stop":[],"stop_token_ids":[],"max_tokens":2037,"output_kind":1,"skip_clone":true,` + tail,
			`"model":null,"stream":true,"stream_options":{"include_usage":null,"continuous_usage_stats":false},"cache_salt":null,"priority":0`},
		{"chat_tiny_temperature", true, `{` + hi + `,"temperature":0.005,"top_k":-1,"max_tokens":16}`,
			`{"presence_penalty":0.0,"frequency_penalty":0.0,"repetition_penalty":1.0,"temperature":0.01,"top_p":1.0,"top_k":-1,"min_p":0.0,"stop":[],"stop_token_ids":[],"output_kind":2,"skip_clone":true,` + tail,
			`"model":null,"stream":false,"stream_options":null,"cache_salt":null,"priority":0`},
		{"completion_plain", false, `{"prompt":"Once upon a time"}`,
			plain + `,"output_kind":2,"skip_clone":true,` + tail,
			`"model":null,"stream":false,"stream_options":null,"cache_salt":null,"priority":0`},
		{"completion_ids_streamed", false, `{"model":"m","prompt":[[1,300,301]],"max_tokens":5,"stream":true,"stop":"xyz","temperature":1}`,
			`{"presence_penalty":0.0,"frequency_penalty":0.0,"repetition_penalty":1.0,"temperature":1.0,"top_p":1.0,"min_p":0.0,"stop":["xyz"],"stop_token_ids":[],"max_tokens":5,"output_kind":1,"skip_clone":true,"output_text_buffer_length":2,` + tail,
			`"model":"m","stream":true,"stream_options":null,"cache_salt":null,"priority":0`},
		{"completion_lax_values", false, `{"prompt":"Once","max_tokens":null,"seed":"7","top_k":2.0,"priority":"-2"}`,
			`{"presence_penalty":0.0,"frequency_penalty":0.0,"repetition_penalty":1.0,"temperature":1.0,"top_p":1.0,"top_k":2,"min_p":0.0,"seed":7,"stop":[],"stop_token_ids":[],"output_kind":2,"skip_clone":true,` + tail,
			`"model":null,"stream":false,"stream_options":null,"cache_salt":null,"priority":-2`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, prefix := "/v1/completions/render", "cmpl-"
			if tt.chat {
				path, prefix = "/v1/chat/completions/render", "chatcmpl-"
			}
			code, ctype, got := post(t, url+path, tt.body)
			if code != http.StatusOK || ctype != "application/json" {
				t.Fatalf("POST %s: %d %s %s", path, code, ctype, got)
			}
			_, _, tok := post(t, url+"/tokenize", tt.body)
			want := `{"request_id":"` + prefix + `0000000000000000","token_ids":` + tokensOf(t, tok) +
				`,"assistant_tokens_mask":null,"token_offsets":null,"features":null,"content_parts":null,"sampling_params":` + tt.sp +
				"," + tt.rest + `,"kv_transfer_params":null,"ec_transfer_params":null}`
			if !tt.chat {
				want = "[" + want + "]"
			}
			if !renderIDRE.MatchString(got) {
				t.Fatalf("request_id is not %s and 16 hex digits: %s", prefix, got)
			}
			got = renderIDRE.ReplaceAllString(got, `$1{"request_id":"$2-0000000000000000"`)
			if got != want {
				t.Errorf("POST %s %s\n got %s\nwant %s", path, tt.body, got, want)
			}
		})
	}
}

// TestRenderRefusesAsGeneration: vLLM validates a render request with the
// request model, model check and renderer that generation uses, so every
// body the simulator's chat or completion refuses gets the same answer from
// its render (but the KV cache's size, which only generation checks).
func TestRenderRefusesAsGeneration(t *testing.T) {
	_, url := startServer(t, zeroLatencyConfig())
	const hi = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, path, body, contentType string
		status                        int
	}{
		{"bad_json", "/v1/chat/completions", `{"messages":`, "", 400},
		{"wrong_types", "/v1/chat/completions", `{"messages":"hi","max_tokens":"many","stream":"perhaps"}`, "", 400},
		{"unknown_model", "/v1/chat/completions", `{"model":"nope",` + hi + `}`, "", 404},
		{"auto_tools_without_the_flag", "/v1/chat/completions", `{` + hi + `,"tools":[` + fnA + `]}`, "", 400},
		{"too_long", "/v1/chat/completions", `{` + hi + `,"max_tokens":5000}`, "", 400},
		{"n", "/v1/chat/completions", `{` + hi + `,"n":2}`, "", 400},
		{"temperature", "/v1/chat/completions", `{` + hi + `,"temperature":3}`, "", 400},
		{"both_prompt_flags", "/v1/chat/completions", `{` + hi + `,"continue_final_message":true}`, "", 400},
		{"content_type", "/v1/chat/completions", `{` + hi + `}`, "text/plain", 400},
		{"empty_prompt", "/v1/completions", `{"prompt":""}`, "", 400},
		{"empty_stop", "/v1/completions", `{"prompt":"x","stop":""}`, "", 400},
		{"batch", "/v1/completions", `{"prompt":["a","b"]}`, "", 400},
		{"not_an_object", "/v1/completions", `[1]`, "", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ct := tt.contentType
			if ct == "" {
				ct = "application/json"
			}
			wantCode, _, want := post(t, url+tt.path, tt.body, "Content-Type", ct)
			code, ctype, got := post(t, url+tt.path+"/render", tt.body, "Content-Type", ct)
			if code != tt.status || wantCode != tt.status || got != want || ctype != "application/json" {
				t.Errorf("render: %d %s %s\ngeneration: %d %s; want both %d and the same body", code, ctype, got, wantCode, want, tt.status)
			}
		})
	}
	// vLLM's shape, not only the generation's.
	if _, _, got := post(t, url+"/v1/completions/render", `{"model":"nope","prompt":"x"}`); got != "{\"error\":{\"message\":\"The model `nope` does not exist.\",\"type\":\"NotFoundError\",\"param\":\"model\",\"code\":404}}" {
		t.Errorf("unknown model: %s", got)
	}
}
