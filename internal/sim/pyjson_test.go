package sim

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestMalformedJSONAsPython: a body json.loads refuses gets FastAPI's
// json_invalid error at the character where Python's parse failed, with
// Python's message; the simulator named position 0 and Go's message (a
// review's finding). The expectations are CPython's, the error dicts its
// reprs.
func TestMalformedJSONAsPython(t *testing.T) {
	_, url := startServer(t, zeroLatencyConfig())
	paths := []string{"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize", "/v1/completions/render"}
	tests := []struct {
		body string
		pos  int
		dict string
	}{
		{" ", 1, "{'type': 'json_invalid', 'loc': ('body', 1), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': 'Expecting value'}}"},
		{"{", 1, "{'type': 'json_invalid', 'loc': ('body', 1), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': 'Expecting property name enclosed in double quotes'}}"},
		{"{\"a\"", 4, "{'type': 'json_invalid', 'loc': ('body', 4), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': \"Expecting ':' delimiter\"}}"},
		{"{\"a\":1,}", 7, "{'type': 'json_invalid', 'loc': ('body', 7), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': 'Expecting property name enclosed in double quotes'}}"},
		{"[1,]", 3, "{'type': 'json_invalid', 'loc': ('body', 3), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': 'Expecting value'}}"},
		{"{\"a\":01}", 6, "{'type': 'json_invalid', 'loc': ('body', 6), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': \"Expecting ',' delimiter\"}}"},
		{"{\"a\":\"x\ny\"}", 7, "{'type': 'json_invalid', 'loc': ('body', 7), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': 'Invalid control character at'}}"},
		{"{\"a\":\"\\q\"}", 6, "{'type': 'json_invalid', 'loc': ('body', 6), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': 'Invalid \\\\escape'}}"},
		{"{\"a\":\"\\u12zz\"}", 7, "{'type': 'json_invalid', 'loc': ('body', 7), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': 'Invalid \\\\uXXXX escape'}}"},
		{"{\"a\":\"abc", 5, "{'type': 'json_invalid', 'loc': ('body', 5), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': 'Unterminated string starting at'}}"},
		{"{\"a\":-NaN}", 5, "{'type': 'json_invalid', 'loc': ('body', 5), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': 'Expecting value'}}"},
		{"{\"a\":1} x", 8, "{'type': 'json_invalid', 'loc': ('body', 8), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': 'Extra data'}}"},
		{"{\"\u00e9\":x}", 5, "{'type': 'json_invalid', 'loc': ('body', 5), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': 'Expecting value'}}"},
		{"{\"a\":[1,2,}", 10, "{'type': 'json_invalid', 'loc': ('body', 10), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': 'Expecting value'}}"},
		{"  \"\\ud83d\\u12\"", 10, "{'type': 'json_invalid', 'loc': ('body', 10), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': 'Invalid \\\\uXXXX escape'}}"},
		{"{\"a\":nul}", 5, "{'type': 'json_invalid', 'loc': ('body', 5), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': 'Expecting value'}}"},
		{"{\"a\":1.}", 6, "{'type': 'json_invalid', 'loc': ('body', 6), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': \"Expecting ',' delimiter\"}}"},
		{"{\"a\":Infinityx}", 13, "{'type': 'json_invalid', 'loc': ('body', 13), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': \"Expecting ',' delimiter\"}}"},
	}
	for i, tt := range tests {
		path := paths[i%len(paths)]
		code, _, body := post(t, url+path, tt.body)
		msg, typ, param := errorOf(t, body)
		wantParam := "body." + strconv.Itoa(tt.pos)
		if code != http.StatusBadRequest || typ != "Bad Request" || param != wantParam || msg != "1 validation error:\n  "+tt.dict {
			t.Errorf("%s %q: %d %q %v %q\nwant 400 %v %q", path, tt.body, code, typ, param, msg, wantParam, tt.dict)
		}
	}
	// FastAPI parses no empty body: the request is missing.
	code, _, body := post(t, url+"/v1/chat/completions", "")
	if msg, _, param := errorOf(t, body); code != http.StatusBadRequest || param != "body" ||
		msg != pydanticError(`'missing', 'loc': ('body',), 'msg': 'Field required', 'input': None`) {
		t.Errorf("an empty body: %d %s", code, body)
	}
	// A byte order mark is not counted, as Python decodes it away.
	code, _, body = post(t, url+"/v1/completions", "\ufeff{\"prompt\":x}")
	if _, _, param := errorOf(t, body); code != http.StatusBadRequest || param != "body.10" {
		t.Errorf("after a byte order mark: %d %s, want 400 at body.10", code, body)
	}
}

