package hf

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// tokenizers' Unicode data is older than Go's: its regexes (Oniguruma) know
// Unicode 16, its normalizers (unicode-normalization-alignments) about
// Unicode 9. The generated tables in unicode_table.go list the characters
// whose classes or normalization differ, so this package can see them as
// tokenizers does:
//
//   - regexUnassigned: characters the scanners of scan.go, the classes
//     translateRegex writes for regexp2 (see onigIs, which also knows a
//     letter whose category changed) and single_word matching (Rust's regex
//     crate, also Unicode 16) treat as unassigned (in no class). The Digits
//     pre-tokenizer uses Rust's char::is_numeric, whose tables are Unicode
//     17 like Go's.
//   - normUnassigned: characters tokenizers' normalizers do not know (no
//     decomposition, combining class 0). Normalization treats them as
//     barriers that pass through unchanged, and undoes compositions into
//     them.
//
// x/text/unicode/norm also differs from tokenizers on purpose: it follows
// the Stream-Safe Text Format and inserts U+034F after 30 non-starters in a
// row. Text with long runs of combining marks is normalized by
// normalizeExact instead.

// normalize normalizes s to form as tokenizers does.
func normalize(form norm.Form, s string) string {
	if isASCII(s) {
		return s
	}
	long := hasLongNonStarterRun(s)
	if !long && form.IsNormalString(s) {
		// Normal for Go's newer tables is normal for tokenizers' too: they
		// know fewer combining classes, decompositions and compositions.
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + len(s)/4)
	start := 0
	for i, r := range s {
		if !isNormUnknown(r) {
			continue
		}
		normalizeSegment(&b, form, s[start:i], long)
		b.WriteRune(r)
		start = i + utf8.RuneLen(r)
	}
	normalizeSegment(&b, form, s[start:], long)
	return b.String()
}

// longRun is the number of characters in a row with a non-starter first
// that sends text to normalizeExact. Non-starter decompositions are at most
// three characters long, so x/text's limit of 30 cannot be reached with
// fewer than ten.
const longRun = 8

// hasLongNonStarterRun reports a run of longRun characters whose
// decomposition starts with a non-starter.
func hasLongNonStarterRun(s string) bool {
	run := 0
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			run = 0
			i++
			continue
		}
		p := norm.NFD.PropertiesString(s[i:])
		if p.LeadCCC() != 0 {
			if run++; run >= longRun {
				return true
			}
		} else {
			run = 0
		}
		i += max(p.Size(), 1)
	}
	return false
}

// normalizeSegment appends the normalization of a stretch without unknown
// characters. Go may still compose into a character tokenizers does not
// know (all such characters are new composites of new scripts, whose parts
// compose with nothing else); tokenizers leaves the parts decomposed, in
// canonical order with the marks that follow.
func normalizeSegment(b *strings.Builder, form norm.Form, s string, long bool) {
	if s == "" {
		return
	}
	if long {
		b.WriteString(normalizeExact(form, s))
		return
	}
	n := form.String(s)
	if !strings.ContainsFunc(n, isNormUnknown) {
		b.WriteString(n)
		return
	}
	var rs []rune
	for _, r := range n {
		if isNormUnknown(r) {
			rs = append(rs, []rune(norm.NFD.String(string(r)))...)
		} else {
			rs = append(rs, r)
		}
	}
	canonicalOrder(rs, runeItself)
	b.WriteString(string(rs))
}

func isNormUnknown(r rune) bool { return r >= 0x300 && unicode.Is(normUnassigned, r) }

// ccc is the canonical combining class of r as tokenizers knows it.
func ccc(r rune) uint8 {
	if isNormUnknown(r) {
		return 0
	}
	var buf [utf8.UTFMax]byte
	return norm.NFD.Properties(buf[:utf8.EncodeRune(buf[:], r)]).CCC()
}

// canonicalOrder sorts each run of non-starters by combining class, stably.
func canonicalOrder[E any](xs []E, runeOf func(E) rune) {
	class := func(x E) uint8 { return ccc(runeOf(x)) }
	for i := 0; i < len(xs); {
		if class(xs[i]) == 0 {
			i++
			continue
		}
		j := i
		for j < len(xs) && class(xs[j]) != 0 {
			j++
		}
		slices.SortStableFunc(xs[i:j], func(x, y E) int { return int(class(x)) - int(class(y)) })
		i = j
	}
}

func runeItself(r rune) rune { return r }

