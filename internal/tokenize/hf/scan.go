package hf

import (
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
)

// Hand-written scanners for the Split regexes of common tokenizers. Each one
// returns exactly the matches tokenizers' Oniguruma finds for its pattern:
// its classes (onigIs: Go's tables without the characters new in Unicode
// 17, ʕ a lower-case letter) and its case folding (ſ is an s). They run
// several times faster than the pattern on regexp2 as translateRegex
// rewrites it, which TestHFScanners and FuzzHFScanners compare them with.

// Patterns with a scanner, as they appear in tokenizer.json.
const (
	// patCL100K is the pattern of Llama 3 (and GPT-4's cl100k): numbers in
	// runs of up to three digits.
	patCL100K = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patQwen is Qwen 2 and 3's variant: one digit per match.
	patQwen = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patDigits3 splits numbers into runs of up to three (DeepSeek V3).
	patDigits3 = `\p{N}{1,3}`
	// patKanaHan is DeepSeek V3's run of common CJK ideographs and kana.
	patKanaHan = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	// patGPT2 is GPT-2's pattern, which the ByteLevel pre-tokenizer applies
	// when use_regex is set.
	patGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// patDeepSeek is DeepSeek V3's word pattern.
	patDeepSeek = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
	// patO200K is GPT-4o's o200k pattern (also gpt-oss'): words split where
	// lower case turns to upper, contractions kept with their word.
	patO200K = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patTekken is Mistral's Tekken variant: no contractions, one digit
	// per match.
	patTekken = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// scannerFor returns the hand-written matcher of a Split regex, or nil.
func scannerFor(pattern string) matcher {
	switch pattern {
	case patCL100K:
		return scanMatcher(func(s string, i int) int { return scanCL100K(s, i, 3) })
	case patQwen:
		return scanMatcher(func(s string, i int) int { return scanCL100K(s, i, 1) })
	case patDigits3:
		return scanMatcher(scanDigits3)
	case patKanaHan:
		return scanMatcher(scanKanaHan)
	case patDeepSeek:
		return scanMatcher(scanDeepSeek)
	case patGPT2:
		return scanMatcher(scanGPT2)
	case patO200K:
		return scanMatcher(func(s string, i int) int { return scanCased(s, i, 3, true) })
	case patTekken:
		return scanMatcher(func(s string, i int) int { return scanCased(s, i, 1, false) })
	}
	return nil
}

// scanMatcher turns "the end of the match starting at i, or -1" into a
// matcher: like a regex search, positions without a match are stepped over
// one character at a time.
type scanMatcher func(s string, i int) int

func (at scanMatcher) find(dst [][2]int, s string, stop *atomic.Bool) [][2]int {
	for i, k := 0, 1; i < len(s) && !halted(stop, k); k++ {
		if end := at(s, i); end > i {
			dst = append(dst, [2]int{i, end})
			i = end
			continue
		}
		if s[i] < utf8.RuneSelf {
			i++
		} else {
			_, n := utf8.DecodeRuneInString(s[i:])
			i += n
		}
	}
	return dst
}

// Character classes, as bits.
const (
	clL     uint8 = 1 << iota // \p{L}
	clN                       // \p{N}
	clSpace                   // \s
	clP                       // \p{P}
	clS                       // \p{S}
	clM                       // \p{M}
	clUpper                   // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	clLower                   // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
)

var asciiClass [utf8.RuneSelf]uint8

func init() {
	for r := range rune(utf8.RuneSelf) {
		asciiClass[r] = classOfSlow(r)
	}
}

func classOfSlow(r rune) uint8 {
	var c uint8
	if unicode.Is(regexUnassigned, r) {
		return 0
	}
	switch {
	case unicode.IsLetter(r):
		c |= clL
		lower, upper := unicode.IsLower(r), unicode.In(r, unicode.Lu, unicode.Lt)
		if cat, ok := movedCategory(r); ok {
			lower, upper = cat == "Ll", cat == "Lu" || cat == "Lt"
		}
		if !lower {
			c |= clUpper // Lu, Lt, Lm, Lo
		}
		if !upper {
			c |= clLower // Ll, Lm, Lo
		}
	case unicode.IsNumber(r):
		c |= clN
	case unicode.IsPunct(r):
		c |= clP
	case unicode.IsSymbol(r):
		c |= clS
	case unicode.IsMark(r):
		c |= clM | clUpper | clLower
	}
	if unicode.IsSpace(r) {
		c |= clSpace
	}
	return c
}

// charAt decodes the character at i (i < len(s)) and its classes.
func charAt(s string, i int) (r rune, n int, class uint8) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, n = utf8.DecodeRuneInString(s[i:])
	return r, n, classOfSlow(r)
}

