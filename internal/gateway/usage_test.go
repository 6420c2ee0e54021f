package gateway

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestUsageCapture(t *testing.T) {
	const usage = `{"prompt_tokens":400,"total_tokens":403,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":16}}`
	tests := []struct {
		name, body, want string
	}{
		{"whole_answer", `{"id":"x","usage":` + usage + `,"prompt_token_ids":[1,2,3]}`, usage},
		{"space_after_key", `{"usage": ` + "\n" + usage + `}`, usage},
		{"null_keeps_the_last", `data: {"usage":{"completion_tokens":1}}` + "\n\n" + `data: {"usage":null}`, `{"completion_tokens":1}`},
		{"later_replaces", `{"usage":{"completion_tokens":1}} {"usage":{"completion_tokens":2}}`, `{"completion_tokens":2}`},
		{"braces_in_strings", `{"usage":{"note":"}\"{","completion_tokens":2},"x":"}"}`, `{"note":"}\"{","completion_tokens":2}`},
		{"key_in_a_string", `{"content":"say \"usage\":{\"completion_tokens\":9}"}`, ""},
		{"cut_off", `{"usage":{"completion_tokens":2`, ""},
		{"too_long", `{"usage":{"x":"` + strings.Repeat("a", usageObjectBytes) + `"}}`, ""},
		{"none", `{"id":"x"}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c usageCapture
			c.write([]byte(tc.body))
			if got := string(c.object()); got != tc.want {
				t.Errorf("object() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestUsageCaptureAnySplit: the usage object captured from a body is the
// last one in it that is an object, however the body is split into
// writes; keys quoted within strings and long trailers do not matter.
func TestUsageCaptureAnySplit(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// Strings may hold what looks like usage: JSON escapes their quotes.
		text := rapid.StringOfN(rapid.SampledFrom([]rune(`"usage":{}\ x`)), 0, 40, -1)
		var body strings.Builder
		body.WriteString(`{"id":"x"`)
		want := ""
		for i := range rapid.IntRange(0, 4).Draw(t, "values") {
			s, _ := json.Marshal(text.Draw(t, "text"))
			fmt.Fprintf(&body, `,"text%d":%s,`, i, s)
			if rapid.Bool().Draw(t, "null") {
				body.WriteString(`"usage":null`)
				continue
			}
			obj := fmt.Sprintf(`{"prompt_tokens":%d,"note":%s,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}`,
				rapid.IntRange(0, 1e6).Draw(t, "prompt"), s, rapid.IntRange(0, 1e6).Draw(t, "completion"), rapid.IntRange(0, 1e6).Draw(t, "cached"))
			body.WriteString(`"usage":` + strings.Repeat(" ", rapid.IntRange(0, 2).Draw(t, "spaces")) + obj)
			want = obj
		}
		body.WriteString(`,"prompt_token_ids":[` + strings.Repeat("1000,", rapid.IntRange(0, 600).Draw(t, "ids")) + `1]}`)
		b := body.String()
		cuts := rapid.SliceOfN(rapid.IntRange(0, len(b)), 0, 12).Draw(t, "cuts")
		slices.Sort(cuts)
		var c usageCapture
		from := 0
		for _, cut := range append(cuts, len(b)) {
			c.write([]byte(b[from:cut]))
			from = cut
		}
		if got := string(c.object()); got != want {
			t.Fatalf("object() = %q, want %q\nbody %q cut at %v", got, want, b, cuts)
		}
	})
}

// FuzzUsageTail: an engine's answer, any bytes, read through the tail in
// any split never panics, and finds what it finds in one write: the same
// captured usage object, the same numbers and the same [DONE].
func FuzzUsageTail(f *testing.F) {
	f.Add([]byte(`{"id":"x","usage":{"prompt_tokens":4,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2}},"prompt_token_ids":[1]}`), uint16(7), uint16(40))
	f.Add([]byte("data: {\"usage\":{\"completion_tokens\":1}}\r\n\r\ndata: {\"usage\":null}\n\ndata: [DONE]\n\n"), uint16(1), uint16(2))
	f.Add([]byte(`{"usage":{"s":"}\"{\\","completion_tokens":2},"x":"\"usage\":{}"}`), uint16(9), uint16(10))
	f.Fuzz(func(t *testing.T, body []byte, a, b uint16) {
		var whole, split usageTail
		whole.write(body)
		cuts := []int{int(a) % (len(body) + 1), int(b) % (len(body) + 1)}
		slices.Sort(cuts)
		split.write(body[:cuts[0]])
		split.write(body[cuts[0]:cuts[1]])
		split.write(body[cuts[1]:])
		if w, s := string(whole.usage.object()), string(split.usage.object()); w != s {
			t.Fatalf("usage object %q in one write, %q in three (cuts %v)", w, s, cuts)
		}
		for _, key := range []string{`"completion_tokens":`, `"prompt_tokens":`, `"cached_tokens":`} {
			wn, wok := whole.number(key)
			sn, sok := split.number(key)
			if wn != sn || wok != sok {
				t.Fatalf("%s: %d, %v in one write, %d, %v in three", key, wn, wok, sn, sok)
			}
		}
		if whole.endsWithDone() != split.endsWithDone() {
			t.Fatal("[DONE] found in one write and not in three, or the reverse")
		}
		// After a whole JSON document, a final usage chunk and [DONE], as a
		// stream ends, are what the tail finds, however it is split.
		if json.Valid(body) {
			n := len(body)%1000 + 1
			end := fmt.Appendf(nil, "\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"prompt_tokens_details\":null}}\n\ndata: [DONE]\n\n", n+1, n)
			for _, cut := range []int{0, cuts[0] % (len(end) + 1), cuts[1] % (len(end) + 1)} {
				tail := whole
				tail.write(end[:cut])
				tail.write(end[cut:])
				got, ok := tail.number(`"completion_tokens":`)
				prompt, pok := tail.number(`"prompt_tokens":`)
				if got != n || !ok || prompt != n+1 || !pok || !tail.endsWithDone() {
					t.Fatalf("%q then %q (cut at %d): completion_tokens %d, %v, prompt_tokens %d, %v, [DONE] %v", body, end, cut, got, ok, prompt, pok, tail.endsWithDone())
				}
			}
		}
	})
}
