package hf

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// sharedPattern builds, from the bytes of program, a pattern in a small
// grammar whose constructs tokenizers' Oniguruma and Go's regexp (RE2) read
// alike, and returns it twice: onig as tokenizer.json would hold it, and
// ref, the same pattern for Go's regexp, with each class written out as
// the ranges of the characters Oniguruma has in it (onigSets). Go's regexp
// finds the leftmost-first match a backtracking engine finds, so
// sharedMatches(ref) is what tokenizers matches, by an engine and a
// path through the syntax that share nothing with translateRegex and
// regexp2.
//
// The grammar: literals, ., \s \S \d \D and general categories alone and in
// classes [...] [^...] with ranges, groups (...) (?:...), alternatives,
// (?i:...) of ASCII letters, the anchors \A \z $ and the quantifiers * + ?
// {n} {n,} {n,m}, lazy but for {n}. ^ and \Z (which Go's regexp cannot say
// as Oniguruma means them) and lookahead (which it lacks) are left out.
func sharedPattern(program string) (onig, ref string) {
	g := &grammarGen{program: program}
	g.sequence(0)
	return g.onig.String(), g.ref.String()
}

type grammarGen struct {
	program   string
	pos       int
	onig, ref strings.Builder
}

// next is the program's next byte, and false when it has none left.
func (g *grammarGen) next() (byte, bool) {
	if g.pos >= len(g.program) {
		return 0, false
	}
	g.pos++
	return g.program[g.pos-1], true
}

func (g *grammarGen) write(onig, ref string) {
	g.onig.WriteString(onig)
	g.ref.WriteString(ref)
}

// grammarLiterals are characters that mean themselves in both syntaxes,
// as each writes them.
var grammarLiterals = [][2]string{{"a", "a"}, {"b", "b"}, {"k", "k"}, {"x", "x"}, {" ", " "},
	{`\n`, `\n`}, {"-", "-"}, {`\.`, `\.`}, {"é", "é"}, {`\u212A`, `\x{212A}`}}

// grammarProps are the class escapes and what Oniguruma has in them.
var grammarProps = []struct {
	onig string
	prop onigProp
}{
	{`\s`, onigProp{name: "space"}}, {`\S`, onigProp{name: "space", negate: true}},
	{`\d`, onigProp{name: "Nd"}}, {`\D`, onigProp{name: "Nd", negate: true}},
	{`\p{L}`, onigProp{name: "L"}}, {`\P{L}`, onigProp{name: "L", negate: true}},
	{`\p{Lu}`, onigProp{name: "Lu"}}, {`\p{N}`, onigProp{name: "N"}}, {`\p{P}`, onigProp{name: "P"}},
}

// grammarQuantifiers may follow any atom; translateRegex refuses them on
// what can match nothing, and {n}?.
var grammarQuantifiers = []string{"*", "+", "?", "{2}", "{0,2}", "{1,3}", "{2,}", "*?", "+?", "??", "{1,2}?", "{2,}?"}

// sequence writes alternatives until the program ends or, inside a group
// (depth > 0), closes it.
func (g *grammarGen) sequence(depth int) {
	atom := false // whether the last thing written may take a quantifier
	for {
		b, ok := g.next()
		if !ok {
			return
		}
		switch b % 12 {
		case 0:
			if depth > 0 {
				return
			}
			g.write("|", "|")
			atom = false
			continue
		case 1:
			g.write("|", "|")
			atom = false
			continue
		case 2:
			if !atom {
				g.write(".", ".")
				break
			}
			q, _ := g.next()
			quant := grammarQuantifiers[int(q)%len(grammarQuantifiers)]
			g.write(quant, quant)
			atom = false
			continue
		case 3:
			if depth >= 4 {
				continue
			}
			open := "(?:"
			if b&0x80 != 0 {
				open = "("
			}
			g.write(open, open)
			g.sequence(depth + 1)
			g.write(")", ")")
		case 4:
			n, _ := g.next()
			g.write("(?i:", "(?i:")
			for i := range int(n%3) + 1 {
				l := string("abkxsAKX"[(int(n)/3+i*5)%8])
				g.write(l, l)
			}
			g.write(")", ")")
		case 5:
			p := grammarProps[int(b/12)%len(grammarProps)]
			g.onig.WriteString(p.onig)
			writeRefSet(&g.ref, propSet(p.prop))
		case 6:
			g.class()
		case 7:
			a := [][2]string{{`\A`, `\A`}, {`\z`, `\z`}, {"$", `(?m:$)`}}[int(b/12)%3]
			g.write(a[0], a[1])
			atom = false
			continue
		default:
			l := grammarLiterals[int(b/12)%len(grammarLiterals)]
			g.write(l[0], l[1])
		}
		atom = true
	}
}

// class writes [...] or [^...] of up to three items: letters, a range and
// class escapes.
func (g *grammarGen) class() {
	n, _ := g.next()
	negate := n&0x80 != 0
	g.onig.WriteByte('[')
	if negate {
		g.onig.WriteByte('^')
	}
	var set runeSet
	for range int(n%3) + 1 {
		item, _ := g.next()
		switch item % 4 {
		case 0:
			p := grammarProps[int(item/4)%len(grammarProps)]
			g.onig.WriteString(p.onig)
			set = set.union(propSet(p.prop))
		case 1:
			g.onig.WriteString("a-k")
			set = set.union(runeSet{{'a', 'k'}})
		default:
			r := []rune("abkx é\u3000")[int(item/4)%7]
			g.onig.WriteRune(r)
			set = set.union(runeSet{{r, r}})
		}
	}
	g.onig.WriteByte(']')
	if negate {
		set = set.complement()
	}
	writeRefSet(&g.ref, set)
}

// writeRefSet writes s for Go's regexp as a class of ranges.
func writeRefSet(b *strings.Builder, s runeSet) {
	if len(s) == 0 {
		b.WriteString(`[^\x00-\x{10FFFF}]`)
		return
	}
	b.WriteByte('[')
	for _, rg := range s {
		fmt.Fprintf(b, `\x{%X}-\x{%X}`, rg[0], rg[1])
	}
	b.WriteByte(']')
}

// sharedMatches is every match of the Go pattern ref in text as tokenizers
// finds them (the onig crate's find_iter): each search starts where the
// last match ended, one character further after an empty match, and an
// empty match where the last one ended is skipped. The search from a
// position is \A, that many characters, then the leftmost-first match of
// ref, so that \A and $ see the whole text. An empty text has no matches:
// tokenizers runs no pattern on one (regex.json.gz has it so).
func sharedMatches(ref, text string) ([][2]int, error) {
	if text == "" {
		return nil, nil
	}
	var out [][2]int
	lastEnd := -1
	for pos, chars := 0, 0; pos <= len(text); chars++ {
		re, err := regexp.Compile(fmt.Sprintf(`\A(?s:.{%d}.*?)(%s)`, chars, ref))
		if err != nil {
			return nil, err
		}
		m := re.FindStringSubmatchIndex(text)
		if m == nil {
			break
		}
		start, end := m[2], m[3]
		if end > start || start != lastEnd {
			out = append(out, [2]int{start, end})
			lastEnd = end
		}
		if end > start {
			pos = end
		} else if pos = end; pos < len(text) {
			_, size := utf8.DecodeRuneInString(text[pos:])
			pos += size
		} else {
			break
		}
		chars = utf8.RuneCountInString(text[:pos]) - 1
	}
	return slices.Clip(out), nil
}
