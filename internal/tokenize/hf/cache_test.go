package hf

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/inferrail/inferrail/internal/tokenize/tokenizetest"
)

// familyTokenizer returns a family's shared tokenizer, or skips the test when
// `make tokenizers` has not fetched its files.
func familyTokenizer(t testing.TB, family string) *Tokenizer {
	t.Helper()
	dir := filepath.Join("..", "..", "..", ".cache", "tokenizers", family)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Skipf("%s: no tokenizer files in %s (run `make tokenizers`)", family, dir)
	}
	return sharedTokenizer(t, family)
}

// cacheTokenizers lists every tokenizer the piece cache is checked on: the
// synthetic ones of testdata (Metaspace schemes, lstrip and rstrip,
// normalized added tokens, Strip …) and the families whose files are
// present.
func cacheTokenizers(t *testing.T) []struct {
	name string
	tok  func(t *testing.T) *Tokenizer
} {
	type entry = struct {
		name string
		tok  func(t *testing.T) *Tokenizer
	}
	var list []entry
	for _, st := range readSynthetic(t).Tokenizers {
		raw := st.Tokenizer
		list = append(list, entry{"synthetic_" + st.Name, func(t *testing.T) *Tokenizer {
			tok, err := newTokenizer(raw, nil, tokenizerClass{})
			if err != nil {
				t.Fatalf("newTokenizer: %v", err)
			}
			return tok
		}})
	}
	for _, family := range families {
		list = append(list, entry{family, func(t *testing.T) *Tokenizer { return familyTokenizer(t, family) }})
	}
	return list
}

// addedContents returns up to 40 added tokens of tok, in content order.
func addedContents(tok *Tokenizer) []string {
	var out []string
	for s := range tok.added.byContent {
		out = append(out, s)
	}
	sort.Strings(out)
	if len(out) > 40 {
		step := len(out) / 40
		var some []string
		for i := 0; i < len(out); i += step {
			some = append(some, out[i])
		}
		out = some
	}
	return out
}

// TestHFCacheEqualsUncached checks that a tokenizer with a piece cache
// encodes exactly as one without: random texts of repeated pieces and added
// tokens, encoded cold (an empty cache) and then warm, with a cache large
// enough to keep everything and one so small that it evicts all the time.
func TestHFCacheEqualsUncached(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine encoding thousands of texts twice, a minute under the race detector; make norace runs it")
	}
	for _, tt := range cacheTokenizers(t) {
		t.Run(tt.name, func(t *testing.T) {
			tok := tt.tok(t)
			specials := addedContents(tok)
			rapid.Check(t, func(rt *rapid.T) {
				texts := tokenizetest.PieceText(specials).Draw(rt, "texts")
				budget := rapid.SampledFrom([]int{1 << 20, 200}).Draw(rt, "budget")
				c := tok.WithCache(budget)
				for _, pass := range []string{"cold", "warm"} {
					for _, text := range texts {
						for _, special := range []bool{false, true} {
							want := tok.Encode(nil, text, special)
							if got := c.Encode(nil, text, special); !slices.Equal(got, want) {
								rt.Fatalf("%s: Encode(%q, %v) with cache = %v, without %v", pass, text, special, got, want)
							}
						}
					}
				}
			})
		})
	}
}

// TestHFGoldensCached runs the goldens through a tokenizer with a piece
// cache, cold and then warm, token for token.
func TestHFGoldensCached(t *testing.T) {
	for _, family := range families {
		t.Run(family, func(t *testing.T) {
			t.Parallel()
			c := familyTokenizer(t, family).WithCache(4 << 20)
			goldens := readGoldens(t, family)
			for _, pass := range []string{"cold", "warm"} {
				failed := 0
				for i, g := range goldens {
					got := c.Encode(nil, g.Text, false)
					gotSpecial := c.Encode(nil, g.Text, true)
					if slices.Equal(got, g.IDs) && slices.Equal(gotSpecial, g.IDsSpecial) {
						continue
					}
					if failed++; failed <= 10 {
						t.Errorf("%s line %d: Encode(%q)\n got %v\nwant %v\n special got %v\n special want %v",
							pass, i+1, g.Text, got, g.IDs, gotSpecial, g.IDsSpecial)
					}
				}
				if failed > 0 {
					t.Errorf("%s: %d of %d goldens differ", pass, failed, len(goldens))
				}
			}
			if hits, misses := c.CacheStats(); hits == 0 || misses == 0 {
				t.Errorf("CacheStats() = %d hits, %d misses; want both > 0", hits, misses)
			}
		})
	}
}

