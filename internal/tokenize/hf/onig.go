package hf

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// tokenizers compiles the regexes of Split and Replace with Oniguruma (Ruby
// syntax, Unicode 16); this package runs those without a scanner on regexp2,
// a .NET-style engine. The two read much the same syntax with different
// meanings in places: in Oniguruma ^ and $ are line anchors, (?i) folds ſ
// to s and ß to ss, [[:alpha:]] is a POSIX class, {,3} means {0,3}, \w and
// \b know other characters, and its tables are older. translateRegex
// accepts the part of the syntax whose meaning it reproduces exactly and
// writes it out in regexp2's syntax; anything else is refused
// (ErrUnsupported) rather than matched otherwise than by tokenizers. It
// accepts:
//
//   - characters, escaped ASCII punctuation, \t \n \r \f \v \a \e \uHHHH, and .
//   - classes [...] and [^...] of characters, ranges and \s \S \d \D
//     \p{C} \P{C}, where C is a general category (onigCategories), of
//     classes nested in them and of intersections && (onigclass.go); those
//     escapes also stand alone
//   - anchors ^ $ \A \z \Z, lookahead (?=...) (?!...), groups (...) (?:...)
//     and alternatives
//   - the quantifiers * + ? {n} {n,} {n,m}, and all but {n} lazy with ?, on
//     what cannot match empty
//   - (?i:...), or (?i) at the start, around alternatives of ASCII
//     characters without ss, st, ff, fi or fl (which also match ß, ﬅ, ﬁ …)
//
// Rewritten: ^ matches at the start and after \n but not at the very end, $
// before \n and at the end, \Z before a final \n and at the end; \d is
// \p{Nd}; classes follow Oniguruma's tables (onigIs), nested ones are
// merged into theirs, and one with && or a negated class nested becomes
// the ranges of the characters it holds; a letter under (?i) becomes the
// class Oniguruma folds it with, ſ with s and the Kelvin sign with k.
// TestOnigRegex checks all this against tokenizers.

// maxRegexDepth bounds the nesting of groups and of classes, and so the
// parser's recursion.
const maxRegexDepth = 64

// maxRepeat is Oniguruma's largest repeat count; it refuses larger ones.
const maxRepeat = 100000

// onigCategories are the general categories \p{..} may name, the ones
// whose members testdata/regex.json.gz lists as tokenizers has them.
var onigCategories = map[string]bool{}

func init() {
	for _, c := range strings.Fields("L Lu Ll Lt Lm Lo M Mn Mc Me N Nd Nl No P Pc Pd Ps Pe Pi Pf Po S Sm Sc Sk So Z Zs Zl Zp") {
		onigCategories[c] = true
	}
}

// onigMoved are the characters whose general category in tokenizers'
// Oniguruma (Unicode 16) differs from Go's (Unicode 17), by the category
// there. (Characters Go has and Oniguruma does not are regexUnassigned.)
var onigMoved = map[rune]string{0x0295: "Ll"}

// onigMovedLo and onigMovedHi bound onigMoved's characters, so that most
// need no lookup.
var onigMovedLo, onigMovedHi = func() (lo, hi rune) {
	lo, hi = unicode.MaxRune, 0
	for r := range onigMoved {
		lo, hi = min(lo, r), max(hi, r)
	}
	return lo, hi
}()

// movedCategory is r's category in Oniguruma if it differs from Go's.
func movedCategory(r rune) (string, bool) {
	if r < onigMovedLo || r > onigMovedHi {
		return "", false
	}
	cat, ok := onigMoved[r]
	return cat, ok
}

// onigIs reports whether tokenizers' Oniguruma puts r in the general
// category name, or in \s for "space".
func onigIs(name string, r rune) bool {
	if cat, ok := movedCategory(r); ok {
		return cat == name || cat[:1] == name
	}
	if unicode.Is(regexUnassigned, r) {
		return false
	}
	return goIs(name, r)
}

// goIs is onigIs as regexp2 sees it: Go's tables.
func goIs(name string, r rune) bool {
	if name == "space" {
		return unicode.IsSpace(r)
	}
	return unicode.Is(unicode.Categories[name], r)
}

// onigProp is \p{name} (negate: \P{name}); name "space" is \s.
type onigProp struct {
	name   string
	negate bool
}

func (p onigProp) has(is func(string, rune) bool, r rune) bool { return is(p.name, r) != p.negate }

