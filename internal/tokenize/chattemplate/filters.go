package chattemplate

import (
	"cmp"
	"slices"
	"strings"

	"github.com/ardanlabs/jinja"
)

// The template engine has filters and tests that compute otherwise than
// Jinja2's: trim keeps characters Python strips; string, join and trim
// leave raw in a printed list what Python escapes; dictsort compares keys
// case and all (Gemma 4 sorts tool properties with it), and it, items
// and dict.items() give pairs that print as lists, not tuples; title starts a
// word after any character but a letter or digit (MiniCPM3 names enum
// classes with it); an undefined value is neither iterable nor a sequence
// (Hermes 2 Pro types array parameters by testing one), while a namespace
// is iterable, a sequence and a mapping, has a length and a list; and it cannot
// parse f(*args) (AI21 Jamba calls its macros so). Its own filters and
// tests cannot be replaced, but a filter it does not know is looked up
// among the template's variables. So the renderer rewrites a template's
// source (overrideFilters): those filters are renamed to variables
// holding Jinja2's versions (filterVars), those tests become such
// filters (Jinja2 parses a test where it parses a filter, after the value
// and before any operator, so "x is iterable" and "x|f" group alike),
// map, select and the like naming one of them as a string literal are
// renamed to ours (higherOrderFilters), the string methods that map case
// one rune at a time, s.upper(), and d.items() become filters that
// compute as Python does ((s|f), replacedMethods), and f(a, *b, k=v)
// becomes f|splat(a, b)(k=v). What it parses but would render wrongly or without
// bound is refused (unreadConstruct).

// overriddenFilters maps each filter the renderer replaces, and each test
// it turns into a filter (under testPrefix), to its callable.
var overriddenFilters = map[string]jinja.Value{
	"dictsort":              jinja.NewCallable(filterPrefix+"dictsort", dictsortFilter),
	"items":                 jinja.NewCallable(filterPrefix+"items", itemsFilter),
	"length":                jinja.NewCallable(filterPrefix+"length", lengthFilter),
	"count":                 jinja.NewCallable(filterPrefix+"count", lengthFilter),
	"list":                  jinja.NewCallable(filterPrefix+"list", listFilter),
	"title":                 jinja.NewCallable(filterPrefix+"title", titleFilter),
	"trim":                  jinja.NewCallable(filterPrefix+"trim", trimFilter),
	"string":                jinja.NewCallable(filterPrefix+"string", stringFilter),
	"join":                  jinja.NewCallable(filterPrefix+"join", joinFilter),
	"upper":                 jinja.NewCallable(filterPrefix+"upper", upperFilter),
	"lower":                 jinja.NewCallable(filterPrefix+"lower", lowerFilter),
	"capitalize":            jinja.NewCallable(filterPrefix+"capitalize", capitalizeFilter),
	splatName:               jinja.NewCallable(filterPrefix+splatName, splatFilter),
	testPrefix + "iterable": jinja.NewCallable(filterPrefix+testPrefix+"iterable", iterableTest),
	testPrefix + "sequence": jinja.NewCallable(filterPrefix+testPrefix+"sequence", sequenceTest),
	testPrefix + "mapping":  jinja.NewCallable(filterPrefix+testPrefix+"mapping", mappingTest),
	"not":                   jinja.NewCallable(filterPrefix+"not", notFilter),
}

