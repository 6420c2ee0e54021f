package chattemplate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferrail/inferrail/internal/tokenize"
	"github.com/inferrail/inferrail/internal/tokenize/hf"
)

// renderOne renders src as a model's chat template over one user message
// with content, as the gateway does.
func renderOne(t *testing.T, src, content string) (string, error) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"messages": []any{map[string]string{"role": "user", "content": content}}})
	chat, err := tokenize.ParseChatRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, _ := json.Marshal(src)
	r, err := newRenderer(nil, hf.ChatConfig{Template: tmpl}, Options{Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	return r.render(chat.Chat, newWatch(nil, DefaultMaxOutput))
}

// TestFiltersAreJinja2s: dictsort and title, whose engine versions differ
// from Jinja2's, render as Jinja2 3.1.6 renders them (every want is its
// output, under transformers' settings). The engine's dictsort compared
// keys case and all, so Gemma 4 listed a tool's Country before its city;
// its title started a word after '_' or '.', so MiniCPM3 named an enum
// class Temperature_Unit (found by a review).
func TestFiltersAreJinja2s(t *testing.T) {
	const name = "get_current_WEATHER"
	for _, tc := range []struct{ src, want string }{
		{"{% for k, v in {'b': 1, 'C': 2, 'a': 3}|dictsort %}{{ k }}{% endfor %}", "abC"},
		{"{% for k, v in {'b': 1, 'C': 2, 'a': 3}|dictsort(true) %}{{ k }}{% endfor %}", "Cab"},
		{"{% for k, v in {'b': 1, 'C': 2, 'a': 3}|dictsort(case_sensitive=true, reverse=true) %}{{ k }}{% endfor %}", "baC"},
		{"{% for k, v in {'x': 3, 'y': 1, 'z': 2.5}|dictsort(by='value') %}{{ k }}{% endfor %}", "yzx"},
		{"{% for k, v in {'a': 'B', 'b': 'a', 'c': 'C'}|dictsort(false, 'value') %}{{ k }}{% endfor %}", "bac"},
		{"{% for k, v in {'a': 1, 'A': 2, 'b': 3}|dictsort(reverse=true) %}{{ k }}{% endfor %}", "baA"},
		{"{% for k, v in {'a': 1, 'A': 2, 'b': 3}|dictsort %}{{ k }}{% endfor %}", "aAb"},
		{"{% for k, v in {'b': 1, 'a': 2}|dictsort %}{{ k }}={{ v }};{% endfor %}", "a=2;b=1;"},
		{"{{ 'temperature_unit'|title }}", "Temperature_unit"},
		{"{{ \"it's a-b (c)d [e]f <g>h {i}j k.l m_n o1p\"|title }}", "It's A-B (C)d [E]f <G>h {I}j K.l M_n O1p"},
		{"{{ 'hello   WORLD\tfoo'|title }}", "Hello   World\tFoo"},
		{"{{ 'ÉCOLE élève'|title }}", "École Élève"},
		// Python's full case mapping, which Go's strings package lacks.
		{"{{ 'ß'|title }}|{{ 'ﬁx'|title }}|{{ 'ΣΑΣ'|title }}|{{ 'ŉ'|title }}", "SS|FIx|Σας|ʼN"},
		{"{{ 'İSTANBUL ıi'|title }}|{{ 'straße-ǆungla'|title }}", "İstanbul Ii|Straße-Ǆungla"},
		{"{{ 'straße'|upper }}|{{ 'ΟΔΟΣ'|lower }}|{{ 'İx'|lower|length }}|{{ 'ßa'|capitalize }}|{{ 'hELLO wORLD'|capitalize }}|{{ 'ǆa'|capitalize }}", "STRASSE|οδος|3|Ssa|Hello world|ǅa"},
		{"{{ 5|upper }}|{{ none|lower }}|{{ [1]|upper }}|{{ ''|capitalize }}", "5|none|[1]|"},
		{"{{ messages[0].content|title|replace('_', ' ') }}", "Get current weather"},
		{"{{ 'a|title' ~ \"|dictsort\" }}", "a|title|dictsort"},
		{"{{ 42|title }}|{{ true|title }}", "42|True"},
		{"{%- set x = 'abc def' | title -%}{{ x }}", "Abc Def"},
		{"{% for m in messages %}{{ m.content | title }}{% endfor %}", "Get_current_weather"},
		// An undefined value is iterable and a sequence, as in Jinja2:
		// Hermes 2 Pro's tool template names an array's item type so.
		{"{{ nothing is iterable }}|{{ nothing is sequence }}", "True|True"},
		{"{{ nothing is not iterable }}|{{ nothing is  not   sequence }}", "False|False"},
		{"{{ 'a' ~ nothing is iterable }}", "aTrue"},
		{"{% for m in messages %}{% if m.content is iterable and m.content is not string %}L{% else %}S{% endif %}{% endfor %}", "S"},
		{"{{ none is iterable }}|{{ 1 is sequence }}|{{ [1] is sequence }}|{{ {} is iterable }}|{{ 'x' is sequence }}", "False|False|True|True|True"},
		{"{{ nothing is iterable | string | length }}", "4"},
		{"{{ not nothing is iterable }}", "False"},
		{"{{ ' is iterable' }}{{ \"x is not sequence\" }}", " is iterablex is not sequence"},
		{"{{ messages[0].missing is iterable }}", "True"},
		{"{% set t = nothing %}{{ 'array' if t is iterable else 'scalar' }}", "array"},
	} {
		got, err := renderOne(t, tc.src, name)
		if err != nil || got != tc.want {
			t.Errorf("%s\nrenders %q, %v; Jinja2 renders %q", tc.src, got, err, tc.want)
		}
	}
	// trim strips what Python's str.strip strips (U+001C to U+001F, which
	// the engine kept, among them) and prints a list or dict as Python
	// does (the engine left U+200B and the like raw): Llama 3.2 Vision
	// trims a system message given as parts.
	const unprintable = "\x1c a\u200db\u00a0\u3000\x1f"
	for _, tc := range []struct{ src, want string }{
		{"{{ [messages[0].content, ' x ']|trim }}|{{ messages[0].content|trim }}|{{ {'k': messages[0].content}|trim }}",
			`['\x1c a\u200db\xa0\u3000\x1f', ' x ']|a` + "\u200db" + `|{'k': '\x1c a\u200db\xa0\u3000\x1f'}`},
		{"{{ '  xx  '|trim('x ') }}|{{ 'xxhixx'|trim('x') }}|{{ 'xxhixx'|trim(chars='x') }}", "|hi|hi"},
		// A filter block applies them too (Firefunction v2 trims so).
		{"{% filter trim %}  {{ messages[0].content }}  {% endfilter %}|{%- filter trim('x') -%}xxhixx{% endfilter %}", "a\u200db|hi"},
		{"{% filter title %}ab's cd{% endfilter %}|{% filter title|upper %}ab{% endfilter %}|{% filter upper %}{% filter title %}ab cd{% endfilter %}{% endfilter %}", "Ab's Cd|AB|AB CD"},
		{"{{ none|trim }}|{{ 1.0|trim }}", "None|1.0"},
	} {
		got, err := renderOne(t, tc.src, unprintable)
		if err != nil || got != tc.want {
			t.Errorf("%s\nrenders %q, %v; Jinja2 renders %q", tc.src, got, err, tc.want)
		}
	}
	// string and join print lists and dicts as Python does.
	for _, tc := range []struct{ src, want string }{
		{"{{ [1, [2, messages[0].content], none, true, 1.5]|join(', ') }}", `1, [2, 'x\u200dy'], None, True, 1.5`},
		{"{{ 'abc'|join('-') }}|{{ {'a': 1, 'b': 2}|join(',') }}|{{ []|join }}|{{ [1,2]|join }}", "a-b-c|a,b||12"},
		{"{{ messages|join('; ', attribute='role') }}|{{ messages|join(',', attribute='nothing.x') }}", "user|"},
		{"{{ [messages[0].content]|string }}|{{ messages[0].content|string }}|{{ 5|string }}|{{ none|string }}|{{ nothing|string }}|", `['x\u200dy']|x` + "\u200dy" + "|5|None||"},
		{"{{ nothing|join(',') }}|{{ [{'a': messages[0].content}]|join }}|{{ ['a', 'b']|join(d='+') }}", `|{'a': 'x\u200dy'}|a+b`},
	} {
		got, err := renderOne(t, tc.src, "x\u200dy")
		if err != nil || got != tc.want {
			t.Errorf("%s\nrenders %q, %v; Jinja2 renders %q", tc.src, got, err, tc.want)
		}
	}
	// A call with an unpacked argument, which the engine cannot parse
	// (AI21 Jamba's template calls its macros so).
	const macros = "{% macro f(a, b, c=3) %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{% macro g(x) %}<{{ x|title }}>{% endmacro %}"
	for _, tc := range []struct{ src, want string }{
		{"{{ f(*[1, 2]) }}", "1-2-3"},
		{"{{ f(0, *[1], c=9) }}", "0-1-9"},
		{"{% set ms = [f, g] %}{% set ps = [[1, 2], ['hi']] %}{% for i in range(2) %}{{ ms[i](*ps[i]) }};{% endfor %}", "1-2-3;<Hi>;"},
		{"{{ f(*'ab') }}|{{ f( * ['x', 'y'] ) }}", "a-b-3|x-y-3"},
		{"{{ '(*x)' }}|{{ (1) * 2 }}|{{ f(2 * 3, 4) }}|{{ f(**{'a': 1, 'b': 2}) }}", "(*x)|2|6-4-3|1-2-3"},
		// With keyword arguments before and after it, **kw among them, and
		// in a call block's call, which passes its caller (neither
		// compiled before a review found them).
		{"{{ f(*[1], **{'b': 2, 'c': 4}) }}|{{ f(*[1, 2], c=5) }}|{{ f(c=5, *[1, 2]) }}|{{ f(0, *[1], **{'c': 9}) }}|{{ f(*[1, 2], **{}) }}", "1-2-4|1-2-5|1-2-5|0-1-9|1-2-3"},
		{"{% macro h(x, y=2) %}[{{ caller(x) }}{{ y }}]{% endmacro %}{% call(v) h(*['a']) %}<{{ v }}>{% endcall %}|{% call(v) h(*['a'], y=7) %}<{{ v }}>{% endcall %}|{% call(v) h(*['a'], **{'y': 8}) %}<{{ v }}>{% endcall %}", "[<a>2]|[<a>7]|[<a>8]"},
		{"{% macro k() %}[{{ caller() }}]{% endmacro %}{% call k(*[]) %}body{% endcall %}|{{ f(*('ß'.upper(), 'x'|upper)) }}|{{ f(*[f(*['a', 'b']), 'c']) }}", "[body]|SS-X-3|a-b-3-c-3"},
		// The built-in callables as far as they take arguments.
		{"{{ range(*[1, 4])|list }}|{{ dict(*[[('a', 1)]]) }}|{{ dict(*[{'x': 1}], y=2, z=3) }}|{{ dict(*[[('b', 1)]], **{'d': 4, 'c': 3}) }}", "[1, 2, 3]|{'a': 1}|{'x': 1, 'y': 2, 'z': 3}|{'b': 1, 'd': 4, 'c': 3}"},
		{"{% set ns = namespace(*[{'a': 1}], **{'b': 2}) %}{{ ns.a }}{{ ns.b }}|{{ strftime_now(*['x']) }}", "12|x"},
	} {
		got, err := renderOne(t, macros+tc.src, "")
		if err != nil || got != tc.want {
			t.Errorf("%s\nrenders %q, %v; Jinja2 renders %q", tc.src, got, err, tc.want)
		}
	}
	for _, src := range []string{"{{ f(*none) }}", "{{ f(*5) }}", "{{ f(*[1], **[2]) }}", "{{ f(*[1], *[2]) }}", "{{ f(**{'a': 1}, *[2]) }}", "{{ f(*[1], 2) }}", "{{ f(c=1, 2, *[3]) }}"} {
		if got, err := renderOne(t, macros+src, ""); err == nil {
			t.Errorf("%s renders %q; Jinja2 raises", src, got)
		}
	}
	if _, err := renderOne(t, "{{ raise_exception(*['boom']) }}", ""); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("raise_exception(*['boom']): %v, want it raised", err)
	}
	// What the engine would render wrongly, refused (found by a review: a
	// set block's filter left the variable empty, and the prompt with it).
	if _, err := renderOne(t, "{% set x | upper %}ab{% endset %}[{{ x }}]", ""); err == nil || !strings.Contains(err.Error(), "set block with a filter") {
		t.Errorf("a set block with a filter: %v, want it refused", err)
	}
	for _, src := range []string{"{% set x\n  | trim %}  a  {% endset %}[{{ x }}]", "{% set x\t| upper %}a{% endset %}[{{ x }}]"} {
		if _, err := renderOne(t, src, ""); err == nil {
			t.Errorf("%q: rendered, want it refused", src)
		}
	}
	for _, src := range []string{"{% set x %}ab{% endset %}[{{ x }}]", "{% set x = 'a' | upper %}{{ x }}", "{% set a, b = 1, 2 %}{{ a }}"} {
		if _, err := renderOne(t, src, ""); err != nil {
			t.Errorf("%s: %v", src, err)
		}
	}
	// What Jinja2 refuses, refused.
	for _, src := range []string{
		"{{ [1, 2]|dictsort }}",
		"{{ {'a': 1}|dictsort(by='size') }}",
		"{{ {'a': 1, 'b': 'x'}|dictsort(by='value') }}",
		"{{ {'a': 1}|dictsort(true, 'key', false, 1) }}",
		"{{ {'a': 1}|dictsort(sideways=true) }}",
		"{{ 'a'|trim(1) }}",
		"{{ 5|join }}",
	} {
		if got, err := renderOne(t, src, name); err == nil {
			t.Errorf("%s renders %q; Jinja2 raises", src, got)
		}
	}
}