// write writes p for regexp2, which gets only the positive form: see rxClass.
func (p onigProp) write(b *strings.Builder) {
	if p.name == "space" {
		b.WriteString(`\s`)
	} else {
		b.WriteString(`\p{` + p.name + `}`)
	}
}

// onigClass is a character class: ranges and properties, negated or not.
type onigClass struct {
	negate bool
	ranges [][2]rune
	props  []onigProp
}

func (c *onigClass) inRanges(r rune) bool {
	for _, rg := range c.ranges {
		if rg[0] <= r && r <= rg[1] {
			return true
		}
	}
	return false
}

// has reports whether the class, with the given tables, holds r.
func (c *onigClass) has(is func(string, rune) bool, r rune) bool {
	in := c.inRanges(r)
	for _, p := range c.props {
		in = in || p.has(is, r)
	}
	return in != c.negate
}

// onigParser translates one pattern; it writes regexp2 syntax to out as it
// reads.
type onigParser struct {
	pattern string
	src     []rune
	pos     int
	depth   int
	out     strings.Builder
}

// translateRegex returns the regexp2 pattern that matches exactly what the
// Oniguruma pattern matches in tokenizers, or an error wrapping
// ErrUnsupported.
func translateRegex(pattern string) (string, error) {
	p := &onigParser{pattern: pattern, src: []rune(pattern)}
	var err error
	if strings.HasPrefix(pattern, "(?i)") {
		p.pos = 4
		p.out.WriteString("(?:")
		_, err = p.foldAlternatives()
		p.out.WriteString(")")
	} else {
		_, err = p.alternatives()
	}
	if err == nil && p.pos < len(p.src) {
		err = p.malformed("an unmatched )")
	}
	if err != nil {
		return "", err
	}
	return p.out.String(), nil
}

func (p *onigParser) refuse(what string) error {
	return fmt.Errorf("regex %q: %s at character %d: %w", p.pattern, what, p.pos, ErrUnsupported)
}

// malformed is the error for a pattern Oniguruma does not compile either.
func (p *onigParser) malformed(what string) error {
	return fmt.Errorf("regex %q: %s at character %d", p.pattern, what, p.pos)
}

func (p *onigParser) peek() rune { return p.peekAt(0) }

// peekAt is the character k after the current one, or -1 past the end.
func (p *onigParser) peekAt(k int) rune {
	if p.pos+k < len(p.src) {
		return p.src[p.pos+k]
	}
	return -1
}

func (p *onigParser) has(s string) bool {
	return strings.HasPrefix(string(p.src[p.pos:min(len(p.src), p.pos+len(s))]), s)
}

// atomInfo is what a quantifier needs to know of what it repeats.
type atomInfo struct {
	nullable  bool // it can match the empty string
	zeroWidth bool // an anchor or lookahead
}

// alternatives reads alternatives up to ) or the end; nullable reports
// that one can match the empty string.
func (p *onigParser) alternatives() (nullable bool, err error) {
	if p.depth++; p.depth > maxRegexDepth {
		return false, p.refuse(fmt.Sprintf("groups nested more than %d deep", maxRegexDepth))
	}
	defer func() { p.depth-- }()
	for {
		n, err := p.sequence()
		if err != nil {
			return false, err
		}
		nullable = nullable || n
		if p.peek() != '|' {
			return nullable, nil
		}
		p.pos++
		p.out.WriteByte('|')
	}
}

func (p *onigParser) sequence() (nullable bool, err error) {
	nullable = true
	for p.pos < len(p.src) && p.peek() != '|' && p.peek() != ')' {
		a, err := p.atom()
		if err != nil {
			return false, err
		}
		optional, err := p.quantifier(a)
		if err != nil {
			return false, err
		}
		nullable = nullable && (a.nullable || optional)
	}
	return nullable, nil
}

