package chattemplate

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

// The template engine has filters and tests that compute otherwise than
// Jinja2's: trim keeps characters Python strips; string, join and trim
// leave raw in a printed list what Python escapes; dictsort compares keys
// case and all (Gemma 4 sorts tool properties with it); title starts a
// word after any character but a letter or digit (MiniCPM3 names enum
// classes with it); an undefined value is neither iterable nor a sequence
// (Hermes 2 Pro types array parameters by testing one); and it cannot
// parse f(*args) (AI21 Jamba calls its macros so). Its own filters and
// tests cannot be replaced, but a filter it does not know is looked up
// among the template's variables. So the renderer rewrites a template's
// source (overrideFilters): those filters are renamed to variables
// holding Jinja2's versions (filterVars), those tests become such
// filters (Jinja2 parses a test where it parses a filter, after the value
// and before any operator, so "x is iterable" and "x|f" group alike), and
// f(a, *b) becomes f|splat(a, b). What it parses but would render wrongly
// or without bound is refused (unreadConstruct).

// overriddenFilters maps each filter the renderer replaces, and each test
// it turns into a filter (under testPrefix), to its callable.
var overriddenFilters = map[string]jinja.Value{
	"dictsort":              jinja.NewCallable(filterPrefix+"dictsort", dictsortFilter),
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
	"not":                   jinja.NewCallable(filterPrefix+"not", notFilter),
}

// filterPrefix starts the name a replaced filter is renamed to; a test
// turned into a filter is named filterPrefix+testPrefix+test.
const (
	filterPrefix = "__inferrail_filter_"
	testPrefix   = "is_"
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
			// A call block's call must stay a call, to pass its caller.
			splats := t.kind != '%' || t.word(src) != "call"
			edits = append(edits, tagEdits(src, t.in, t.out, splats)...)
		}
	}
	if len(edits) == 0 {
		return src
	}
	var b strings.Builder
	prev := 0
	for _, e := range edits {
		b.WriteString(src[prev:e.start])
		b.WriteString(e.text)
		prev = e.end
	}
	b.WriteString(src[prev:])
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
	if _, ok := overriddenFilters[name]; !ok || strings.HasPrefix(name, testPrefix) || name == "not" || name == splatName {
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
// src[from:to], in order; calls with an unpacked argument are rewritten
// only with splats.
func tagEdits(src string, from, to int, splats bool) []sourceEdit {
	var edits []sourceEdit
	stars := map[int]bool{} // the '*' of calls rewritten to splatName, to drop
	// word returns the name starting at i (after spaces) and where it ends.
	word := func(i int) (string, int, int) {
		i = skipTagSpace(src, i, to)
		k := i
		for k < to && isNameByte(src[k]) {
			k++
		}
		return src[i:k], i, k
	}
	for i := from; i < to; i++ {
		c := src[i]
		switch {
		case c == '\'' || c == '"':
			for i++; i < to && src[i] != c; i++ {
				if src[i] == '\\' {
					i++
				}
			}
		case c == '*' && stars[i]:
			edits = append(edits, sourceEdit{i, i + 1, ""})
		case c == '(':
			if star := splatArg(src, from, i, to); splats && star >= 0 {
				edits = append(edits, sourceEdit{i, i + 1, "|" + filterPrefix + splatName + "("})
				stars[star] = true
			}
		case c == '|':
			name, at, end := word(i + 1)
			if _, ok := overriddenFilters[name]; ok && !strings.HasPrefix(name, testPrefix) && name != "not" && name != splatName {
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

// splatName is the filter a call with an unpacked argument, f(a, *b), is
// rewritten to: f|splat(a, b). The engine cannot parse the star; a filter
// applies to the value before it as a call does (both end a postfix
// expression), and the filter calls it with b's items (AI21 Jamba's
// template calls macros so).
const splatName = "splat"

// splatArg returns where the '*' is when the bracket at src[open] opens
// a call whose last positional argument is unpacked (*x, not **x), with
// none unpacked before it and only keyword arguments after it; else -1.
func splatArg(src string, from, open, to int) int {
	p := open - 1
	for p >= from && isTagSpace(src[p]) {
		p--
	}
	if p < from || !(isNameByte(src[p]) || src[p] == ')' || src[p] == ']') {
		return -1 // a bracketed expression, not a call
	}
	if isNameByte(src[p]) {
		q := p
		for q > from && isNameByte(src[q-1]) {
			q--
		}
		switch src[q : p+1] {
		case "if", "elif", "in", "and", "or", "not", "is", "else", "return":
			return -1
		}
		for q--; q >= from && isTagSpace(src[q]); q-- {
		}
		if q >= from && src[q] == '|' {
			return -1 // a filter's arguments: the value before is no callee
		}
	}
	args, ok := callArgs(src, open, to)
	if !ok {
		return -1
	}
	star := -1
	for k, a := range args {
		t := strings.TrimLeft(src[a[0]:a[1]], " \t\n\r")
		at := a[1] - len(t)
		switch {
		case strings.HasPrefix(t, "**"):
		case strings.HasPrefix(t, "*"):
			if star >= 0 {
				return -1
			}
			star = at
			for _, rest := range args[k+1:] {
				if !isKeywordArg(src[rest[0]:rest[1]]) {
					return -1
				}
			}
		}
	}
	return star
}

// callArgs splits the arguments of the call whose bracket opens at
// src[open] at their top-level commas, each as [start, end); false when
// the bracket does not close before to.
func callArgs(src string, open, to int) ([][2]int, bool) {
	var args [][2]int
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
			return args, true
		case ',':
			if depth == 0 {
				args = append(args, [2]int{start, i})
				start = i + 1
			}
		}
	}
	return nil, false
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

// splatFilter calls its value with the arguments it is given, the last
// one's items in its place (see splatName).
func splatFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) < 2 || !args[0].IsCallable() {
		return jinja.Undefined(), errors.New("only a callable can be called with unpacked arguments")
	}
	items, err := pyIter(args[len(args)-1])
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("argument after * must be an iterable: %w", err)
	}
	call := append(slices.Clone(args[1:len(args)-1]), items...)
	return args[0].AsCallable().Fn(call, kwargs)
}

// iterableTest is Jinja2's iterable test: what iter() takes, an undefined
// value included.
func iterableTest(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 || len(kwargs) > 0 {
		return jinja.Undefined(), errors.New("iterable takes no arguments")
	}
	v := args[0]
	return jinja.NewBool(v.IsList() || v.IsDict() || v.IsString() || v.IsUndefined()), nil
}

// sequenceTest is Jinja2's sequence test: what has a length and items,
// an undefined value included.
func sequenceTest(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	return iterableTest(args, kwargs) // the same kinds, in the engine's values
}

// notFilter negates a test turned into a filter ("is not").
func notFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 {
		return jinja.Undefined(), errors.New("not takes one value")
	}
	return jinja.NewBool(!args[0].IsTruthy()), nil
}

