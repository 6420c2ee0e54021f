package hf

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// regexGoldens is testdata/regex.json.gz, what tokenizers' Oniguruma
// matches, written by scripts/goldens/regex_goldens.py.
type regexGoldens struct {
	Classes map[string][][2]rune `json:"classes"`
	Cases   []struct {
		Pattern  string     `json:"pattern"`
		Compiles bool       `json:"compiles"`
		Texts    []string   `json:"texts"`
		Matches  [][][2]int `json:"matches"`
		IDs      [][]int    `json:"ids"`
	} `json:"cases"`
}

func readRegexGoldens(t *testing.T) *regexGoldens {
	t.Helper()
	return readGzipJSON[regexGoldens](t, filepath.Join("testdata", "regex.json.gz"))
}

// readGzipJSON decodes the gzip-compressed JSON document at path.
func readGzipJSON[T any](tb testing.TB, path string) *T {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	var v T
	if err := json.NewDecoder(zr).Decode(&v); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	return &v
}

// refusedRegexes are the goldens' patterns translateRegex refuses, all of
// which tokenizers compiles: it would match them otherwise than regexp2.
var refusedRegexes = map[string]bool{
	`(?i)[a-z]+`:    true, // a class under (?i): ſ is in it, İ is not
	`[[:alpha:]]+`:  true, // a POSIX bracket
	`\w+`:           true, // \w and \b know other characters
	`\b\w`:          true,
	`\w+|[^\w\s]+`:  true,
	`a{,3}`:         true, // {0,3} in Oniguruma, literal text in regexp2
	`(?i)ss`:        true, // also ß and ẞ
	`(?i)st`:        true, // also ﬅ and ﬆ
	`(?i:fi)`:       true, // also ﬁ
	`\p{Greek}+`:    true, // a script, not a general category
	`\p{l}`:         true,
	`a{2}?`:         true, // (?:a{2})? in Oniguruma, lazy in regexp2
	`a*+`:           true, // possessive
	`(a*)*`:         true, // a repeated group that can match nothing
	`(?<=a)b`:       true, // lookbehind
	`\x41`:          true,
	`\h+`:           true, // a hex digit in Oniguruma
	`\R`:            true,
	`\X`:            true,
	`[a[:digit:]]+`: true, // a POSIX bracket nested
	`[[:alpha]]+`:   true, // a class in Oniguruma, refused as what looks like one
	`[&&a]`:         true, // && with nothing on a side
	`[a&&]`:         true,
	`[a-c&&]b]`:     true,
	`[a-[bc]]`:      true, // [bc] in Oniguruma
	`[[a]-c]`:       true, // - a character after a nested class
	`[!-&&b]`:       true, // && ends the range's operand: empty in Oniguruma
	`[]]]`:          true, // ] outside a class
}

// TestOnigRegex: each pattern of the goldens (the review's, the published
// split patterns, and what translateRegex rewrites or refuses) is refused
// with ErrUnsupported as refusedRegexes says, or finds exactly the matches
// tokenizers finds, empty ones included, and a tokenizer normalizing with
// Replace on it gives tokenizers' ids.
func TestOnigRegex(t *testing.T) {
	g := readRegexGoldens(t)
	seen := map[string]bool{}
	for _, c := range g.Cases {
		seen[c.Pattern] = true
		if !c.Compiles {
			t.Errorf("tokenizers does not compile %q", c.Pattern)
			continue
		}
		pat := c.Pattern
		m, err := newMatcher(patternJSON{Regex: &pat})
		tok, loadErr := newTokenizer(replaceTokenizerJSON(t, pat), nil, tokenizerClass{})
		if refusedRegexes[pat] {
			if !errors.Is(err, ErrUnsupported) || !errors.Is(loadErr, ErrUnsupported) {
				t.Errorf("%q: newMatcher error %v, load error %v, want ErrUnsupported", pat, err, loadErr)
			}
			continue
		}
		if err != nil || loadErr != nil {
			t.Errorf("%q: newMatcher error %v, load error %v", pat, err, loadErr)
			continue
		}
		for i, text := range c.Texts {
			if got := m.find(nil, text, nil); !slices.Equal(got, c.Matches[i]) && len(got)+len(c.Matches[i]) > 0 {
				t.Errorf("%q on %+q: matches %v, tokenizers %v", pat, text, got, c.Matches[i])
			}
			if got := tok.Encode(nil, text, false); !slices.Equal(got, c.IDs[i]) {
				t.Errorf("%q: Encode(%+q) = %v, tokenizers %v", pat, text, got, c.IDs[i])
			}
		}
	}
	for pat := range refusedRegexes {
		if !seen[pat] {
			t.Errorf("refusedRegexes has %q, the goldens do not", pat)
		}
	}
}

