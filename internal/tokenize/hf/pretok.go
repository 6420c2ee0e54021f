package hf

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
)

// piece is a pre-token: a string the model encodes on its own. head is how
// many bytes at its front tokenizers aligns with offset 0 of the original
// text: the first character's, and what normalizers put in its place.
// Metaspace's prepend_scheme "first" prepends to a piece with a head; the
// head is tracked only when such a Metaspace is there (0 otherwise).
type piece struct {
	s    string
	head int
}

// sub is the piece of p.s[start:end].
func (p piece) sub(start, end int) piece {
	return piece{s: p.s[start:end], head: max(0, min(p.head-start, end-start))}
}

// preTokenizer splits one piece into smaller ones, appending only non-empty
// pieces to dst, as tokenizers' PreTokenizedString::split keeps them.
type preTokenizer interface {
	split(dst []piece, p piece, sc *splitScratch) []piece
}

// splitScratch holds buffers reused across pieces of one encoding.
type splitScratch struct {
	matches [][2]int
	parts   []splitPart
	stop    *atomic.Bool // the encoding's, for the matchers; nil never stops
}

// splitPart is one range of a string and whether the pattern matched it.
type splitPart struct {
	start, end int
	match      bool
}

// newPreTokenizers flattens the pre_tokenizer of tokenizer.json into a list
// applied in order. byteLevel reports a ByteLevel pre-tokenizer, which must
// come last: the model then works on raw bytes instead of the GPT-2
// characters ByteLevel maps them to.
func newPreTokenizers(path string, raw json.RawMessage) (list []preTokenizer, byteLevel bool, err error) {
	typ, err := componentType(raw)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	switch typ {
	case "":
		return nil, false, nil
	case "Sequence":
		var c struct {
			Type          string            `json:"type"`
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := strictUnmarshal(raw, &c); err != nil {
			return nil, false, fmt.Errorf("%s: %w", path, err)
		}
		for i, sub := range c.PreTokenizers {
			if byteLevel {
				return nil, false, fmt.Errorf("%s.pretokenizers[%d]: a pre-tokenizer after ByteLevel: %w", path, i, ErrUnsupported)
			}
			l, bl, err := newPreTokenizers(fmt.Sprintf("%s.pretokenizers[%d]", path, i), sub)
			if err != nil {
				return nil, false, err
			}
			list, byteLevel = append(list, l...), bl
		}
		return list, byteLevel, nil
	case "Split":
		p, err := newSplitPre(path, raw)
		if err != nil {
			return nil, false, err
		}
		return []preTokenizer{p}, false, nil
	case "ByteLevel":
		p, err := newByteLevelPre(path, raw)
		if err != nil {
			return nil, false, err
		}
		return []preTokenizer{p}, true, nil
	case "Metaspace":
		p, err := newMetaspace(raw)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", path, err)
		}
		return []preTokenizer{p}, false, nil
	case "Digits":
		var c struct {
			Type             string `json:"type"`
			IndividualDigits bool   `json:"individual_digits"`
		}
		if err := strictUnmarshal(raw, &c); err != nil {
			return nil, false, fmt.Errorf("%s: %w", path, err)
		}
		b := splitContiguous
		if c.IndividualDigits {
			b = splitIsolated
		}
		// Rust's char::is_numeric, whose tables (Unicode 17, unlike
		// tokenizers' regexes) are Go's.
		return []preTokenizer{&splitPre{m: runeClassMatcher(unicode.IsNumber), behavior: b}}, false, nil
	}
	return nil, false, fmt.Errorf("%s: pre-tokenizer type %q: %w", path, typ, ErrUnsupported)
}

// newSplitPre reads a Split pre-tokenizer.
func newSplitPre(path string, raw json.RawMessage) (preTokenizer, error) {
	var c struct {
		Type     string      `json:"type"`
		Pattern  patternJSON `json:"pattern"`
		Behavior string      `json:"behavior"`
		Invert   bool        `json:"invert"`
	}
	if err := strictUnmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	b, err := parseBehavior(c.Behavior)
	if err != nil {
		return nil, fmt.Errorf("%s.behavior: %w", path, err)
	}
	m, err := newMatcher(c.Pattern)
	if err != nil {
		return nil, fmt.Errorf("%s.pattern: %w", path, err)
	}
	return &splitPre{m: m, behavior: b, invert: c.Invert}, nil
}

