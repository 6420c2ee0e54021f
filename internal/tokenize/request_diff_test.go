package tokenize

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	"github.com/inferrail/inferrail/internal/tokenize/tokenizetest"
)

// The single-pass parsers must give what the reference parsers
// (request_reference_test.go) give for every body: the same Prompt, and
// the same error, message and kind.

func FuzzParseChatRequestAgainstReference(f *testing.F) {
	for _, s := range tokenizetest.RequestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > 1<<14 {
			return
		}
		compareWithReference(t, "ParseChatRequest", body, ParseChatRequest, parseChatRequestReference)
	})
}

func FuzzParseCompletionRequestAgainstReference(f *testing.F) {
	for _, s := range tokenizetest.RequestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > 1<<14 {
			return
		}
		compareWithReference(t, "ParseCompletionRequest", body, ParseCompletionRequest, parseCompletionRequestReference)
	})
}

func TestParseSeedsAgainstReference(t *testing.T) {
	for _, s := range tokenizetest.RequestSeeds {
		compareWithReference(t, "ParseChatRequest", []byte(s), ParseChatRequest, parseChatRequestReference)
		compareWithReference(t, "ParseCompletionRequest", []byte(s), ParseCompletionRequest, parseCompletionRequestReference)
	}
}

// TestParseChatRequestAgainstReference compares the parsers over chat
// requests of realistic shapes, with repeated keys and values of the wrong
// kind mixed in.
func TestParseChatRequestAgainstReference(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		body := chatBody().Draw(rt, "body")
		compareWithReference(rt, "ParseChatRequest", []byte(body), ParseChatRequest, parseChatRequestReference)
	})
}

func TestParseCompletionRequestAgainstReference(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		body := completionBody().Draw(rt, "body")
		compareWithReference(rt, "ParseCompletionRequest", []byte(body), ParseCompletionRequest, parseCompletionRequestReference)
	})
}

func compareWithReference(t interface {
	Helper()
	Fatalf(string, ...any)
}, name string, body []byte, parse, reference func([]byte) (*Prompt, error)) {
	t.Helper()
	got, err := parse(body)
	want, wantErr := reference(body)
	if errKind(err) != errKind(wantErr) {
		t.Fatalf("%s(%q): error %v (%s), want %v (%s)", name, body, err, errKind(err), wantErr, errKind(wantErr))
	}
	// Chat.Contents is checked by package chattemplate's
	// TestChatReusesContents and FuzzChatRender.
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(Chat{}, "Contents")); diff != "" {
		t.Fatalf("%s(%q) (-reference +got):\n%s", name, body, diff)
	}
}

// errKind is an error's type, its UnsupportedError reason and its message.
func errKind(err error) string {
	var ue *UnsupportedError
	switch {
	case err == nil:
		return "nil"
	case errors.As(err, &ue):
		return fmt.Sprintf("unsupported %s: %s", ue.Reason, err)
	}
	return fmt.Sprintf("%T: %s", errors.Unwrap(err), err)
}

// Generators of request bodies, written as text so that keys can repeat,
// be escaped or change case, and values can be of any kind.

// member is one "key": value of an object, both as JSON text.
type member struct{ key, val string }

func objectText(rt *rapid.T, members []member) string {
	space := rapid.SampledFrom([]string{"", "", " ", "\n  "})
	var b strings.Builder
	b.WriteString("{")
	for i, m := range members {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(space.Draw(rt, "space") + m.key + space.Draw(rt, "space") + ":" + space.Draw(rt, "space") + m.val)
	}
	b.WriteString(space.Draw(rt, "space") + "}")
	return b.String()
}

func listText(rt *rapid.T, items []string) string {
	space := rapid.SampledFrom([]string{"", " ", "\n"}).Draw(rt, "space")
	return "[" + space + strings.Join(items, ","+space) + "]"
}

// keyText writes a key as is, mostly, or escaped, or in another case.
func keyText(rt *rapid.T, key string) string {
	switch rapid.IntRange(0, 30).Draw(rt, "keyForm") { // rapid favours 0, 1 and 30
	case 10:
		return `"` + strings.Replace(key, key[:1], fmt.Sprintf(`\u%04x`, key[0]), 1) + `"`
	case 20:
		return `"` + strings.ToUpper(key[:1]) + key[1:] + `"`
	}
	return `"` + key + `"`
}