// TestHFSyntheticCached is TestHFSynthetic through a piece cache, cold and
// warm: the synthetic tokenizers have the components whose result depends
// on where a piece is (Metaspace's prepend_scheme "first") or on its
// neighbours (lstrip, rstrip, single_word).
func TestHFSyntheticCached(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine drawing and checking thousands of cases, where the race detector has nothing to find; make norace runs it")
	}
	data := readSynthetic(t)
	for _, st := range data.Tokenizers {
		t.Run(st.Name, func(t *testing.T) {
			tok, err := newTokenizer(st.Tokenizer, nil, tokenizerClass{})
			if err != nil {
				t.Fatalf("newTokenizer: %v", err)
			}
			c := tok.WithCache(1 << 20)
			for _, pass := range []string{"cold", "warm"} {
				for i, text := range data.Texts {
					if got := c.Encode(nil, text, false); !slices.Equal(got, st.IDs[i]) {
						t.Errorf("%s: Encode(%q) = %v, want %v", pass, text, got, st.IDs[i])
					}
					if got := c.Encode(nil, text, true); !slices.Equal(got, st.IDsSpecial[i]) {
						t.Errorf("%s: Encode(%q, special) = %v, want %v", pass, text, got, st.IDsSpecial[i])
					}
				}
			}
		})
	}
}