// dictsortFilter is Jinja2's dictsort(value, case_sensitive=False,
// by="key", reverse=False): the dict's (key, value) pairs sorted by key or
// by value, strings compared lower-cased unless case_sensitive, equal ones
// in the dict's order.
func dictsortFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 || !args[0].IsDict() {
		return jinja.Undefined(), errors.New("dictsort: the value has no items(): not a dict")
	}
	opts, err := filterArgs("dictsort", args[1:], kwargs, "case_sensitive", "by", "reverse")
	if err != nil {
		return jinja.Undefined(), err
	}
	caseSensitive := opts[0].IsTruthy()
	pos := 0
	switch by := opts[1]; {
	case by.IsUndefined(), by.IsString() && by.AsString() == "key":
	case by.IsString() && by.AsString() == "value":
		pos = 1
	default:
		return jinja.Undefined(), errors.New(`dictsort: you can only sort by either "key" or "value"`)
	}
	reverse := opts[2].IsTruthy()
	d := args[0].AsDict()
	keys := d.OrderedKeys()
	items := make([][2]jinja.Value, len(keys))
	for i, k := range keys {
		v, _ := d.Get(k)
		items[i] = [2]jinja.Value{jinja.NewString(k), v}
	}
	sortKey := func(v jinja.Value) jinja.Value {
		if v.IsString() && !caseSensitive {
			return jinja.NewString(strings.ToLower(v.AsString()))
		}
		return v
	}
	var cmpErr error
	slices.SortStableFunc(items, func(a, b [2]jinja.Value) int {
		c, err := pyCompare(sortKey(a[pos]), sortKey(b[pos]))
		if err != nil && cmpErr == nil {
			cmpErr = err
		}
		if reverse {
			return -c
		}
		return c
	})
	if cmpErr != nil {
		return jinja.Undefined(), fmt.Errorf("dictsort: %w", cmpErr)
	}
	out := make([]jinja.Value, len(items))
	for i, it := range items {
		out[i] = jinja.NewList([]jinja.Value{it[0], it[1]})
	}
	return jinja.NewList(out), nil
}

