package chattemplate

import (
	"errors"
	"fmt"
	"maps"

	"github.com/ardanlabs/jinja"
)

// emptyTuple is () as the engine makes it. The engine marks a list that
// is a tuple, which it prints as Python prints one ((1, 2), (1,)), in an
// unexported field; only its own evaluation sets it. So one tuple is
// taken from a rendering of () and copied (newTuple).
var emptyTuple = func() jinja.Value {
	got := jinja.NewList(nil)
	keep := jinja.NewCallable("keep", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) == 1 && args[0].IsList() {
			got = args[0]
		}
		return jinja.NewString(""), nil
	})
	if t, err := jinja.Compile("{{ keep(()) }}"); err == nil {
		_, _ = t.RenderValues(map[string]jinja.Value{"keep": keep}) // without a tuple, pairs print as lists (TestTuplesPrintAsPythons)
	}
	return got
}()

// newTuple returns a tuple of items: a new list copied from emptyTuple,
// the mark with it.
func newTuple(items ...jinja.Value) jinja.Value {
	v := jinja.NewList(nil)
	*v.AsList() = *emptyTuple.AsList()
	v.AsList().Items = items
	return v
}

// itemPairs returns a dict's (key, value) pairs as tuples, in its order,
// as Python's dict.items() gives them.
func itemPairs(d *jinja.Dict) []jinja.Value {
	out := make([]jinja.Value, len(d.Keys))
	for i, k := range d.Keys {
		v, _ := d.Get(k)
		out[i] = newTuple(jinja.NewString(k), v)
	}
	return out
}

// itemsFilter is Jinja2's items: a mapping's (key, value) pairs, none of
// an undefined value. The engine's gives its pairs as lists.
func itemsFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 || len(kwargs) > 0 {
		return jinja.Undefined(), errors.New("items takes no arguments")
	}
	switch v := args[0]; {
	case v.IsUndefined():
		return jinja.NewList(nil), nil
	case v.IsDict() && !isNamespace(v):
		return jinja.NewList(itemPairs(v.AsDict())), nil
	}
	return jinja.Undefined(), errors.New("can only get item pairs from a mapping")
}

// itemsMethod is the filter d.items() is rewritten to (see
// replacedMethods): a dict's pairs as tuples; the engine's are lists.
// A namespace's is its attribute items; no other value has the method.
var itemsMethod = jinja.NewCallable(filterPrefix+methodPrefix+"items", func(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 || len(kwargs) > 0 {
		return jinja.Undefined(), errors.New("dict.items takes no arguments")
	}
	switch v := args[0]; {
	case isNamespace(v):
		return namespaceMethod(v, "items")
	case v.IsDict():
		return jinja.NewList(itemPairs(v.AsDict())), nil
	}
	return jinja.Undefined(), fmt.Errorf("'%s' object has no attribute 'items'", pyType(args[0]))
})

// replacedMethods are the methods whose calls without arguments the
// renderer rewrites to filters, by name: the case methods (caseMethods)
// and dict.items, whose pairs the engine gives as lists.
var replacedMethods = func() map[string]jinja.Value {
	m := maps.Clone(caseMethods)
	m["items"] = itemsMethod
	return m
}()