// higherOrderFilters are the engine's filters that apply a filter or a
// test named by a string argument (map('title'), select('iterable'),
// selectattr('v', 'sequence')), each with the position of that argument
// after the value. The engine looks the name up among its own filters and
// tests, never among the replaced ones, so a call that names a replaced
// filter or test as a string literal is renamed to ours, which apply the
// replacement with Jinja2's semantics (namesReplaced); so is one naming
// another of them that names one so (map('map', 'upper')), as the engine's
// would apply its own. A name given any other way (a variable, an
// expression) keeps the engine's filter.
var higherOrderFilters = map[string]struct {
	nameArg int  // the argument naming the filter or test, after the value
	test    bool // it names a test, not a filter
	fn      jinja.Value
}{
	"map":        {0, false, jinja.NewCallable(filterPrefix+"map", mapFilter)},
	"select":     {0, true, jinja.NewCallable(filterPrefix+"select", selectFilter("select", false, true))},
	"reject":     {0, true, jinja.NewCallable(filterPrefix+"reject", selectFilter("reject", false, false))},
	"selectattr": {1, true, jinja.NewCallable(filterPrefix+"selectattr", selectFilter("selectattr", true, true))},
	"rejectattr": {1, true, jinja.NewCallable(filterPrefix+"rejectattr", selectFilter("rejectattr", true, false))},
}

// isReplacedFilter reports whether a template's filter name is one the
// renderer replaces (not a test turned into a filter, nor a helper).
func isReplacedFilter(name string) bool {
	_, ok := overriddenFilters[name]
	return ok && !strings.HasPrefix(name, testPrefix) && name != "not" && name != splatName
}

// isReplacedTest reports whether a template's test name is one the
// renderer replaces.
func isReplacedTest(name string) bool {
	_, ok := overriddenFilters[testPrefix+name]
	return ok && name != ""
}

// filterPrefix starts the name a replaced filter is renamed to; a test
// turned into a filter is named filterPrefix+testPrefix+test.
const (
	filterPrefix = "__inferrail_filter_"
	testPrefix   = "is_"
	methodPrefix = "str_"
)

// filterVars adds the replacing filters to a rendering's variables.
func filterVars(vars map[string]jinja.Value) {
	for _, f := range replacingFilters {
		vars[f.name] = f.fn
	}
}

// replacingFilters are overriddenFilters under the names a template
// calls them by, made once.
var replacingFilters = func() []namedValue {
	var out []namedValue
	for name, fn := range overriddenFilters {
		out = append(out, namedValue{filterPrefix + name, fn})
	}
	for name, f := range higherOrderFilters {
		out = append(out, namedValue{filterPrefix + name, f.fn})
	}
	for name, fn := range replacedMethods {
		out = append(out, namedValue{filterPrefix + methodPrefix + name, fn})
	}
	return out
}()

// namedValue is a template variable and its name.
type namedValue struct {
	name string
	fn   jinja.Value
}

// sourceEdit replaces src[start:end] with text.
type sourceEdit struct {
	start, end int
	text       string
}

// overrideFilters returns src with every application of a replaced filter
// (| name) renamed to its replacement, and every replaced test (is name, is
// not name) turned into the filter that replaces it, in {{ }} and {% %}
// tags outside string literals; src as it is when its tags cannot be
// found.
func overrideFilters(src string) string {
	tags, ok := templateTags(src)
	if !ok {
		return src
	}
	var edits []sourceEdit
	for _, t := range tags {
		if t.kind == '%' && t.word(src) == "filter" {
			edits = append(edits, filterBlockEdit(src, t)...)
		}
		if t.kind != '#' {
			edits = append(edits, tagEdits(src, t.in, t.out)...)
		}
	}
	if len(edits) == 0 {
		return src
	}
	return applyEdits(src, 0, len(src), edits)
}

// applyEdits returns src[from:to] with edits, which lie within it, made.
func applyEdits(src string, from, to int, edits []sourceEdit) string {
	// A method call's receiver is opened before the edits inside it; an
	// opening inserted at a place goes before what replaces text there.
	slices.SortStableFunc(edits, func(a, b sourceEdit) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.end-a.start, b.end-b.start))
	})
	var b strings.Builder
	prev := from
	for _, e := range edits {
		if e.start < prev {
			continue // overlaps the edit before it: the text stays
		}
		b.WriteString(src[prev:e.start])
		b.WriteString(e.text)
		prev = e.end
	}
	b.WriteString(src[prev:to])
	return b.String()
}