// newByteLevelPre reads a ByteLevel pre-tokenizer.
func newByteLevelPre(path string, raw json.RawMessage) (preTokenizer, error) {
	c := byteLevelJSON{UseRegex: true}
	if err := strictUnmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	p := &byteLevelPre{addPrefixSpace: c.AddPrefixSpace}
	if c.UseRegex {
		pat := patGPT2
		m, err := newMatcher(patternJSON{Regex: &pat})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		p.re = m
	}
	return p, nil
}

// splitBehavior is tokenizers' SplitDelimiterBehavior.
type splitBehavior int

const (
	splitRemoved splitBehavior = iota
	splitIsolated
	splitMergedWithPrevious
	splitMergedWithNext
	splitContiguous
)

func parseBehavior(s string) (splitBehavior, error) {
	switch s {
	case "Removed":
		return splitRemoved, nil
	case "Isolated":
		return splitIsolated, nil
	case "MergedWithPrevious":
		return splitMergedWithPrevious, nil
	case "MergedWithNext":
		return splitMergedWithNext, nil
	case "Contiguous":
		return splitContiguous, nil
	}
	return 0, fmt.Errorf("%q: %w", s, ErrUnsupported)
}

// splitPre is the Split pre-tokenizer (and Digits, which is a Split on
// numeric characters).
type splitPre struct {
	m        matcher
	behavior splitBehavior
	invert   bool
}

func (p *splitPre) split(dst []piece, in piece, sc *splitScratch) []piece {
	return splitBy(dst, in, p.m, p.behavior, p.invert, sc)
}

// splitBy is NormalizedString::split: the string is cut into matched and
// unmatched ranges covering it, the flags are inverted if asked, the ranges
// are merged according to behavior, and non-empty results are kept.
func splitBy(dst []piece, in piece, m matcher, behavior splitBehavior, invert bool, sc *splitScratch) []piece {
	s := in.s
	if s == "" {
		return dst
	}
	sc.matches = m.find(sc.matches[:0], s, sc.stop)
	parts := sc.parts[:0]
	prev := 0
	for _, mt := range sc.matches {
		if prev != mt[0] {
			parts = append(parts, splitPart{prev, mt[0], invert})
		}
		parts = append(parts, splitPart{mt[0], mt[1], !invert})
		prev = mt[1]
	}
	if prev != len(s) {
		parts = append(parts, splitPart{prev, len(s), invert})
	}
	sc.parts = parts

	emit := func(start, end int) {
		if start < end {
			dst = append(dst, in.sub(start, end))
		}
	}
	switch behavior {
	case splitIsolated:
		for _, p := range parts {
			emit(p.start, p.end)
		}
	case splitRemoved:
		for _, p := range parts {
			if !p.match {
				emit(p.start, p.end)
			}
		}
	case splitContiguous:
		// Runs of parts with the same flag become one piece.
		for i := 0; i < len(parts); {
			j := i + 1
			for j < len(parts) && parts[j].match == parts[j-1].match {
				j++
			}
			emit(parts[i].start, parts[j-1].end)
			i = j
		}
	case splitMergedWithPrevious, splitMergedWithNext:
		// A match directly after a non-match joins it; for
		// MergedWithNext the same walking backwards, so a match directly
		// before a non-match joins it, and the pieces come out reversed.
		back := behavior == splitMergedWithNext
		n0 := len(dst)
		prevMatch := false
		start, end, open := 0, 0, false
		for i := range parts {
			p := parts[i]
			if back {
				p = parts[len(parts)-1-i]
			}
			if p.match && !prevMatch && open {
				start, end = min(start, p.start), max(end, p.end)
			} else {
				if open {
					emit(start, end)
				}
				start, end, open = p.start, p.end, true
			}
			prevMatch = p.match
		}
		if open {
			emit(start, end)
		}
		if back {
			slices.Reverse(dst[n0:])
		}
	}
	return dst
}

// runeClassMatcher matches every single character of a class.
type runeClassMatcher func(rune) bool

func (f runeClassMatcher) find(dst [][2]int, s string, stop *atomic.Bool) [][2]int {
	k := 0
	for i, r := range s {
		if k++; halted(stop, k) {
			break
		}
		if f(r) {
			dst = append(dst, [2]int{i, i + utf8.RuneLen(r)})
		}
	}
	return dst
}