// pyCompare orders two values as Python's < does for the kinds a template
// sorts: numbers (bools among them) with numbers, strings with strings by
// code point. Other pairs are Python's TypeError.
func pyCompare(a, b jinja.Value) (int, error) {
	num := func(v jinja.Value) (float64, bool) {
		switch {
		case v.IsBool():
			if v.AsBool() {
				return 1, true
			}
			return 0, true
		case v.IsInt():
			return float64(v.AsInt()), true
		case v.IsFloat():
			return v.AsFloat(), true
		}
		return 0, false
	}
	if x, ok := num(a); ok {
		if y, ok := num(b); ok {
			if a.IsInt() && b.IsInt() {
				return cmp.Compare(a.AsInt(), b.AsInt()), nil
			}
			return cmp.Compare(x, y), nil
		}
	}
	if a.IsString() && b.IsString() {
		return strings.Compare(a.AsString(), b.AsString()), nil // UTF-8 keeps code point order
	}
	return 0, fmt.Errorf("'<' not supported between instances of '%s' and '%s'", pyType(a), pyType(b))
}

// filterArgs reads a filter's optional arguments as Python binds them:
// positional ones in the order of names, then keyword ones; an argument
// given neither way is Undefined.
func filterArgs(filter string, args []jinja.Value, kwargs map[string]jinja.Value, names ...string) ([]jinja.Value, error) {
	if len(args) > len(names) {
		return nil, fmt.Errorf("%s takes at most %d arguments, got %d", filter, len(names), len(args))
	}
	out := make([]jinja.Value, len(names))
	for i := range out {
		out[i] = jinja.Undefined()
	}
	copy(out, args)
	for k, v := range kwargs {
		i := slices.Index(names, k)
		switch {
		case i < 0:
			return nil, fmt.Errorf("%s got an unexpected keyword argument %q", filter, k)
		case i < len(args):
			return nil, fmt.Errorf("%s got multiple values for argument %q", filter, k)
		}
		out[i] = v
	}
	return out, nil
}

// trimFilter is Jinja2's trim(value, chars=None): Python's str() of the
// value (a list's or dict's repr escaping what Python calls unprintable)
// stripped of Python's whitespace, or of the characters in chars. The
// engine's trim keeps U+001C to U+001F, which Python strips, and gives a
// list's raw repr (Llama 3.2 Vision trims a system message's parts).
func trimFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 1 && len(kwargs) == 0 {
		return jinja.NewString(pyStrip(pyStr(args[0]))), nil // the usual call, without allocating
	}
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("trim takes a value")
	}
	opts, err := filterArgs("trim", args[1:], kwargs, "chars")
	if err != nil {
		return jinja.Undefined(), err
	}
	s := pyStr(args[0])
	if chars := opts[0]; !chars.IsUndefined() && !chars.IsNone() {
		if !chars.IsString() {
			return jinja.Undefined(), errors.New("trim: strip arg must be None or str")
		}
		return jinja.NewString(strings.Trim(s, chars.AsString())), nil
	}
	return jinja.NewString(pyStrip(s)), nil
}

// stringFilter is Jinja2's string: Python's str() of the value, a list's
// or dict's repr escaping what Python calls unprintable (the engine's
// leaves U+200B and the like raw).
func stringFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 || len(kwargs) > 0 {
		return jinja.Undefined(), errors.New("string takes no arguments")
	}
	return jinja.NewString(pyStr(args[0])), nil
}

// joinFilter is Jinja2's join(value, d=”, attribute=None): the str() of
// each item (or of each item's attribute, a dotted path), joined with d.
// A list's items, a string's characters and a dict's keys are its items.
func joinFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("join takes a value")
	}
	opts, err := filterArgs("join", args[1:], kwargs, "d", "attribute")
	if err != nil {
		return jinja.Undefined(), err
	}
	items, err := pyIter(args[0])
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("join: %w", err)
	}
	sep := ""
	if !opts[0].IsUndefined() {
		sep = pyStr(opts[0])
	}
	parts := make([]string, len(items))
	for i, it := range items {
		if attr := opts[1]; !attr.IsUndefined() && !attr.IsNone() {
			it = attrPath(it, pyStr(attr))
		}
		parts[i] = pyStr(it)
	}
	return jinja.NewString(strings.Join(parts, sep)), nil
}

