package chattemplate

import (
	"errors"
	"strings"
	"testing"
)

// TestNamespaceIsNoCollection: a namespace is neither iterable, nor a
// sequence, nor a mapping, and has no length, list or items, as Jinja2's
// Namespace; the engine made one a dict, so ns is iterable held and
// ns|length counted its attributes (a review's finding). Every want is
// Jinja2 3.1.6's output under transformers' settings.
func TestNamespaceIsNoCollection(t *testing.T) {
	const ns = "{% set ns = namespace(a=1) %}"
	for _, tc := range []struct{ src, want string }{
		{"{{ ns is iterable }}|{{ ns is sequence }}|{{ ns is mapping }}|{{ ns is not iterable }}|{{ ns is defined }}", "False|False|False|True|True"},
		{"{{ [ns]|select('iterable')|list|length }}|{{ [ns]|reject('sequence')|list|length }}", "0|1"},
		{"{{ ns['a'] }}|{{ ns.a }}|{{ ns }}|{{ ns|string }}|{{ ns|trim }}", "1|1|<Namespace {'a': 1}>|<Namespace {'a': 1}>|<Namespace {'a': 1}>"},
		{"{% macro m() %}x{% endmacro %}{% set ns2 = namespace(items=m) %}{{ ns2.items() }}|{% set ns3 = namespace(items=1) %}{{ ns3.items }}", "x|1"},
		// What is no namespace keeps its answers.
		{"{{ {'a': 1} is mapping }}|{{ nothing is mapping }}|{{ [1] is mapping }}|{{ none is mapping }}|{{ 'a' is mapping }}|{{ messages[0] is mapping }}", "True|False|False|False|False|True"},
		{"{{ [1, 2]|length }}|{{ 'ab'|length }}|{{ {'a': 1}|length }}|{{ nothing|length }}|{{ (1,)|length }}|{{ 'ßx'|count }}|{{ messages|length }}|{{ range(3)|length }}", "2|2|1|0|1|2|1|3"},
		{"{{ 'ab'|list }}|{{ {'a': 1, 'b': 2}|list }}|{{ nothing|list }}|{{ (1, 2)|list }}|{{ [1, [2]]|list }}|{{ ['ab']|map('list')|list }}|{{ range(3)|list }}", "['a', 'b']|['a', 'b']|[]|[1, 2]|[1, [2]]|[['a', 'b']]|[0, 1, 2]"},
	} {
		got, err := renderOne(t, ns+tc.src, "x")
		if err != nil || got != tc.want {
			t.Errorf("%s\nrenders %q, %v; Jinja2 renders %q", tc.src, got, err, tc.want)
		}
	}
	// What Jinja2 refuses, refused as any template error is.
	for _, src := range []string{
		"{{ ns|length }}", "{{ ns|count }}", "{{ ns|list }}", "{{ ns|join }}", "{{ ns|map('upper')|list }}",
		"{{ ns|dictsort }}", "{{ ns|items|list }}", "{{ ns.items() }}",
		"{{ 5|length }}", "{{ none|length }}", "{{ true|count }}", "{{ 1.5|length }}", "{{ 5|list }}", "{{ none|list }}",
	} {
		got, err := renderOne(t, ns+src, "x")
		var terr *Error // a template error, as the renderer fails on any
		if !errors.As(err, &terr) {
			t.Errorf("%s renders %q, %v; Jinja2 raises", src, got, err)
		}
	}
	if _, err := renderOne(t, ns+"{{ ns|length }}", "x"); err == nil || !strings.Contains(err.Error(), "'Namespace' has no len()") {
		t.Errorf("ns|length: %v, want Python's TypeError", err)
	}
}