func (p *onigParser) atom() (atomInfo, error) {
	r := p.peek()
	switch r {
	case '(':
		return p.group()
	case '[':
		c, err := p.class()
		if err != nil {
			return atomInfo{}, err
		}
		p.writeClassNode(c)
		return atomInfo{}, nil
	case '.':
		p.pos++
		p.out.WriteByte('.') // any character but \n in both
		return atomInfo{}, nil
	case '^':
		p.pos++
		p.out.WriteString(`(?:\A|(?<=\n)(?!\z))`)
		return atomInfo{nullable: true, zeroWidth: true}, nil
	case '$':
		p.pos++
		p.out.WriteString(`(?=\n|\z)`)
		return atomInfo{nullable: true, zeroWidth: true}, nil
	case '\\':
		anchor := map[rune]string{'A': `\A`, 'z': `\z`, 'Z': `(?=\n?\z)`}[p.peekAt(1)]
		if anchor != "" {
			p.pos += 2
			p.out.WriteString(anchor)
			return atomInfo{nullable: true, zeroWidth: true}, nil
		}
		c, prop, err := p.escape()
		if err != nil {
			return atomInfo{}, err
		}
		if prop != nil {
			p.writeClass(onigClass{props: []onigProp{*prop}})
		} else {
			writeChar(&p.out, c)
		}
		return atomInfo{}, nil
	case '*', '+', '?':
		return atomInfo{}, p.malformed(fmt.Sprintf("%q with nothing to repeat", r))
	case '{', '}', ']':
		return atomInfo{}, p.refuse(fmt.Sprintf("an unescaped %q", r))
	}
	p.pos++
	writeChar(&p.out, r)
	return atomInfo{}, nil
}

func (p *onigParser) group() (atomInfo, error) {
	p.pos++ // (
	a := atomInfo{}
	fold := false
	switch {
	case p.has("?:"):
		p.pos += 2
		p.out.WriteString("(?:")
	case p.has("?="), p.has("?!"):
		p.out.WriteString("(" + string(p.src[p.pos:p.pos+2]))
		p.pos += 2
		a = atomInfo{nullable: true, zeroWidth: true}
	case p.has("?i:"):
		p.pos += 3
		p.out.WriteString("(?:")
		fold = true
	case p.peek() == '?':
		return a, p.refuse("a group (?" + string(p.peekAt(1)))
	default: // captures do not change what matches
		p.out.WriteString("(?:")
	}
	var nullable bool
	var err error
	if fold {
		nullable, err = p.foldAlternatives()
	} else {
		nullable, err = p.alternatives()
	}
	if err != nil {
		return a, err
	}
	if p.peek() != ')' {
		return a, p.malformed("a missing )")
	}
	p.pos++
	p.out.WriteByte(')')
	a.nullable = a.nullable || nullable
	return a, nil
}

// quantifier reads the quantifier after an atom, if any; optional
// reports one that allows no repetition.
func (p *onigParser) quantifier(a atomInfo) (optional bool, err error) {
	start := p.pos
	exact := false
	switch p.peek() {
	case '*', '?':
		p.pos++
		optional = true
	case '+':
		p.pos++
	case '{':
		lo, hi, ok := p.interval()
		if !ok {
			return false, p.refuse("a { that is not {n}, {n,} or {n,m}")
		}
		optional, exact = lo == 0, lo == hi && !strings.Contains(string(p.src[start:p.pos]), ",")
	default:
		return false, nil
	}
	switch {
	case a.zeroWidth:
		return false, p.refuse("a repeated anchor or lookahead")
	case a.nullable:
		return false, p.refuse("a repeated group that can match nothing")
	}
	p.out.WriteString(string(p.src[start:p.pos]))
	if p.peek() == '?' {
		if exact {
			// Oniguruma reads a{n}? as (?:a{n})?, regexp2 as lazy.
			return false, p.refuse("{n}?")
		}
		p.pos++
		p.out.WriteByte('?')
	}
	if strings.ContainsRune("*+?{", p.peek()) {
		return false, p.refuse("a possessive or repeated quantifier")
	}
	return optional, nil
}

// interval reads {n}, {n,} or {n,m} (n <= m <= maxRepeat).
func (p *onigParser) interval() (lo, hi int, ok bool) {
	end := p.pos + 1
	for end < len(p.src) && p.src[end] != '}' {
		end++
	}
	if end == len(p.src) {
		return 0, 0, false
	}
	body := string(p.src[p.pos+1 : end])
	a, b, comma := strings.Cut(body, ",")
	lo, err := strconv.Atoi(a)
	if err != nil || a == "" || a[0] == '+' || a[0] == '-' || lo > maxRepeat {
		return 0, 0, false
	}
	hi = lo
	switch {
	case comma && b == "":
		hi = maxRepeat
	case comma:
		if hi, err = strconv.Atoi(b); err != nil || b[0] == '+' || b[0] == '-' || hi < lo || hi > maxRepeat {
			return 0, 0, false
		}
	}
	p.pos = end + 1
	return lo, hi, true
}