// pyIter is what Python's iter() gives of a template value: a list's
// items, a string's characters, a dict's keys; nothing of an undefined
// value. Other values are not iterable.
func pyIter(v jinja.Value) ([]jinja.Value, error) {
	switch {
	case v.IsList():
		return v.AsList().Items, nil
	case v.IsString():
		var out []jinja.Value
		for _, r := range v.AsString() {
			out = append(out, jinja.NewString(string(r)))
		}
		return out, nil
	case v.IsDict():
		keys := v.AsDict().OrderedKeys()
		out := make([]jinja.Value, len(keys))
		for i, k := range keys {
			out[i] = jinja.NewString(k)
		}
		return out, nil
	case v.IsUndefined():
		return nil, nil
	}
	return nil, fmt.Errorf("'%s' object is not iterable", pyType(v))
}

// attrPath looks a dotted path up in v as Jinja2's attribute getters do:
// each part a dict's key, or a list's index when it is a number; what is
// not there is undefined.
func attrPath(v jinja.Value, path string) jinja.Value {
	for part := range strings.SplitSeq(path, ".") {
		switch {
		case v.IsDict():
			got, ok := v.AsDict().Get(part)
			if !ok {
				return jinja.Undefined()
			}
			v = got
		case v.IsList():
			i, err := strconv.Atoi(part)
			items := v.AsList().Items
			if err != nil || i < 0 || i >= len(items) {
				return jinja.Undefined()
			}
			v = items[i]
		default:
			return jinja.Undefined()
		}
	}
	return v
}

// upperFilter, lowerFilter and capitalizeFilter are Jinja2's: Python's
// str() of the value, its case mapped in full as Python maps it (ß to SS,
// a final sigma to ς, a digraph's title case), which Go's strings package
// maps one rune at a time.
func upperFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	return caseFilter("upper", args, kwargs, func(s string) string { return cases.Upper(language.Und).String(s) })
}

func lowerFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	return caseFilter("lower", args, kwargs, func(s string) string { return cases.Lower(language.Und).String(s) })
}

// capitalizeFilter is str.capitalize: the first character in title case,
// the rest lower-cased.
func capitalizeFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	return caseFilter("capitalize", args, kwargs, func(s string) string {
		if s == "" {
			return s
		}
		_, size := utf8.DecodeRuneInString(s)
		return cases.Title(language.Und).String(s[:size]) + cases.Lower(language.Und).String(s[size:])
	})
}

// caseFilter applies mapCase to the str() of a filter's one value.
func caseFilter(name string, args []jinja.Value, kwargs map[string]jinja.Value, mapCase func(string) string) (jinja.Value, error) {
	if len(args) != 1 || len(kwargs) > 0 {
		return jinja.Undefined(), fmt.Errorf("%s takes no arguments", name)
	}
	return jinja.NewString(mapCase(pyStr(args[0]))), nil
}

// titleFilter is Jinja2's title: the text cut before every run of
// whitespace, '-', '(', '{', '[' and '<', each piece's first character
// upper-cased and the rest lower-cased.
func titleFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 || len(kwargs) > 0 {
		return jinja.Undefined(), errors.New("title takes no arguments")
	}
	s := pyStr(args[0])
	// Python's str.upper and str.lower map case fully (ß to SS, a final
	// sigma to ς), as x/text's casers do and Go's strings package does not.
	upper, lower := cases.Upper(language.Und), cases.Lower(language.Und)
	var b strings.Builder
	b.Grow(len(s))
	for len(s) > 0 {
		n := pieceLen(s)
		_, size := utf8.DecodeRuneInString(s)
		b.WriteString(upper.String(s[:size]))
		b.WriteString(lower.String(s[size:n]))
		s = s[n:]
	}
	return jinja.NewString(b.String()), nil
}

// pieceLen is the length of the first piece of s as Jinja2's title cuts
// it (re.split on a captured run of separators, which keeps the runs): a
// run of separators, or the text up to the next one.
func pieceLen(s string) int {
	sep := func(r rune) bool { return pyIsSpace(r) || strings.ContainsRune("-({[<", r) }
	r, _ := utf8.DecodeRuneInString(s)
	first := sep(r)
	for i, r := range s {
		if sep(r) != first {
			return i
		}
	}
	return len(s)
}
