package openai

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

func TestFindModelUser(t *testing.T) {
	for _, tt := range []struct{ body, user string }{
		{`{"model":"a","user":"u-1"}`, "u-1"},
		{`{"user":"first","user":"last"}`, "last"},
		{`{"user":"set","user":null}`, ""},
		{`{"user":5}`, ""},
		{`{"metadata":{"user":"inner"}}`, ""},
		{`{"us\u0065r":"esc\u00e9"}`, "escé"},
		{`{"model":"user"}`, ""},
	} {
		f, err := FindModel([]byte(tt.body))
		if err != nil || f.User != tt.user {
			t.Errorf("FindModel(%s).User = %q, %v; want %q", tt.body, f.User, err, tt.user)
		}
	}
}

func TestFindModelStream(t *testing.T) {
	for _, tt := range []struct {
		body   string
		stream bool
	}{
		{`{"model":"a","stream":true}`, true},
		{`{"stream" : true , "model":"a"}`, true},
		{`{"stream":false}`, false},
		{`{"stream":true,"stream":false}`, false},
		// As vLLM's pydantic reads a boolean (LaxBool).
		{`{"stream":"true"}`, true},
		{`{"stream":"Yes"}`, true},
		{`{"stream":1}`, true},
		{`{"stream":1e0}`, true},
		{`{"stream":"no"}`, false},
		{`{"stream":" true"}`, false},
		{`{"stream":2}`, false},
		{`{"stream":[true]}`, false},
		{`{"stream":"\u0074\u0072\u0075\u0065"}`, true},
		{`{"stream":"\u0074\u0072\u0075\u0065 "}`, false},
		{`{"stream":1.0000000000000000000000000000000000000000}`, true},
		{`{"stream":null}`, false},
		{`{"stream_options":{"include_usage":true}}`, false},
		{`{"metadata":{"stream":true}}`, false},
		{`{"str\u0065am":true}`, true},
		{`{"model":"stream"}`, false},
	} {
		f, err := FindModel([]byte(tt.body))
		if err != nil || f.Stream != tt.stream {
			t.Errorf("FindModel(%s).Stream = %v, %v; want %v", tt.body, f.Stream, err, tt.stream)
		}
	}
}

// pydanticTrue is a naive reading of what pydantic's lax mode takes as
// true, for a value decoded by encoding/json (numbers as float64).
func pydanticTrue(v any) bool {
	switch t := v.(type) {
	case bool:
		return t
	case float64:
		return t == 1
	case string:
		return slices.Contains([]string{"1", "on", "t", "true", "y", "yes"}, strings.ToLower(t))
	}
	return false
}

// TestLaxBool: booleans as pydantic 2.14 read them in a request model
// (checked there: model_validate of json.loads of each input).
func TestLaxBool(t *testing.T) {
	for _, tt := range []struct {
		json    string
		value   bool
		errType string
	}{
		{`true`, true, ""}, {`false`, false, ""},
		{`1`, true, ""}, {`1.0`, true, ""}, {`1e0`, true, ""}, {`10e-1`, true, ""},
		{`0`, false, ""}, {`-0`, false, ""}, {`0.0`, false, ""},
		{`2`, false, "bool_parsing"}, {`-1`, false, "bool_parsing"}, {`2.0`, false, "bool_parsing"},
		{`1.5`, false, "bool_type"}, {`100000000000000000000001`, false, "bool_type"}, {`1e400`, false, "bool_type"},
		{`"true"`, true, ""}, {`"True"`, true, ""}, {`"yes"`, true, ""}, {`"on"`, true, ""}, {`"1"`, true, ""},
		{`"t"`, true, ""}, {`"Y"`, true, ""},
		{`"no"`, false, ""}, {`"0"`, false, ""}, {`"off"`, false, ""}, {`"F"`, false, ""}, {`"N"`, false, ""},
		{`" true"`, false, "bool_parsing"}, {`"TRUE "`, false, "bool_parsing"}, {`"1.0"`, false, "bool_parsing"},
		{`""`, false, "bool_parsing"}, {`" 1"`, false, "bool_parsing"},
		{`[]`, false, "bool_type"}, {`{}`, false, "bool_type"},
	} {
		d := json.NewDecoder(strings.NewReader(tt.json))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if got, errType := LaxBool(v); got != tt.value || errType != tt.errType {
			t.Errorf("LaxBool(%s) = %v, %q; want %v, %q", tt.json, got, errType, tt.value, tt.errType)
		}
	}
}

