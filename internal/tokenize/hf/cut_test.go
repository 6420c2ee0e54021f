package hf

import (
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestCanCut(t *testing.T) {
	for _, tt := range []struct {
		vocab     []string
		byteLevel bool
		want      bool
	}{
		{[]string{"▁", "a", "▁a", "▁▁", "▁▁a"}, false, true},
		{[]string{"▁", "a", "a▁"}, false, false},   // a merge may join across a cut
		{[]string{"▁", "a", "▁a▁b"}, false, false}, // likewise, inside an entry
		{[]string{"a", "▁a"}, false, false},        // the mark alone is unknown: unknowns could fuse
		{[]string{"▁", "a"}, true, false},          // byte-level vocabularies hold no marks
	} {
		vocab := map[string]int{}
		for i, tok := range tt.vocab {
			vocab[tok] = i
		}
		if got := canCut(vocab, tt.byteLevel); got != tt.want {
			t.Errorf("canCut(%q, byteLevel %v) = %v, want %v", tt.vocab, tt.byteLevel, got, tt.want)
		}
	}
}

// TestCutWordsSameIDs: a long word cut at its spaces encodes to the ids of
// the word merged whole (the reference), on Llama 2's vocabulary, whose
// tokenizer is cut so.
func TestCutWordsSameIDs(t *testing.T) {
	tok := sharedTokenizer(t, "llama2")
	if !tok.model.cutSpaces {
		t.Fatal("llama2: words are not cut; the test would compare a path with itself")
	}
	pieces := []string{"▁", "▁▁", "▁▁▁▁", "a", "the", "▁the", "ing", "é", "日本", "😀", "\u200b", "<0x41>", "\n", "\t", "1", "23", "▁▁return", "x▁", "\x00", "\uffff"}
	rapid.Check(t, func(rt *rapid.T) {
		parts := rapid.SliceOfN(rapid.SampledFrom(pieces), 1, 120).Draw(rt, "parts")
		word := strings.Join(parts, "")
		got := tok.model.encode(nil, word, nil)
		want := tok.model.encodeWord(nil, word, nil)
		if !slices.Equal(got, want) {
			rt.Fatalf("encode(%q) cut = %v, whole = %v", word, got, want)
		}
	})
}