// replaceTokenizerJSON is the goldens' tokenizer for a pattern: Replace
// with ▁ over the 256 byte tokens, so its ids are the bytes of the text
// with each match replaced.
func replaceTokenizerJSON(t *testing.T, pattern string) []byte {
	t.Helper()
	vocab := map[string]int{}
	for b := range 256 {
		vocab[fmt.Sprintf("<0x%02X>", b)] = b
	}
	data, err := json.Marshal(map[string]any{
		"version": "1.0", "added_tokens": []any{}, "pre_tokenizer": nil, "post_processor": nil, "decoder": nil,
		"normalizer": map[string]any{"type": "Replace", "pattern": map[string]string{"Regex": pattern}, "content": "▁"},
		"model":      map[string]any{"type": "BPE", "byte_fallback": true, "vocab": vocab, "merges": []string{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestOnigTables: onigIs and onigSets give, for every general category
// translateRegex accepts and for \s and \d, exactly the characters
// tokenizers' Oniguruma has in them, and foldLetters exactly those (?i)
// matches with each ASCII letter.
func TestOnigTables(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine over every code point of 59 classes, where the race detector has nothing to find; make norace runs it")
	}
	g := readRegexGoldens(t)
	check := func(name string, want [][2]rune, is func(rune) bool) {
		in := func(r rune) bool {
			for _, rg := range want {
				if rg[0] <= r && r <= rg[1] {
					return true
				}
			}
			return false
		}
		bad := 0
		for r := rune(0); r <= utf8.MaxRune; r++ {
			if r >= 0xD800 && r <= 0xDFFF {
				continue
			}
			if is(r) != in(r) {
				if bad++; bad <= 5 {
					t.Errorf("%s: %U: ours %v, tokenizers %v", name, r, is(r), in(r))
				}
			}
		}
	}
	for name := range onigCategories {
		want, ok := g.Classes[`\p{`+name+`}`]
		if !ok {
			t.Errorf(`onigCategories has %s, the goldens no \p{%s}`, name, name)
			continue
		}
		check(`\p{`+name+`}`, want, func(r rune) bool { return onigIs(name, r) })
		check(`set \p{`+name+`}`, want, onigSets()[name].has)
	}
	check(`\s`, g.Classes[`\s`], func(r rune) bool { return onigIs("space", r) })
	check(`set \s`, g.Classes[`\s`], onigSets()["space"].has)
	check(`\d`, g.Classes[`\d`], func(r rune) bool { return onigIs("Nd", r) })
	for l := 'a'; l <= 'z'; l++ {
		want := g.Classes["(?i)"+string(l)]
		check("(?i)"+string(l), want, func(r rune) bool { return slices.Contains(foldLetters(l), r) })
	}
}

// FuzzTranslateRegex: a pattern comes from tokenizer.json, outside bytes.
// translateRegex must refuse it or write a pattern regexp2 compiles, whose
// matches in any text are in order, apart and on character boundaries.
// And the fuzzed pattern, read as a program for sharedPattern, builds a
// pattern of constructs Go's regexp reads as Oniguruma does: translated,
// it must find in the text exactly the matches Go's regexp finds, so a
// translation that changes what a pattern means fails here.
func FuzzTranslateRegex(f *testing.F) {
	for _, p := range append(slices.Clone(scannerPatterns), `\s+$`, `^\s+`, `(?i:'s|'t)x`, `[^\S\n]+`, `[^\P{L}a]`,
		`\P{L}+|[\p{Lu}\p{Lt}]+?`, `a{2,3}?(?=b)|\Z`, `[a-c\-\]]+`, `(?i)k|\u00e9`, `a{,3}`, `[[:alpha:]]`, `(a`,
		` ?[^(\s|[.,!?…。，、।۔،])]+`, `[a-z&&[^aeiou]]`, `[^\s[^\p{L}]]`, `[]a[^\D]]`) {
		f.Add(p, "a \nb\u088f'ſK\u0295")
	}
	// Programs for sharedPattern that build patterns of each construct.
	for _, p := range sharedSeeds {
		f.Add(p, "ab\nk\u212AK1é .a\n")
	}
	f.Fuzz(func(t *testing.T, pattern, text string) {
		if len(pattern) > 64 || len(text) > 16 || !utf8.ValidString(text) {
			return
		}
		translated, err := translateRegex(pattern)
		if err != nil {
			return
		}
		re, err := regexp2.Compile(translated, regexp2.None)
		if err != nil {
			t.Fatalf("translateRegex(%q) = %q, which regexp2 refuses: %v", pattern, translated, err)
		}
		boundary := func(i int) bool { return i == len(text) || utf8.RuneStart(text[i]) }
		last := 0
		for _, m := range (&regexMatcher{re: re}).find(nil, text, nil) {
			if m[0] < last || m[1] < m[0] || m[1] > len(text) || !boundary(m[0]) || !boundary(m[1]) {
				t.Fatalf("%q (as %q) on %q: match %v after %d", pattern, translated, text, m, last)
			}
			last = m[1]
		}
		checkShared(t, pattern, text)
	})
}

// sharedSeeds are programs for sharedPattern: literals, quantified and lazy
// ones, classes, escapes, groups, (?i:...) and anchors.
var sharedSeeds = []string{"\x08\x02\x00", "\x14\x02\x07", "\x08\x02\x06", "\x06\x82\x01\x00\x02",
	"\x05\x02\x01", "\x11\x02\x08", "\x03\x08\x14\x00\x02\x01", "\x04\x01\x02\x00", "\x04\x06\x02\x01", "\x07\x08", "\x13",
	"\x08\x1f", "\x87\x08\x01\x14\x00\x02\x0a", "\x35\x02\x01", "\x08\x02\x0b\x2c"}

// checkShared is FuzzTranslateRegex's check of meaning: the pattern
// sharedPattern builds from program matches in text, translated, exactly
// what it matches in Go's regexp.
func checkShared(t *testing.T, program, text string) {
	t.Helper()
	onig, ref := sharedPattern(program)
	translated, err := translateRegex(onig)
	if err != nil {
		if !errors.Is(err, ErrUnsupported) {
			t.Fatalf("translateRegex(%q): %v, want nil or ErrUnsupported", onig, err)
		}
		return
	}
	re, err := regexp2.Compile(translated, regexp2.None)
	if err != nil {
		t.Fatalf("translateRegex(%q) = %q, which regexp2 refuses: %v", onig, translated, err)
	}
	want, err := sharedMatches(ref, text)
	if err != nil {
		t.Fatalf("%q: Go's regexp refuses its reference %q: %v", onig, ref, err)
	}
	if got := (&regexMatcher{re: re}).find(nil, text, nil); !slices.Equal(got, want) {
		t.Fatalf("%q (as %q) on %+q: matches %v, Go's regexp (%q) %v", onig, translated, text, got, ref, want)
	}
}
