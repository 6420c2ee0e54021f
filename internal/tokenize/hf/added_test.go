package hf

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
)

// charTokenizer is a tokenizer.json whose vocabulary is one token per
// character of chars, numbered in order of first appearance, with the given
// added tokens and nothing else: what the cases of the review's mini.py build
// for the tokenizers library.
func charTokenizer(t *testing.T, chars string, added []addedTokenJSON) []byte {
	t.Helper()
	vocab := map[string]int{}
	for _, r := range chars {
		if _, ok := vocab[string(r)]; !ok {
			vocab[string(r)] = len(vocab)
		}
	}
	m := map[string]any{
		"version": "1.0", "added_tokens": added, "normalizer": nil, "pre_tokenizer": nil,
		"post_processor": nil, "decoder": nil,
		"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestHFAddedTokenSwallowed: an added token whose whole match a previous
// token's rstrip took, and whose lstrip then leaves it nothing, is an empty
// split, which tokenizers drops. The ids are tokenizers 0.23.3's.
func TestHFAddedTokenSwallowed(t *testing.T) {
	const chars = "abcdefghijklmnopqrstuvwxyz xyXY \n!é▁DZzž" // " " is 26, "\n" 29; 36 ids
	tok := func(content string, lstrip, rstrip, normalized bool) addedTokenJSON {
		return addedTokenJSON{Content: content, LStrip: lstrip, RStrip: rstrip, Normalized: normalized, Special: true}
	}
	type swallowCase struct {
		name  string
		added []addedTokenJSON
		cases map[string][]int // text → ids
	}
	tests := []swallowCase{
		{"newline", []addedTokenJSON{tok("\n", true, true, false)}, map[string][]int{
			"x\n\n\ny": {23, 29, 24}, "x\ny": {23, 29, 24}, "\n\n": {29},
		}},
		{"two_spaces", []addedTokenJSON{tok("  ", true, true, false)}, map[string][]int{
			"    ": {36}, "a    b": {0, 36, 1}, "  ": {36},
		}},
	}
	for _, normalized := range []bool{false, true} {
		tests = append(tests, swallowCase{fmt.Sprintf("rstrip_then_lstrip_normalized_%v", normalized),
			[]addedTokenJSON{tok("<a>", false, true, normalized), tok(" ", true, false, normalized)},
			map[string][]int{"<a> x": {36, 23}, "<a>x": {36, 23}, "x <a> y": {23, 26, 36, 24}},
		})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tk, err := newTokenizer(charTokenizer(t, chars, tt.added), nil, tokenizerClass{})
			if err != nil {
				t.Fatal(err)
			}
			for text, want := range tt.cases {
				if got := tk.Encode(nil, text, false); !slices.Equal(got, want) {
					t.Errorf("Encode(%q) = %v, want %v", text, got, want)
				}
			}
		})
	}
}