func TestFindModel(t *testing.T) {
	tests := []struct {
		body    string
		name    string
		present bool
		err     error
	}{
		{`{"model":"a","x":1}`, "a", true, nil},
		{` { "x" : {"model":"inner"} , "model" : "b" } `, "b", true, nil},
		{`{"model":"a","model":"c"}`, "c", true, nil},
		{`{"mod\u0065l":"esc"}`, "esc", true, nil},
		{`{"model":null}`, "", true, nil},
		{`{"messages":[{"model":"no"}]}`, "", false, nil},
		{`{}`, "", false, nil},
		{`{"model":5}`, "", true, ErrModelType},
		{`[1]`, "", false, ErrNotObject},
		{"{\"model\":\"a\xffb\"}", "", true, ErrModelNotUTF8},
		{`{"model":"\u00e9\"q"}`, "é\"q", true, nil},
	}
	for _, tt := range tests {
		f, err := FindModel([]byte(tt.body))
		if err != tt.err || f.Name != tt.name || f.Present != tt.present {
			t.Errorf("FindModel(%s) = %+v, %v; want %q present=%v err=%v", tt.body, f, err, tt.name, tt.present, tt.err)
		}
	}
}

// object draws a JSON object with nested values and maybe a model key.
func object() *rapid.Generator[[]byte] {
	return rapid.Custom(func(t *rapid.T) []byte {
		keys := rapid.SliceOfN(rapid.SampledFrom([]string{"model", "messages", "max_tokens", "m\u00f6del", "x", "stream", "max_completion_tokens", "n"}), 0, 6).Draw(t, "keys")
		var b bytes.Buffer
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(rapid.SampledFrom([]string{",", " , ", ",\n"}).Draw(t, "sep"))
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteString(rapid.SampledFrom([]string{":", " : "}).Draw(t, "colon"))
			var v any
			switch rapid.IntRange(0, 7).Draw(t, "kind") {
			case 6: // what a lax boolean may be
				v = rapid.SampledFrom([]any{"true", "Yes", "no", "1", "0", " true", 1, 0, 2, 1.5, 1.0}).Draw(t, "lax")
			case 7: // what a lax count may be
				v = rapid.SampledFrom([]any{"2000", " 7 ", "+3", "1_000", "1.0", "x", json.RawMessage("1e3"), json.RawMessage("2.0"),
					json.RawMessage("99999999999999999999"), json.RawMessage("-4"), json.RawMessage("0.5")}).Draw(t, "count")
			case 0:
				v = rapid.String().Draw(t, "str")
			case 1:
				v = rapid.Int().Draw(t, "int")
			case 2:
				v = map[string]any{"model": rapid.String().Draw(t, "inner"), "l": []any{"}", "]", 1}}
			case 3:
				v = nil
			case 4:
				v = rapid.Bool().Draw(t, "bool")
			default:
				v = []any{rapid.String().Draw(t, "el"), map[string]any{"a": "{"}}
			}
			vb, _ := json.Marshal(v)
			b.Write(vb)
		}
		b.WriteByte('}')
		return b.Bytes()
	})
}

