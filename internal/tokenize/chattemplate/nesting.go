package chattemplate

import (
	"fmt"
	"strings"
)

// The template engine parses a template by recursion, a call or more for
// each block inside a block and for each operator, bracket, filter or
// call inside an expression, and it renders the tree it built by
// recursion too: a left-leaning chain (1+1+…, x|f|f…) is as deep as it
// is long. It sets no bound, so a template of a megabyte or two (500,000
// nested brackets, 1,000,000 additions, filters or calls) or of 10 MB
// (1,000,000 nested ifs) grows the stack past the Go runtime's limit,
// which ends the process: no recover can catch it. So a template is
// measured before it is compiled (tooDeep), and one nested past these
// bounds is refused as one that does not compile. Real templates stay far
// below them: of 94 (the goldens' and a corpus of public models'), the
// deepest nests blocks 13 deep and the busiest tag has 28 operators and
// brackets.
const (
	// maxBlockDepth bounds how deeply blocks ({% if %}, {% for %},
	// {% macro %}, a block {% set %} …) nest.
	maxBlockDepth = 256
	// maxTagOperators bounds the operators, opening brackets and
	// keyword operators of one tag: their count bounds how deep its
	// expression's tree can be.
	maxTagOperators = 512
)

// blockOpeners are the statements the engine parses as blocks, up to
// their end tag.
var blockOpeners = map[string]bool{
	"if": true, "for": true, "macro": true, "call": true, "filter": true,
	"raw": true, "generation": true, "block": true,
	// "set" opens a block only without an assignment (blockSet).
}

// tooDeep says why the engine could not parse or render src without
// growing its stack without bound, "" when it can: blocks nested past
// maxBlockDepth, or a tag past maxTagOperators. It reads src as the
// engine's scanner does (templateTags); a template whose tags cannot be
// found is left to the engine, which refuses it.
func tooDeep(src string) string {
	tags, ok := templateTags(src)
	if !ok {
		return ""
	}
	depth := 0
	for _, t := range tags {
		if t.kind == '#' {
			continue
		}
		if t.kind == '%' {
			switch word := t.word(src); {
			case blockOpeners[word] || word == "set" && blockSet(src, t):
				depth++
				if depth > maxBlockDepth {
					return fmt.Sprintf("blocks nested deeper than %d levels", maxBlockDepth)
				}
			case strings.HasPrefix(word, "end") && depth > 0:
				// A closer that does not match its block fails the
				// compile, so counting every closer undercounts nothing
				// the engine accepts.
				depth--
			}
		}
		if n := tagOperators(src, t); n > maxTagOperators {
			return fmt.Sprintf("a tag with %d operators and brackets, more than %d", n, maxTagOperators)
		}
	}
	return ""
}

// blockSet reports whether the set tag t is a block set ({% set x %}…
// {% endset %}): one without an assignment's '=' (a lone '=', not part
// of ==, !=, <= or >=).
func blockSet(src string, t tagSpan) bool {
	toks := tagTokens(src, t.in, t.out)
	for i, tk := range toks {
		if tk.kind != '=' {
			continue
		}
		joinedBefore := i > 0 && toks[i-1].end == tk.start && isComparisonByte(toks[i-1].kind)
		joinedAfter := i+1 < len(toks) && toks[i+1].start == tk.end && toks[i+1].kind == '='
		if !joinedBefore && !joinedAfter {
			return false
		}
	}
	return true
}

func isComparisonByte(c byte) bool { return c == '=' || c == '!' || c == '<' || c == '>' }

// tagOperators counts the tokens of tag t that can each add a level to
// the engine's expression tree: every operator byte and opening bracket
// (outside string literals), and the keywords not, and, or, if, else, in
// and is.
func tagOperators(src string, t tagSpan) int {
	n := 0
	for _, tk := range tagTokens(src, t.in, t.out) {
		switch tk.kind {
		case 'q', '0', ',', ':', ')', ']', '}':
		case 'a':
			switch src[tk.start:tk.end] {
			case "not", "and", "or", "if", "else", "in", "is":
				n++
			}
		default:
			n++
		}
	}
	return n
}