// classAt is the classes of the character at i, 0 past the end.
func classAt(s string, i int) uint8 {
	if i >= len(s) {
		return 0
	}
	_, _, c := charAt(s, i)
	return c
}

// runOf returns the end of the run of characters with any of the classes in
// want, starting at i.
func runOf(s string, i int, want uint8) int {
	for i < len(s) {
		_, n, c := charAt(s, i)
		if c&want == 0 {
			break
		}
		i += n
	}
	return i
}

// runNot returns the end of the run of characters with none of the classes
// in avoid, starting at i.
func runNot(s string, i int, avoid uint8) int {
	for i < len(s) {
		_, n, c := charAt(s, i)
		if c&avoid != 0 {
			break
		}
		i += n
	}
	return i
}

func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// scanContraction matches (?i:'s|'t|'re|'ve|'m|'ll|'d) at i. Oniguruma
// folds only ASCII letters into these, and ſ (U+017F) into s.
func scanContraction(s string, i int) int {
	if s[i] != '\'' || i+1 >= len(s) {
		return -1
	}
	if strings.HasPrefix(s[i+1:], "ſ") {
		return i + 1 + len("ſ")
	}
	switch lowerASCII(s[i+1]) {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if i+2 < len(s) && lowerASCII(s[i+2]) == 'e' {
			return i + 3
		}
	case 'l':
		if i+2 < len(s) && lowerASCII(s[i+2]) == 'l' {
			return i + 3
		}
	}
	return -1
}

// scanSpaces matches the three whitespace alternatives shared by the
// patterns, \s*[\r\n]+|\s+(?!\S)|\s+, at i, whose character has class c0.
func scanSpaces(s string, i int, c0 uint8) int {
	if c0&clSpace == 0 {
		return -1
	}
	end, last, lastStart := i, -1, i
	for end < len(s) {
		r, n, c := charAt(s, end)
		if c&clSpace == 0 {
			break
		}
		if r == '\r' || r == '\n' {
			last = end
		}
		lastStart = end
		end += n
	}
	// \s*[\r\n]+: backtracking leaves the last line break of the run last.
	if last >= 0 {
		return last + 1
	}
	// \s+(?!\S): the whole run at the end of the text, else all of it but
	// its last character, if that leaves any.
	if end == len(s) {
		return end
	}
	if lastStart > i {
		return lastStart
	}
	// \s+
	return end
}