// TestHFCacheStart checks that the first piece of a text is cached apart
// from the same text after an added token: with Metaspace's prepend_scheme
// "first" they encode differently.
func TestHFCacheStart(t *testing.T) {
	var tok *Tokenizer
	for _, st := range readSynthetic(t).Tokenizers {
		if st.Name == "metaspace_first_fuse_unk" {
			var err error
			if tok, err = newTokenizer(st.Tokenizer, nil, tokenizerClass{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if tok == nil {
		t.Fatal("no synthetic tokenizer metaspace_first_fuse_unk")
	}
	specials := addedContents(tok)
	if len(specials) == 0 {
		t.Fatal("metaspace_first_fuse_unk has no added tokens")
	}
	piece := strings.Repeat("hello world ", 8)
	c := tok.WithCache(1 << 20)
	first := c.Encode(nil, piece, false)
	after := c.Encode(nil, specials[0]+piece, false)[1:]
	if slices.Equal(first, after) {
		t.Fatalf("%q encodes as %v both first and after %q; the test needs a difference", piece, first, specials[0])
	}
	if want := tok.Encode(nil, specials[0]+piece, false)[1:]; !slices.Equal(after, want) {
		t.Errorf("after %q: %v, want %v", specials[0], after, want)
	}
}

// TestHFCacheHits checks what is cached and counted: long pieces between
// added tokens, not short ones.
func TestHFCacheHits(t *testing.T) {
	tok := familyTokenizer(t, "qwen3")
	c := tok.WithCache(1 << 20)
	system := "system\n" + strings.Repeat("You are a careful assistant. ", 10)
	chat := func(user string) string {
		return "<|im_start|>" + system + "<|im_end|>\n<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n"
	}
	long := strings.Repeat("Tell me about the sea. ", 4)
	for _, tt := range []struct {
		text         string
		hits, misses uint64 // after encoding text
	}{
		{chat("hi"), 0, 1},                   // the system turn; "user\nhi", "\n" and "assistant\n" are too short
		{chat("hi"), 1, 1},                   // found
		{chat(long), 2, 2},                   // found, and the user turn is new
		{chat(long), 4, 2},                   // both found
		{system + long, 4, 3},                // no added token: one piece, which starts the text
		{system + long, 5, 3},                // found
		{"<|im_end|>" + system + long, 5, 4}, // the same text not at the start is another piece
		{"x" + chat(long), 7, 4},             // "x" is too short; both turns found
		{strings.Repeat("a", 63), 7, 4},      // too short
		{strings.Repeat("a", 64), 7, 5},
	} {
		if got, want := c.Encode(nil, tt.text, false), tok.Encode(nil, tt.text, false); !slices.Equal(got, want) {
			t.Fatalf("Encode(%q) = %v, want %v", tt.text, got, want)
		}
		if hits, misses := c.CacheStats(); hits != tt.hits || misses != tt.misses {
			t.Errorf("after Encode(%.40q…): CacheStats() = %d, %d; want %d, %d", tt.text, hits, misses, tt.hits, tt.misses)
		}
	}
	if hits, misses := tok.CacheStats(); hits != 0 || misses != 0 {
		t.Errorf("without a cache: CacheStats() = %d, %d; want 0, 0", hits, misses)
	}
	if tok.WithCache(0).pieces != nil {
		t.Errorf("WithCache(0) has a cache")
	}
}

// TestPieceCacheConcurrent encodes with Qwen3's tokenizer from 16
// goroutines through one small cache that keeps evicting; under -race it
// checks the locking.
func TestPieceCacheConcurrent(t *testing.T) {
	tok := familyTokenizer(t, "qwen3")
	c := tok.WithCache(3000)
	tokenizetest.CheckCacheConcurrent(t, "qwen3",
		func(s string) []int { return c.Encode(nil, s, false) },
		func(s string) []int { return tok.Encode(nil, s, false) })
}

// BenchmarkHFChat8k encodes an 8,000-token chat with Qwen3's tokenizer:
// without a piece cache (nocache); with an empty one (cold); with one that
// has seen the same chat (warm); and with one that has seen its system turn
// but not the other five (warm-system), whose text is rebuilt for every
// encoding (about 3 µs) to make them new. cold-words also empties the BPE
// model's word cache, which a running gateway keeps warm.
// warm-system-one-turn is another 8,000-token chat (Chat8kOneTurn) whose
// system turn of 7,500 tokens has been seen and whose one user turn of 450
// is new, its text rebuilt for every encoding as in warm-system.
func BenchmarkHFChat8k(b *testing.B) {
	tok := familyTokenizer(b, "qwen3")
	count := func(s string) int { return len(tok.Encode(nil, s, false)) }
	system, turns := tokenizetest.Chat8k(b, count)
	chat := turns("")
	n := len(tok.Encode(nil, chat, false))
	run := func(name string, n int, setup func() *Tokenizer, text func(i int) string) {
		b.Run(name, func(b *testing.B) {
			c := setup()
			var dst []int
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				dst = c.Encode(dst[:0], text(i), false)
				i++
			}
			b.ReportMetric(float64(n), "tokens")
			if len(dst) < n {
				b.Fatalf("%d tokens, want at least %d", len(dst), n)
			}
		})
	}
	same := func(int) string { return chat }
	run("nocache", n, func() *Tokenizer { return tok }, same)
	b.Run("cold", func(b *testing.B) {
		var dst []int
		b.ReportAllocs()
		for b.Loop() {
			dst = tok.WithCache(4<<20).Encode(dst[:0], chat, false)
		}
		b.ReportMetric(float64(n), "tokens")
	})
	b.Run("cold-words", func(b *testing.B) {
		var dst []int
		b.ReportAllocs()
		for b.Loop() {
			tok.model.cache.reset()
			dst = tok.WithCache(4<<20).Encode(dst[:0], chat, false)
		}
		b.ReportMetric(float64(n), "tokens")
	})
	run("warm", n, func() *Tokenizer {
		c := tok.WithCache(4 << 20)
		c.Encode(nil, chat, false)
		return c
	}, same)
	run("warm-system", n, func() *Tokenizer {
		c := tok.WithCache(4 << 20)
		c.Encode(nil, system, false)
		return c
	}, func(i int) string { return turns(fmt.Sprintf("(%d) ", i)) })
	system1, chat1 := tokenizetest.Chat8kOneTurn(b, count)
	run("warm-system-one-turn", len(tok.Encode(nil, chat1(""), false)), func() *Tokenizer {
		c := tok.WithCache(4 << 20)
		c.Encode(nil, system1, false)
		return c
	}, func(i int) string { return chat1(fmt.Sprintf("(%d) ", i)) })
}

// BenchmarkHFShared encodes chats of about 8,000 tokens with Qwen3's
// tokenizer from one goroutine and from sixteen sharing the tokenizer and
// its piece cache, checking every id against the single-threaded encoding
// without a cache, and reports tokens/s. warm: 32 chats, seen before by a
// cache of the gateway's default size (tokenizer.cache_tokens, 4 Mi
// tokens). evicting: 256 chats sharing their system turn, twice what a
// cache of 1 Mi tokens holds, so most turns are tokenized again each time. The ratio of the two goroutine
// counts is what sharing costs or gains; this machine has two cores.
func BenchmarkHFShared(b *testing.B) {
	tok := familyTokenizer(b, "qwen3")
	count := func(s string) int { return len(tok.Encode(nil, s, false)) }
	_, turns := tokenizetest.Chat8k(b, count)
	for _, v := range []struct {
		name  string
		chats int
		cache int
	}{{"warm", 32, 4 << 20}, {"evicting", 256, 1 << 20}} {
		texts := make([]string, v.chats)
		want := make([][]int, v.chats)
		for i := range texts {
			texts[i] = turns(fmt.Sprintf("(%d) ", i))
			want[i] = tok.Encode(nil, texts[i], false)
		}
		cached := tok.WithCache(v.cache)
		for _, s := range texts {
			cached.Encode(nil, s, false)
		}
		for _, g := range tokenizetest.SharedGoroutines {
			b.Run(fmt.Sprintf("%s/goroutines=%d", v.name, g), func(b *testing.B) {
				tokenizetest.BenchShared(b, g, texts, want, func(dst []int, s string) []int { return cached.Encode(dst, s, false) })
			})
		}
	}
}