// unreadConstruct names a construct of src the template engine parses
// without error but renders wrongly or without bound, "" for none: a set
// block with a filter ({% set x | f %}…{% endset %}), which it stores
// under the name "x | f", leaving x empty; a recursive loop's loop kept
// as a value (keepsLoop).
func unreadConstruct(src string) string {
	tags, _ := templateTags(src)
	for _, t := range tags {
		if t.kind != '%' || t.word(src) != "set" {
			continue
		}
		rest := strings.TrimLeft(src[t.in:t.out], " \t\r\n")[len("set"):]
		rest = strings.TrimLeft(rest, " \t\r\n")
		n := 0
		for n < len(rest) && (isNameByte(rest[n]) || rest[n] == '.' || rest[n] == ',' || isTagSpace(rest[n])) {
			n++
		}
		if n > 0 && strings.HasPrefix(rest[n:], "|") && !strings.Contains(rest, "=") {
			return "a set block with a filter ({% set x | f %})"
		}
	}
	if keepsLoop(src, tags) {
		return "a recursive loop's loop kept or passed as a value, whose depth cannot be bounded"
	}
	return ""
}

// keepsLoop reports whether a template with a recursive loop names loop
// other than to call it or read a member of it: a loop kept in a
// variable and called from there recurses at the same loop.depth, which
// the watch bounds.
func keepsLoop(src string, tags []tagSpan) bool {
	if !strings.Contains(src, "recursive") {
		return false
	}
	for _, t := range tags {
		if t.kind == '#' {
			continue
		}
		closer := "}}"
		if t.kind == '%' {
			closer = "%}"
		}
		toks, _, err := lexTag(src[t.in:t.out]+closer, t.kind == '%')
		if err != nil {
			return true // cannot tell
		}
		for i, tk := range toks {
			if tk.kind != tokName || tk.text != "loop" || (i > 0 && toks[i-1].is(".")) {
				continue
			}
			if i+1 == len(toks) || !(toks[i+1].is("(") || toks[i+1].is(".") || toks[i+1].is("[")) {
				return true
			}
		}
	}
	return false
}

// filterBlockEdit renames the first filter of a {% filter name %} tag t,
// which follows no '|', when it is a replaced one.
func filterBlockEdit(src string, t tagSpan) []sourceEdit {
	i := skipTagSpace(src, skipTagSpace(src, t.in, t.out)+len("filter"), t.out)
	k := i
	for k < t.out && isNameByte(src[k]) {
		k++
	}
	name := src[i:k]
	if !isReplacedFilter(name) {
		return nil
	}
	return []sourceEdit{{i, k, filterPrefix + name}}
}

// isTagSpace reports whether c is whitespace between a tag's tokens.
func isTagSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipTagSpace returns where the whitespace at src[i:to] ends.
func skipTagSpace(src string, i, to int) int {
	for i < to && isTagSpace(src[i]) {
		i++
	}
	return i
}