// byteLevelPre is the ByteLevel pre-tokenizer. The mapping of bytes to
// printable characters is not applied: the model's vocabulary is converted to
// raw bytes instead (see bpe), which gives the same ids.
type byteLevelPre struct {
	addPrefixSpace bool
	re             matcher // nil unless use_regex
}

func (p *byteLevelPre) split(dst []piece, in piece, sc *splitScratch) []piece {
	if p.addPrefixSpace && !strings.HasPrefix(in.s, " ") {
		in.s = " " + in.s
		if in.head > 0 {
			in.head++
		}
	}
	if p.re == nil {
		if in.s != "" {
			dst = append(dst, in)
		}
		return dst
	}
	return splitBy(dst, in, p.re, splitIsolated, false, sc)
}

// metaspacePre is the Metaspace pre-tokenizer: spaces become the replacement
// character, which is prepended as the scheme says, and the piece is split
// before each replacement character.
type metaspacePre struct {
	repl    string
	prepend string // "always", "first" or "never"
	cut     bool   // split before each replacement character
}

// newMetaspace reads a Metaspace object, which the pre-tokenizer and the
// decoder of that name share.
func newMetaspace(raw json.RawMessage) (*metaspacePre, error) {
	var c struct {
		Type           string  `json:"type"`
		Replacement    string  `json:"replacement"`
		PrependScheme  *string `json:"prepend_scheme"`
		Split          *bool   `json:"split"`
		AddPrefixSpace *bool   `json:"add_prefix_space"`
		StrRep         *string `json:"str_rep"`
	}
	if err := strictUnmarshal(raw, &c); err != nil {
		return nil, err
	}
	if utf8.RuneCountInString(c.Replacement) != 1 {
		return nil, fmt.Errorf("replacement %q: must be one character", c.Replacement)
	}
	p := &metaspacePre{repl: c.Replacement, prepend: "always", cut: true}
	if c.PrependScheme != nil {
		switch *c.PrependScheme {
		case "always", "first", "never":
			p.prepend = *c.PrependScheme
		default:
			return nil, fmt.Errorf("prepend_scheme %q: %w", *c.PrependScheme, ErrUnsupported)
		}
	}
	if c.AddPrefixSpace != nil && !*c.AddPrefixSpace {
		if p.prepend != "never" {
			return nil, fmt.Errorf("add_prefix_space does not match declared prepend_scheme")
		}
	}
	if c.Split != nil {
		p.cut = *c.Split
	}
	return p, nil
}

func (p *metaspacePre) split(dst []piece, in piece, sc *splitScratch) []piece {
	s := strings.ReplaceAll(in.s, " ", p.repl)
	// Each replacement is aligned with its space; a prepended one with
	// the character it goes before.
	head := in.head + strings.Count(in.s[:in.head], " ")*(len(p.repl)-1)
	if !strings.HasPrefix(s, p.repl) && (p.prepend == "always" || p.prepend == "first" && head > 0) {
		s = p.repl + s
		if head > 0 {
			head += len(p.repl)
		}
	}
	in.s, in.head = s, head
	if !p.cut {
		if s != "" {
			dst = append(dst, in)
		}
		return dst
	}
	return splitBy(dst, in, literalMatcher(p.repl), splitMergedWithNext, false, sc)
}

// The GPT-2 byte-to-character mapping of ByteLevel: printable Latin-1 bytes
// stand for themselves, the other 68 bytes for U+0100 onwards.
var (
	byteLevelChars [256]rune
	byteLevelBytes = map[rune]byte{}
)

func init() {
	n := 0
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE {
			byteLevelChars[b] = rune(b)
		} else {
			byteLevelChars[b] = rune(256 + n)
			n++
		}
		byteLevelBytes[byteLevelChars[b]] = byte(b)
	}
}

// byteLevelDecode turns a byte-level token back into the bytes it stands for;
// ok is false if it has a character outside the mapping.
func byteLevelDecode(tok string) (string, bool) {
	buf := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := byteLevelBytes[r]
		if !ok {
			return "", false
		}
		buf = append(buf, b)
	}
	return string(buf), true
}