// TestNamedFiltersAreJinja2s: a replaced filter or test named as a
// string to map, select, reject, selectattr or rejectattr is ours, as it
// is after '|'; the engine applied its own, so map('upper') left ß as it
// was and select('iterable') dropped an undefined value (found by a
// review). Every want is Jinja2 3.1.6's output under transformers'
// settings; names not replaced keep the engine's filters.
func TestNamedFiltersAreJinja2s(t *testing.T) {
	for _, tc := range []struct{ content, src, want string }{
		{"x", "{{ ['straße', 'ǆa b']|map('upper')|join(',') }}", "STRASSE,ǄA B"},
		{"get_current_WEATHER", "{{ ['temperature_unit', \"it's a-b\"]|map('title')|join(',') }}|{{ messages|map(attribute='content')|map('title')|join }}", "Temperature_unit,It's A-B|Get_current_weather"},
		{"\x1c a\u200db\u00a0\u3000\x1f", "{{ messages|map(attribute='content')|map('trim')|join }}|{{ [[messages[0].content]]|map('string')|join }}", "a\u200db|" + `['\x1c a\u200db\xa0\u3000\x1f']`},
		// Arguments after the name are the filter's.
		{"x", "{{ [[1, 'x'], ['a']]|map('join', '-')|join(';') }}|{{ ['xxhixx']|map('trim', 'x')|join }}|{{ ['xxhixx']|map('trim', chars='x')|join }}", "1-x;a|hi|hi"},
		{"x", "{{ [{'b': 1, 'C': 2, 'a': 3}]|map('dictsort')|map('first')|map('first')|join }}|{{ ['ßa', 'hELLO wORLD']|map('capitalize')|join(',') }}|{{ ['ΟΔΟΣ', 'İx']|map('lower')|join(',') }}", "a|Ssa,Hello world|οδος,i̇x"},
		// What map goes through: nothing of a false value, a string's
		// characters, a dict's keys.
		{"x", "{{ ['ab', 'cd']|map('upper')|list }}|{{ none|map('upper')|list }}|{{ ''|map('upper')|list }}|{{ 'aß'|map('upper')|join }}|{{ {'x': 1, 'y': 2}|map('upper')|join }}|{{ nothing|map('upper')|list }}", "['AB', 'CD']|[]|[]|ASS|XY|[]"},
		{"x", "{{ ['ß']|map( 'upper' )|join }}|{{ ['ß']|map(\"upper\")|join }}|{{ ['ß'] | map (\n'upper'\n) | join }}", "SS|SS|SS"},
		// An undefined value is iterable and a sequence.
		{"x", "{{ [nothing, 1, 'a', none, [2]]|select('iterable')|list|length }}|{{ [nothing, 1, 'a']|reject('sequence')|list }}|{{ [nothing, 1, 'a', [2]]|select(\"sequence\")|list|length }}|{{ [nothing, none, 'a']|reject('iterable')|list }}", "3|[1]|3|[None]"},
		{"x", "{% set xs = [{'n': 'a', 'v': [1]}, {'n': 'b', 'v': 2}, {'n': 'c'}, {'n': 'd', 'v': 'str'}] %}{{ xs|selectattr('v', 'iterable')|map(attribute='n')|join(',') }}|{{ xs|rejectattr('v', 'sequence')|map(attribute='n')|join(',') }}|{{ xs|selectattr('v','sequence')|map(attribute='n')|join(',') }}|{{ xs|rejectattr('v', 'iterable')|map(attribute='n')|join(',') }}", "a,c,d|b|a,c,d|b"},
		{"x", "{{ {'a': 1, 'b': 2}|select('sequence')|join }}|{{ none|select('iterable')|list }}|{{ [1, 'a']|map('string')|join }}", "ab|[]|1a"},
		// A higher-order filter named so, applying a replaced one, is ours
		// too: the engine's applied its own upper (a review's finding).
		{"x", "{{ [['a', 'b']]|map('map', 'upper')|map('list')|list }}|{{ [['straße', 'ǆa']]|map('map','upper')|map('list')|list }}|{{ [['straße'], ['x']]|map('map', 'upper')|map('join', ',')|join(';') }}|{{ ['straße']|map('map', 'upper')|map('join')|list }}", "[['A', 'B']]|[['STRASSE', 'ǄA']]|STRASSE;X|['STRASSE']"},
		{"x", "{{ [['  a ', 'xbx']]|map('map', 'trim', 'x ')|map('list')|list }}|{{ [[nothing, 1, 'a']]|map('select', 'iterable')|map('list')|list }}|{{ [[{'v': [1]}, {'v': 2}]]|map('selectattr', 'v', 'iterable')|map('list')|list }}|{{ [[{'v': [1]}, {'v': 2}]]|map('rejectattr', 'v', 'sequence')|map('list')|list }}", "[['a', 'b']]|[[Undefined, 'a']]|[[{'v': [1]}]]|[[{'v': 2}]]"},
		{"x", "{{ [[['ß']]]|map('map', 'map', 'upper')|map('map', 'list')|map('list')|list }}|{{ [['a', 'bb']]|map('map', 'first')|map('list')|list }}|{{ [[1, 2, 3]]|map('select', 'odd')|map('list')|list }}|{{ [['ß']]|map('reject', 'sequence')|map('list')|list }}", "[[['SS']]]|[['a', 'b']]|[[1, 3]]|[[]]"},
		// Names not replaced, and no name, keep the engine's filters.
		{"x", "{{ ['a', 'bb']|map('first')|join }}|{{ [1, 2, 3]|select('odd')|join }}|{{ [{'v': 1}, {}]|selectattr('v', 'defined')|list|length }}|{{ ['1', '2']|map('int')|sum }}|{{ [{'v': 0}, {'v': 1}]|selectattr('v')|list|length }}|{{ [0, 1, 2]|select|join }}|{{ [{'n': 'x'}]|map(attribute='n')|join }}|{{ [{}]|map(attribute='n', default='d')|join }}", "ab|13|1|3|1|12|x|d"},
	} {
		got, err := renderOne(t, tc.src, tc.content)
		if err != nil || got != tc.want {
			t.Errorf("%s\nrenders %q, %v; Jinja2 renders %q", tc.src, got, err, tc.want)
		}
	}
	// map(attribute=…) is never renamed (it names no filter), but ours
	// takes it as Jinja2's does, called by its own name.
	for _, tc := range []struct{ src, want string }{
		{"{{ [{'n': 'x'}, {}]|" + filterPrefix + "map(attribute='n', default='d')|join }}", "xd"},
		{"{{ [{'n': 'x'}, {}]|" + filterPrefix + "map(attribute='n')|list|length }}", "2"},
	} {
		if got, err := renderOne(t, tc.src, "x"); err != nil || got != tc.want {
			t.Errorf("%s\nrenders %q, %v; want %q", tc.src, got, err, tc.want)
		}
	}
	// What Jinja2 refuses, refused.
	for _, src := range []string{
		"{{ ['a']|" + filterPrefix + "map(attribute='n', size=1)|list }}",
		"{{ ['a']|" + filterPrefix + "map|list }}",
		"{{ ['a']|map('trim', 1)|list }}",
		"{{ ['a']|map('upper', 1)|list }}",
		"{{ ['a']|select('iterable', 1)|list }}",
		"{{ 5|map('upper')|list }}",
		"{{ ['a']|map('trim', attribute='x')|list }}",
		"{{ [{'v': [1]}]|selectattr('v', 'iterable', 2)|list }}",
	} {
		if got, err := renderOne(t, src, "x"); err == nil {
			t.Errorf("%s renders %q; Jinja2 raises", src, got)
		}
	}
}

