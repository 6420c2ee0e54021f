package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// TestHFMetaspaceFirstHead: Metaspace's prepend_scheme "first" prepends
// to a piece whose first character tokenizers aligns with offset 0 of the
// original text, which is not always the piece at offset 0 of the
// normalized text: normalizers delete the first character (Strip, Replace),
// expand it into several that pre-tokenizers split apart (NFKC, Prepend),
// or compose a later character into what follows the head. The vocabulary
// is one token per character with byte fallback, so the ids show each ▁;
// they are tokenizers 0.23.3's.
func TestHFMetaspaceFirstHead(t *testing.T) {
	vocab := map[string]int{}
	for _, r := range "▁abcdefghijklmnopqrstuvwxyz0123456789 ⁄()í" {
		vocab[string(r)] = len(vocab)
	}
	for b := range 256 {
		vocab[fmt.Sprintf("<0x%02X>", b)] = len(vocab)
	}
	const meta = `{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":false}`
	seq := func(pre string) string { return `{"type":"Sequence","pretokenizers":[` + pre + `,` + meta + `]}` }
	digits := seq(`{"type":"Digits","individual_digits":true}`)
	tests := []struct {
		name, normalizer, preTokenizer string
		cases                          map[string][]int // text → ids
	}{
		{"strip", `{"type":"Strip","strip_left":true,"strip_right":true}`, meta, map[string][]int{
			" x": {24}, "  hello world ": {8, 5, 12, 12, 15, 0, 23, 15, 18, 12, 4}, "hello": {0, 8, 5, 12, 12, 15},
		}},
		{"replace_zwsp", `{"type":"Replace","pattern":{"String":"\u200b"},"content":""}`, meta, map[string][]int{
			"\u200bhello": {8, 5, 12, 12, 15}, "hello": {0, 8, 5, 12, 12, 15},
		}},
		{"nfkc_digits", `{"type":"NFKC"}`, digits, map[string][]int{
			"½ cup":   {0, 28, 0, 38, 0, 29, 0, 3, 21, 16},
			"¼":       {0, 28, 0, 38, 0, 31},
			"x½":      {0, 24, 28, 38, 29},
			"⑽ items": {0, 39, 0, 28, 0, 27, 0, 40, 0, 9, 20, 5, 13, 19},
			"12 cups": {0, 28, 29, 0, 3, 21, 16, 19},
		}},
		{"lstrip_digits", `{"type":"Strip","strip_left":true,"strip_right":false}`, digits, map[string][]int{
			"  7 days": {34, 0, 4, 1, 25, 19}, "7 days": {0, 34, 0, 4, 1, 25, 19}, " x": {24},
		}},
		{"prepend_digits", `{"type":"Prepend","prepend":"x"}`, digits, map[string][]int{
			"7 days": {0, 24, 0, 34, 0, 4, 1, 25, 19}, "a7": {0, 24, 1, 34},
		}},
		// ﬁ becomes f and an inserted i; with U+0301 after it the i
		// composes into í, which takes U+0301's place, past the head.
		{"nfkc_split_f", `{"type":"NFKC"}`, seq(`{"type":"Split","pattern":{"String":"f"},"behavior":"Isolated","invert":false}`), map[string][]int{
			"ﬁx": {0, 6, 0, 9, 24}, "ﬁ\u0301x": {0, 6, 41, 24},
		}},
		// A replacement is aligned with the last character it replaces.
		{"replace_two", `{"type":"Replace","pattern":{"String":"ab"},"content":"c"}`, meta, map[string][]int{
			"abd": {3, 4}, "xabd": {0, 24, 3, 4},
		}},
		{"replace_one", `{"type":"Replace","pattern":{"String":"a"},"content":"c"}`, meta, map[string][]int{
			"abd": {0, 3, 2, 4},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := json.Marshal(map[string]any{
				"version": "1.0", "added_tokens": []any{}, "post_processor": nil, "decoder": nil,
				"normalizer": json.RawMessage(tt.normalizer), "pre_tokenizer": json.RawMessage(tt.preTokenizer),
				"model": map[string]any{"type": "BPE", "byte_fallback": true, "vocab": vocab, "merges": []string{}},
			})
			if err != nil {
				t.Fatal(err)
			}
			tok, err := newTokenizer(data, nil, tokenizerClass{})
			if err != nil {
				t.Fatal(err)
			}
			for text, want := range tt.cases {
				if got := tok.Encode(nil, text, false); !slices.Equal(got, want) {
					t.Errorf("Encode(%q) = %v, want %v", text, got, want)
				}
			}
		})
	}
}

