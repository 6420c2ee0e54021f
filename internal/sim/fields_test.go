package sim

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"
)

// pydanticError is the message of vLLM's 400 for one validation error,
// given as the Python repr of its dict after 'type'.
func pydanticError(rest string) string {
	return "1 validation error:\n  {'type': " + rest + "}"
}

// TestDeclaredFieldTypes: every field vLLM's request models declare is
// checked against its type as pydantic's lax mode checks it, and a value
// it refuses is a 400 naming the field, where the simulator answered 200
// for the fields it does not otherwise read (a review's finding). The
// messages are pydantic 2's for the same models.
func TestDeclaredFieldTypes(t *testing.T) {
	_, url := startServer(t, zeroLatencyConfig())
	const (
		chat = "/v1/chat/completions"
		cmpl = "/v1/completions"
		hi   = `{"messages":[{"role":"user","content":"hi"}],`
		p    = `{"prompt":"hi",`
	)
	tests := []struct {
		name, path, body, param, msg string
	}{
		{"user_int", chat, hi + `"user":5}`, "body.user",
			pydanticError(`'string_type', 'loc': ('body', 'user'), 'msg': 'Input should be a valid string', 'input': 5`)},
		{"logit_bias_bool", cmpl, p + `"logit_bias":false}`, "body.logit_bias",
			pydanticError(`'dict_type', 'loc': ('body', 'logit_bias'), 'msg': 'Input should be a valid dictionary', 'input': False`)},
		{"logit_bias_value", chat, hi + `"logit_bias":{"5":"x"}}`, "body.logit_bias.5",
			pydanticError(`'float_parsing', 'loc': ('body', 'logit_bias', '5'), 'msg': 'Input should be a valid number, unable to parse string as a number', 'input': 'x'`)},
		{"seed_str", cmpl, p + `"seed":"x"}`, "body.seed",
			pydanticError(`'int_parsing', 'loc': ('body', 'seed'), 'msg': 'Input should be a valid integer, unable to parse string as an integer', 'input': 'x'`)},
		{"seed_past_int64", chat, hi + `"seed":9223372036854775808}`, "body.seed",
			pydanticError(`'less_than_equal', 'loc': ('body', 'seed'), 'msg': 'Input should be less than or equal to 9223372036854775807', 'input': 9223372036854775808, 'ctx': {'le': 9223372036854775807}`)},
		{"priority_null", cmpl, p + `"priority":null}`, "body.priority",
			pydanticError(`'int_type', 'loc': ('body', 'priority'), 'msg': 'Input should be a valid integer', 'input': None`)},
		{"presence_penalty_str", chat, hi + `"presence_penalty":"a"}`, "body.presence_penalty",
			pydanticError(`'float_parsing', 'loc': ('body', 'presence_penalty'), 'msg': 'Input should be a valid number, unable to parse string as a number', 'input': 'a'`)},
		{"frequency_penalty_list", cmpl, p + `"frequency_penalty":[]}`, "body.frequency_penalty",
			pydanticError(`'float_type', 'loc': ('body', 'frequency_penalty'), 'msg': 'Input should be a valid number', 'input': []`)},
		{"top_k_fraction", chat, hi + `"top_k":1.5}`, "body.top_k",
			pydanticError(`'int_from_float', 'loc': ('body', 'top_k'), 'msg': 'Input should be a valid integer, got a number with a fractional part', 'input': 1.5`)},
		{"skip_special_tokens_word", cmpl, p + `"skip_special_tokens":"maybe"}`, "body.skip_special_tokens",
			pydanticError(`'bool_parsing', 'loc': ('body', 'skip_special_tokens'), 'msg': 'Input should be a valid boolean, unable to interpret input', 'input': 'maybe'`)},
		{"include_stop_str_null", chat, hi + `"include_stop_str_in_output":null}`, "body.include_stop_str_in_output",
			pydanticError(`'bool_type', 'loc': ('body', 'include_stop_str_in_output'), 'msg': 'Input should be a valid boolean', 'input': None`)},
		{"parallel_tool_calls_list", chat, hi + `"parallel_tool_calls":[1]}`, "body.parallel_tool_calls",
			pydanticError(`'bool_type', 'loc': ('body', 'parallel_tool_calls'), 'msg': 'Input should be a valid boolean', 'input': [1]`)},
		{"stop_token_ids_item", cmpl, p + `"stop_token_ids":[1,"a"]}`, "body.stop_token_ids.1",
			pydanticError(`'int_parsing', 'loc': ('body', 'stop_token_ids', 1), 'msg': 'Input should be a valid integer, unable to parse string as an integer', 'input': 'a'`)},
		{"bad_words_str", chat, hi + `"bad_words":"x"}`, "body.bad_words",
			pydanticError(`'list_type', 'loc': ('body', 'bad_words'), 'msg': 'Input should be a valid list', 'input': 'x'`)},
		{"documents_value", chat, hi + `"documents":[{"title":1}]}`, "body.documents.0.title",
			pydanticError(`'string_type', 'loc': ('body', 'documents', 0, 'title'), 'msg': 'Input should be a valid string', 'input': 1`)},
		{"request_id_int", cmpl, p + `"request_id":7}`, "body.request_id",
			pydanticError(`'string_type', 'loc': ('body', 'request_id'), 'msg': 'Input should be a valid string', 'input': 7`)},
		{"chat_template_kwargs_list", chat, hi + `"chat_template_kwargs":[]}`, "body.chat_template_kwargs",
			pydanticError(`'dict_type', 'loc': ('body', 'chat_template_kwargs'), 'msg': 'Input should be a valid dictionary', 'input': []`)},
		{"stream_options_word", cmpl, p + `"stream":true,"stream_options":{"include_usage":"maybe"}}`, "body.stream_options.include_usage",
			pydanticError(`'bool_parsing', 'loc': ('body', 'stream_options', 'include_usage'), 'msg': 'Input should be a valid boolean, unable to interpret input', 'input': 'maybe'`)},
		{"stream_options_int", chat, hi + `"stream":true,"stream_options":3}`, "body.stream_options",
			pydanticError(`'model_type', 'loc': ('body', 'stream_options'), 'msg': 'Input should be a valid dictionary or instance of StreamOptions', 'input': 3, 'ctx': {'class_name': 'StreamOptions'}`)},
		{"response_format_int", cmpl, p + `"response_format":5}`, "body.response_format.ResponseFormat",
			"3 validation errors:\n" +
				"  {'type': 'model_type', 'loc': ('body', 'response_format', 'ResponseFormat'), 'msg': 'Input should be a valid dictionary or instance of ResponseFormat', 'input': 5, 'ctx': {'class_name': 'ResponseFormat'}}\n" +
				"  {'type': 'model_type', 'loc': ('body', 'response_format', 'StructuralTagResponseFormat'), 'msg': 'Input should be a valid dictionary or instance of StructuralTagResponseFormat', 'input': 5, 'ctx': {'class_name': 'StructuralTagResponseFormat'}}\n" +
				"  {'type': 'model_type', 'loc': ('body', 'response_format', 'LegacyStructuralTagResponseFormat'), 'msg': 'Input should be a valid dictionary or instance of LegacyStructuralTagResponseFormat', 'input': 5, 'ctx': {'class_name': 'LegacyStructuralTagResponseFormat'}}"},
		// Errors come in the order the model declares its fields.
		{"two_in_declared_order", chat, hi + `"user":1,"frequency_penalty":"x"}`, "body.frequency_penalty",
			"2 validation errors:\n" +
				"  {'type': 'float_parsing', 'loc': ('body', 'frequency_penalty'), 'msg': 'Input should be a valid number, unable to parse string as a number', 'input': 'x'}\n" +
				"  {'type': 'string_type', 'loc': ('body', 'user'), 'msg': 'Input should be a valid string', 'input': 1}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, body := post(t, url+tt.path, tt.body)
			msg, typ, param := errorOf(t, body)
			if code != http.StatusBadRequest || typ != "Bad Request" || param != tt.param || msg != tt.msg {
				t.Errorf("%s: %d %q %v\n%s\nwant 400 \"Bad Request\" %v\n%s", tt.body, code, typ, param, msg, tt.param, tt.msg)
			}
		})
	}
}

