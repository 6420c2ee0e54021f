package hf

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode"
)

// Oniguruma's classes: [...] unites its characters, ranges, property
// escapes and nested classes ([a[bc]] is [abc]); && intersects what is on
// either side of it, the loosest binding ([a-z&&[^aeiou]] is the
// consonants); [^...] is the complement of all that. A ] first in a class
// is a character, as is a - first, last or first after &&, and & alone.
// Classes that only unite, with no negated class nested, are written for
// regexp2 as one class (writeClass), keeping \p{..} as regexp2 has it,
// unless negated with more than one of \S \D \P{..}; the others are
// computed as sets of characters over Oniguruma's tables (onigSets) and
// written out as ranges.

// classNode is a class as read: the intersection of its operands (one
// unless && splits it), negated by [^.
type classNode struct {
	negate bool
	ops    []classOperand
}

// classOperand is the union of what it holds.
type classOperand struct {
	ranges [][2]rune
	props  []onigProp
	nested []*classNode
}

func (o *classOperand) empty() bool { return len(o.ranges)+len(o.props)+len(o.nested) == 0 }

// class reads [...]. A - must be first, last or between two characters;
// POSIX brackets [:...:] are refused, as is && with nothing on a side.
func (p *onigParser) class() (*classNode, error) {
	if p.depth++; p.depth > maxRegexDepth {
		return nil, p.refuse(fmt.Sprintf("groups and classes nested more than %d deep", maxRegexDepth))
	}
	defer func() { p.depth-- }()
	p.pos++ // [
	n := &classNode{}
	if p.peek() == '^' {
		n.negate = true
		p.pos++
	}
	var op classOperand
	// start: at the start of an operand, where - is a character; and
	// of the class, where ] is one too.
	start := true
	for {
		switch r := p.peek(); {
		case r < 0:
			return nil, p.malformed("an unterminated [")
		case r == ']' && start && len(n.ops) > 0:
			return nil, p.refuse("&& with nothing after it")
		case r == ']' && !start:
			p.pos++
			n.ops = append(n.ops, op)
			return n, nil
		case r == '[' && p.peekAt(1) == ':':
			return nil, p.refuse("a POSIX bracket [:...:]")
		case r == '[':
			sub, err := p.class()
			if err != nil {
				return nil, err
			}
			op.nested = append(op.nested, sub)
			start = false
			continue
		case r == '&' && p.peekAt(1) == '&':
			if op.empty() {
				return nil, p.refuse("&& with nothing before it")
			}
			p.pos += 2
			n.ops = append(n.ops, op)
			op = classOperand{}
			start = true
			continue
		case r == '-' && !start && p.peekAt(1) != ']':
			return nil, p.refuse("- in a class neither first, last nor in a range")
		}
		if err := p.classItem(&op); err != nil {
			return nil, err
		}
		start = false
	}
}

// classItem reads a character, a range or a property escape into op.
func (p *onigParser) classItem(op *classOperand) error {
	lo, prop, err := p.classChar()
	if err != nil {
		return err
	}
	if prop != nil {
		op.props = append(op.props, *prop)
		return nil
	}
	hi := lo
	if p.peek() == '-' && p.peekAt(1) != ']' {
		p.pos++
		switch {
		case p.peek() == '[':
			return p.refuse("[ after - in a class")
		case p.has("&&"): // Oniguruma ends the operand there: [!-&&b] is empty
			return p.refuse("- before && in a class")
		}
		if hi, prop, err = p.classChar(); err != nil {
			return err
		}
		if prop != nil || hi < lo {
			return p.refuse("a range in a class that is not from a character to a later one")
		}
	}
	op.ranges = append(op.ranges, [2]rune{lo, hi})
	return nil
}

func (p *onigParser) classChar() (rune, *onigProp, error) {
	if p.peek() == '\\' {
		return p.escape()
	}
	if p.peek() < 0 {
		return 0, nil, p.malformed("an unterminated [")
	}
	p.pos++
	return p.src[p.pos-1], nil, nil
}

// writeClassNode writes n for regexp2: as one class when it only unites
// and writeClass can write it, else as the set of characters it holds.
func (p *onigParser) writeClassNode(n *classNode) {
	if c, ok := n.flat(); ok && (!c.negate || c.negatedProps() <= 1) {
		p.writeClass(c)
		return
	}
	writeSet(&p.out, n.set())
}

