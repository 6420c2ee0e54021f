package tokenize

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/inferrail/inferrail/internal/tokenize/tokenizetest"
)

// familyHF returns a family's shared tokenizer, or skips the test when
// `make tokenizers` has not fetched its files.
func familyHF(t testing.TB, family string) *HF {
	t.Helper()
	dir := filepath.Join("..", "..", ".cache", "tokenizers", family)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Skipf("%s: no tokenizer files in %s (run `make tokenizers`)", family, dir)
	}
	return sharedHF(t, family)
}

// cacheTokenizers lists every tokenizer the piece cache is checked on: the
// synthetic ones of testdata (Metaspace schemes, lstrip and rstrip,
// normalized added tokens, Strip …) and the families whose files are
// present.
func cacheTokenizers(t *testing.T) []struct {
	name string
	tok  func(t *testing.T) *HF
} {
	type entry = struct {
		name string
		tok  func(t *testing.T) *HF
	}
	var list []entry
	for _, st := range readSynthetic(t).Tokenizers {
		raw := st.Tokenizer
		list = append(list, entry{"synthetic_" + st.Name, func(t *testing.T) *HF {
			tok, err := newHF(raw, nil)
			if err != nil {
				t.Fatalf("newHF: %v", err)
			}
			return tok
		}})
	}
	for _, family := range hfFamilies {
		list = append(list, entry{family, func(t *testing.T) *HF { return familyHF(t, family) }})
	}
	return list
}