// scanCL100K matches patCL100K (maxDigits 3) or patQwen (maxDigits 1) at i.
func scanCL100K(s string, i, maxDigits int) int {
	if end := scanContraction(s, i); end > 0 {
		return end
	}
	r0, n0, c0 := charAt(s, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c0&clL != 0 {
		return runOf(s, i, clL)
	}
	if r0 != '\r' && r0 != '\n' && c0&clN == 0 && classAt(s, i+n0)&clL != 0 {
		return runOf(s, i+n0, clL)
	}
	// \p{N}{1,maxDigits}
	if c0&clN != 0 {
		return numberRun(s, i, maxDigits)
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	if end := symbolRun(s, i, r0, false); end > 0 {
		return end
	}
	return scanSpaces(s, i, c0)
}

// numberRun returns the end of the run of at most maxDigits numbers at i.
func numberRun(s string, i, maxDigits int) int {
	end := i
	for k := 0; k < maxDigits && end < len(s); k++ {
		_, n, c := charAt(s, end)
		if c&clN == 0 {
			break
		}
		end += n
	}
	return end
}

// symbolRun matches ' ?[^\s\p{L}\p{N}]+[\r\n]*' at i, whose character is
// r0, or -1; with slash, the closing run is [\r\n/]*.
func symbolRun(s string, i int, r0 rune, slash bool) int {
	j := i
	if r0 == ' ' {
		j = i + 1
	}
	if j >= len(s) || classAt(s, j)&(clSpace|clL|clN) != 0 {
		return -1
	}
	end := runNot(s, j, clSpace|clL|clN)
	for end < len(s) && (s[end] == '\r' || s[end] == '\n' || slash && s[end] == '/') {
		end++
	}
	return end
}

// scanDigits3 matches \p{N}{1,3} at i.
func scanDigits3(s string, i int) int {
	if end := numberRun(s, i, 3); end > i {
		return end
	}
	return -1
}

func isKanaHan(r rune) bool {
	return r >= 0x4e00 && r <= 0x9fa5 || r >= 0x3040 && r <= 0x309f || r >= 0x30a0 && r <= 0x30ff
}

// scanKanaHan matches patKanaHan at i.
func scanKanaHan(s string, i int) int {
	end := i
	for end < len(s) && s[end] >= utf8.RuneSelf {
		r, n := utf8.DecodeRuneInString(s[end:])
		if !isKanaHan(r) {
			break
		}
		end += n
	}
	if end == i {
		return -1
	}
	return end
}

func isASCIILetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isASCIIPunct(c byte) bool {
	return c >= '!' && c <= '/' || c >= ':' && c <= '@' || c >= '[' && c <= '`' || c >= '{' && c <= '~'
}

// scanDeepSeek matches patDeepSeek at i.
func scanDeepSeek(s string, i int) int {
	// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
	if isASCIIPunct(s[i]) && i+1 < len(s) && isASCIILetter(s[i+1]) {
		end := i + 1
		for end < len(s) && isASCIILetter(s[end]) {
			end++
		}
		return end
	}
	r0, n0, c0 := charAt(s, i)
	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
	if r0 != '\r' && r0 != '\n' && c0&(clL|clP|clS) == 0 && classAt(s, i+n0)&(clL|clM) != 0 {
		return runOf(s, i+n0, clL|clM)
	}
	if c0&(clL|clM) != 0 {
		return runOf(s, i, clL|clM)
	}
	// ' ?[\p{P}\p{S}]+[\r\n]*'
	j := i
	if r0 == ' ' {
		j = i + 1
	}
	if j < len(s) && classAt(s, j)&(clP|clS) != 0 {
		end := runOf(s, j, clP|clS)
		for end < len(s) && (s[end] == '\r' || s[end] == '\n') {
			end++
		}
		return end
	}
	return scanSpaces(s, i, c0)
}

// scanGPT2 matches patGPT2 at i.
func scanGPT2(s string, i int) int {
	if s[i] == '\'' && i+1 < len(s) {
		switch s[i+1] {
		case 's', 't', 'm', 'd':
			return i + 2
		case 'r', 'v':
			if i+2 < len(s) && s[i+2] == 'e' {
				return i + 3
			}
		case 'l':
			if i+2 < len(s) && s[i+2] == 'l' {
				return i + 3
			}
		}
	}
	_, _, c0 := charAt(s, i)
	j, c := i, c0
	if s[i] == ' ' && i+1 < len(s) {
		j, c = i+1, classAt(s, i+1)
	}
	// ' ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+': the optional space goes with
	// whatever class the next character starts.
	switch {
	case c&clL != 0:
		return runOf(s, j, clL)
	case c&clN != 0:
		return runOf(s, j, clN)
	case c&clSpace == 0:
		return runNot(s, j, clSpace|clL|clN)
	}
	// \s+(?!\S)|\s+ (no line-break alternative in this pattern).
	if c0&clSpace == 0 {
		return -1
	}
	end, lastStart := i, i
	for end < len(s) {
		_, n, c := charAt(s, end)
		if c&clSpace == 0 {
			break
		}
		lastStart = end
		end += n
	}
	if end == len(s) || lastStart == i {
		return end
	}
	return lastStart
}

// scanCased matches patO200K (maxDigits 3, contractions) or patTekken
// (maxDigits 1, none) at i. Its two word alternatives are tried as the
// regex tries them: each first with the optional leading character taken,
// then without it.
func scanCased(s string, i, maxDigits int, contractions bool) int {
	r0, n0, c0 := charAt(s, i)
	lead := r0 != '\r' && r0 != '\n' && c0&(clL|clN) == 0 // [^\r\n\p{L}\p{N}]
	end := -1
	for _, word := range []func(string, int) int{upperThenLower, upperOnly} {
		if lead {
			end = word(s, i+n0)
		}
		if end < 0 {
			end = word(s, i)
		}
		if end >= 0 {
			if contractions && end < len(s) {
				end = max(end, scanContraction(s, end))
			}
			return end
		}
	}
	// \p{N}{1,maxDigits}
	if c0&clN != 0 {
		return numberRun(s, i, maxDigits)
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
	if end := symbolRun(s, i, r0, true); end > 0 {
		return end
	}
	return scanSpaces(s, i, c0)
}

// upperThenLower matches [upper]*[lower]+ at j, or returns -1. The greedy
// upper run gives back characters until one it gave back is also lower;
// that one alone then ends the match, since the characters after it in the
// run are not lower.
func upperThenLower(s string, j int) int {
	k := runOf(s, j, clUpper)
	if classAt(s, k)&clLower != 0 {
		return runOf(s, k, clLower)
	}
	end := -1
	for p := j; p < k; {
		_, n, c := charAt(s, p)
		p += n
		if c&clLower != 0 {
			end = p
		}
	}
	return end
}

// upperOnly matches [upper]+[lower]* at j, or returns -1.
func upperOnly(s string, j int) int {
	if classAt(s, j)&clUpper == 0 {
		return -1
	}
	return runOf(s, runOf(s, j, clUpper), clLower)
}
