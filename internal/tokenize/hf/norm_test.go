package hf

import (
	"encoding/json"
	"testing"
)

// TestHFReplaceEmptyMatchAtStart: Replace puts its content at an empty
// match, also when that is the only match and at the start of the text (the
// replacement was dropped then, as if nothing had matched). The results are
// tokenizers 0.23.3's.
func TestHFReplaceEmptyMatchAtStart(t *testing.T) {
	tests := []struct{ pattern, in, want string }{
		{`^`, "a", "▁a"},
		{`^`, "ab", "▁ab"},
		{`\A`, "a", "▁a"},
		{`^x?`, "a", "▁a"},
		{`^x?`, "xa", "▁a"},
	}
	for _, tt := range tests {
		raw, err := json.Marshal(map[string]any{"type": "Replace", "pattern": map[string]string{"Regex": tt.pattern}, "content": "▁"})
		if err != nil {
			t.Fatal(err)
		}
		n, err := newNormalizer("normalizer", raw)
		if err != nil {
			t.Fatalf("Replace %q: %v", tt.pattern, err)
		}
		if got := n.normalize(tt.in); got != tt.want {
			t.Errorf("Replace %q by ▁ in %q = %q, want %q", tt.pattern, tt.in, got, tt.want)
		}
	}
}