// escape reads a backslash escape that stands for a character c or, with
// prop set, a class.
func (p *onigParser) escape() (c rune, prop *onigProp, err error) {
	p.pos++ // \
	e := p.peek()
	if e < 0 {
		return 0, nil, p.malformed("a trailing \\")
	}
	p.pos++
	if c, ok := map[rune]rune{'t': '\t', 'n': '\n', 'r': '\r', 'f': '\f', 'v': '\v', 'a': '\a', 'e': 0x1b}[e]; ok {
		return c, nil, nil
	}
	switch e {
	case 's', 'S':
		return 0, &onigProp{name: "space", negate: e == 'S'}, nil
	case 'd', 'D':
		return 0, &onigProp{name: "Nd", negate: e == 'D'}, nil
	case 'p', 'P':
		end := p.pos
		for end < len(p.src) && p.src[end] != '}' {
			end++
		}
		if p.peek() != '{' || end == len(p.src) || !onigCategories[string(p.src[p.pos+1:end])] {
			return 0, nil, p.refuse(`a \p or \P not of a general category such as \p{L}`)
		}
		name := string(p.src[p.pos+1 : end])
		p.pos = end + 1
		return 0, &onigProp{name: name, negate: e == 'P'}, nil
	case 'u':
		if p.pos+4 <= len(p.src) {
			if v, err := strconv.ParseUint(string(p.src[p.pos:p.pos+4]), 16, 32); err == nil && utf8.ValidRune(rune(v)) {
				p.pos += 4
				return rune(v), nil, nil
			}
		}
		return 0, nil, p.refuse(`a \u without four hex digits of a character`)
	}
	if e < utf8.RuneSelf && (e == ' ' || unicode.IsPunct(e) || unicode.IsSymbol(e)) {
		return e, nil, nil
	}
	p.pos -= 2
	return 0, nil, p.refuse(fmt.Sprintf(`\%c`, e))
}

// foldAlternatives reads the inside of (?i:...): alternatives of ASCII
// characters, each letter written as the class Oniguruma folds it with.
func (p *onigParser) foldAlternatives() (nullable bool, err error) {
	empty := true // the current alternative
	var prev rune // its last character, lower-cased
	for p.pos < len(p.src) && p.peek() != ')' {
		r := p.peek()
		switch {
		case r == '|':
			p.pos++
			p.out.WriteByte('|')
			nullable, empty, prev = nullable || empty, true, 0
			continue
		case r == '\\':
			c, prop, err := p.escape()
			if err != nil {
				return false, err
			}
			if prop != nil {
				return false, p.refuse("a class in (?i:...)")
			}
			r = c
		case strings.ContainsRune("()[]{}.*+?^$", r):
			return false, p.refuse(fmt.Sprintf("%q in (?i:...), which takes only alternatives of characters", r))
		default:
			p.pos++
		}
		if r >= utf8.RuneSelf {
			return false, p.refuse(fmt.Sprintf("%q in (?i:...): only ASCII folds as regexp2 can be told", r))
		}
		l := rune(lowerASCII(byte(r)))
		if prev == 's' && (l == 's' || l == 't') || prev == 'f' && (l == 'f' || l == 'i' || l == 'l') {
			return false, p.refuse(fmt.Sprintf("%c%c in (?i:...), which Oniguruma also matches as one character", prev, l))
		}
		prev, empty = l, false
		if l < 'a' || l > 'z' {
			writeChar(&p.out, r)
			continue
		}
		p.out.WriteByte('[')
		for _, f := range foldLetters(l) {
			writeChar(&p.out, f)
		}
		p.out.WriteByte(']')
	}
	return nullable || empty, nil
}

// foldLetters are the characters Oniguruma matches with the lower-case
// ASCII letter l under (?i): l, its capital, and the Kelvin sign for k and
// ſ for s, which fold to them.
func foldLetters(l rune) []rune {
	switch l {
	case 'k':
		return []rune{'k', 'K', 0x212A}
	case 's':
		return []rune{'s', 'S', 0x017F}
	}
	return []rune{l, l - 'a' + 'A'}
}

// writeChar writes r for regexp2: ASCII letters and digits as they are,
// the rest of the BMP as \uHHHH, which regexp2 reads as the character in
// and out of classes, and other characters as they are.
func writeChar(b *strings.Builder, r rune) {
	switch {
	case r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r)):
		b.WriteRune(r)
	case r <= 0xFFFF:
		fmt.Fprintf(b, `\u%04X`, r)
	default:
		b.WriteRune(r)
	}
}

