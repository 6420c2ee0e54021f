package chattemplate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

// caseMethods are the string methods the renderer replaces, by name: the
// engine's map case one rune at a time, as Go's strings package does, so
// 'straße'.upper() kept its ß where Python writes STRASSE. A call without
// arguments, s.upper(), is rewritten to (s|f), f holding Python's
// version: a filter applies to the value before it where a method call
// does (the engine parses both as postfix operators), and the brackets
// keep it there wherever the call stands.
var caseMethods = map[string]jinja.Value{
	"upper":      caseMethod("upper", func(s string) string { return cases.Upper(language.Und).String(s) }),
	"lower":      caseMethod("lower", func(s string) string { return cases.Lower(language.Und).String(s) }),
	"title":      caseMethod("title", pyTitle),
	"capitalize": caseMethod("capitalize", pyCapitalize),
}

// caseMethod is the filter a call of the string method name is rewritten
// to: mapCase of a string. A dict's key of that name holding a callable is
// called, as Jinja2 looks a dict's attribute up among its keys; any other
// value has no such method.
func caseMethod(name string, mapCase func(string) string) jinja.Value {
	return jinja.NewCallable(filterPrefix+methodPrefix+name, func(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || len(kwargs) > 0 {
			return jinja.Undefined(), fmt.Errorf("str.%s takes no arguments", name)
		}
		v := args[0]
		switch {
		case v.IsString():
			return jinja.NewString(mapCase(v.AsString())), nil
		case v.IsDict():
			if fn, ok := v.AsDict().Get(name); ok && fn.IsCallable() {
				return fn.AsCallable().Fn(nil, nil)
			}
		}
		return jinja.Undefined(), fmt.Errorf("'%s' object has no attribute '%s'", pyType(v), name)
	})
}

// srcToken is a token of a tag's source, src[start:end]: kind 'a' for a
// name, 'q' for a string literal, '0' for a number, else its one byte.
type srcToken struct {
	start, end int
	kind       byte
}

// tagTokens splits the tag content src[from:to] into tokens, as far as
// finding a method call's receiver needs.
func tagTokens(src string, from, to int) []srcToken {
	var toks []srcToken
	for i := from; i < to; {
		c := src[i]
		j := i + 1
		kind := c
		switch {
		case isTagSpace(c):
			i++
			continue
		case c == '\'' || c == '"':
			for j < to && src[j] != c {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			j, kind = min(j+1, to), 'q'
		case c >= '0' && c <= '9':
			for j < to && isNameByte(src[j]) {
				j++
			}
			if j+1 < to && src[j] == '.' && src[j+1] >= '0' && src[j+1] <= '9' {
				for j++; j < to && isNameByte(src[j]); j++ {
				}
			}
			kind = '0'
		case isNameByte(c):
			for j < to && isNameByte(src[j]) {
				j++
			}
			kind = 'a'
		}
		toks = append(toks, srcToken{i, j, kind})
		i = j
	}
	return toks
}

// receiverStart returns where the receiver of the method call whose '.'
// is at src[dot] starts: the postfix expression before it (a name, a
// literal or a bracketed expression, followed by attributes, subscripts
// and calls), or -1 when there is none, or it is a filter's or a test's
// name (x|f.upper(), which Jinja2 refuses).
func receiverStart(src string, toks []srcToken, dot int) int {
	k, _ := slices.BinarySearchFunc(toks, dot, func(t srcToken, at int) int { return cmp.Compare(t.start, at) })
	start := -1
	for j := k - 1; j >= 0 && start < 0; {
		switch t := toks[j]; t.kind {
		case ')', ']', '}':
			open := openingToken(toks, j)
			switch {
			case open < 0:
				return -1
			case t.kind != '}' && open > 0 && endsOperand(src, toks[open-1]):
				j = open - 1 // a call or a subscript of what is before it
			default:
				start = open
			}
		case 'a', 'q', '0':
			switch {
			case t.kind == 'a' && isKeyword(src[t.start:t.end]):
				return -1
			case t.kind == 'q' && j > 0 && toks[j-1].kind == 'q':
				j-- // adjacent literals are one string
			case j > 1 && toks[j-1].kind == '.':
				j -= 2 // an attribute of what is before the dot
			case j == 1 && toks[0].kind == '.':
				return -1
			default:
				start = j
			}
		default:
			return -1
		}
	}
	if start < 0 {
		return -1
	}
	if start > 0 {
		prev := toks[start-1]
		word := src[prev.start:prev.end]
		if prev.kind == '|' || word == "is" || word == "not" && start > 1 && src[toks[start-2].start:toks[start-2].end] == "is" {
			return -1
		}
	}
	return toks[start].start
}

// openingToken returns the index of the bracket toks[closing] closes, -1
// for none.
func openingToken(toks []srcToken, closing int) int {
	depth := 0
	for j := closing; j >= 0; j-- {
		switch toks[j].kind {
		case ')', ']', '}':
			depth++
		case '(', '[', '{':
			if depth--; depth == 0 {
				return j
			}
		}
	}
	return -1
}

// endsOperand reports whether a bracket after t opens a call or a
// subscript of it rather than an expression of its own.
func endsOperand(src string, t srcToken) bool {
	switch t.kind {
	case 'q', ')', ']', '}': // '}' ends a dict literal
		return true
	case 'a':
		return !isKeyword(src[t.start:t.end])
	}
	return false
}

// isKeyword reports whether a name is one of Jinja2's operators or
// statement words, which no value is named.
func isKeyword(name string) bool {
	switch name {
	case "if", "elif", "else", "in", "and", "or", "not", "is", "for", "recursive", "return":
		return true
	}
	return false
}

// pyTitle is Python's str.title: a character after a cased one (a letter
// with case) lower-cased, any other in title case, each mapped in full
// (ß to Ss, ǆ to ǅ, a final sigma to ς).
func pyTitle(s string) string {
	lower, title := cases.Lower(language.Und), cases.Title(language.Und)
	// A sigma's lower case depends on what is around it in s: taken from
	// s lower-cased whole, where every other character maps on its own.
	lowered := lower.String(s)
	var b strings.Builder
	b.Grow(len(s))
	at, prevCased := 0, false // at: where the current character's lower case starts in lowered
	for _, r := range s {
		one := string(r)
		if r >= utf8.RuneSelf || 'A' <= r && r <= 'Z' {
			one = lower.String(one)
		}
		switch {
		case !prevCased && r < utf8.RuneSelf:
			b.WriteString(strings.ToUpper(string(r)))
		case !prevCased:
			b.WriteString(title.String(string(r)))
		case r == 'Σ' && at+len(one) <= len(lowered) && (lowered[at:at+len(one)] == "ς" || lowered[at:at+len(one)] == "σ"):
			b.WriteString(lowered[at : at+len(one)])
		default:
			b.WriteString(one)
		}
		at += len(one)
		prevCased = unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) ||
			unicode.Is(unicode.Other_Lowercase, r) || unicode.Is(unicode.Other_Uppercase, r)
	}
	return b.String()
}

// pyCapitalize is Python's str.capitalize: the first character in title
// case, the rest lower-cased as they stand in s (a final sigma after it
// is final).
func pyCapitalize(s string) string {
	if s == "" {
		return s
	}
	lower := cases.Lower(language.Und)
	_, size := utf8.DecodeRuneInString(s)
	rest, first := lower.String(s), lower.String(s[:size])
	if strings.HasPrefix(rest, first) {
		rest = rest[len(first):] // the first character lower-cases on its own
	} else {
		rest = lower.String(s[size:])
	}
	return cases.Title(language.Und).String(s[:size]) + rest
}
