package sim

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestPyStrEscapesAsPythonRepr: a string in a validation message is
// written as Python's repr writes it, every character str.isprintable
// calls unprintable escaped (\x below 0x100, \u, \U above). Only those
// below 0xa0 were escaped, so a line or paragraph separator, a no-break
// space or a zero-width space was written raw (found by a review).
func TestPyStrEscapesAsPythonRepr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", `'plain'`},
		{"it's", `"it's"`},
		{"a\u2028b\u00a0c\u200bd", `'a\u2028b\xa0c\u200bd'`},
		{"tab\tnl\ncr\r", `'tab\tnl\ncr\r'`},
		{"\x00\x7f\u0085", `'\x00\x7f\x85'`},
		{"é ü 中 😀", `'é ü 中 😀'`},
		{"\U000e0001\ufeff", `'\U000e0001\ufeff'`},
	} {
		var b strings.Builder
		pyStr(&b, tc.in)
		if b.String() != tc.want {
			t.Errorf("pyStr(%q) = %s, want %s", tc.in, b.String(), tc.want)
		}
	}
}

// TestTokenizeTokenStrs: /tokenize fills token_strs, one string per
// token, when asked with return_token_strs, and leaves it null otherwise.
// It was always null (found by a review).
func TestTokenizeTokenStrs(t *testing.T) {
	_, url := startServer(t, zeroLatencyConfig())
	for _, asked := range []bool{true, false} {
		body := `{"prompt":"Hello world, again","return_token_strs":` + map[bool]string{true: "true", false: "false"}[asked] + `}`
		code, _, got := post(t, url+"/tokenize", body)
		var out struct {
			Count     int       `json:"count"`
			Tokens    []int     `json:"tokens"`
			TokenStrs *[]string `json:"token_strs"`
		}
		if err := json.Unmarshal([]byte(got), &out); err != nil || code != 200 {
			t.Fatalf("%s: %d %s", body, code, got)
		}
		switch {
		case asked && (out.TokenStrs == nil || len(*out.TokenStrs) != out.Count || out.Count != len(out.Tokens)):
			t.Errorf("asked: %s; want a string for each of the tokens", got)
		case !asked && out.TokenStrs != nil:
			t.Errorf("not asked: %s; want token_strs null", got)
		}
	}
}
