package hf

import (
	"errors"
	"strings"
	"testing"
	"unicode"

	"pgregory.net/rapid"
)

// TestRuneSetOps: union, intersect, complement and has agree with a naive
// set of characters, near 0 and near unicode.MaxRune.
func TestRuneSetOps(t *testing.T) {
	edge := []rune{0, 1, 2, 3, 5, 8, 9, 10, unicode.MaxRune - 3, unicode.MaxRune - 1, unicode.MaxRune}
	ranges := rapid.Custom(func(rt *rapid.T) [][2]rune {
		var rs [][2]rune
		for range rapid.IntRange(0, 4).Draw(rt, "n") {
			a, b := rapid.SampledFrom(edge).Draw(rt, "a"), rapid.SampledFrom(edge).Draw(rt, "b")
			rs = append(rs, [2]rune{min(a, b), max(a, b)})
		}
		return rs
	})
	naive := func(rs [][2]rune, r rune) bool {
		for _, rg := range rs {
			if rg[0] <= r && r <= rg[1] {
				return true
			}
		}
		return false
	}
	var probes []rune
	for _, r := range edge {
		probes = append(probes, r, max(r-1, 0), min(r+1, unicode.MaxRune))
	}
	rapid.Check(t, func(rt *rapid.T) {
		a, b := ranges.Draw(rt, "a"), ranges.Draw(rt, "b")
		sa, sb := newRuneSet(a), newRuneSet(b)
		for i := 1; i < len(sa); i++ {
			if sa[i][0] <= sa[i-1][1]+1 {
				rt.Fatalf("newRuneSet(%v) = %v: ranges overlap or touch", a, sa)
			}
		}
		for _, r := range probes {
			in, ib := naive(a, r), naive(b, r)
			for _, c := range []struct {
				op        string
				got, want bool
			}{
				{"has", sa.has(r), in},
				{"union", sa.union(sb).has(r), in || ib},
				{"intersect", sa.intersect(sb).has(r), in && ib},
				{"complement", sa.complement().has(r), !in},
			} {
				if c.got != c.want {
					rt.Fatalf("%s of %v and %v at %U = %v, want %v", c.op, a, b, r, c.got, c.want)
				}
			}
		}
	})
}

// TestClassAgainstModel: a random class of a few letters, \s \d \p{L}
// \P{Lu}, nested, negated and intersected classes matches a character
// exactly when a naive reading of Oniguruma's rules (TestOnigRegex checks
// them against tokenizers) holds it: the classes writeClass writes and the
// sets writeSet writes agree.
func TestClassAgainstModel(t *testing.T) {
	probes := []rune("abcdeA1 \t\u3000\u0295\u088f\u0660é-]")
	rapid.Check(t, func(rt *rapid.T) {
		pattern, in := drawClass(rt, 0)
		m, err := newMatcher(patternJSON{Regex: &pattern})
		if err != nil {
			rt.Fatalf("%q: %v", pattern, err)
		}
		for _, r := range probes {
			got := len(m.find(nil, string(r), nil)) == 1
			if want := in(r); got != want {
				rt.Fatalf("%q on %+q: matched %v, want %v", pattern, r, got, want)
			}
		}
	})
}

// drawClass draws a class and its meaning: each operand unites its items,
// && intersects the operands, ^ negates the lot.
func drawClass(rt *rapid.T, depth int) (string, func(rune) bool) {
	type item struct {
		text string
		in   func(rune) bool
	}
	prop := func(name string, negate bool) func(rune) bool {
		return func(r rune) bool { return onigIs(name, r) != negate }
	}
	leaves := []item{
		{"a", func(r rune) bool { return r == 'a' }},
		{"c", func(r rune) bool { return r == 'c' }},
		{"b-d", func(r rune) bool { return 'b' <= r && r <= 'd' }},
		{`\s`, prop("space", false)},
		{`\d`, prop("Nd", false)},
		{`\S`, prop("space", true)},
		{`\p{L}`, prop("L", false)},
		{`\P{Lu}`, prop("Lu", true)},
	}
	negate := rapid.Bool().Draw(rt, "negate")
	var b strings.Builder
	b.WriteByte('[')
	if negate {
		b.WriteByte('^')
	}
	var ops [][]func(rune) bool
	for i := range rapid.IntRange(1, 2).Draw(rt, "ops") {
		if i > 0 {
			b.WriteString("&&")
		}
		var op []func(rune) bool
		for range rapid.IntRange(1, 3).Draw(rt, "items") {
			if depth < 3 && rapid.IntRange(0, 2).Draw(rt, "nest") == 0 {
				text, in := drawClass(rt, depth+1)
				b.WriteString(text)
				op = append(op, in)
				continue
			}
			it := rapid.SampledFrom(leaves).Draw(rt, "item")
			b.WriteString(it.text)
			op = append(op, it.in)
		}
		ops = append(ops, op)
	}
	b.WriteByte(']')
	return b.String(), func(r rune) bool {
		all := true
		for _, op := range ops {
			some := false
			for _, in := range op {
				some = some || in(r)
			}
			all = all && some
		}
		return all != negate
	}
}

// TestClassDepth: classes nest as deep as groups may, no deeper.
func TestClassDepth(t *testing.T) {
	for _, c := range []struct {
		depth int
		ok    bool
	}{{1, true}, {maxRegexDepth - 1, true}, {maxRegexDepth, false}, {10 * maxRegexDepth, false}} {
		pattern := strings.Repeat("[", c.depth) + "a" + strings.Repeat("]", c.depth)
		got, err := translateRegex(pattern)
		if c.ok && (err != nil || got != "[a]") || !c.ok && !errors.Is(err, ErrUnsupported) {
			t.Errorf("classes %d deep: translateRegex = %q, %v; want ok %v", c.depth, got, err, c.ok)
		}
	}
}