// TestCaseMethodsArePythons: the string methods upper, lower, title and
// capitalize map case in full as Python's do (ß to SS, a final sigma to
// ς, a digraph's title case); the engine's mapped one rune at a time, so
// 'straße'.upper() kept its ß (found by a review). Every want is Jinja2
// 3.1.6's output under transformers' settings.
func TestCaseMethodsArePythons(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"{{ 'straße'.upper() }}|{{ 'ΣΑΣ'.lower() }}|{{ 'ΟΔΟΣ ΣΑΣ.'.lower() }}|{{ 'İx'.lower()|length }}|{{ messages[0].content.upper() }}|{{ messages[0]['content'].upper() }}", "STRASSE|σας|οδος σας.|3|STRASSE|STRASSE"},
		// str.title starts a word after any character without case.
		{"{{ 'ǆungla ǆ'.title() }}|{{ \"they're bill's a1b c_d x-y\".title() }}|{{ 'ΣΑΣ ΣΑΣ'.title() }}|{{ \"ΑΣ'Β\".title() }}|{{ 'ß ﬁx ŉ'.title() }}|{{ 'hELLO wORLD'.title() }}|{{ 'ǅa'.title() }}|{{ 'ªb ǈ ⓐb'.title() }}", "ǅungla ǅ|They'Re Bill'S A1B C_D X-Y|Σας Σας|Ασ'Β|Ss Fix ʼN|Hello World|ǅa|ªb ǈ Ⓐb"},
		// The capitalize filter is str.capitalize too: a sigma after the
		// first letter is final.
		{"{{ 'ßa'.capitalize() }}|{{ 'ΑΣ'.capitalize() }}|{{ 'hELLO wORLD'.capitalize() }}|{{ 'ǆa'.capitalize() }}|{{ ''.capitalize() }}|{{ 'ΑΣ'|capitalize }}|{{ ['ΑΣ']|map('capitalize')|join }}", "Ssa|Ας|Hello world|ǅa||Ας|Ας"},
		// Wherever the call stands, on whatever receiver.
		{"{{ 'ab cd'.upper().split()|join('-') }}|{{ 'x' ~ 'ß'.upper() ~ 'y' }}|{{ ['ß'][0].upper() }}|{{ 'ß'.upper()[1] }}|{{ 'AB'.lower().upper() }}|{{ 'ß' . upper ( ) }}|{{ 'ß'.upper(\n) }}|{% if 'ß'.upper() == 'SS' %}y{% endif %}|{{ 'SS' is eq 'ß'.upper() }}|{{ not 'a'.upper() }}|{{ ('a' ~ 'ß').upper() }}|{{ 'a' 'ß'.upper() }}", "AB-CD|xSSy|SS|S|AB|SS|SS|y|True|False|ASS|ASS"},
		{"{% macro f(x) %}{{ x }}{% endmacro %}{{ f('ß').upper() }}|{% set d = {'k': 'ß'} %}{{ d.k.upper() }}|{{ d['k'].upper() }}|{{ d.get('k').upper() }}|{% for m in ['ß'] %}{{ m.upper() }}{{ loop.cycle('a', 'ß').upper() }}{% endfor %}|{% set s = 'ß'.upper() %}{{ s }}|{{ 'ß'.upper()|lower }}", "SS|SS|SS|SS|SSA|SS|ss"},
		// In statements' expressions: a macro's default, a set, a loop's
		// condition, a call block.
		{"{% macro m(a='ß'.upper(), b=2) %}{{ a }}{{ b }}{% endmacro %}{{ m() }}|{% set ns = namespace(v='') %}{% set ns.v = 'ß'.upper() %}{{ ns.v }}|{% for c in ['a', 'ß'] if c.upper() != 'A' %}{{ c.upper() }}{% endfor %}|{% macro g() %}{{ caller('ß'.upper()) }}{% endmacro %}{% call(x) g() %}{{ x.lower() }}{% endcall %}|{{ 'ß'.upper() if true else 'x'.lower() }}|{{ ['ß', 'b']|map('upper')|map('lower')|join }}", "SS2|SS|SS|ss|SS|ssb"},
		// On a dict literal's item (a review's finding: the '}' was taken
		// for no operand, and the subscript alone for the receiver).
		{"{{ {'a':'ß'}['a'].upper() }}|{{ {'a':['ß']}['a'][0].upper() }}|{{ {'a':'x'}.a.upper() }}", "SS|SS|X"},
		// A dict's key of the method's name is called, as in Jinja2.
		{"{% macro f() %}m{% endmacro %}{% set d = {'title': f} %}{{ d.title() }}", "m"},
	} {
		got, err := renderOne(t, tc.src, "straße")
		if err != nil || got != tc.want {
			t.Errorf("%s\nrenders %q, %v; Jinja2 renders %q", tc.src, got, err, tc.want)
		}
	}
	for _, src := range []string{"{% set n = 5 %}{{ n.upper() }}", "{{ nothing.upper() }}", "{{ none.lower() }}", "{{ [1].title() }}"} {
		if got, err := renderOne(t, src, "x"); err == nil {
			t.Errorf("%s renders %q; Jinja2 raises", src, got)
		}
	}
}

