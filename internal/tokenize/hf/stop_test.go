package hf

import (
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// stopTokenizerJSON is a small BPE without a pre-tokenizer split inside
// words: "ab" merges, then "abab"; a text without spaces is one word.
const stopTokenizerJSON = `{"version":"1.0","added_tokens":[
 {"id":0,"content":"<s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
 "normalizer":null,"pre_tokenizer":{"type":"Split","pattern":{"String":" "},"behavior":"MergedWithNext","invert":false},
 "post_processor":null,"decoder":{"type":"Fuse"},
 "model":{"type":"BPE","vocab":{"<s>":0,"a":1,"b":2," ":3,"ab":4,"abab":5},"merges":[["a","b"],["ab","ab"]]}}`

// TestEncodeUntil: told to stop before it starts, or in the middle of a
// long word's merges, EncodeUntil gives up with ErrStopped and leaves no
// trace: the same texts encode afterwards exactly as before, and a word
// short enough for the word cache was not cached half merged.
func TestEncodeUntil(t *testing.T) {
	tok, err := newTokenizer([]byte(stopTokenizerJSON), nil, tokenizerClass{})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("ab", 1<<16) // one word, 65,536 merges and more
	short := "abab ab"
	want := map[string][]int{long: tok.Encode(nil, long, false), short: tok.Encode(nil, short, false)}
	if len(want[long]) != 1<<15 || !slices.Equal(want[short], []int{5, 3, 4}) {
		t.Fatalf("the tokenizer encodes %d ids for the long word and %v for %q", len(want[long]), want[short], short)
	}
	cached := tok.WithCache(1 << 20)
	fresh := newTokenizerOrFatal(t)

	var stop atomic.Bool
	stop.Store(true)
	for _, text := range []string{long, short} {
		if _, err := cached.EncodeUntil(nil, text, false, &stop); !errors.Is(err, ErrStopped) {
			t.Errorf("EncodeUntil(%.10q…) with stop set: %v, want ErrStopped", text, err)
		}
	}
	// While reading a long word's characters: it gives up within
	// stopEvery of them, with no ids.
	s := &bpeScratch{stop: &stop}
	if ids := fresh.model.mergeWord(s, nil, long); len(ids) != 0 {
		t.Errorf("stopped while reading the word, mergeWord gave %d ids, want none", len(ids))
	}
	// While queueing or applying its merges: the word is left unmerged.
	syms := make([]symbol, len(long))
	for i := range syms {
		syms[i] = symbol{id: fresh.model.asciiIDs[long[i]], prev: int32(i - 1), next: int32(i + 1), n: 1}
	}
	syms[len(syms)-1].next = -1
	unmerged := 0
	for _, sym := range fresh.model.applyMerges(s, syms) {
		if sym.n == 1 {
			unmerged++
		}
	}
	if unmerged < len(long)-2*stopEvery {
		t.Errorf("stopped merges left %d of %d symbols unmerged, want all but at most %d", unmerged, len(long), 2*stopEvery)
	}
	if len(s.heap) >= stopEvery {
		t.Errorf("stopped merges queued %d candidates first, want it to stop queueing within %d", len(s.heap), stopEvery)
	}
	word := "abababab"
	if got := fresh.model.encode([]int{7}, word, &stop); !slices.Equal(got, []int{7}) {
		t.Errorf("a stopped word encoding appended %v", got[1:])
	}
	if _, ok := fresh.model.cache.get(word); ok {
		t.Error("a stopped word encoding was cached")
	}
	if hits, misses := cached.CacheStats(); hits != 0 {
		t.Errorf("piece cache: %d hits, %d misses after stopped encodings, want no hits", hits, misses)
	}
	for text, w := range want {
		for _, tk := range []*Tokenizer{cached, fresh} {
			if got := tk.Encode(nil, text, false); !slices.Equal(got, w) {
				t.Errorf("after stopped encodings, Encode(%.10q…) = %d ids, want %d", text, len(got), len(w))
			}
		}
	}
	var never atomic.Bool
	if got, err := cached.EncodeUntil(nil, long, false, &never); err != nil || !slices.Equal(got, want[long]) {
		t.Errorf("EncodeUntil without stop: %d ids, %v", len(got), err)
	}
}

func newTokenizerOrFatal(t *testing.T) *Tokenizer {
	t.Helper()
	tok, err := newTokenizer([]byte(stopTokenizerJSON), nil, tokenizerClass{})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestScratchReleaseDropsLongWordBuffers: a scratch that encoded a
// megabyte-long word goes back to the pool without its buffers, which
// the pool would otherwise keep; an ordinary one keeps them.
func TestScratchReleaseDropsLongWordBuffers(t *testing.T) {
	for _, tt := range []struct {
		name string
		cap  int
		kept bool
	}{{"ordinary", 64, true}, {"at_the_limit", maxPooledSymbols, true}, {"long_word", maxPooledSymbols + 1, false}} {
		s := &bpeScratch{syms: make([]symbol, 0, tt.cap), heap: make(mergeHeap, 0, 8), ids: make([]int32, 0, 8)}
		s.trim() // what release does before handing it to the pool
		if kept := s.syms != nil && s.heap != nil && s.ids != nil; kept != tt.kept {
			t.Errorf("%s: after trim buffers kept = %v, want %v", tt.name, kept, tt.kept)
		}
	}
}

// TestMatchersStop: every kind of pre-tokenizer matcher, told to stop,
// gives up on a long text within stopEvery steps (a step is a match or a
// character stepped over); not told to, it finds every match.
func TestMatchersStop(t *testing.T) {
	re, err := newRegexMatcher(patGPT2)
	if err != nil {
		t.Fatal(err)
	}
	words := strings.Repeat("ab ", 1<<15) // GPT-2's pattern: "ab", then " ab" 32,767 times, then " "
	for _, c := range []struct {
		name string
		m    matcher
		text string
		want int // matches in text
	}{
		{"literal", literalMatcher(" "), words, 1 << 15},
		{"regexp2", re, words, 1<<15 + 1},
		{"scanner", scannerFor(patGPT2), words, 1<<15 + 1},
		{"rune_class", runeClassMatcher(func(r rune) bool { return r == ' ' }), words, 1 << 15},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := len(c.m.find(nil, c.text, nil)); got != c.want {
				t.Fatalf("not stopped: %d matches, want %d", got, c.want)
			}
			var stop atomic.Bool
			if got := len(c.m.find(nil, c.text, &stop)); got != c.want {
				t.Fatalf("stop not set: %d matches, want %d", got, c.want)
			}
			stop.Store(true)
			if got := len(c.m.find(nil, c.text, &stop)); got >= stopEvery {
				t.Errorf("stopped: %d matches, want fewer than %d", got, stopEvery)
			}
		})
	}
}
