package sim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRequestLargerThanPoolIsRefused: should a request outgrow the KV
// cache (startup refuses such configs, so the engine is altered behind
// its back here), it gets a 400 rather than a place in the queue it would
// hold for good, and the requests after it are served.
func TestRequestLargerThanPoolIsRefused(t *testing.T) {
	cfg := zeroLatencyConfig()
	cfg.NumGPUBlocks, cfg.MaxModelLen = 64, 1008 // 63 usable blocks of 16
	srv, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.cfg.MaxModelLen, srv.engine.cfg.MaxModelLen = 1<<40, 1<<40
	url := serve(t, srv) + "/v1/completions"

	big := `{"model":"m","max_tokens":1,"prompt":"` + strings.Repeat("abc", 1100) + `"}`
	// A guard, not a measure: without the check the request never ends.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(big))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("a request larger than the pool: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a request larger than the pool: status %d, want 400", resp.StatusCode)
	}
	if code, _, body := post(t, url, `{"model":"m","max_tokens":1,"prompt":"hi"}`); code != http.StatusOK {
		t.Errorf("the next request: %d %s", code, body)
	}
}

// errorOf decodes an error body.
func errorOf(t *testing.T, body string) (msg, typ string, param any) {
	t.Helper()
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Param   any    `json:"param"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("not an error body: %s", body)
	}
	return e.Error.Message, e.Error.Type, e.Error.Param
}

// TestUnimitatedParametersRefused: what the simulator cannot answer as
// vLLM would is a 400 naming the parameter, as the README promises.
func TestUnimitatedParametersRefused(t *testing.T) {
	_, url := startServer(t, zeroLatencyConfig())
	tests := []struct {
		path, body, param string
	}{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"return_token_ids":true}`, "return_token_ids"},
		{"/v1/completions", `{"prompt":"hi","return_token_ids":true}`, "return_token_ids"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"prompt_logprobs":1}`, "prompt_logprobs"},
		{"/v1/completions", `{"prompt":"hi","prompt_logprobs":0}`, "prompt_logprobs"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"use_beam_search":true}`, "use_beam_search"},
		{"/v1/completions", `{"prompt":"hi","use_beam_search":true}`, "use_beam_search"},
		{"/v1/completions", `{"prompt":"hi","truncate_prompt_tokens":4}`, "truncate_prompt_tokens"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"truncate_prompt_tokens":-1}`, "truncate_prompt_tokens"},
	}
	for _, tt := range tests {
		code, _, body := post(t, url+tt.path, tt.body)
		msg, typ, param := errorOf(t, body)
		if code != http.StatusBadRequest || typ != "BadRequestError" || param != tt.param || !strings.Contains(msg, "not supported by inferrail-sim") {
			t.Errorf("%s %s: %d %s, want a 400 naming %s", tt.path, tt.body, code, body, tt.param)
		}
	}
	// Their defaults are served.
	for _, b := range []string{`"return_token_ids":false`, `"prompt_logprobs":null`, `"use_beam_search":false`, `"truncate_prompt_tokens":null`} {
		if code, _, body := post(t, url+"/v1/completions", `{"prompt":"hi",`+b+`}`); code != http.StatusOK {
			t.Errorf("%s: %d %s", b, code, body)
		}
	}
}

// TestRequestsVLLMRefuses: requests vLLM answers with a 400 get its 400,
// type, param and message, not a 200.
func TestRequestsVLLMRefuses(t *testing.T) {
	_, url := startServer(t, zeroLatencyConfig())
	const hi = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, path, body string
		typ              string
		param            any
		msg              string
	}{
		{"negative temperature", "/v1/chat/completions", `{` + hi + `,"temperature":-1}`,
			"BadRequestError", "temperature", "temperature must be non-negative, got -1.0."},
		{"temperature over 2", "/v1/chat/completions", `{` + hi + `,"temperature":2.5}`,
			"BadRequestError", "temperature", "temperature must be in [0, 2], got 2.5."},
		{"infinite temperature", "/v1/completions", `{"prompt":"hi","temperature":1e999}`,
			"BadRequestError", "temperature", "temperature must be a finite number, got inf."},
		{"temperature nan", "/v1/chat/completions", `{` + hi + `,"temperature":"nan"}`,
			"BadRequestError", "temperature", "temperature must be a finite number, got nan."},
		{"infinite repetition_penalty", "/v1/completions", `{"prompt":"hi","repetition_penalty":"inf"}`,
			"BadRequestError", nil, "repetition_penalty must be a finite number, got inf."},
		{"top_p over 1", "/v1/completions", `{"prompt":"hi","top_p":5}`,
			"BadRequestError", "top_p", "top_p must be in (0, 1], got 5.0."},
		{"top_p 0", "/v1/chat/completions", `{` + hi + `,"top_p":"0"}`,
			"BadRequestError", "top_p", "top_p must be in (0, 1], got 0.0."},
		{"presence_penalty", "/v1/chat/completions", `{` + hi + `,"presence_penalty":2.5}`,
			"BadRequestError", nil, "presence_penalty must be in [-2, 2], got 2.5."},
		{"min_p", "/v1/completions", `{"prompt":"hi","min_p":1.5}`,
			"BadRequestError", nil, "min_p must be in [0, 1], got 1.5."},
		{"top_k", "/v1/completions", `{"prompt":"hi","top_k":-2}`,
			"BadRequestError", nil, "top_k must be 0 (disable), or at least 1, got -2."},
		{"stop of the wrong type", "/v1/chat/completions", `{` + hi + `,"stop":5}`, "Bad Request", "body.stop",
			"2 validation errors:\n  {'type': 'string_type', 'loc': ('body', 'stop', 'str'), 'msg': 'Input should be a valid string', 'input': 5}\n" +
				"  {'type': 'list_type', 'loc': ('body', 'stop', 'list[str]'), 'msg': 'Input should be a valid list', 'input': 5}"},
		{"stop list of the wrong type", "/v1/completions", `{"prompt":"hi","stop":["a",1]}`, "Bad Request", "body.stop",
			"2 validation errors:\n  {'type': 'string_type', 'loc': ('body', 'stop', 'str'), 'msg': 'Input should be a valid string', 'input': ['a', 1]}\n" +
				"  {'type': 'string_type', 'loc': ('body', 'stop', 'list[str]', 1), 'msg': 'Input should be a valid string', 'input': 1}"},
		{"empty stop string", "/v1/completions", `{"prompt":"hi","stop":""}`,
			"BadRequestError", nil, "stop cannot contain an empty string."},
		{"empty string in a stop list", "/v1/chat/completions", `{` + hi + `,"stop":["x",""]}`,
			"BadRequestError", nil, "stop cannot contain an empty string."},
		{"tool_choice without tools", "/v1/chat/completions", `{` + hi + `,"tool_choice":"required"}`, "Bad Request", "body",
			"1 validation error:\n  {'type': 'value_error', 'loc': ('body',), 'msg': 'Value error, When using `tool_choice`, `tools` must be set.', " +
				"'input': {'messages': [{'role': 'user', 'content': 'hi'}], 'tool_choice': 'required'}}"},
		{"empty tools", "/v1/chat/completions", `{` + hi + `,"tools":[],"tool_choice":"auto"}`, "Bad Request", "body",
			"1 validation error:\n  {'type': 'value_error', 'loc': ('body',), 'msg': 'Value error, `tools` must not be an empty array. Either provide at least one tool or omit the field entirely.', " +
				"'input': {'messages': [{'role': 'user', 'content': 'hi'}], 'tools': [], 'tool_choice': 'auto'}}"},
		{"tool_choice of another value", "/v1/chat/completions", `{` + hi + `,"tools":[` + fnA + `],"tool_choice":"sometimes"}`, "Bad Request", "body",
			toolUsageError(`Invalid value for `+"`tool_choice`"+`: sometimes! Only named tools, "none", "auto" or "required" are supported.`, `'tool_choice': 'sometimes'`)},
		{"tool_choice a number", "/v1/chat/completions", `{` + hi + `,"tools":[` + fnA + `],"tool_choice":1.5}`, "Bad Request", "body",
			toolUsageError(`Invalid value for `+"`tool_choice`"+`: 1.5! Only named tools, "none", "auto" or "required" are supported.`, `'tool_choice': 1.5`)},
		{"named tool without a function", "/v1/chat/completions", `{` + hi + `,"tools":[` + fnA + `],"tool_choice":{"type":"function","function":null}}`, "Bad Request", "body",
			toolUsageError("Invalid value for `function`: `None` in `tool_choice`! "+toolUsage, `'tool_choice': {'type': 'function', 'function': None}`)},
		{"named tool without a name", "/v1/chat/completions", `{` + hi + `,"tools":[` + fnA + `],"tool_choice":{"function":{}}}`, "Bad Request", "body",
			toolUsageError("Expected field `name` in `function` in `tool_choice`! "+toolUsage, `'tool_choice': {'function': {}}`)},
		{"named tool with an empty name", "/v1/chat/completions", `{` + hi + `,"tools":[` + fnA + `],"tool_choice":{"function":{"name":""}}}`, "Bad Request", "body",
			toolUsageError("Invalid `name` in `function`: `` in `tool_choice`! "+toolUsage, `'tool_choice': {'function': {'name': ''}}`)},
		{"named tool not among the tools", "/v1/chat/completions", `{` + hi + `,"tools":[` + fnA + `],"tool_choice":{"function":{"name":"b"}}}`, "Bad Request", "body",
			toolUsageError("The tool specified in `tool_choice` does not match any of the specified `tools`", `'tool_choice': {'function': {'name': 'b'}}`)},
		{"invalid UTF-8", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}",
			"Bad Request", nil, "There was an error parsing the body"},
		{"invalid UTF-8 to /tokenize", "/tokenize", "{\"prompt\":\"\xc3\"}", "Bad Request", nil, "There was an error parsing the body"},
		{"empty prompt", "/v1/completions", `{"prompt":""}`, "Bad Request", "body",
			"1 validation error:\n  {'type': 'value_error', 'loc': ('body',), 'msg': 'Value error, Either prompt or prompt_embeds must be provided and non-empty.', 'input': {'prompt': ''}}"},
		// The gateway predicts nothing for it, but vLLM refuses it unless
		// started with --enable-prompt-embeds (a review's finding: the
		// simulator answered the gateway's "prompt not followed").
		{"prompt embeds", "/v1/completions", `{"prompt":"hi","prompt_embeds":"AAAA"}`, "BadRequestError", nil,
			"You must set `--enable-prompt-embeds` to input `prompt_embeds`."},
		{"stream options without stream", "/v1/chat/completions", `{` + hi + `,"stream_options":{"include_usage":true}}`,
			"BadRequestError", "stream_options", "Stream options can only be defined when `stream=True`."},
		{"stream options with stream 0", "/v1/completions", `{"prompt":"hi","stream":0,"stream_options":{"include_usage":false}}`,
			"BadRequestError", "stream_options", "Stream options can only be defined when `stream=True`."},
	}
	for _, tt := range tests {
		code, _, body := post(t, url+tt.path, tt.body)
		if code != http.StatusBadRequest {
			t.Errorf("%s: status %d %s, want 400", tt.name, code, body)
			continue
		}
		if msg, typ, param := errorOf(t, body); msg != tt.msg || typ != tt.typ || param != tt.param {
			t.Errorf("%s: got %q %q %v\nwant %q %q %v", tt.name, msg, typ, param, tt.msg, tt.typ, tt.param)
		}
	}
	// What vLLM takes stays a 200.
	for _, b := range []struct{ path, body string }{
		{"/v1/chat/completions", `{` + hi + `,"temperature":0,"top_p":1,"min_p":0,"top_k":-1,"stop":["x"]}`},
		{"/v1/completions", `{"prompt":"hi","temperature":2}`},
		{"/v1/completions", `{"prompt":"hi","extra_key":"k","lora_path":"x","prompt_embeds":null}`}, // SGLang's keys, which vLLM ignores
		{"/v1/chat/completions", `{` + hi + `,"extra_key":"k"}`},
		{"/v1/chat/completions", `{` + hi + `,"tool_choice":"none"}`},
		{"/v1/completions", `{"prompt":"hi","stop":"x","presence_penalty":-2,"repetition_penalty":1.1}`},
		{"/tokenize", `{"prompt":""}`},
		{"/tokenize", `{"prompt":"hi","stop":""}`},
		{"/tokenize", `{` + hi + `,"tool_choice":"required"}`},
		// vLLM reads the raw body with Python's truth: empty options, and a
		// stream that is a non-empty string, pass its check.
		{"/v1/chat/completions", `{` + hi + `,"stream_options":{}}`},
		{"/v1/completions", `{"prompt":"hi","stream":false,"stream_options":null}`},
		{"/v1/completions", `{"prompt":"hi","stream":"false","stream_options":{"include_usage":true}}`},
		// Token ids written as floats with no fractional part are ids.
		{"/v1/completions", `{"prompt":[1.0,300.0,3.01e2],"max_tokens":1}`},
		{"/v1/completions", `{"prompt":[[1,3E2]],"max_tokens":1}`},
	} {
		if code, _, body := post(t, url+b.path, b.body); code != http.StatusOK {
			t.Errorf("%s %s: %d %s, want 200", b.path, b.body, code, body)
		}
	}
}

// TestMessagesQuoteLargeInts: messages quote integers as the client sent
// them, however large, as vLLM's Python ints do; they were clamped to
// 137438953408.
func TestMessagesQuoteLargeInts(t *testing.T) {
	_, url := startServer(t, zeroLatencyConfig())
	const hi = `"messages":[{"role":"user","content":"hi"}]`
	context := func(asked, total string) string {
		return "This model's maximum context length is 2048 tokens. However, you requested " + asked +
			" output tokens and your prompt contains 11 input tokens, for a total of " + total +
			" tokens. Please reduce the length of the input prompt or the number of requested output tokens."
	}
	tests := []struct{ path, body, msg string }{
		{"/v1/chat/completions", `{` + hi + `,"max_tokens":9223372036854775808}`, context("9223372036854775808", "9223372036854775819")},
		{"/v1/chat/completions", `{` + hi + `,"max_completion_tokens":1e18}`, context("1000000000000000000", "1000000000000000011")},
		// A float past int64 is no int to pydantic, whatever its fraction.
		{"/v1/chat/completions", `{` + hi + `,"max_completion_tokens":1e20}`, "1 validation error:\n  {'type': 'int_parsing_size', 'loc': ('body', 'max_completion_tokens'), " +
			"'msg': 'Unable to parse input string as an integer, exceeded maximum size', 'input': 1e+20}"},
		{"/v1/chat/completions", `{` + hi + `,"max_tokens":"123456789012345678901234567890"}`,
			context("123456789012345678901234567890", "123456789012345678901234567901")},
		{"/v1/chat/completions", `{` + hi + `,"max_tokens":-99999999999999999999}`, "max_tokens must be at least 1, got -99999999999999999999."},
		{"/v1/chat/completions", `{` + hi + `,"min_tokens":-1e15}`, "min_tokens must be greater than or equal to 0, got -1000000000000000."},
		{"/detokenize", `{"tokens":[1,999999999999]}`, "Token id 999999999999 is out of vocabulary"},
		{"/detokenize", `{"tokens":[18446744073709551616]}`, "Token id 18446744073709551616 is out of vocabulary"},
	}
	for _, tt := range tests {
		code, _, body := post(t, url+tt.path, tt.body)
		if msg, _, _ := errorOf(t, body); code != http.StatusBadRequest || msg != tt.msg {
			t.Errorf("%s: %d %q\nwant 400 %q", tt.body, code, msg, tt.msg)
		}
	}
}

// TestNoPrefixQueriesWithCachingOff: with --no-enable-prefix-caching vLLM
// looks nothing up, so vllm:prefix_cache_queries_total stays 0.
func TestNoPrefixQueriesWithCachingOff(t *testing.T) {
	for _, caching := range []bool{true, false} {
		cfg := zeroLatencyConfig()
		cfg.EnablePrefixCaching = caching
		_, url := startServer(t, cfg)
		if code, _, body := post(t, url+"/v1/completions", `{"model":"m","max_tokens":2,"prompt":"hello there"}`); code != http.StatusOK {
			t.Fatalf("%d %s", code, body)
		}
		resp, err := http.Get(url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		q := metricValue(t, string(page), `vllm:prefix_cache_queries_total{engine="0",model_name="m"}`)
		if caching && q == 0 || !caching && q != 0 {
			t.Errorf("caching %v: prefix_cache_queries_total = %v", caching, q)
		}
	}
}

// TestMetricsBelowMount: /metrics/ is the metrics page too, as vLLM's
// mount of prometheus_client's app at /metrics makes it.
func TestMetricsBelowMount(t *testing.T) {
	_, url := startServer(t, zeroLatencyConfig())
	for _, path := range []string{"/metrics", "/metrics/"} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != MetricsContentType ||
			!strings.Contains(string(page), "# TYPE vllm:num_requests_running gauge") {
			t.Errorf("GET %s: %d %s %.80q", path, resp.StatusCode, resp.Header.Get("Content-Type"), page)
		}
	}
}

// TestEngineLabelIsRank: the engine label of every series is the data
// parallel rank, vLLM's engine index.
func TestEngineLabelIsRank(t *testing.T) {
	cfg := zeroLatencyConfig()
	cfg.DataParallelRank = 2
	_, url := startServer(t, cfg)
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metricValue(t, string(page), `vllm:num_requests_running{engine="2",model_name="m"}`)
	if strings.Contains(string(page), `engine="0"`) {
		t.Error(`a series is labelled engine="0" on rank 2`)
	}
}

// fnA is a tool named a, and toolUsage the hint vLLM's named tool errors end with.
const (
	fnA       = `{"type":"function","function":{"name":"a"}}`
	toolUsage = "Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`"
)

