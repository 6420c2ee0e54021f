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

// mapFilter is Jinja2's map for a filter named as a string whose
// replacement is ours, or that is ours applying one (map('map',
// 'upper')): map(value, name, *args, **kwargs) applies it to each item
// with args and kwargs; map(value, attribute=path, default=None) takes
// each item's attribute instead.
func mapFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("map takes a value")
	}
	var apply func(jinja.Value) (jinja.Value, error)
	switch {
	case len(args) == 1:
		attr, ok := kwargs["attribute"]
		if !ok {
			return jinja.Undefined(), errors.New("map requires a filter argument")
		}
		def, hasDefault := kwargs["default"]
		for k := range kwargs {
			if k != "attribute" && k != "default" {
				return jinja.Undefined(), fmt.Errorf("map: unexpected keyword argument %q", k)
			}
		}
		apply = func(item jinja.Value) (jinja.Value, error) {
			got := attrPath(item, pyStr(attr))
			if got.IsUndefined() && hasDefault && !def.IsNone() {
				got = def
			}
			return got, nil
		}
	default:
		name := pyStr(args[1])
		fn, extra := replacingFilter(name), args[2:]
		if fn == nil {
			return jinja.Undefined(), fmt.Errorf("map: no replaced filter named %q", name)
		}
		apply = func(item jinja.Value) (jinja.Value, error) {
			return fn(append([]jinja.Value{item}, extra...), kwargs)
		}
	}
	items, err := filteredItems(args[0])
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("map: %w", err)
	}
	out := make([]jinja.Value, len(items))
	for i, it := range items {
		if out[i], err = apply(it); err != nil {
			return jinja.Undefined(), err
		}
	}
	return jinja.NewList(out), nil
}

// replacingFilter is our version of the filter name, a replaced one or
// one of higherOrderFilters; nil for none.
func replacingFilter(name string) func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
	if isReplacedFilter(name) {
		return overriddenFilters[name].AsCallable().Fn
	}
	return higherOrderFns[name]
}

// higherOrderFns are higherOrderFilters' callables by name. mapFilter,
// one of them, looks the others up here: through higherOrderFilters, the
// variable would be initialized from itself.
var higherOrderFns = map[string]func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error){}

func init() {
	for name, h := range higherOrderFilters {
		higherOrderFns[name] = h.fn.AsCallable().Fn
	}
}

// selectFilter returns Jinja2's select (keep) or reject (!keep) for a
// test named as a string whose replacement is ours, or with byAttr its
// selectattr or rejectattr: (value, [attribute,] name, *args, **kwargs)
// keeps each item (whose attribute) the test, given args and kwargs,
// holds or does not hold for. Without a name an item's truth is tested.
func selectFilter(filter string, byAttr, keep bool) func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
	return func(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
		if len(args) == 0 {
			return jinja.Undefined(), fmt.Errorf("%s takes a value", filter)
		}
		off := 1
		if byAttr {
			if len(args) < 2 {
				return jinja.Undefined(), fmt.Errorf("%s: missing parameter for attribute name", filter)
			}
			off = 2
		}
		test := func(v jinja.Value) (bool, error) { return v.IsTruthy(), nil }
		if len(args) > off {
			name := pyStr(args[off])
			if !isReplacedTest(name) {
				return jinja.Undefined(), fmt.Errorf("%s: no replaced test named %q", filter, name)
			}
			fn, extra := overriddenFilters[testPrefix+name].AsCallable().Fn, args[off+1:]
			test = func(v jinja.Value) (bool, error) {
				got, err := fn(append([]jinja.Value{v}, extra...), kwargs)
				return got.IsTruthy(), err
			}
		}
		items, err := filteredItems(args[0])
		if err != nil {
			return jinja.Undefined(), fmt.Errorf("%s: %w", filter, err)
		}
		var out []jinja.Value
		for _, it := range items {
			v := it
			if byAttr {
				v = attrPath(it, pyStr(args[1]))
			}
			ok, err := test(v)
			if err != nil {
				return jinja.Undefined(), fmt.Errorf("%s: %w", filter, err)
			}
			if ok == keep {
				out = append(out, it)
			}
		}
		return jinja.NewList(out), nil
	}
}

// filteredItems are the items map and select go through: none of a false
// value (Jinja2 tests "if value" first, so none and 0 give nothing), else
// what iter() gives.
func filteredItems(v jinja.Value) ([]jinja.Value, error) {
	if !v.IsTruthy() {
		return nil, nil
	}
	return pyIter(v)
}

func splatFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) < 2 || len(kwargs) > 0 {
		return jinja.Undefined(), errors.New("splat takes a callable and its positional arguments")
	}
	if !args[0].IsCallable() {
		return jinja.Undefined(), fmt.Errorf("'%s' object is not callable", pyType(args[0]))
	}
	items, err := pyIter(args[len(args)-1])
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("argument after * must be an iterable: %w", err)
	}
	bound := append(slices.Clone(args[1:len(args)-1]), items...)
	fn := args[0].AsCallable()
	return jinja.NewCallable(fn.Name, func(more []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
		return fn.Fn(append(slices.Clone(bound), more...), kwargs)
	}), nil
}

// iterableTest is Jinja2's iterable test: what iter() takes, an undefined
// value included, a namespace not.
func iterableTest(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 || len(kwargs) > 0 {
		return jinja.Undefined(), errors.New("iterable takes no arguments")
	}
	v := args[0]
	return jinja.NewBool(v.IsList() || v.IsDict() && !isNamespace(v) || v.IsString() || v.IsUndefined()), nil
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
	if len(args) == 0 || !args[0].IsDict() || isNamespace(args[0]) {
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
		out[i] = newTuple(it[0], it[1])
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
// value. Other values, a namespace among them, are not iterable.
func pyIter(v jinja.Value) ([]jinja.Value, error) {
	switch {
	case isNamespace(v): // a dict to the engine, not iterable to Python
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

// capitalizeFilter is str.capitalize (pyCapitalize).
func capitalizeFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	return caseFilter("capitalize", args, kwargs, pyCapitalize)
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