func TestFindAndSpliceAgreeWithDecoder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		body := object().Draw(t, "body")
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("generated invalid JSON %s: %v", body, err)
		}
		f, err := FindModel(body)
		want, present := m["model"]
		if present != f.Present {
			t.Fatalf("FindModel(%s) present=%v, decoder says %v", body, f.Present, present)
		}
		if stream := pydanticTrue(m["stream"]); f.Stream != stream {
			t.Fatalf("FindModel(%s).Stream = %v, decoder says %v", body, f.Stream, stream)
		}
		checkCounts(t, body, f)
		if s, isStr := want.(string); present && isStr {
			if err != nil || f.Name != s {
				t.Fatalf("FindModel(%s) = %q, %v; want %q", body, f.Name, err, s)
			}
		} else if present && want != nil && err != ErrModelType {
			t.Fatalf("FindModel(%s) err = %v for a non-string model", body, err)
		}
		if err != nil {
			return
		}
		name := rapid.String().Draw(t, "name")
		out := SpliceModel(body, f, name)
		var got map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("splice of %s gave invalid JSON %s: %v", body, out, err)
		}
		if got["model"] != name {
			t.Fatalf("spliced model %v, want %q", got["model"], name)
		}
		delete(got, "model")
		delete(m, "model")
		if !maps.EqualFunc(got, m, func(a, b any) bool { ja, _ := json.Marshal(a); jb, _ := json.Marshal(b); return bytes.Equal(ja, jb) }) {
			t.Fatalf("splice changed more than the model: %s → %s", body, out)
		}
		if f.Present && (!bytes.Equal(out[:f.Start], body[:f.Start]) || !bytes.HasSuffix(out, body[f.End:])) {
			t.Fatalf("bytes around the model changed: %s → %s", body, out)
		}
	})
}

// checkCounts fails unless FindModel's counts are LaxWhole of the values
// a decoder finds at the top level of body, numbers kept as written.
func checkCounts(t fataler, body []byte, f ModelField) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var top map[string]any
	if d.Decode(&top) != nil {
		return
	}
	for key, got := range map[string]int64{"max_tokens": f.MaxTokens, "max_completion_tokens": f.MaxCompletionTokens, "n": f.N} {
		var want int64
		if v := top[key]; v != nil {
			raw, _ := json.Marshal(v)
			want = LaxWhole(raw)
		}
		if got != want {
			t.Fatalf("FindModel(%s)'s %s = %d, decoder's value reads %d", body, key, got, want)
		}
	}
}

// fataler is what checkCounts needs of *testing.T and *rapid.T.
type fataler interface {
	Fatalf(format string, args ...any)
}

// TestLaxWhole: counts as pydantic's lax mode reads an integer field;
// strings it may refuse ("1_000" is Python's int() syntax) read high,
// which only costs an engine's 400.
func TestLaxWhole(t *testing.T) {
	for _, tt := range []struct {
		json string
		want int64
	}{
		{`2000`, 2000}, {`1`, 1}, {`0`, 0}, {`-5`, 0}, {`-0`, 0},
		{`2000.0`, 2000}, {`1e3`, 1000}, {`1E3`, 1000}, {`10e-1`, 1}, {`1.5`, 0}, {`0.5`, 0}, {`1e400`, 0},
		{`99999999999999999999`, math.MaxInt64}, {`1e30`, math.MaxInt64}, {`9223372036854775807`, math.MaxInt64},
		{`"2000"`, 2000}, {`" 7 "`, 7}, {`"+3"`, 3}, {`"1_000"`, 1000}, {`"1.0"`, 1}, {`"\u0031\u0032"`, 12},
		{`""`, 0}, {`"x"`, 0}, {`"-3"`, 0}, {`".5"`, 0}, {`"` + strings.Repeat("1", 70) + `"`, 0},
		{`true`, 0}, {`null`, 0}, {`[5]`, 0}, {`{"n":5}`, 0},
	} {
		if got := LaxWhole([]byte(tt.json)); got != tt.want {
			t.Errorf("LaxWhole(%s) = %d, want %d", tt.json, got, tt.want)
		}
	}
}

func TestFindModelCounts(t *testing.T) {
	for _, tt := range []struct {
		body         string
		max, maxC, n int64
	}{
		{`{"model":"a","max_tokens":16}`, 16, 0, 0},
		{`{"max_completion_tokens":"300","n":2,"max_tokens":1}`, 1, 300, 2},
		{`{"max_tokens":5,"max_tokens":null}`, 0, 0, 0},
		{`{"options":{"max_tokens":5},"n":[3]}`, 0, 0, 0},
		{`{"max_tok\u0065ns":9,"\u006e":4}`, 9, 0, 4},
	} {
		f, err := FindModel([]byte(tt.body))
		if err != nil || f.MaxTokens != tt.max || f.MaxCompletionTokens != tt.maxC || f.N != tt.n {
			t.Errorf("FindModel(%s) = max_tokens %d, max_completion_tokens %d, n %d, %v; want %d, %d, %d",
				tt.body, f.MaxTokens, f.MaxCompletionTokens, f.N, err, tt.max, tt.maxC, tt.n)
		}
	}
}