// TestDeclaredFieldCoercions: what pydantic's lax mode turns into the
// declared type is served.
func TestDeclaredFieldCoercions(t *testing.T) {
	_, url := startServer(t, zeroLatencyConfig())
	for _, b := range []struct{ path, body string }{
		{"/v1/completions", `{"prompt":"hi","seed":"5","priority":true,"user":null,"logit_bias":{"5":"1.5"}}`},
		{"/v1/completions", `{"prompt":"hi","seed":" 5.0 ","top_k":"1_0","n":1.0,"min_tokens":"0"}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"echo":"no","skip_special_tokens":0,"ignore_eos":"off"}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"temperature":"1_0e-1","stop_token_ids":["1",2.0],"documents":[{"t":"x"}]}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"text"},"chat_template_kwargs":{},"parallel_tool_calls":null}`},
	} {
		if code, _, body := post(t, url+b.path, b.body); code != http.StatusOK {
			t.Errorf("%s %s: %d %s, want 200", b.path, b.body, code, body)
		}
	}
}

// TestChatTemplateKwargsIsADict: a chat_template_kwargs that is no dict
// gets pydantic's dict_type error on every endpoint that takes a chat;
// /tokenize answered with Go's JSON decoder message (a review's finding).
func TestChatTemplateKwargsIsADict(t *testing.T) {
	_, url := startServer(t, zeroLatencyConfig())
	const hi = `{"messages":[{"role":"user","content":"hi"}],`
	tests := []struct {
		name, path, value, input string
	}{
		{"chat_int", "/v1/chat/completions", "5", "5"},
		{"render_str", "/v1/chat/completions/render", `"x"`, "'x'"},
		{"tokenize_int", "/tokenize", "5", "5"},
		{"tokenize_list", "/tokenize", `[{"a":1}]`, "[{'a': 1}]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, body := post(t, url+tt.path, hi+`"chat_template_kwargs":`+tt.value+`}`)
			msg, _, param := errorOf(t, body)
			want := pydanticError(`'dict_type', 'loc': ('body', 'chat_template_kwargs'), 'msg': 'Input should be a valid dictionary', 'input': ` + tt.input)
			if code != http.StatusBadRequest || msg != want || param != "body.chat_template_kwargs" {
				t.Errorf("%s: %d %v %q\nwant 400 body.chat_template_kwargs %q", tt.path, code, param, msg, want)
			}
		})
	}
	// /tokenize takes a dict, and null, as vLLM's TokenizeChatRequest does.
	for _, v := range []string{`{"enable_thinking":false}`, "null"} {
		if code, _, body := post(t, url+"/tokenize", hi+`"chat_template_kwargs":`+v+`}`); code != http.StatusOK {
			t.Errorf("/tokenize with chat_template_kwargs %s: %d %s", v, code, body)
		}
	}
}

