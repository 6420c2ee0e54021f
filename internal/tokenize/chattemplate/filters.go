package chattemplate

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// The template engine has filters that compute otherwise than Jinja2's:
// dictsort compares keys case and all (Jinja2 ignores case by default,
// and Gemma 4's tool declarations sort their properties with it), and
// title starts a word after any character that is not a letter or digit
// (Jinja2 only after whitespace and -({[<, so MiniCPM3 names an enum of
// temperature_unit Temperature_unit). The engine's own filters cannot be
// replaced, but a filter it does not know is looked up among the
// template's variables: so the renderer renames these filters in the
// template's source (overrideFilters) to variables holding Jinja2's
// versions (filterVars).

// overriddenFilters maps each filter the renderer replaces to its
// callable.
var overriddenFilters = map[string]jinja.Value{
	"dictsort": jinja.NewCallable(filterPrefix+"dictsort", dictsortFilter),
	"title":    jinja.NewCallable(filterPrefix+"title", titleFilter),
}

// filterPrefix starts the name a replaced filter is renamed to.
const filterPrefix = "__inferrail_filter_"

// filterVars adds the replacing filters to a rendering's variables.
func filterVars(vars map[string]jinja.Value) {
	for name, f := range overriddenFilters {
		vars[filterPrefix+name] = f
	}
}

// overrideFilters returns src with every application of a replaced filter
// (| name, in a {{ }} or {% %} tag, outside string literals) renamed to
// its replacement; src as it is when its tags cannot be found.
func overrideFilters(src string) string {
	tags, ok := templateTags(src)
	if !ok {
		return src
	}
	var b strings.Builder
	prev := 0
	for _, t := range tags {
		if t.kind == '#' {
			continue
		}
		for _, at := range filterNames(src, t.in, t.out) {
			b.WriteString(src[prev:at])
			b.WriteString(filterPrefix)
			prev = at
		}
	}
	if prev == 0 {
		return src
	}
	b.WriteString(src[prev:])
	return b.String()
}

// filterNames returns where, in src[from:to], the name of a replaced
// filter follows a '|' outside string literals.
func filterNames(src string, from, to int) []int {
	var at []int
	for i := from; i < to; i++ {
		switch c := src[i]; c {
		case '\'', '"':
			for i++; i < to && src[i] != c; i++ {
				if src[i] == '\\' {
					i++
				}
			}
		case '|':
			j := i + 1
			for j < to && (src[j] == ' ' || src[j] == '\t' || src[j] == '\n' || src[j] == '\r') {
				j++
			}
			k := j
			for k < to && isNameByte(src[k]) {
				k++
			}
			if _, ok := overriddenFilters[src[j:k]]; ok && k > j {
				at = append(at, j)
			}
		}
	}
	return at
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
	return 0, fmt.Errorf("'<' not supported between a %s and a %s", kindName(a), kindName(b))
}

// kindName names a value's kind for messages.
func kindName(v jinja.Value) string {
	switch {
	case v.IsString():
		return "string"
	case v.IsNumber(), v.IsBool():
		return "number"
	case v.IsList():
		return "list"
	case v.IsDict():
		return "dict"
	case v.IsNone():
		return "None"
	}
	return "value"
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

// titleFilter is Jinja2's title: the text cut before every run of
// whitespace, '-', '(', '{', '[' and '<', each piece's first character
// upper-cased and the rest lower-cased.
func titleFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 || len(kwargs) > 0 {
		return jinja.Undefined(), errors.New("title takes no arguments")
	}
	s := pyStr(args[0])
	var b strings.Builder
	b.Grow(len(s))
	for len(s) > 0 {
		n := pieceLen(s)
		r, size := utf8.DecodeRuneInString(s)
		b.WriteString(strings.ToUpper(string(r)))
		b.WriteString(strings.ToLower(s[size:n]))
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
