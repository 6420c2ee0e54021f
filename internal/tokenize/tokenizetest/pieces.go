package tokenizetest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"
)

// pieceAtoms are the fragments random pieces are made of: words, spaces
// and newlines, digits, punctuation, text NFC changes, CJK, the Metaspace
// character.
var pieceAtoms = []string{
	"the", " cat", "Hello", " world", " ", "  ", "\n", "\n\n", "\t", "42", "2025", ",", ".", "!", "'s", "'ll",
	"e\u0301", "é", "日本語", "中文", "▁", "{", "}", "<", ">", "|", "x", "ab", "  \n ",
}

// PieceText draws texts built from a few pieces, most of them long enough
// to be cached, and added tokens of the tokenizer between them, so that the
// same piece comes back at the start of a text, after an added token and
// next to another piece.
func PieceText(specials []string) *rapid.Generator[[]string] {
	return rapid.Custom(func(t *rapid.T) []string {
		atoms := rapid.SampledFrom(pieceAtoms)
		pool := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) string {
			return strings.Join(rapid.SliceOfN(atoms, 1, 60).Draw(t, "atoms"), "")
		}), 1, 4).Draw(t, "pool")
		texts := make([]string, rapid.IntRange(1, 4).Draw(t, "texts"))
		for i := range texts {
			var b strings.Builder
			for range rapid.IntRange(0, 6).Draw(t, "steps") {
				if rapid.IntRange(0, 3).Draw(t, "piece") > 0 {
					b.WriteString(rapid.SampledFrom(pool).Draw(t, "from pool"))
				}
				if len(specials) > 0 && rapid.IntRange(0, 3).Draw(t, "special") > 0 {
					b.WriteString(rapid.SampledFrom(specials).Draw(t, "added token"))
				}
			}
			texts[i] = b.String()
		}
		return texts
	})
}

// cacheGoroutines is how many goroutines CheckCacheConcurrent shares one
// tokenizer among: the spec's sixteen threads.
const cacheGoroutines = 16

// CheckCacheConcurrent encodes from 16 goroutines through cached, a
// tokenizer with a small piece cache that keeps evicting, texts of long
// pieces between <|im_start|> and <|im_end|>, and checks that each gives
// what direct, the same tokenizer without a cache, gives; under -race it
// checks the locking.
func CheckCacheConcurrent(t *testing.T, name string, cached, direct func(text string) []int) {
	t.Helper()
	var pieces []string
	for i := range 40 {
		pieces = append(pieces, fmt.Sprintf("piece %d: %s", i, strings.Repeat(pieceAtoms[i%len(pieceAtoms)]+" and more ", 3+i%20)))
	}
	var texts []string
	for i := range 200 {
		texts = append(texts, "<|im_start|>"+pieces[i%len(pieces)]+"<|im_end|><|im_start|>"+pieces[(i*7)%len(pieces)]+"<|im_end|>")
	}
	want := make([][]int, len(texts))
	for i, s := range texts {
		want[i] = direct(s)
	}
	var wg sync.WaitGroup
	errs := make(chan string, cacheGoroutines)
	for w := range cacheGoroutines {
		wg.Go(func() {
			for round := range 3 {
				for i := (w + round) % cacheGoroutines; i < len(texts); i += cacheGoroutines {
					if got := cached(texts[i]); !slices.Equal(got, want[i]) {
						errs <- fmt.Sprintf("%s: Encode(%q) = %v, want %v", name, texts[i], got, want[i])
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
}
