package chattemplate

import "testing"

// TestTuplesPrintAsPythons: the pairs of dictsort, items and d.items()
// are tuples, printed as Python prints them, and still iterate, index
// and unpack as before; the engine made them lists, so a template
// printing one wrote [('a', 2)] as [['a', 2]] (a review's finding).
// Every want is Jinja2 3.1.6's output under transformers' settings.
func TestTuplesPrintAsPythons(t *testing.T) {
	const d = "{% set d = {'b': 1, 'a': 2} %}"
	for _, tc := range []struct{ src, want string }{
		{"{{ d|dictsort }}|{{ d|dictsort(reverse=true) }}", "[('a', 2), ('b', 1)]|[('b', 1), ('a', 2)]"},
		{"{% for p in d.items() %}{{ p }}{% endfor %}|{{ d.items()|list }}|{{ d|items|list }}", "('b', 1)('a', 2)|[('b', 1), ('a', 2)]|[('b', 1), ('a', 2)]"},
		{"{{ d|dictsort|first }}|{{ d|dictsort|last }}|{{ d.items()|first }}|{{ d . items ( ) | list | first }}", "('a', 2)|('b', 1)|('b', 1)|('b', 1)"},
		{"{{ d|dictsort|string }}|{{ d|dictsort|join(';') }}|{{ [d.items()|first]|string }}|{{ d|dictsort|trim }}", "[('a', 2), ('b', 1)]|('a', 2);('b', 1)|[('b', 1)]|[('a', 2), ('b', 1)]"},
		{"{% for p in messages[0].items() %}{{ p }}{% endfor %}|{{ {'items': 1}.items()|list }}|{{ d.items()|sort }}", "('role', 'user')('content', 'x')|[('items', 1)]|[('a', 2), ('b', 1)]"},
		// Tuples the engine already made stay so.
		{"{{ (1, 2) }}|{{ (1,) }}|{{ () }}|{{ [(1, 2), 3] }}|{{ {'a': (1, 'x')} }}|{{ ((1, 2), (3,)) }}", "(1, 2)|(1,)|()|[(1, 2), 3]|{'a': (1, 'x')}|((1, 2), (3,))"},
		{"{% for x in [1, 2] %}{{ loop.cycle((1, 2), 'b') }}{% endfor %}|{% macro f() %}{{ varargs }}{% endmacro %}{{ f(1, 2) }}|{{ f() }}", "(1, 2)b|(1, 2)|()"},
		// Iterating, indexing and unpacking them is as before.
		{"{% for k, v in d|dictsort %}{{ k }}={{ v }};{% endfor %}{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", "a=2;b=1;b=1;a=2;"},
		{"{% for p in d.items() %}{{ p[0] }}{{ p[1] }}{{ p|length }}{{ p|first }}{% endfor %}|{{ (d|dictsort)[0] == ('a', 2) }}|{{ ('a', 2) in d|dictsort }}", "b12ba22a|True|True"},
		{"{{ d.items()|map('join', '=')|join(',') }}|{{ d|dictsort|map('last')|list }}|{{ d|dictsort|tojson }}|{{ d.items()|list|reverse|list }}", "b=1,a=2|[2, 1]|[[\"a\", 2], [\"b\", 1]]|[('a', 2), ('b', 1)]"},
		{"{% for k, v in {'b': {'c': 3}}.items() recursive %}{{ k }}{% if v is mapping %}[{{ loop(v.items()) }}]{% else %}{{ v }}{% endif %}{% endfor %}|{% for k, v in d.items() if v > 1 %}{{ k }}{% endfor %}|{{ d.items()|selectattr('1', 'gt', 1)|list }}", "b[c3]|a|[('a', 2)]"},
		{"{{ d|items|list }}|{{ nothing|items|list }}|{{ {'x': 'ß'}.items()|first|map('upper')|list }}", "[('b', 1), ('a', 2)]|[]|['X', 'SS']"},
	} {
		got, err := renderOne(t, d+tc.src, "x")
		if err != nil || got != tc.want {
			t.Errorf("%s\nrenders %q, %v; Jinja2 renders %q", tc.src, got, err, tc.want)
		}
	}
	// What Jinja2 refuses, refused.
	for _, src := range []string{"{{ 'ab'.items() }}", "{{ [1]|items|list }}", "{{ 5|items|list }}"} {
		if got, err := renderOne(t, src, "x"); err == nil {
			t.Errorf("%s renders %q; Jinja2 raises", src, got)
		}
	}
}
