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
	} {
		got, err := renderOne(t, macros+tc.src, "")
		if err != nil || got != tc.want {
			t.Errorf("%s\nrenders %q, %v; Jinja2 renders %q", tc.src, got, err, tc.want)
		}
	}
	if got, err := renderOne(t, macros+"{{ f(*none) }}", ""); err == nil {
		t.Errorf("f(*none) renders %q; Jinja2 raises TypeError", got)
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

// TestOverrideFiltersRenamesOnlyFilters: only a replaced filter applied
// with '|' in a tag is renamed; text, strings, comments, other names and
// filters are left as they are.
func TestOverrideFiltersRenamesOnlyFilters(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"a|title {{ x|title }}", "a|title {{ x|" + filterPrefix + "title }}"},
		{"{{ x | dictsort(true) }}{% for k in y|\n dictsort %}{% endfor %}", "{{ x | " + filterPrefix + "dictsort(true) }}{% for k in y|\n " + filterPrefix + "dictsort %}{% endfor %}"},
		{"{{ '|title' }}{# {{ x|title }} #}{{ x|titles }}{{ title }}{{ x.title() }}", "{{ '|title' }}{# {{ x|title }} #}{{ x|titles }}{{ title }}{{ x.title() }}"},
		{"{% raw %}{{ x|title }}{% endraw %}", "{% raw %}{{ x|title }}{% endraw %}"},
		{"{{ \"a\\\"|title\" }}", "{{ \"a\\\"|title\" }}"},
		{"{{ x|title", "{{ x|title"},
		{"{{ f(*x) }}{{ a.b[1](k, *y, z=1) }}{{ f(*x, y) }}{{ f(*x, *y) }}{% if (*x) %}{% endif %}{{ v|join(*x) }}{{ v | join (*x) }}",
			"{{ f|" + filterPrefix + "splat(x) }}{{ a.b[1]|" + filterPrefix + "splat(k, y, z=1) }}{{ f(*x, y) }}{{ f(*x, *y) }}{% if (*x) %}{% endif %}{{ v|" + filterPrefix + "join(*x) }}{{ v | " + filterPrefix + "join (*x) }}"},
		{"{% call f(*x) %}{% endcall %}", "{% call f(*x) %}{% endcall %}"},
		{"{% filter title %}x{% endfilter %}{%- filter  trim('x') %}{% endfilter %}{% filter indent %}{% endfilter %}",
			"{% filter " + filterPrefix + "title %}x{% endfilter %}{%- filter  " + filterPrefix + "trim('x') %}{% endfilter %}{% filter indent %}{% endfilter %}"},
		{"{{ x is iterable }}{% if y is not sequence %}{% endif %}", "{{ x |" + filterPrefix + "is_iterable }}{% if y |" + filterPrefix + "is_sequence|" + filterPrefix + "not %}{% endif %}"},
		{"{{ this is iterable }}{{ x is defined }}{{ x|not }}{{ x is iterable(1) }}{{ x is_iterable }}", "{{ this |" + filterPrefix + "is_iterable }}{{ x is defined }}{{ x|not }}{{ x is iterable(1) }}{{ x is_iterable }}"},
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
// it was.
func FuzzOverrideFilters(f *testing.F) {
	for _, s := range []string{
		"{{ f(*x) }}{{ v|join(*y) }}", "{% filter title %}a{% endfilter %}", "{{ x is not iterable }}{{ y is sequence }}",
		"{% set x | f %}{% endset %}", "{% for m in m recursive %}{{ loop(m) }}{% endfor %}", "{{ a|dictsort(true)|title }} text {# c #}",
		"{% raw %}{{ x|title }}{% endraw %}{{ '|trim' }}", "{% call f(*x) %}{% endcall %}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 4096 {
			return
		}
		out := overrideFilters(src)
		_ = compileTemplate(src)
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
