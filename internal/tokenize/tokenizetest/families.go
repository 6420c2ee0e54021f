package tokenizetest

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer is what the checks of a Hugging Face family use of its
// tokenizer, *hf.Tokenizer, whose WithCache returns T. This package does
// not import hf, so that hf's own tests can use it.
type Tokenizer[T any] interface {
	Encode(dst []int, text string, addSpecialTokens bool) []int
	Decode(ids []int) string
	WithCache(maxTokens int) T
	VocabSize() int
	SpecialIDs() (prefix, suffix []int)
	AddedTokens() []string
}

// Families holds the families' tokenizers for the fuzz targets, each loaded
// by Load on the first input that picks it, so that a fuzz worker reads
// only those it uses. Safe for concurrent use.
type Families[T Tokenizer[T]] struct {
	// Load returns a family's tokenizer, or skips the test when `make
	// tokenizers` has not fetched its files.
	Load func(tb testing.TB, family string) T

	mu sync.Mutex
	m  map[string]*family[T] // guarded by mu
}

// family is a family's tokenizer as the fuzz targets check it.
type family[T Tokenizer[T]] struct {
	name           string
	tok            T
	maxID          int      // every id is below
	sep            string   // the added token of the lowest id, which ends a piece
	added          []string // every added token
	prefix, suffix []int    // what special tokens put around a text
}

func (fs *Families[T]) get(t *testing.T, name string) *family[T] {
	t.Helper()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.m[name]; f != nil {
		return f
	}
	tok := fs.Load(t, name)
	f := &family[T]{name: name, tok: tok, maxID: tok.VocabSize(), added: tok.AddedTokens()}
	if len(f.added) > 0 {
		f.sep = f.added[0]
	}
	if f.sep == "" {
		t.Fatalf("%s: no added tokens", name)
	}
	f.prefix, f.suffix = tok.SpecialIDs()
	if fs.m == nil {
		fs.m = map[string]*family[T]{}
	}
	fs.m[name] = f
	return f
}

// roundTrips reports whether the family's Decode gives back s from its
// encoding without special tokens. The byte-level families (Qwen3, Llama
// 3.1 and 3.2, DeepSeek V3, Mistral Nemo, GPT-4o, Command R+) keep every
// valid UTF-8 text, Qwen3 and Command R+ once NFC normalized.
// Gemma 3 and Llama 2 write spaces as "▁" and decode every "▁" as a space,
// so a "▁" of the text comes back as a space. Llama 2 (transformers 5's
// LlamaTokenizer, legacy) also prepends "▁" to each stretch of text between
// added tokens that does not start with one, and its decoder strips the
// first space of all: "a</s>b" decodes as "a</s> b", " a" as "a".
func (f *family[T]) roundTrips(s string) bool {
	if !utf8.ValidString(s) {
		return false // encoded as if each invalid byte were U+FFFD
	}
	switch f.name {
	case "qwen3", "command_r_plus":
		return norm.NFC.IsNormalString(s)
	case "llama3_1", "deepseek_v3", "llama3_2", "mistral_nemo", "gpt4o":
		return true
	case "gemma3":
		return !strings.Contains(s, "▁")
	case "llama2":
		if strings.Contains(s, "▁") || strings.HasPrefix(s, " ") {
			return false
		}
		for _, a := range f.added {
			if strings.Contains(s, a) {
				return false
			}
		}
		return true
	}
	return false
}

// Check encodes s with the family's tokenizer and checks what holds for
// every family: Encode appends to dst, ids are in the vocabulary, special
// tokens only wrap the plain encoding, a piece cache changes nothing (a new
// cache: s cold, then warm, then sep+s+sep+s, where s is a piece not at the
// start, missed once and found once), and Decode gives back s where the
// family guarantees it (roundTrips).
func (fs *Families[T]) Check(t *testing.T, name, s string) {
	t.Helper()
	f := fs.get(t, name)
	ids := f.tok.Encode([]int{-7}, s, false)
	if ids[0] != -7 {
		t.Fatalf("%s: Encode overwrote dst", f.name)
	}
	ids = ids[1:]
	for _, id := range ids {
		if id < 0 || id >= f.maxID {
			t.Fatalf("%s: Encode(%q): id %d out of range", f.name, s, id)
		}
	}
	special := f.tok.Encode(nil, s, true)
	if want := slices.Concat(f.prefix, ids, f.suffix); !slices.Equal(special, want) {
		t.Fatalf("%s: Encode(%q, true) = %v, want %v", f.name, s, special, want)
	}
	twice := f.sep + s + f.sep + s
	twiceIDs := f.tok.Encode(nil, twice, false)
	c := f.tok.WithCache(1 << 16)
	for _, tt := range []struct {
		pass, text string
		special    bool
		want       []int
	}{
		{"cold", s, false, ids},
		{"warm", s, false, ids},
		{"warm", s, true, special},
		{"after_added_token", twice, false, twiceIDs},
	} {
		if got := c.Encode(nil, tt.text, tt.special); !slices.Equal(got, tt.want) {
			t.Fatalf("%s: %s: Encode(%q, %v) with cache = %v, without %v", f.name, tt.pass, tt.text, tt.special, got, tt.want)
		}
	}
	if f.roundTrips(s) {
		if got := f.tok.Decode(ids); got != s {
			t.Fatalf("%s: Decode(Encode(%q)) = %q", f.name, s, got)
		}
	}
}