// textValue is a JSON string of text that tests the decoding of strings.
func textValue() *rapid.Generator[string] {
	return rapid.Custom(func(rt *rapid.T) string {
		switch rapid.IntRange(0, 9).Draw(rt, "textForm") {
		case 0:
			return rapid.SampledFrom([]string{`""`, `"\u00e9\n\t\"\\\/"`, `"\ud800 lone"`, `"\ud83d\ude00"`, "\"\xff\xfe bad \xc3\"", `"a\u001cb"`, `"<&>"`, `"\u0000"`}).Draw(rt, "special")
		case 1:
			return rapid.SampledFrom([]string{`"user"`, `"assistant"`, `"system"`, `"developer"`, `"tool"`, `"text"`, `"yes"`}).Draw(rt, "word")
		}
		s := rapid.StringMatching(`[ -~é日\n\t]{0,40}`).Draw(rt, "text")
		out, _ := json.Marshal(s)
		return string(out)
	})
}

// anyValue is a JSON value of any kind, shallow.
func anyValue() *rapid.Generator[string] {
	return rapid.SampledFrom([]string{
		`null`, `true`, `false`, `0`, `1`, `-1`, `1.0`, `1e400`, `123456789012345678901234567890`, `"s"`, `""`,
		`[]`, `{}`, `[1, "a", null]`, `{"a": {"b": [1.0]}}`, `["x"]`, `{"type":"text","text":"t"}`,
	})
}

// boolValue is a value of a lax boolean member, sometimes not one.
func boolValue() *rapid.Generator[string] {
	return mostly(rapid.SampledFrom([]string{
		`true`, `false`, `null`, `1`, `0`, `1.0`, `0.0`, `"yes"`, `"No"`, `"ON"`, `"off"`, `"t"`, `"f"`, `"y"`, `"n"`,
	}), rapid.SampledFrom([]string{`2`, `"maybe"`, `""`, `"\"true\""`, `"tru\u0065"`, `[1]`, `{}`}))
}

// oneIn draws a choice made about once in n draws (rapid favours the ends
// of a range, so the choice is the end it favours less).
func oneIn(rt *rapid.T, n int, label string) bool {
	return rapid.IntRange(1, n).Draw(rt, label) == n
}

// mostly draws from good, and about one time in eight from odd.
func mostly(good, odd *rapid.Generator[string]) *rapid.Generator[string] {
	return rapid.Custom(func(rt *rapid.T) string {
		if oneIn(rt, 8, "odd") {
			return odd.Draw(rt, "oddValue")
		}
		return good.Draw(rt, "value")
	})
}

func partValue(rt *rapid.T) string {
	switch rapid.IntRange(0, 9).Draw(rt, "partForm") {
	case 0:
		return textValue().Draw(rt, "stringPart")
	case 1:
		return rapid.SampledFrom([]string{`null`, `1`, `true`, `[]`, `{}`}).Draw(rt, "oddPart")
	case 2:
		return objectText(rt, []member{{`"type"`, rapid.SampledFrom([]string{`"image_url"`, `"refusal"`, `1`, `null`, `"te\u0078t"`}).Draw(rt, "type")}, {`"image_url"`, `{"url":"x"}`}})
	case 3:
		return objectText(rt, []member{{`"type"`, `"text"`}})
	}
	members := []member{{keyText(rt, "type"), `"text"`}, {keyText(rt, "text"), rapid.OneOf(textValue(), anyValue()).Draw(rt, "partText")}}
	if oneIn(rt, 6, "repeatText") {
		members = append(members, member{`"text"`, textValue().Draw(rt, "secondText")})
	}
	return objectText(rt, members)
}

func contentValue(rt *rapid.T) string {
	switch rapid.IntRange(0, 9).Draw(rt, "contentForm") {
	case 5:
		return anyValue().Draw(rt, "oddContent")
	case 1, 2, 3:
		n := rapid.IntRange(0, 4).Draw(rt, "parts")
		parts := make([]string, n)
		for i := range parts {
			parts[i] = partValue(rt)
		}
		return listText(rt, parts)
	}
	return textValue().Draw(rt, "content")
}

func toolCallValue(rt *rapid.T) string {
	if oneIn(rt, 9, "oddCall") {
		return anyValue().Draw(rt, "call")
	}
	fn := anyValue().Draw(rt, "function")
	if !oneIn(rt, 5, "goodFunction") {
		args := rapid.SampledFrom([]string{`{"x": 1}`, ``, `not json`, `{"a": [1.0, {"b": null}]}`}).Draw(rt, "arguments")
		argText, _ := json.Marshal(args)
		fmembers := []member{{keyText(rt, "name"), rapid.OneOf(textValue(), anyValue()).Draw(rt, "name")}, {keyText(rt, "arguments"), string(argText)}}
		if oneIn(rt, 7, "badArguments") {
			fmembers[1].val = anyValue().Draw(rt, "argumentsValue")
		}
		fn = objectText(rt, rapid.Permutation(fmembers).Draw(rt, "functionOrder"))
	}
	members := []member{{`"id"`, `"call_1"`}, {`"type"`, `"function"`}, {keyText(rt, "function"), fn}}
	return objectText(rt, rapid.Permutation(members).Draw(rt, "callOrder"))
}