// toolUsageError is the 400 of vLLM's check_tool_usage for a chat of "hi"
// with the tools [fnA] and the tool_choice shown as choice.
func toolUsageError(msg, choice string) string {
	return "1 validation error:\n  {'type': 'value_error', 'loc': ('body',), 'msg': " + pyQuoted(msg) +
		", 'input': {'messages': [{'role': 'user', 'content': 'hi'}], 'tools': [{'type': 'function', 'function': {'name': 'a'}}], " + choice + "}}"
}

// pyQuoted is Python's repr of "Value error, " + msg.
func pyQuoted(msg string) string {
	var b strings.Builder
	pyStr(&b, "Value error, "+msg)
	return b.String()
}

// TestContextLengthAtLeast: vLLM tokenizes a text prompt no further than
// one token past the input it allows, so its 400 for a prompt too long
// says the prompt has "at least" that many tokens, and the total "at
// least" --max-model-len plus one; the simulator gave the prompt's whole
// count (a review's finding). A prompt of token ids is counted whole, and
// a max_tokens past the context takes no part in the truncation, however
// large.
func TestContextLengthAtLeast(t *testing.T) {
	_, url := startServer(t, zeroLatencyConfig()) // --max-model-len 2048
	long := strings.Repeat("ab ", 3000)
	ids := strings.Repeat("5,", 2099) + "5"
	msg := func(asked, atLeast, n, total string) string {
		return "This model's maximum context length is 2048 tokens. However, you requested " + asked +
			" output tokens and your prompt contains " + atLeast + n + " input tokens, for a total of " + atLeast + total +
			" tokens. Please reduce the length of the input prompt or the number of requested output tokens."
	}
	tests := []struct {
		name, path, body, want string
	}{
		{"completion_text", "/v1/completions", `{"prompt":"` + long + `","max_tokens":48}`, msg("48", "at least ", "2001", "2049")},
		{"completion_default_max", "/v1/completions", `{"prompt":"` + long + `"}`, msg("16", "at least ", "2033", "2049")},
		{"chat_no_max", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + long + `"}]}`, msg("0", "at least ", "2049", "2049")},
		{"chat_max_as_string", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + long + `"}],"max_completion_tokens":"2048"}`,
			msg("2048", "at least ", "1", "2049")},
		{"token_ids", "/v1/completions", `{"prompt":[` + ids + `],"max_tokens":1}`, msg("1", "", "2100", "2101")},
		{"max_past_int64", "/v1/completions", `{"prompt":"hi","max_tokens":99999999999999999999}`,
			msg("99999999999999999999", "", "2", "100000000000000000001")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, body := post(t, url+tt.path, tt.body)
			got, _, param := errorOf(t, body)
			if code != http.StatusBadRequest || got != tt.want || param != "input_tokens" {
				t.Errorf("%d %v %q\nwant 400 input_tokens %q", code, param, got, tt.want)
			}
		})
	}
}

