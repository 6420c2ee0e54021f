package chattemplate

import (
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/ardanlabs/jinja"
)

// namespaceMark is the index of the unexported field in which the engine
// marks a dict made by namespace(); nil if it has none.
var namespaceMark = func() []int {
	f, ok := reflect.TypeFor[jinja.Value]().FieldByName("namespace")
	if !ok || f.Type.Kind() != reflect.Bool {
		return nil // the engine changed: TestNamespaceIsNoCollection fails
	}
	return f.Index
}()

// isNamespace reports whether v was made by namespace(). The engine makes
// a namespace a dict that hides dict's methods, but Jinja2's Namespace is
// no collection: it has attributes, no length, no items, and iter() refuses
// it. Only reflection reads the mark.
func isNamespace(v jinja.Value) bool {
	return namespaceMark != nil && v.IsDict() && reflect.ValueOf(v).FieldByIndex(namespaceMark).Bool()
}

// mappingTest is Jinja2's mapping test: a dict, not a namespace.
func mappingTest(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 || len(kwargs) > 0 {
		return jinja.Undefined(), errors.New("mapping takes no arguments")
	}
	return jinja.NewBool(args[0].IsDict() && !isNamespace(args[0])), nil
}

// lengthFilter is Jinja2's length and count, Python's len(): a string's
// code points, a list's or a dict's items, 0 for an undefined value.
// Python refuses the rest, a namespace among them, where the engine's
// gives 0 or the namespace's attributes.
func lengthFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 || len(kwargs) > 0 {
		return jinja.Undefined(), errors.New("length takes no arguments")
	}
	switch v := args[0]; {
	case v.IsString():
		n := 0
		for range v.AsString() {
			n++
		}
		return jinja.NewInt(int64(n)), nil
	case v.IsList():
		return jinja.NewInt(int64(v.AsList().Len())), nil
	case v.IsDict() && !isNamespace(v):
		return jinja.NewInt(int64(v.AsDict().Len())), nil
	case v.IsUndefined():
		return jinja.NewInt(0), nil
	}
	return jinja.Undefined(), fmt.Errorf("object of type '%s' has no len()", pyType(args[0]))
}

// listFilter is Jinja2's list, Python's list(): what iter() gives (pyIter).
func listFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 || len(kwargs) > 0 {
		return jinja.Undefined(), errors.New("list takes no arguments")
	}
	items, err := pyIter(args[0])
	if err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewList(slices.Clone(items)), nil
}

// namespaceMethod calls a namespace's attribute name, as Jinja2 looks a
// method up among a namespace's attributes.
func namespaceMethod(ns jinja.Value, name string) (jinja.Value, error) {
	if fn, ok := ns.AsDict().Get(name); ok && fn.IsCallable() {
		return fn.AsCallable().Fn(nil, nil)
	}
	return jinja.Undefined(), fmt.Errorf("'Namespace' object has no attribute '%s'", name)
}