// TestUnicodeHeadCut: unicodeHead reads s only up to the first ASCII
// character past the head, which nothing composes with or reorders across
// (checked here for every ASCII character); on random strings it agrees
// with the same alignment rule applied to the whole of s, whose tags also
// consume each character of s exactly once.
func TestUnicodeHeadCut(t *testing.T) {
	for r := range rune(utf8.RuneSelf) {
		for _, form := range []norm.Form{norm.NFC, norm.NFKC} {
			if !form.PropertiesString(string(r)).BoundaryBefore() {
				t.Fatalf("%q combines with what is before it", r)
			}
		}
	}
	naive := func(form norm.Form, s string, head int) int {
		runes, n := []rune(s), 0
		j, stopped := 0, false // runes of s consumed
		for _, c := range normChars(form, s) {
			off := len(string(runes[:j]))
			if !stopped && (c.change > 0 && off <= head || c.change <= 0 && off < head) {
				n += utf8.RuneLen(c.r)
			} else {
				stopped = true
			}
			j += 1 - min(c.change, 1)
		}
		if j != len(runes) {
			t.Fatalf("normChars(%+q) consumes %d characters of %d", s, j, len(runes))
		}
		return n
	}
	r := rand.New(rand.NewPCG(7, 8))
	pool := append([]string{"x", "1", "(", "  "}, normPool...)
	forms := map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}
	for range 20000 {
		var b strings.Builder
		for range 1 + r.IntN(8) {
			b.WriteString(pool[r.IntN(len(pool))])
		}
		s := b.String()
		_, first := utf8.DecodeRuneInString(s)
		for name, form := range forms {
			for _, head := range []int{0, first, len(s) / 2, len(s)} {
				if !utf8.RuneStart(s[min(head, len(s)-1)]) && head < len(s) {
					continue
				}
				if got, want := unicodeHead(form, s, head), naive(form, s, head); got != want {
					t.Fatalf("%s: unicodeHead(%+q, %d) = %d, want %d", name, s, head, got, want)
				}
			}
		}
	}
}

// TestRegexBacktrackingStops: a split pattern that backtracks without end
// on a text ((a|aa)+$ on 40 a's and a "!": 28 a's took 0.3 s, and each a
// more half as long again) stops at matchTimeout, and the encoding reports ErrStopped, as tokenizers' encode
// fails at Oniguruma's retry limit; it held its worker for as long as the
// text made it backtrack.
func TestRegexBacktrackingStops(t *testing.T) {
	vocab := map[string]int{"a": 0, "b": 1, "!": 2}
	for b := range 256 {
		vocab[fmt.Sprintf("<0x%02X>", b)] = len(vocab)
	}
	data, err := json.Marshal(map[string]any{
		"version": "1.0", "added_tokens": []any{}, "post_processor": nil, "decoder": nil, "normalizer": nil,
		"pre_tokenizer": json.RawMessage(`{"type":"Split","pattern":{"Regex":"(a|aa)+$"},"behavior":"Isolated","invert":false}`),
		"model":         map[string]any{"type": "BPE", "byte_fallback": true, "vocab": vocab, "merges": []string{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := newTokenizer(data, nil, tokenizerClass{})
	if err != nil {
		t.Fatalf("the pattern should load (it is Oniguruma syntax we reproduce): %v", err)
	}
	if got := tok.Encode(nil, "aab", false); !slices.Equal(got, []int{0, 0, 1}) {
		t.Fatalf("Encode(aab) = %v", got)
	}
	var stop atomic.Bool
	if _, err := tok.EncodeUntil(nil, strings.Repeat("a", 40)+"!", false, &stop); !errors.Is(err, ErrStopped) {
		t.Errorf("a text that backtracks without end: %v, want ErrStopped", err)
	}
}