// TestDetokenizeTokenErrors: /detokenize describes each bad token id as
// pydantic does for a list of non-negative ints (its types and the ge
// context, checked against pydantic 2.14); every one was int_type, and
// the bound had no context (a review's finding).
func TestDetokenizeTokenErrors(t *testing.T) {
	_, url := startServer(t, zeroLatencyConfig())
	code, _, body := post(t, url+"/detokenize", `{"tokens":[-1,2.5,"x",NaN,3,"7",true]}`)
	msg, _, _ := errorOf(t, body)
	for _, want := range []string{
		"4 validation errors:",
		"{'type': 'greater_than_equal', 'loc': ('body', 'tokens', 0), 'msg': 'Input should be greater than or equal to 0', 'input': -1, 'ctx': {'ge': 0}}",
		"{'type': 'int_from_float', 'loc': ('body', 'tokens', 1), 'msg': 'Input should be a valid integer, got a number with a fractional part', 'input': 2.5}",
		"{'type': 'int_parsing', 'loc': ('body', 'tokens', 2), 'msg': 'Input should be a valid integer, unable to parse string as an integer', 'input': 'x'}",
		"{'type': 'finite_number', 'loc': ('body', 'tokens', 3), 'msg': 'Input should be a finite number', 'input': nan}",
	} {
		if code != http.StatusBadRequest || !strings.Contains(msg, want) {
			t.Errorf("%d %q\nlacks %q", code, msg, want)
		}
	}
}