// addedContents returns up to 40 added tokens of tok, in content order.
func addedContents(tok *HF) []string {
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
	for _, family := range hfFamilies {
		t.Run(family, func(t *testing.T) {
			t.Parallel()
			c := familyHF(t, family).WithCache(4 << 20)
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

// goldenIDs is a text and the ids a golden gives for it.
type goldenIDs struct {
	name    string // names the golden in failures
	text    string
	special bool // add_special_tokens
	ids     []int
}

// checkGoldensCached encodes goldens through one piece cache as a gateway
// does, token for token: cold (an empty cache, where a piece is encoded the
// first time and found when a later golden repeats it), warm (the same
// cache, the same order) and warm again in another order, so that each
// golden takes pieces that others put. The cache keeps everything, so warm
// passes must find every piece.
func checkGoldensCached(t *testing.T, tok *HF, goldens []goldenIDs) {
	t.Helper()
	c := tok.WithCache(4 << 20)
	inOrder := make([]int, len(goldens))
	for i := range inOrder {
		inOrder[i] = i
	}
	shuffled := rand.New(rand.NewPCG(7, 8)).Perm(len(goldens))
	for _, pass := range []struct {
		name  string
		order []int
	}{{"cold", inOrder}, {"warm", inOrder}, {"warm_shuffled", shuffled}} {
		_, missesBefore := c.CacheStats()
		failed := 0
		for _, i := range pass.order {
			g := goldens[i]
			if got := c.Encode(nil, g.text, g.special); !slices.Equal(got, g.ids) {
				if failed++; failed <= 10 {
					t.Errorf("%s: %s: Encode(%q, %v) with cache\n got %v\nwant %v", pass.name, g.name, g.text, g.special, got, g.ids)
				}
			}
		}
		if failed > 0 {
			t.Errorf("%s: %d of %d goldens differ", pass.name, failed, len(goldens))
		}
		if _, misses := c.CacheStats(); pass.name != "cold" && misses != missesBefore {
			t.Errorf("%s: %d pieces missed, want all found", pass.name, misses-missesBefore)
		}
	}
	hits, misses := c.CacheStats()
	if hits == 0 {
		t.Errorf("CacheStats() = %d hits, %d misses: no golden has a piece the cache keeps", hits, misses)
	}
	t.Logf("%d goldens, 3 passes: %d pieces found, %d encoded", len(goldens), hits, misses)
}

// TestHFSyntheticCached is TestHFSynthetic through a piece cache, cold and
// warm: the synthetic tokenizers have the components whose result depends
// on where a piece is (Metaspace's prepend_scheme "first") or on its
// neighbours (lstrip, rstrip, single_word).
func TestHFSyntheticCached(t *testing.T) {
	data := readSynthetic(t)
	for _, st := range data.Tokenizers {
		t.Run(st.Name, func(t *testing.T) {
			tok, err := newHF(st.Tokenizer, nil)
			if err != nil {
				t.Fatalf("newHF: %v", err)
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
	var tok *HF
	for _, st := range readSynthetic(t).Tokenizers {
		if st.Name == "metaspace_first_fuse_unk" {
			var err error
			if tok, err = newHF(st.Tokenizer, nil); err != nil {
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
	tok := familyHF(t, "qwen3")
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

// TestPieceCacheConcurrent encodes with Qwen3's tokenizer from several
// goroutines through one small cache that keeps evicting; under -race it
// checks the locking.
func TestPieceCacheConcurrent(t *testing.T) {
	tok := familyHF(t, "qwen3")
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
	tok := familyHF(b, "qwen3")
	count := func(s string) int { return len(tok.Encode(nil, s, false)) }
	system, turns := tokenizetest.Chat8k(b, count)
	chat := turns("")
	n := len(tok.Encode(nil, chat, false))
	run := func(name string, n int, setup func() *HF, text func(i int) string) {
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
	run("nocache", n, func() *HF { return tok }, same)
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
	run("warm", n, func() *HF {
		c := tok.WithCache(4 << 20)
		c.Encode(nil, chat, false)
		return c
	}, same)
	run("warm-system", n, func() *HF {
		c := tok.WithCache(4 << 20)
		c.Encode(nil, system, false)
		return c
	}, func(i int) string { return turns(fmt.Sprintf("(%d) ", i)) })
	system1, chat1 := tokenizetest.Chat8kOneTurn(b, count)
	run("warm-system-one-turn", len(tok.Encode(nil, chat1(""), false)), func() *HF {
		c := tok.WithCache(4 << 20)
		c.Encode(nil, system1, false)
		return c
	}, func(i int) string { return chat1(fmt.Sprintf("(%d) ", i)) })
}

// BenchmarkChatRequest8k is the whole edge path of an 8,000-token chat
// request with Qwen3: the body parsed, the chat template rendered, the text
// tokenized. cold uses an empty piece cache each time; warm one that has
// seen the same request (BenchmarkHFChat8k's warm-system covers a seen
// system prompt before new turns).
func BenchmarkChatRequest8k(b *testing.B) {
	tok := familyHF(b, "qwen3")
	chunks, _ := tokenizetest.Corpus(b)
	var lines []string
	for _, c := range chunks {
		lines = append(lines, strings.SplitAfter(c, "\n")...)
	}
	take := func(tokens int) string {
		var sb strings.Builder
		for n := 0; n < tokens; {
			sb.WriteString(lines[0])
			n += len(tok.Encode(nil, lines[0], false))
			lines = lines[1:]
		}
		return sb.String()
	}
	system := take(5000)
	var turns []string
	for range 5 {
		turns = append(turns, take(600))
	}
	body := func(tag string) []byte {
		msgs := []map[string]string{{"role": "system", "content": system}}
		for i, t := range turns {
			msgs = append(msgs, map[string]string{"role": []string{"user", "assistant"}[i%2], "content": tag + t})
		}
		out, err := json.Marshal(map[string]any{"model": "m", "messages": msgs, "chat_template_kwargs": map[string]bool{"enable_thinking": false}})
		if err != nil {
			b.Fatal(err)
		}
		return out
	}
	same := body("")
	renderer := func(b *testing.B, c *HF) *ChatRenderer {
		r, err := c.NewChatRenderer(ChatOptions{})
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	encode := func(b *testing.B, r *ChatRenderer, req []byte) int {
		p, err := ParseChatRequest(req)
		if err != nil {
			b.Fatal(err)
		}
		ids, err := r.ChatIDs(p)
		if err != nil {
			b.Fatal(err)
		}
		return len(ids)
	}
	n := encode(b, renderer(b, tok), same)
	b.Run("cold", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer() // the gateway builds its renderer once, at start
			r := renderer(b, tok.WithCache(4<<20))
			b.StartTimer()
			encode(b, r, same)
		}
		b.ReportMetric(float64(n), "tokens")
	})
	b.Run("warm", func(b *testing.B) {
		r := renderer(b, tok.WithCache(4<<20))
		encode(b, r, same)
		b.ReportAllocs()
		for b.Loop() {
			encode(b, r, same)
		}
		b.ReportMetric(float64(n), "tokens")
	})
}