// TestOverrideFiltersRenamesOnlyFilters: only a replaced filter applied
// with '|' in a tag is renamed; text, strings, comments, other names and
// filters are left as they are.
func TestOverrideFiltersRenamesOnlyFilters(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"a|title {{ x|title }}", "a|title {{ x|" + filterPrefix + "title }}"},
		{"{{ x | dictsort(true) }}{% for k in y|\n dictsort %}{% endfor %}", "{{ x | " + filterPrefix + "dictsort(true) }}{% for k in y|\n " + filterPrefix + "dictsort %}{% endfor %}"},
		{"{{ '|title' }}{# {{ x|title }} #}{{ x|titles }}{{ title }}{{ x.title }}", "{{ '|title' }}{# {{ x|title }} #}{{ x|titles }}{{ title }}{{ x.title }}"},
		{"{% raw %}{{ x|title }}{% endraw %}", "{% raw %}{{ x|title }}{% endraw %}"},
		{"{{ \"a\\\"|title\" }}", "{{ \"a\\\"|title\" }}"},
		{"{{ x|title", "{{ x|title"},
		{"{{ f(*x) }}{{ a.b[1](k, *y, z=1) }}{{ f(*x, y) }}{{ f(*x, *y) }}{% if (*x) %}{% endif %}{{ v|join(*x) }}{{ v | join (*x) }}",
			"{{ f|" + filterPrefix + "splat(x)() }}{{ a.b[1]|" + filterPrefix + "splat(k, y)(z=1) }}{{ f(*x, y) }}{{ f(*x, *y) }}{% if (*x) %}{% endif %}{{ v|" + filterPrefix + "join(*x) }}{{ v | " + filterPrefix + "join (*x) }}"},
		// Keyword arguments, **kw among them, go to the call after splat,
		// which a call block's call stays; what Jinja2 cannot parse is left.
		{"{% call f(*x) %}{% endcall %}{{ f(k=1, *x, j=2, **kw) }}{{ f( a ,\n* x|title , **kw ,) }}{{ f(*x, **kw, k=1) }}{{ f(**kw, *x) }}{{ f(k=1, a, *x) }}",
			"{% call f|" + filterPrefix + "splat(x)() %}{% endcall %}{{ f|" + filterPrefix + "splat(x)(k=1, j=2, **kw) }}{{ f|" + filterPrefix + "splat(a, x|" + filterPrefix + "title)(**kw) }}{{ f(*x, **kw, k=1) }}{{ f(**kw, *x) }}{{ f(k=1, a, *x) }}"},
		{"{% filter title %}x{% endfilter %}{%- filter  trim('x') %}{% endfilter %}{% filter indent %}{% endfilter %}",
			"{% filter " + filterPrefix + "title %}x{% endfilter %}{%- filter  " + filterPrefix + "trim('x') %}{% endfilter %}{% filter indent %}{% endfilter %}"},
		{"{{ x is iterable }}{% if y is not sequence %}{% endif %}", "{{ x |" + filterPrefix + "is_iterable }}{% if y |" + filterPrefix + "is_sequence|" + filterPrefix + "not %}{% endif %}"},
		{"{{ this is iterable }}{{ x is defined }}{{ x|not }}{{ x is iterable(1) }}{{ x is_iterable }}", "{{ this |" + filterPrefix + "is_iterable }}{{ x is defined }}{{ x|not }}{{ x is iterable(1) }}{{ x is_iterable }}"},
		// A replaced filter or test named as a literal string to map,
		// select and the like: only there, not in strings, comments or raw
		// blocks, nor when named by a variable or an expression.
		{"{{ xs|map('title') }}{{ xs | map( \"upper\" ) }}{{ xs|map(\n'trim', 'x') }}{{ xs|select('iterable') }}{{ xs|reject( 'sequence') }}{{ xs|selectattr('v', 'iterable') }}{{ xs|rejectattr(\"v\",\n\t'sequence') }}",
			"{{ xs|" + filterPrefix + "map('title') }}{{ xs | " + filterPrefix + "map( \"upper\" ) }}{{ xs|" + filterPrefix + "map(\n'trim', 'x') }}{{ xs|" + filterPrefix + "select('iterable') }}{{ xs|" + filterPrefix + "reject( 'sequence') }}{{ xs|" + filterPrefix + "selectattr('v', 'iterable') }}{{ xs|" + filterPrefix + "rejectattr(\"v\",\n\t'sequence') }}"},
		// A case method's call becomes a filter in brackets around its
		// receiver; not in strings, comments or raw blocks, nor with
		// arguments, nor on a filter's or a test's name.
		{"{{ x.upper() }}{{ a.b[0](c).d.lower ( ) }}{{ 'x' 'y'.title() }}{{ (a ~ b).capitalize() }}{{ x.lower().upper() }}{% if y . title(\n) %}{% endif %}{{ f(*x).upper() }}",
			"{{ (x|" + filterPrefix + "str_upper) }}{{ (a.b[0](c).d|" + filterPrefix + "str_lower) }}{{ ('x' 'y'|" + filterPrefix + "str_title) }}{{ ((a ~ b)|" + filterPrefix + "str_capitalize) }}{{ ((x|" + filterPrefix + "str_lower)|" + filterPrefix + "str_upper) }}{% if (y |" + filterPrefix + "str_title) %}{% endif %}{{ (f|" + filterPrefix + "splat(x)()|" + filterPrefix + "str_upper) }}"},
		{"{{ 'x.upper()' }}{# {{ x.upper() }} #}{% raw %}{{ x.upper() }}{% endraw %}{{ x.upper }}{{ x.uppers() }}{{ x.upper(1) }}{{ x|title.upper() }}{{ x is string.upper() }}{{ .upper() }}{{ + .upper() }}{{ x.swapcase() }}",
			"{{ 'x.upper()' }}{# {{ x.upper() }} #}{% raw %}{{ x.upper() }}{% endraw %}{{ x.upper }}{{ x.uppers() }}{{ x.upper(1) }}{{ x|" + filterPrefix + "title.upper() }}{{ x is string.upper() }}{{ .upper() }}{{ + .upper() }}{{ x.swapcase() }}"},
		{"{{ x.upper() }}{{ x.upper(", "{{ x.upper() }}{{ x.upper("},
		{"{% for x in xs|map(attribute='name')|map('trim') %}{% endfor %}", "{% for x in xs|map(attribute='name')|" + filterPrefix + "map('trim') %}{% endfor %}"},
		// One naming another that names a replaced filter or test, at any
		// depth; not one naming another that names none.
		{"{{ xs|map('map', 'upper') }}{{ xs|map('select', 'iterable') }}{{ xs|map('rejectattr', 'v', 'sequence') }}{{ xs|map('map', 'map', 'title') }}{{ xs|map('map', 'first') }}{{ xs|map('select', 'odd') }}{{ xs|map('map') }}{{ xs|map('map', f) }}{{ xs|select('map', 'upper') }}",
			"{{ xs|" + filterPrefix + "map('map', 'upper') }}{{ xs|" + filterPrefix + "map('select', 'iterable') }}{{ xs|" + filterPrefix + "map('rejectattr', 'v', 'sequence') }}{{ xs|" + filterPrefix + "map('map', 'map', 'title') }}{{ xs|map('map', 'first') }}{{ xs|map('select', 'odd') }}{{ xs|map('map') }}{{ xs|map('map', f) }}{{ xs|select('map', 'upper') }}"},
		{"{{ \"xs|map('title')\" }}{# {{ xs|map('title') }} #}{% raw %}{{ xs|select('iterable') }}{% endraw %}",
			"{{ \"xs|map('title')\" }}{# {{ xs|map('title') }} #}{% raw %}{{ xs|select('iterable') }}{% endraw %}"},
		{"{{ xs|map(f) }}{{ xs|map('title' ~ '') }}{{ xs|map('titles') }}{{ xs|map('ti\\tle') }}{{ xs|map(attribute='title') }}{{ xs|map('length') }}{{ xs|select('odd') }}{{ xs|select('title') }}{{ xs|map('iterable') }}{{ xs|map('is_iterable') }}{{ xs|map('not') }}{{ xs|selectattr('iterable') }}{{ xs|maps('title') }}{{ xs.map('title') }}{{ xs|map }}{{ xs|map('title'",
			"{{ xs|map(f) }}{{ xs|map('title' ~ '') }}{{ xs|map('titles') }}{{ xs|map('ti\\tle') }}{{ xs|map(attribute='title') }}{{ xs|map('length') }}{{ xs|select('odd') }}{{ xs|select('title') }}{{ xs|map('iterable') }}{{ xs|map('is_iterable') }}{{ xs|map('not') }}{{ xs|selectattr('iterable') }}{{ xs|maps('title') }}{{ xs.map('title') }}{{ xs|map }}{{ xs|map('title'"},
	} {
		if got := overrideFilters(tc.src); got != tc.want {
			t.Errorf("overrideFilters(%q) = %q, want %q", tc.src, got, tc.want)
		}
	}
}

