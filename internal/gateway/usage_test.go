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