func messageValue(rt *rapid.T) string {
	if oneIn(rt, 16, "oddMessage") {
		return anyValue().Draw(rt, "message")
	}
	role := mostly(rapid.SampledFrom([]string{`"user"`, `"assistant"`, `"system"`, `"developer"`, `"tool"`}), anyValue()).Draw(rt, "role")
	members := []member{{keyText(rt, "role"), role}}
	if !oneIn(rt, 7, "noContent") {
		members = append(members, member{keyText(rt, "content"), contentValue(rt)})
	}
	for _, k := range []string{"reasoning", "reasoning_content", "name", "tool_call_id", "extra"} {
		if oneIn(rt, 6, "has_"+k) {
			members = append(members, member{keyText(rt, k), mostly(textValue(), anyValue()).Draw(rt, k)})
		}
	}
	if oneIn(rt, 5, "hasToolCalls") {
		val := anyValue().Draw(rt, "toolCalls")
		if !oneIn(rt, 4, "goodToolCalls") {
			calls := make([]string, rapid.IntRange(0, 3).Draw(rt, "calls"))
			for i := range calls {
				calls[i] = toolCallValue(rt)
			}
			val = listText(rt, calls)
		}
		members = append(members, member{keyText(rt, "tool_calls"), val})
	}
	if oneIn(rt, 7, "repeat") {
		members = append(members, members[rapid.IntRange(0, len(members)-1).Draw(rt, "repeated")])
	}
	return objectText(rt, rapid.Permutation(members).Draw(rt, "order"))
}

func toolValue(rt *rapid.T) string {
	if oneIn(rt, 9, "oddTool") {
		return anyValue().Draw(rt, "tool")
	}
	fn := objectText(rt, []member{{`"name"`, textValue().Draw(rt, "toolName")}, {`"parameters"`, `{"type": "object", "properties": {"x": {"type": "number", "default": 1.50}}}`}, {`"description"`, textValue().Draw(rt, "description")}})
	return objectText(rt, []member{{`"type"`, `"function"`}, {`"function"`, fn}})
}

// chatBody is a chat request body: mostly well formed, sometimes broken.
func chatBody() *rapid.Generator[string] {
	return rapid.Custom(func(rt *rapid.T) string {
		var members []member
		add := func(key, val string) { members = append(members, member{keyText(rt, key), val}) }
		if !oneIn(rt, 11, "noMessages") {
			val := anyValue().Draw(rt, "messagesValue")
			if !oneIn(rt, 9, "oddMessages") {
				msgs := make([]string, rapid.IntRange(0, 5).Draw(rt, "messages"))
				for i := range msgs {
					msgs[i] = messageValue(rt)
				}
				val = listText(rt, msgs)
			}
			add("messages", val)
		}
		add("model", `"m"`)
		for _, k := range []string{"add_generation_prompt", "continue_final_message", "add_special_tokens"} {
			if rapid.Bool().Draw(rt, "has_"+k) {
				add(k, boolValue().Draw(rt, k))
			}
		}
		for _, k := range []string{"cache_salt", "reasoning_effort", "documents", "max_tokens"} {
			if oneIn(rt, 4, "has_"+k) {
				add(k, mostly(textValue(), anyValue()).Draw(rt, k))
			}
		}
		if oneIn(rt, 8, "hasTemplate") {
			add("chat_template", mostly(rapid.Just("null"), anyValue()).Draw(rt, "template"))
		}
		if oneIn(rt, 4, "hasKwargs") {
			val := anyValue().Draw(rt, "kwargs")
			if !oneIn(rt, 6, "objectKwargs") {
				kw := []member{{`"enable_thinking"`, boolValue().Draw(rt, "thinking")}}
				if oneIn(rt, 4, "kwargsTemplate") {
					kw = append(kw, member{keyText(rt, "chat_template"), mostly(rapid.Just("null"), anyValue()).Draw(rt, "template")})
				}
				val = objectText(rt, kw)
			}
			add("chat_template_kwargs", val)
		}
		if oneIn(rt, 4, "hasTools") {
			val := anyValue().Draw(rt, "toolsValue")
			if !oneIn(rt, 4, "goodTools") {
				tools := make([]string, rapid.IntRange(0, 3).Draw(rt, "tools"))
				for i := range tools {
					tools[i] = toolValue(rt)
				}
				val = listText(rt, tools)
			}
			add("tools", val)
		}
		members = append(members, logprobMembers(rt, "top_logprobs")...)
		if len(members) > 0 && oneIn(rt, 5, "repeat") {
			members = append(members, members[rapid.IntRange(0, len(members)-1).Draw(rt, "repeated")])
		}
		return breakBody(rt, objectText(rt, rapid.Permutation(members).Draw(rt, "order")))
	})
}