// TestTemplateFromAFile: a chat_template without Jinja's characters is a
// file's path, as vLLM reads --chat-template; one that cannot be opened is
// an error. It was rendered as the template itself, so every chat's prompt
// was the path (found by a review).
func TestTemplateFromAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "chat.jinja")
	if err := os.WriteFile(path, []byte("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	chat, err := tokenize.ParseChatRequest([]byte(`{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := newRenderer(nil, hf.ChatConfig{}, Options{Template: path})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.Render(chat.Chat); err != nil || got != "<user>hi" {
		t.Errorf("the file's template renders %q, %v; want %q", got, err, "<user>hi")
	}
	if _, err := newRenderer(nil, hf.ChatConfig{}, Options{Template: path + ".missing"}); err == nil || !strings.Contains(err.Error(), "looks like a file path") {
		t.Errorf("a missing file: %v, want an error", err)
	}
}

// FuzzOverrideFilters: the source rewriting never panics on a template
// of any shape, compiling it neither; it is idempotent (a rewritten
// template has nothing left to rewrite, so nothing is renamed twice); it
// changes nothing of a template that names none of the replaced filters
// and tests and unpacks nothing; and it leaves the text between tags as
// it was. A template nested past the bounds (tooDeep) never compiles.
func FuzzOverrideFilters(f *testing.F) {
	for _, s := range []string{
		"{{ f(*x) }}{{ v|join(*y) }}", "{% filter title %}a{% endfilter %}", "{{ x is not iterable }}{{ y is sequence }}",
		"{% set x | f %}{% endset %}", "{% for m in m recursive %}{{ loop(m) }}{% endfor %}", "{{ a|dictsort(true)|title }} text {# c #}",
		"{% raw %}{{ x|title }}{% endraw %}{{ '|trim' }}", "{% call f(*x) %}{% endcall %}",
		"{{ xs|map('title')|select(\"iterable\") }}{{ xs|rejectattr('v', 'sequence')|map(f) }}",
		"{{ xs|map('map', 'upper')|map('selectattr', 'v', 'iterable')|map('map', 'map', f) }}",
		"{{ x.upper().lower() }}{% if a[0](b).title() %}{% endif %}{{ x|title.upper() }}{{ {'a': {}}.capitalize() }}",
		"{{ " + strings.Repeat("(", 600) + "1" + strings.Repeat(")", 600) + " }}", strings.Repeat("{%if a%}", 257),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 4096 {
			return
		}
		out := overrideFilters(src)
		ct := compileTemplate(src)
		if why := tooDeep(overrideFilters(jinjaSource(src))); why != "" && (ct.err == nil || !strings.Contains(ct.err.Error(), why)) {
			t.Fatalf("%q is nested too deeply (%s), yet compiles with error %v", src, why, ct.err)
		}
		if again := overrideFilters(out); again != out {
			t.Fatalf("%q rewrites to %q, and that again to %q", src, out, again)
		}
		touched := strings.Contains(src, "*") || strings.Contains(src, "is")
		for name := range overriddenFilters {
			touched = touched || strings.Contains(src, strings.TrimPrefix(name, testPrefix))
		}
		if !touched && out != src {
			t.Fatalf("%q names nothing replaced, yet rewrites to %q", src, out)
		}
		if tags, ok := templateTags(src); ok {
			outTags, ok := templateTags(out)
			if !ok || len(outTags) != len(tags) {
				t.Fatalf("%q: %d tags, rewritten %q: %d (%v)", src, len(tags), out, len(outTags), ok)
			}
			for i := range tags {
				prev, outPrev := 0, 0
				if i > 0 {
					prev, outPrev = tags[i-1].end, outTags[i-1].end
				}
				if src[prev:tags[i].start] != out[outPrev:outTags[i].start] {
					t.Fatalf("%q: the text before tag %d changed in %q", src, i, out)
				}
			}
		}
	})
}
