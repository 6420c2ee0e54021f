package openai

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestArrayPromptTokens(t *testing.T) {
	tests := []struct {
		name   string
		raw    string
		tokens int
		ok     bool
	}{
		{"ids", `[1,2,3]`, 3, true},
		{"batch_of_ids", `[[1,2,3],[4,5],[]]`, 5, true},
		{"batch_of_texts", `["abcd","abcde",""]`, 3, true},
		{"escapes_count_as_written", `["\u00e9\n"]`, 2, true},
		{"spaces", ` [ [ 1 , 2 ] , "abcdefgh" , 7 ] `[1:], 5, true},
		{"other_elements", `[{"a":1},null]`, 2 + 1, true},
		{"empty", `[]`, 0, true},
		{"text", `"a single prompt"`, 0, false},
		{"null", `null`, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, ok := ArrayPromptTokens([]byte(tc.raw), 4)
			if n != tc.tokens || ok != tc.ok {
				t.Errorf("ArrayPromptTokens(%s) = %d, %v; want %d, %v", tc.raw, n, ok, tc.tokens, tc.ok)
			}
		})
	}
}

// TestPrompts: a batch of texts or of token-id lists is one prompt per
// element, as vLLM generates for each; anything else is one prompt.
func TestPrompts(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want int
	}{
		{"texts", `["a","b","c"]`, 3},
		{"id_lists", ` [ [1,2] , [3] ]`[1:], 2},
		{"ids", `[1,2,3]`, 1},
		{"text", `"a b c"`, 1},
		{"empty", `[]`, 1},
		{"null", `null`, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Prompts([]byte(tc.raw)); got != tc.want {
				t.Errorf("Prompts(%s) = %d, want %d", tc.raw, got, tc.want)
			}
		})
	}
}

// refArrayPromptTokens is the naive reading of ArrayPromptTokens' rule:
// the decoder splits the array, each element kept as written.
func refArrayPromptTokens(raw []byte, bytesPerToken int) (int, bool) {
	var elems []json.RawMessage
	if json.Unmarshal(raw, &elems) != nil || elems == nil {
		return 0, false
	}
	n := 0
	for _, e := range elems {
		switch {
		case e[0] == '"':
			n += (len(e) - 2 + bytesPerToken - 1) / bytesPerToken
		case e[0] == '[':
			var ids []json.RawMessage
			_ = json.Unmarshal(e, &ids)
			n += len(ids)
		case e[0] == '-' || e[0] >= '0' && e[0] <= '9':
			n++
		default:
			n += (len(e) + bytesPerToken - 1) / bytesPerToken
		}
	}
	return n, true
}

func FuzzArrayPromptTokens(f *testing.F) {
	for _, tc := range []string{`[1,2,3]`, `[[1,2],[3]]`, `["ab","cde\"f"]`, ` [ {"a":[1]} , null , -3e2 ] `, `"x"`, `[[[1,2]],[]]`} {
		f.Add([]byte(tc))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		raw = raw[skipSpace(raw, 0):] // a value as FindModel spans it starts at its first byte
		n, ok := ArrayPromptTokens(raw, 4)
		wn, wok := refArrayPromptTokens(raw, 4)
		if n != wn || ok != wok {
			t.Fatalf("ArrayPromptTokens(%s) = %d, %v; reference %d, %v", raw, n, ok, wn, wok)
		}
	})
}

// refPrompts is Prompts by encoding/json: the elements of an array whose
// first is a text or a list, else one.
func refPrompts(raw []byte) int {
	var elems []json.RawMessage
	if json.Unmarshal(raw, &elems) != nil || len(elems) == 0 {
		return 1
	}
	if first := bytes.TrimSpace(elems[0]); first[0] != '"' && first[0] != '[' {
		return 1
	}
	return len(elems)
}

func FuzzPrompts(f *testing.F) {
	for _, tc := range []string{`"x"`, `["a","b"]`, `[[1,2],[3]]`, `[1,2,3]`, `[]`, ` [ "a" , [1] ] `, `null`} {
		f.Add([]byte(tc))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		raw = bytes.TrimSpace(raw) // a value as FindModel spans it
		if got, want := Prompts(raw), refPrompts(raw); got != want {
			t.Fatalf("Prompts(%s) = %d, reference %d", raw, got, want)
		}
	})
}