// tagEdits returns the edits of overrideFilters in the tag content
// src[from:to], in order.
func tagEdits(src string, from, to int) []sourceEdit {
	var edits []sourceEdit
	// word returns the name starting at i (after spaces) and where it ends.
	word := func(i int) (string, int, int) {
		i = skipTagSpace(src, i, to)
		k := i
		for k < to && isNameByte(src[k]) {
			k++
		}
		return src[i:k], i, k
	}
	var toks []srcToken // the tag's tokens, made when a method call needs them
	for i := from; i < to; i++ {
		c := src[i]
		switch {
		case c == '\'' || c == '"':
			for i++; i < to && src[i] != c; i++ {
				if src[i] == '\\' {
					i++
				}
			}
		case c == '.':
			method, _, end := word(i + 1)
			if _, ok := replacedMethods[method]; !ok {
				continue
			}
			open := skipTagSpace(src, end, to)
			if open == to || src[open] != '(' {
				continue
			}
			closing := skipTagSpace(src, open+1, to)
			if closing == to || src[closing] != ')' {
				continue // with arguments: the engine's, as Python refuses them
			}
			if toks == nil {
				toks = tagTokens(src, from, to)
			}
			if start := receiverStart(src, toks, i); start >= 0 {
				edits = append(edits, sourceEdit{start, start, "("},
					sourceEdit{i, closing + 1, "|" + filterPrefix + methodPrefix + method + ")"})
				i = closing
			}
		case c == '(':
			if text, end, ok := splatCall(src, from, i, to); ok {
				edits = append(edits, sourceEdit{i, end, text})
				i = end - 1
			}
		case c == '|':
			name, at, end := word(i + 1)
			if isReplacedFilter(name) || namesReplaced(src, name, end, to) {
				edits = append(edits, sourceEdit{at, end, filterPrefix + name})
			}
			i = max(i, end-1)
		case isNameByte(c):
			name, _, end := word(i)
			if name != "is" || (i > from && isNameByte(src[i-1])) {
				i = end - 1
				continue
			}
			test, _, tend := word(end)
			negate := test == "not"
			if negate {
				test, _, tend = word(tend)
			}
			if _, ok := overriddenFilters[testPrefix+test]; !ok || tend == end {
				i = end - 1
				continue
			}
			if next, _, _ := word(tend); next == "" && tend < to && src[tend] == '(' {
				i = end - 1 // a call: not the plain test
				continue
			}
			text := "|" + filterPrefix + testPrefix + test
			if negate {
				text += "|" + filterPrefix + "not"
			}
			edits = append(edits, sourceEdit{i, tend, text})
			i = tend - 1
		}
	}
	return edits
}

// namesReplaced reports whether the filter name, ending at src[end],
// is one of higherOrderFilters called with a string literal naming a
// replaced filter or test where it takes that name, or naming another of
// them that does so with the arguments after it (map('map', 'upper')).
func namesReplaced(src, name string, end, to int) bool {
	if _, ok := higherOrderFilters[name]; !ok {
		return false
	}
	open := skipTagSpace(src, end, to)
	if open == to || src[open] != '(' {
		return false
	}
	args, _, ok := callArgs(src, open, to)
	if !ok {
		return false
	}
	for {
		h := higherOrderFilters[name]
		if len(args) <= h.nameArg {
			return false
		}
		named, ok := plainStringLiteral(strings.TrimSpace(src[args[h.nameArg][0]:args[h.nameArg][1]]))
		switch {
		case !ok:
			return false
		case h.test:
			return isReplacedTest(named)
		case isReplacedFilter(named):
			return true
		}
		if _, ok := higherOrderFilters[named]; !ok {
			return false
		}
		name, args = named, args[h.nameArg+1:]
	}
}

// plainStringLiteral returns the text of a quoted literal without
// escapes, which is all of s; false for anything else.
func plainStringLiteral(s string) (string, bool) {
	if len(s) < 2 || (s[0] != '\'' && s[0] != '"') || s[len(s)-1] != s[0] {
		return "", false
	}
	inner := s[1 : len(s)-1]
	if strings.ContainsAny(inner, "\\'\"") {
		return "", false
	}
	return inner, true
}

// splatName is the filter a call with an unpacked argument is rewritten
// to: f(a, *b, k=v, **kw) becomes f|splat(a, b)(k=v, **kw). The engine
// cannot parse the star, but it parses and expands **kw. A filter applies
// to the value before it as a call does (both end a postfix expression);
// splat gives a callable that calls f with a, b's items and what it is
// called with, and the call after it stays a call, so a call block's
// call passes its caller (AI21 Jamba's template calls macros so).
const splatName = "splat"