// TestEachMemberIsPythonsDict: eachMember visits each key once, where it
// first appeared, with its last value (as Python's dict keeps a repeated
// key), against a naive reference. It makes one pass: looking each key
// up from the end, 80,000 logit_bias keys took 14 s (a review's finding).
func TestEachMemberIsPythonsDict(t *testing.T) {
	naive := func(o *object) (keys []string, vals []any) {
		for i, k := range o.keys {
			if slices.Contains(keys, k) {
				continue
			}
			keys = append(keys, k)
			last := o.vals[i]
			for j := i + 1; j < len(o.keys); j++ {
				if o.keys[j] == k {
					last = o.vals[j]
				}
			}
			vals = append(vals, last)
		}
		return keys, vals
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		o := &object{}
		for i := range rng.IntN(12) {
			o.keys = append(o.keys, string(rune('a'+rng.IntN(5))))
			o.vals = append(o.vals, i)
		}
		var keys []string
		var vals []any
		eachMember(o, func(k string, v any) { keys, vals = append(keys, k), append(vals, v) })
		wantKeys, wantVals := naive(o)
		if !slices.Equal(keys, wantKeys) || fmt.Sprint(vals) != fmt.Sprint(wantVals) {
			t.Fatalf("%v %v: visited %v %v, want %v %v", o.keys, o.vals, keys, vals, wantKeys, wantVals)
		}
	}
}