// rxClass is a class as regexp2 gets it, [base-[minus]] (base negated or
// not), with no negated property in either: regexp2 unites a negated one
// with the others of its class wrongly ([\P{L}\P{Nd}] does not hold "s"),
// also when it merges the classes of alternatives into one.
type rxClass struct {
	base, minus onigClass
}

func (x rxClass) goHas(r rune) bool { return x.base.has(goIs, r) && !x.minus.has(goIs, r) }

// writeClass writes c for regexp2, as one class or alternatives of classes
// (each matching one character, so the same).
func (p *onigParser) writeClass(c onigClass) {
	var pos, neg []onigProp
	for _, pr := range c.props {
		if pr.negate {
			neg = append(neg, pr)
		} else {
			pos = append(pos, pr)
		}
	}
	switch {
	case len(neg) == 0:
		writeRxClass(&p.out, rxClass{base: c}, func(r rune) bool { return c.has(onigIs, r) })
	case !c.negate:
		// The characters and \p{..}s, then each negated property alone.
		parts := []onigClass{}
		if len(c.ranges) > 0 || len(pos) > 0 {
			parts = append(parts, onigClass{ranges: c.ranges, props: pos})
		}
		for _, n := range neg {
			parts = append(parts, onigClass{negate: true, props: []onigProp{{name: n.name}}})
		}
		p.out.WriteString("(?:")
		for i, part := range parts {
			if i > 0 {
				p.out.WriteByte('|')
			}
			writeRxClass(&p.out, rxClass{base: part}, func(r rune) bool { return part.has(onigIs, r) })
		}
		p.out.WriteString(")")
	default:
		// [^...\P{X}] is \p{X} less the rest (two negated: writeClassNode).
		x := rxClass{
			base:  onigClass{props: []onigProp{{name: neg[0].name}}},
			minus: onigClass{ranges: c.ranges, props: pos},
		}
		writeRxClass(&p.out, x, func(r rune) bool { return c.has(onigIs, r) })
	}
}

// writeRxClass writes x, corrected to hold exactly the characters want
// holds where Oniguruma's tables differ from Go's: the others are in both
// or neither, and only properties tell them apart.
func writeRxClass(b *strings.Builder, x rxClass, want func(rune) bool) {
	var add, sub [][2]rune
	if len(x.base.props) > 0 || len(x.minus.props) > 0 {
		for _, r := range onigDiffering() {
			switch g, o := x.goHas(r), want(r); {
			case g && !o:
				sub = appendRange(sub, r)
			case o && !g:
				add = appendRange(add, r)
			}
		}
	}
	x.minus.ranges = slices.Concat(x.minus.ranges, sub)
	if len(add) > 0 {
		b.WriteString("(?:")
	}
	b.WriteByte('[')
	if x.base.negate {
		b.WriteByte('^')
	}
	writeClassItems(b, x.base)
	if len(x.minus.ranges) > 0 || len(x.minus.props) > 0 {
		b.WriteString("-[")
		writeClassItems(b, x.minus)
		b.WriteByte(']')
	}
	b.WriteByte(']')
	if len(add) > 0 {
		b.WriteString("|[")
		writeClassItems(b, onigClass{ranges: add})
		b.WriteString("])")
	}
}

func writeClassItems(b *strings.Builder, c onigClass) {
	for _, rg := range c.ranges {
		writeChar(b, rg[0])
		if rg[1] > rg[0] {
			b.WriteByte('-')
			writeChar(b, rg[1])
		}
	}
	for _, pr := range c.props {
		pr.write(b)
	}
}

// appendRange adds r, which is past every character in rs, to rs.
func appendRange(rs [][2]rune, r rune) [][2]rune {
	if n := len(rs); n > 0 && rs[n-1][1] == r-1 {
		rs[n-1][1] = r
		return rs
	}
	return append(rs, [2]rune{r, r})
}

// onigDiffering lists, in order, the characters whose classes Oniguruma's
// tables and Go's may disagree on.
var onigDiffering = sync.OnceValue(func() []rune {
	var rs []rune
	for _, rg := range regexUnassigned.R16 {
		for r := rune(rg.Lo); r <= rune(rg.Hi); r += rune(rg.Stride) {
			rs = append(rs, r)
		}
	}
	for _, rg := range regexUnassigned.R32 {
		for r := rune(rg.Lo); r <= rune(rg.Hi); r += rune(rg.Stride) {
			rs = append(rs, r)
		}
	}
	for r := range onigMoved {
		rs = append(rs, r)
	}
	slices.Sort(rs)
	return rs
})