// Hangul syllable arithmetic (Unicode §3.12).
const (
	hangulSBase, hangulLBase, hangulVBase, hangulTBase = 0xAC00, 0x1100, 0x1161, 0x11A7
	hangulTCount, hangulNCount, hangulSCount           = 28, 588, 11172
)

// normChar is a character of a normalized string with what it does to the
// string it came from, as unicode-normalization-alignments (tokenizers'
// normalizer) tags it: change 0 replaces the next character not yet
// consumed, -n replaces it and the n after it, 1 is inserted. tokenizers
// aligns each character with the original text by these tags (see
// unicodeHead).
type normChar struct {
	r      rune
	change int
}

func normRune(c normChar) rune { return c.r }

// normalizeExact is the Unicode normalization algorithm without x/text's
// stream-safe limit: full decomposition, canonical ordering of every run of
// non-starters, then (for NFC and NFKC) canonical composition. It uses
// x/text only for character properties and to look up single pairs.
func normalizeExact(form norm.Form, s string) string {
	cs := normChars(form, s)
	rs := make([]rune, len(cs))
	for i, c := range cs {
		rs[i] = c.r
	}
	return string(rs)
}

// normChars is normalizeExact's algorithm, keeping each character's tag:
// the first character of a decomposition replaces its source, the others
// are inserted, and a composition takes the tags of both its parts.
func normChars(form norm.Form, s string) []normChar {
	decomp := norm.NFD
	if form == norm.NFKC || form == norm.NFKD {
		decomp = norm.NFKD
	}
	var cs []normChar
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		first := len(cs)
		switch p := decomp.PropertiesString(s[i:]); {
		case isNormUnknown(r):
			cs = append(cs, normChar{r: r})
		case r >= hangulSBase && r < hangulSBase+hangulSCount:
			k := r - hangulSBase
			cs = append(cs, normChar{r: hangulLBase + k/hangulNCount}, normChar{r: hangulVBase + (k%hangulNCount)/hangulTCount})
			if t := k % hangulTCount; t != 0 {
				cs = append(cs, normChar{r: hangulTBase + t})
			}
		case p.Decomposition() != nil:
			for _, d := range string(p.Decomposition()) {
				cs = append(cs, normChar{r: d})
			}
		default:
			cs = append(cs, normChar{r: r})
		}
		for k := first + 1; k < len(cs); k++ {
			cs[k].change = 1
		}
		i += n
	}
	canonicalOrder(cs, normRune)
	if form == norm.NFD || form == norm.NFKD {
		return cs
	}
	out := cs[:0]
	starter := -1 // index in out of the last starter
	for _, c := range cs {
		cc := ccc(c.r)
		if starter >= 0 {
			last := len(out) - 1
			// c is blocked from the starter by a character between them
			// of class 0 or of a class at least its own.
			if last == starter || ccc(out[last].r) != 0 && ccc(out[last].r) < cc {
				if x, ok := composePair(out[starter].r, c.r); ok {
					out[starter] = normChar{r: x, change: out[starter].change + c.change - 1}
					continue
				}
			}
		}
		if cc == 0 {
			starter = len(out)
		}
		out = append(out, c)
	}
	return out
}

// unicodeHead is normalizeHead for a Unicode normalization form: how many
// bytes at the front of normalize(form, s) tokenizers aligns with the
// first head bytes of s. It consumes the characters of s in order, one
// (and those it absorbs) for each character of the result that is not
// inserted; an inserted one takes the alignment of the last consumed
// character, or the text's start before any.
func unicodeHead(form norm.Form, s string, head int) int {
	// Nothing composes with an ASCII character before it or reorders
	// across it, so the result of s up to one is a prefix of the whole's.
	end := len(s)
	for i := head; i < len(s); i++ {
		if s[i] < utf8.RuneSelf {
			end = i
			break
		}
	}
	n, off := 0, 0 // bytes of the result in the head, of s consumed
	for _, c := range normChars(form, s[:end]) {
		if c.change > 0 && off > head || c.change <= 0 && off >= head {
			break
		}
		for k := c.change; k <= 0; k++ {
			_, size := utf8.DecodeRuneInString(s[off:])
			off += size
		}
		n += utf8.RuneLen(c.r)
	}
	return n
}

// composePair is the primary composite of a starter and a following
// character, if tokenizers knows one.
func composePair(a, b rune) (rune, bool) {
	c := norm.NFC.String(string([]rune{a, b}))
	r, n := utf8.DecodeRuneInString(c)
	if n != len(c) || isNormUnknown(r) {
		return 0, false
	}
	return r, true
}
