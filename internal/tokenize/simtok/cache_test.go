package simtok

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/inferrail/inferrail/internal/tokenize"
	"github.com/inferrail/inferrail/internal/tokenize/hf"
	"github.com/inferrail/inferrail/internal/tokenize/tokenizetest"
)

// TestSimCacheEqualsUncached is the Hugging Face tokenizer's
// TestHFCacheEqualsUncached for builtin:sim.
func TestSimCacheEqualsUncached(t *testing.T) {
	sim := New()
	specials := specials[:]
	rapid.Check(t, func(rt *rapid.T) {
		texts := tokenizetest.PieceText(specials).Draw(rt, "texts")
		budget := rapid.SampledFrom([]int{1 << 20, 200}).Draw(rt, "budget")
		c := sim.WithCache(budget)
		for _, pass := range []string{"cold", "warm"} {
			for _, text := range texts {
				want := sim.Encode(nil, text)
				if got := c.Encode(nil, text); !slices.Equal(got, want) {
					rt.Fatalf("%s: Encode(%q) with cache = %v, without %v", pass, text, got, want)
				}
				if got := c.PromptIDs(&tokenize.Prompt{Text: text, AddSpecial: true}); !slices.Equal(got, sim.PromptIDs(&tokenize.Prompt{Text: text, AddSpecial: true})) {
					rt.Fatalf("%s: PromptIDs(%q) differs with cache", pass, text)
				}
			}
		}
	})
	c := sim.WithCache(1 << 20)
	text := IMStart + strings.Repeat("system prompt ", 10) + IMEnd
	c.Encode(nil, text)
	c.Encode(nil, text)
	if hits, misses := c.CacheStats(); hits != 1 || misses != 1 {
		t.Errorf("CacheStats() = %d, %d; want 1, 1", hits, misses)
	}
}

// TestPieceCacheConcurrent encodes from 16 goroutines through one
// small cache that keeps evicting; under -race it checks the locking.
func TestPieceCacheConcurrent(t *testing.T) {
	sim := New()
	simCached := sim.WithCache(3000)
	tokenizetest.CheckCacheConcurrent(t, "sim",
		func(s string) []int { return simCached.Encode(nil, s) },
		func(s string) []int { return sim.Encode(nil, s) })
	if _, tokens := simCached.pieces.Size(); tokens > 3000 {
		t.Errorf("sim cache holds %d tokens, bound 3000", tokens)
	}
}

// BenchmarkSimChat8k is the Hugging Face tokenizer's BenchmarkHFChat8k's
// nocache and warm for builtin:sim, on the same text with its special
// tokens (built with Qwen3's tokenizer counting the tokens).
func BenchmarkSimChat8k(b *testing.B) {
	qwen3 := loadQwen3(b)
	_, turns := tokenizetest.Chat8k(b, func(s string) int { return len(qwen3.Encode(nil, s, false)) })
	chat := turns("")
	sim := New()
	n := sim.Count(chat)
	warm := sim.WithCache(4 << 20)
	warm.Encode(nil, chat)
	for _, c := range []struct {
		name string
		sim  *Tokenizer
	}{{"nocache", sim}, {"warm", warm}} {
		b.Run(c.name, func(b *testing.B) {
			var dst []int
			b.ReportAllocs()
			for b.Loop() {
				dst = c.sim.Encode(dst[:0], chat)
			}
			b.ReportMetric(float64(n), "tokens")
		})
	}
}

// BenchmarkSimShared is the Hugging Face tokenizer's BenchmarkHFShared
// for builtin:sim, on the same chats.
func BenchmarkSimShared(b *testing.B) {
	qwen3 := loadQwen3(b)
	_, turns := tokenizetest.Chat8k(b, func(s string) int { return len(qwen3.Encode(nil, s, false)) })
	sim := New()
	for _, v := range []struct {
		name  string
		chats int
		cache int
	}{{"warm", 32, 4 << 20}, {"evicting", 256, 1 << 20}} {
		texts := make([]string, v.chats)
		want := make([][]int, v.chats)
		for i := range texts {
			texts[i] = turns(fmt.Sprintf("(%d) ", i))
			want[i] = sim.Encode(nil, texts[i])
		}
		cached := sim.WithCache(v.cache)
		for _, s := range texts {
			cached.Encode(nil, s)
		}
		for _, g := range tokenizetest.SharedGoroutines {
			b.Run(fmt.Sprintf("%s/goroutines=%d", v.name, g), func(b *testing.B) {
				tokenizetest.BenchShared(b, g, texts, want, cached.Encode)
			})
		}
	}
}

// loadQwen3 loads Qwen3's tokenizer, or skips the benchmark when `make
// tokenizers` has not fetched its files.
func loadQwen3(b *testing.B) *hf.Tokenizer {
	b.Helper()
	dir := filepath.Join("..", "..", "..", ".cache", "tokenizers", "qwen3")
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		b.Skipf("qwen3: no tokenizer files in %s (run `make tokenizers`)", dir)
	}
	tok, err := hf.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	return tok
}