// completionBody is a completion request body.
// logprobMembers draws the members that ask for prompt logprobs:
// prompt_logprobs, echo, and logprobs, the member echo takes them at.
func logprobMembers(rt *rapid.T, logprobs string) []member {
	var members []member
	for _, key := range []string{"prompt_logprobs", "echo", logprobs} {
		if oneIn(rt, 3, "has "+key) {
			val := rapid.SampledFrom([]string{"true", "false", "null", "0", "1", `"yes"`, `"maybe"`, "[]"}).Draw(rt, key)
			members = append(members, member{keyText(rt, key), val})
		}
	}
	return members
}

func completionBody() *rapid.Generator[string] {
	return rapid.Custom(func(rt *rapid.T) string {
		ids := func() string {
			n := rapid.IntRange(0, 4).Draw(rt, "ids")
			items := make([]string, n)
			for i := range items {
				items[i] = rapid.SampledFrom([]string{"0", "1", "151643", "-1", "1.5", "1e2", "null", `"a"`, "99999999999999999999"}).Draw(rt, "id")
			}
			return listText(rt, items)
		}
		var members []member
		if !oneIn(rt, 11, "noPrompt") {
			var prompt string
			switch rapid.IntRange(0, 6).Draw(rt, "promptForm") {
			case 0:
				prompt = anyValue().Draw(rt, "oddPrompt")
			case 1:
				prompt = ids()
			case 2:
				prompt = listText(rt, []string{ids()})
			case 3:
				prompt = listText(rt, []string{ids(), ids()})
			case 4:
				prompt = listText(rt, rapid.SliceOfN(textValue(), 0, 3).Draw(rt, "texts"))
			default:
				prompt = textValue().Draw(rt, "prompt")
			}
			members = append(members, member{keyText(rt, "prompt"), prompt})
		}
		if rapid.Bool().Draw(rt, "hasAddSpecial") {
			members = append(members, member{keyText(rt, "add_special_tokens"), boolValue().Draw(rt, "addSpecial")})
		}
		if rapid.Bool().Draw(rt, "hasSalt") {
			members = append(members, member{keyText(rt, "cache_salt"), mostly(textValue(), anyValue()).Draw(rt, "salt")})
		}
		members = append(members, logprobMembers(rt, "logprobs")...)
		if len(members) > 0 && oneIn(rt, 5, "repeat") {
			members = append(members, members[rapid.IntRange(0, len(members)-1).Draw(rt, "repeated")])
		}
		return breakBody(rt, objectText(rt, rapid.Permutation(members).Draw(rt, "order")))
	})
}

// breakBody sometimes spoils a body: cut short, trailing data, a stray
// byte.
func breakBody(rt *rapid.T, body string) string {
	switch rapid.IntRange(0, 40).Draw(rt, "break") { // rapid favours 0, 1 and 40
	case 10:
		return body[:rapid.IntRange(0, len(body)-1).Draw(rt, "cut")]
	case 20:
		return body + rapid.SampledFrom([]string{" ", " x", "{}", ","}).Draw(rt, "trailing")
	case 30:
		i := rapid.IntRange(0, len(body)-1).Draw(rt, "at")
		return body[:i] + rapid.SampledFrom([]string{",", "]", "}", "\"", "\xff", " "}).Draw(rt, "stray") + body[i:]
	}
	return body
}

// BenchmarkParseChatRequest32k parses a 32 KB chat request, the size of
// BenchmarkChatRequest8k's, with the single-pass parser and the reference.
func BenchmarkParseChatRequest32k(b *testing.B) {
	chunks, _ := tokenizetest.Corpus(b)
	text := strings.Join(chunks, "")
	msgs := []map[string]string{{"role": "system", "content": text[:20000]}}
	for i := range 5 {
		at := 20000 + i*2400
		msgs = append(msgs, map[string]string{"role": []string{"user", "assistant"}[i%2], "content": text[at : at+2400]})
	}
	body, err := json.Marshal(map[string]any{"model": "m", "messages": msgs, "chat_template_kwargs": map[string]bool{"enable_thinking": false}})
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range []struct {
		name  string
		parse func([]byte) (*Prompt, error)
	}{{"single_pass", ParseChatRequest}, {"reference", parseChatRequestReference}} {
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := p.parse(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