// TestBodiesPythonCannotParse: what json.loads raises other than a
// JSONDecodeError (RecursionError, the ValueError of an int past 4,300
// digits) is FastAPI's plain 400.
func TestBodiesPythonCannotParse(t *testing.T) {
	_, url := startServer(t, zeroLatencyConfig())
	for _, b := range []string{
		`{"prompt":"hi","seed":` + strings.Repeat("9", 4301) + `}`,
		`{"prompt":"hi","seed":-` + strings.Repeat("9", 4301) + `}`,
		`{"prompt":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`,
	} {
		code, _, body := post(t, url+"/v1/completions", b)
		if msg, typ, param := errorOf(t, body); code != http.StatusBadRequest || typ != "Bad Request" || param != nil || msg != "There was an error parsing the body" {
			t.Errorf("%.40s…: %d %s", b, code, body)
		}
	}
	// 4,300 digits are an int, refused by seed's bound.
	code, _, body := post(t, url+"/v1/completions", `{"prompt":"hi","seed":`+strings.Repeat("9", 4300)+`}`)
	if _, typ, param := errorOf(t, body); code != http.StatusBadRequest || typ != "Bad Request" || param != "body.seed" {
		t.Errorf("a 4,300-digit seed: %d %.200s", code, body)
	}
}

// TestNonFiniteNumbers: Python's json reads NaN, Infinity and -Infinity,
// which Python clients send; pydantic then judges them as any number: a
// float takes them, an int or a string does not, and vLLM's own range
// checks refuse them where they must be finite. The simulator refused
// every such body as malformed (a review's finding).
func TestNonFiniteNumbers(t *testing.T) {
	_, url := startServer(t, zeroLatencyConfig())
	tests := []struct {
		name, path, body string
		typ              string
		param            any
		msg              string
	}{
		{"temperature_nan", "/v1/completions", `{"prompt":"hi","temperature":NaN}`,
			"BadRequestError", "temperature", "temperature must be a finite number, got nan."},
		{"presence_penalty_minus_inf", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"presence_penalty":-Infinity}`,
			"BadRequestError", nil, "presence_penalty must be in [-2, 2], got -inf."},
		{"seed_nan", "/v1/completions", `{"prompt":"hi","seed":NaN}`, "Bad Request", "body.seed",
			pydanticError(`'finite_number', 'loc': ('body', 'seed'), 'msg': 'Input should be a finite number', 'input': nan`)},
		{"user_inf", "/v1/completions", `{"prompt":"hi","user":Infinity}`, "Bad Request", "body.user",
			pydanticError(`'string_type', 'loc': ('body', 'user'), 'msg': 'Input should be a valid string', 'input': inf`)},
		{"echo_nan", "/v1/completions", `{"prompt":"hi","echo":NaN}`, "Bad Request", "body.echo",
			pydanticError(`'bool_type', 'loc': ('body', 'echo'), 'msg': 'Input should be a valid boolean', 'input': nan`)},
		// What a chat template renders Python writes as NaN, which the
		// simulator cannot, and refuses.
		{"template_kwargs", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"x":NaN}}`,
			"BadRequestError", "chat_template_kwargs", "NaN and Infinity in chat_template_kwargs are not supported by inferrail-sim."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, body := post(t, url+tt.path, tt.body)
			msg, typ, param := errorOf(t, body)
			if code != http.StatusBadRequest || typ != tt.typ || param != tt.param || msg != tt.msg {
				t.Errorf("%d %q %v %q\nwant 400 %q %v %q", code, typ, param, msg, tt.typ, tt.param, tt.msg)
			}
		})
	}
	// A float field that is not range-checked takes them; so does a field
	// no model declares.
	for _, b := range []struct{ path, body string }{
		{"/v1/completions", `{"prompt":"hi","max_tokens":2,"vllm_xargs":{"x":NaN},"length_penalty":Infinity}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"logit_bias":{"5":-Infinity}}`},
		{"/tokenize", `{"prompt":"hi","x":[NaN,-Infinity]}`},
	} {
		if code, _, body := post(t, url+b.path, b.body); code != http.StatusOK {
			t.Errorf("%s %s: %d %s, want 200", b.path, b.body, code, body)
		}
	}
}

// TestDecodeJSONValues: what decodeJSON makes of valid JSON is what
// json.loads makes of it, as pyRepr shows it.
func TestDecodeJSONValues(t *testing.T) {
	tests := []struct{ in, repr string }{
		{`[NaN,Infinity,-Infinity,1e999,-1e999,1E+2,-0,-0.0]`, "[nan, inf, -inf, inf, -inf, 100.0, 0, -0.0]"},
		{`"\ud83d\ude00\u00e9\/"`, "'😀é/'"},
		{`"\ud83dx"`, "'�x'"}, // Python keeps the lone surrogate; Go cannot
		{` {"a" : [ 1 , {"b":null} ] , "a":true}` + "\r\n", "{'a': True}"},
		{`123456789012345678901234567890`, "123456789012345678901234567890"},
	}
	for _, tt := range tests {
		v, err := decodeJSON([]byte(tt.in))
		var b strings.Builder
		pyRepr(&b, v)
		if err != nil || b.String() != tt.repr {
			t.Errorf("decodeJSON(%q) = %s, %v; want %s", tt.in, b.String(), err, tt.repr)
		}
	}
}