// flat is n as one onigClass, if it has no && and no negated class nested.
func (n *classNode) flat() (onigClass, bool) {
	if len(n.ops) != 1 {
		return onigClass{}, false
	}
	op := n.ops[0]
	c := onigClass{negate: n.negate, ranges: slices.Clone(op.ranges), props: slices.Clone(op.props)}
	for _, sub := range op.nested {
		s, ok := sub.flat()
		if !ok || s.negate {
			return onigClass{}, false
		}
		c.ranges = append(c.ranges, s.ranges...)
		c.props = append(c.props, s.props...)
	}
	return c, true
}

// set is the characters n holds in tokenizers' Oniguruma.
func (n *classNode) set() runeSet {
	var s runeSet
	for i, op := range n.ops {
		u := newRuneSet(op.ranges)
		for _, pr := range op.props {
			u = u.union(propSet(pr))
		}
		for _, sub := range op.nested {
			u = u.union(sub.set())
		}
		if i == 0 {
			s = u
		} else {
			s = s.intersect(u)
		}
	}
	if n.negate {
		s = s.complement()
	}
	return s
}

func (c *onigClass) negatedProps() int {
	n := 0
	for _, p := range c.props {
		if p.negate {
			n++
		}
	}
	return n
}

// runeSet is a set of characters: sorted ranges, apart and not adjacent.
type runeSet [][2]rune

// newRuneSet is the set of the characters of ranges, which it leaves as
// they are.
func newRuneSet(ranges [][2]rune) runeSet {
	rs := slices.Clone(ranges)
	slices.SortFunc(rs, func(a, b [2]rune) int { return int(a[0] - b[0]) })
	var s runeSet
	for _, rg := range rs {
		if n := len(s); n > 0 && rg[0] <= s[n-1][1]+1 {
			s[n-1][1] = max(s[n-1][1], rg[1])
			continue
		}
		s = append(s, rg)
	}
	return s
}

func (s runeSet) has(r rune) bool {
	_, found := slices.BinarySearchFunc(s, r, func(rg [2]rune, r rune) int {
		switch {
		case rg[1] < r:
			return -1
		case rg[0] > r:
			return 1
		}
		return 0
	})
	return found
}

func (s runeSet) union(t runeSet) runeSet { return newRuneSet(slices.Concat(s, t)) }

// complement is every character not in s, up to unicode.MaxRune.
func (s runeSet) complement() runeSet {
	var c runeSet
	next := rune(0)
	for _, rg := range s {
		if rg[0] > next {
			c = append(c, [2]rune{next, rg[0] - 1})
		}
		next = rg[1] + 1
	}
	if next <= unicode.MaxRune {
		c = append(c, [2]rune{next, unicode.MaxRune})
	}
	return c
}

func (s runeSet) intersect(t runeSet) runeSet {
	return s.complement().union(t.complement()).complement()
}

// writeSet writes s for regexp2 as a class of ranges, or its complement
// negated when that has fewer.
func writeSet(b *strings.Builder, s runeSet) {
	b.WriteByte('[')
	if c := s.complement(); len(s) == 0 || len(c) > 0 && len(c) < len(s) {
		b.WriteByte('^')
		s = c
	}
	writeClassItems(b, onigClass{ranges: s})
	b.WriteByte(']')
}

// propSet is the set of characters p stands for in Oniguruma.
func propSet(p onigProp) runeSet {
	s := onigSets()[p.name]
	if p.negate {
		return s.complement()
	}
	return s
}

// onigSets are the sets of the general categories \p{..} may name, and of
// \s as "space", as onigIs has them: Go's tables, corrected where
// Oniguruma's differ.
var onigSets = sync.OnceValue(func() map[string]runeSet {
	sets := map[string]runeSet{}
	for name := range onigCategories {
		sets[name] = onigSet(name, unicode.Categories[name])
	}
	sets["space"] = onigSet("space", unicode.White_Space) // unicode.IsSpace's table
	return sets
})

func onigSet(name string, t *unicode.RangeTable) runeSet {
	var rs [][2]rune
	add := func(lo, hi, stride rune) {
		if stride == 1 {
			rs = append(rs, [2]rune{lo, hi})
			return
		}
		for r := lo; r <= hi; r += stride {
			rs = append(rs, [2]rune{r, r})
		}
	}
	for _, rg := range t.R16 {
		add(rune(rg.Lo), rune(rg.Hi), rune(rg.Stride))
	}
	for _, rg := range t.R32 {
		add(rune(rg.Lo), rune(rg.Hi), rune(rg.Stride))
	}
	var in, out runeSet
	for _, r := range onigDiffering() {
		switch g, o := goIs(name, r), onigIs(name, r); {
		case g && !o:
			out = appendRange(out, r)
		case o && !g:
			in = appendRange(in, r)
		}
	}
	return newRuneSet(rs).intersect(out.complement()).union(in)
}