// splatCall returns the text that replaces src[open:end], the arguments
// of a call with an unpacked argument (see splatName), each rewritten as
// the rest of the tag is; false when the bracket at src[open] opens no
// such call, or one Jinja2 refuses to parse (an argument unpacked twice,
// a positional one after *x or a keyword one, anything after **kw).
func splatCall(src string, from, open, to int) (text string, end int, ok bool) {
	if !opensCall(src, from, open) {
		return "", 0, false
	}
	args, closing, ok := callArgs(src, open, to)
	if !ok {
		return "", 0, false
	}
	var positional, keyword []string
	unpacked, seenKeyword, seenStar, seenStars := "", false, false, false
	for _, a := range args {
		at, end := skipTagSpace(src, a[0], a[1]), a[1]
		for end > at && isTagSpace(src[end-1]) {
			end--
		}
		switch t := src[at:end]; {
		case seenStars, t == "":
			return "", 0, false
		case strings.HasPrefix(t, "**"):
			seenStars = true
			keyword = append(keyword, "**"+rewrittenRange(src, skipTagSpace(src, at+2, end), end))
		case strings.HasPrefix(t, "*"):
			if seenStar {
				return "", 0, false
			}
			seenStar, unpacked = true, rewrittenRange(src, skipTagSpace(src, at+1, end), end)
		case isKeywordArg(t):
			seenKeyword = true
			keyword = append(keyword, rewrittenRange(src, at, end))
		case seenStar || seenKeyword:
			return "", 0, false
		default:
			positional = append(positional, rewrittenRange(src, at, end))
		}
	}
	if !seenStar {
		return "", 0, false
	}
	positional = append(positional, unpacked)
	return "|" + filterPrefix + splatName + "(" + strings.Join(positional, ", ") + ")(" + strings.Join(keyword, ", ") + ")", closing + 1, true
}

// rewrittenRange is the expression src[from:to] with the edits of
// overrideFilters made in it.
func rewrittenRange(src string, from, to int) string {
	return applyEdits(src, from, to, tagEdits(src, from, to))
}

// opensCall reports whether the bracket at src[open] opens a call's
// arguments: it follows a name, a call or a subscript, but neither a
// keyword (if (x)) nor a filter's name (v|join(x)), whose value is no
// callee.
func opensCall(src string, from, open int) bool {
	p := open - 1
	for p >= from && isTagSpace(src[p]) {
		p--
	}
	if p < from || !(isNameByte(src[p]) || src[p] == ')' || src[p] == ']') {
		return false // a bracketed expression, not a call
	}
	if isNameByte(src[p]) {
		q := p
		for q > from && isNameByte(src[q-1]) {
			q--
		}
		switch src[q : p+1] {
		case "if", "elif", "in", "and", "or", "not", "is", "else", "return":
			return false
		}
		for q--; q >= from && isTagSpace(src[q]); q-- {
		}
		if q >= from && src[q] == '|' {
			return false
		}
	}
	return true
}

// callArgs splits the arguments of the call whose bracket opens at
// src[open] at their top-level commas, each as [start, end), and gives
// where the bracket closes; false when it does not close before to.
func callArgs(src string, open, to int) (args [][2]int, closing int, ok bool) {
	start, depth := open+1, 0
	for i := open + 1; i < to; i++ {
		switch c := src[i]; c {
		case '\'', '"':
			for i++; i < to && src[i] != c; i++ {
				if src[i] == '\\' {
					i++
				}
			}
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			if depth > 0 {
				depth--
				continue
			}
			if strings.TrimSpace(src[start:i]) != "" {
				args = append(args, [2]int{start, i})
			}
			return args, i, true
		case ',':
			if depth == 0 {
				args = append(args, [2]int{start, i})
				start = i + 1
			}
		}
	}
	return nil, 0, false
}

// isKeywordArg reports whether a call argument is name=value.
func isKeywordArg(a string) bool {
	a = strings.TrimSpace(a)
	n := 0
	for n < len(a) && isNameByte(a[n]) {
		n++
	}
	rest := strings.TrimLeft(a[n:], " \t\n\r")
	return n > 0 && strings.HasPrefix(rest, "=") && !strings.HasPrefix(rest, "==")
}

// splatFilter binds its value, a callable, to the arguments it is given,
// the last one's items in its place (see splatName): what it gives calls
// the value with them and then with its own. It keeps the callable's
// name, which the engine reads: a call of dict gets its keyword
// arguments in the order they are written.