// stringOr is v if it is a string, else "" (null and other kinds name no
// model).
func stringOr(v any) string {
	s, _ := v.(string)
	return s
}

func FuzzFindModel(f *testing.F) {
	for _, s := range []string{`{"mod\u0065l":"a","prompt":[1,2],"model":"b","prompt":"p"}`, `{"prompt":null,"model":""}`, `{"model":"a"}`, "{\"model\":\"\xc3\"}", `{"a":[{"model":1}],"model":null}`, `{}`, `{"model":"\ud83d\ude00"}`, `{"stream":true,"str\u0065am":false}`, `{"stream":"yes"}`, `{"stream":1.0}`, `{"request_id":"r1","user":"u","request_id":2}`, `{"requ\u0065st_id":"r\u00e9"}`, `{"max_tokens":"1_0","n":2.0,"max_completion_tokens":1e3}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) {
			return
		}
		fm, err := FindModel(body)
		var top map[string]any
		if json.Unmarshal(body, &top) == nil {
			if stream := pydanticTrue(top["stream"]); fm.Stream != stream {
				t.Fatalf("FindModel(%s).Stream = %v, decoder says %v", body, fm.Stream, stream)
			}
			for key, got := range map[string]string{"user": fm.User, "request_id": fm.RequestID} {
				if want, _ := top[key].(string); got != want {
					t.Fatalf("FindModel(%s)'s %s = %q, decoder says %q", body, key, got, want)
				}
			}
			checkCounts(t, body, fm)
			// The model and prompt are those the decoder reads: the
			// last of their keys, the prompt's span its value.
			if model, ok := top["model"]; err == nil && (ok != fm.Present || ok && fm.Name != stringOr(model)) {
				t.Fatalf("FindModel(%s) = model %q (present %v), decoder says %#v (present %v)", body, fm.Name, fm.Present, model, ok)
			}
			if prompt, ok := top["prompt"]; ok {
				var got any
				if fm.PromptEnd <= fm.PromptStart || json.Unmarshal(body[fm.PromptStart:fm.PromptEnd], &got) != nil || !reflect.DeepEqual(got, prompt) {
					t.Fatalf("FindModel(%s) spans the prompt %q, decoder says %#v", body, body[fm.PromptStart:fm.PromptEnd], prompt)
				}
			} else if fm.PromptStart != 0 || fm.PromptEnd != 0 {
				t.Fatalf("FindModel(%s) spans a prompt %d:%d the decoder does not see", body, fm.PromptStart, fm.PromptEnd)
			}
		}
		if fm.Present && body[fm.Start] == '"' && (err == ErrModelNotUTF8) == utf8.Valid(body[fm.Start:fm.End]) {
			t.Fatalf("FindModel(%s) err = %v for a model string whose UTF-8 validity is %v", body, err, utf8.Valid(body[fm.Start:fm.End]))
		}
		if err != nil {
			return
		}
		out := SpliceModel(body, fm, "x")
		if !json.Valid(out) {
			t.Fatalf("splice of %s is invalid: %s", body, out)
		}
		again, err := FindModel(out)
		if err != nil || again.Name != "x" {
			t.Fatalf("after splice FindModel = %+v, %v", again, err)
		}
	})
}

func TestValidRequestID(t *testing.T) {
	for id, want := range map[string]bool{"abc-123_x.y:z": true, "": false, "a b": false, "é": false, string(make([]byte, 129)): false} {
		if got := ValidRequestID(id); got != want {
			t.Errorf("ValidRequestID(%q) = %v, want %v", id, got, want)
		}
	}
}
