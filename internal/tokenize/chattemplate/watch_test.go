package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ardanlabs/jinja"

	"github.com/inferrail/inferrail/internal/tokenize"
	"github.com/inferrail/inferrail/internal/tokenize/hf"
)

// watchVars are the variables the instrumentation tests render with.
func watchVars() map[string]jinja.Value {
	msgs := []jinja.Value{}
	for i, role := range []string{"system", "user", "assistant", "user"} {
		m := jinja.NewDict()
		m.AsDict().Set("role", jinja.NewString(role))
		m.AsDict().Set("content", jinja.NewString(fmt.Sprintf("  text %d\n", i)))
		msgs = append(msgs, m)
	}
	leaf := func(name string, children ...jinja.Value) jinja.Value {
		d := jinja.NewDict()
		d.AsDict().Set("name", jinja.NewString(name))
		d.AsDict().Set("children", jinja.NewList(children))
		return d
	}
	return map[string]jinja.Value{
		"messages": jinja.NewList(msgs),
		"tree":     jinja.NewList([]jinja.Value{leaf("a", leaf("b"), leaf("c", leaf("d"))), leaf("e")}),
		"none":     jinja.None(),
	}
}

// renderSource compiles src and renders it with vars and w's callables.
func renderSource(src string, vars map[string]jinja.Value, w *watch) (out string, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	t, err := jinja.Compile(src)
	if err != nil {
		return "", err
	}
	all := make(map[string]jinja.Value, len(vars)+2)
	for k, v := range vars {
		all[k] = v
	}
	w.vars(all)
	return t.RenderValues(all)
}

// TestInstrumentKeepsText: an instrumented template renders byte for byte
// what the template renders, whitespace control, trim_blocks and
// lstrip_blocks included, and calls the watch in every loop iteration.
func TestInstrumentKeepsText(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
	}{
		{"plain", "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"},
		{"dashes", "{%- for m in messages -%}\n  {{- m.content -}}\n{%- endfor -%}\n end"},
		{"block_defaults", "{% for m in messages %}\n    {% if m.role == 'user' %}\n  U {{ m.content }}\n    {% endif %}\n{% endfor %}\n"},
		{"loop_first_in_file", "{% for m in messages %}   {% if true %}x{% endif %}{% endfor %}"},
		{"expression_dash_after_for", "a\n  {% for m in messages %}{{- m.content }}{% endfor %}"},
		{"newlines_after_for", "{% for m in messages %}\n\n{{ m.role }}{% endfor %}"},
		{"for_else", "{% for m in [] %}x{% else %}empty{% endfor %}{% for m in messages %}{% else %}none{% endfor %}"},
		{"nested_loop_vars", "{% for m in messages %}{% for c in m.content %}{{ loop.index }}{{ c }}{% endfor %}{{ loop.last }}{{ loop.previtem is defined }}{% endfor %}"},
		{"loop_filter", "{% for m in messages if m.role == 'user' %}{{ loop.index0 }}{{ m.content }}{% endfor %}"},
		{"recursive", "{% for x in tree recursive %}[{{ x.name }}{% if x.children %}{{ loop(x.children) }}{% endif %}]{% endfor %}"},
		{"macro", "{% macro show(ms) %}{% for m in ms %}<{{ m.role }}>{% endfor %}{% endmacro %}{{ show(messages) }}|{{ show(messages[1:]) }}"},
		{"macro_markers", "{%- macro a(x) -%}\n  [{{ x }}]  \n{%- endmacro -%}\n{% macro b(x) %}\n  <{{ x }}>\n  {% endmacro %}\n{%+ macro c(x) +%}\n (x) \n  {%+ endmacro +%}\n{{ a(1) }}{{ b(2) }}{{ c(3) }}"},
		{"macro_recursive", "{% macro walk(xs) %}{% for x in xs %}({{ x.name }}{{ walk(x.children) }}){% endfor %}{% endmacro %}{{ walk(tree) }}"},
		{"macro_caller", "{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}in{% endcall %}"},
		{"call_markers", "{% macro box() %}[{{ caller() }}]{% endmacro %}{%- call box() -%}\n  in  \n{%- endcall -%}\n{% call box() %}\n  x\n  {% endcall %}\n{%+ call box() +%}\n y \n  {%+ endcall +%}\nz"},
		{"namespace", "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}"},
		{"set_block", "{% for m in messages %}{% set x %}<{{ m.role }}>{% endset %}{{ x }}{% endfor %}"},
		{"raw", "{% raw %}{% for x in y %}{{ x }}{% endraw %}{% for m in messages %}{{ m.role }}{% endfor %}"},
		{"comments", "{# {% for %} {{ x }} #}{% for m in messages %}{#- c -#} {{ m.role }}{% endfor %}"},
		{"closers_in_strings", "{% for m in messages %}{{ '%}' ~ m.role ~ \"}}\" }}{% endfor %}"},
		{"dict_literal", "{{ {'a': {'b': 1}}['a']['b'] }}{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}"},
		{"conditional_without_else", "{% for m in messages %}{{ m.content if m.role == 'user' }}{% endfor %}"},
		{"filters", "{{ messages | length }}{% for m in messages %}{{ m.content | trim }}{{ m | tojson }}{% endfor %}"},
		{"keep_markers", "{% for m in messages +%}\n{{ m.role }}\n  {%+ endfor %}"},
		{"scalars", "{% for m in messages %}{{ loop.index }}{{ none }}{{ true }}{{ 1.5 }}{{ undefined_name }}{% endfor %}"},
		{"braces_in_text", "{ {% for m in messages %}{x}{{ m.role }}}{% endfor %} }"},
		{"for_in_expression_text", "{{ 'for' }}{% for m in messages %}{{ 'endfor' }}{% endfor %}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := renderSource(tc.src, watchVars(), newWatch(nil, 1<<30))
			if err != nil {
				t.Fatalf("the template itself: %v", err)
			}
			inst, ok := instrument(tc.src)
			if !ok {
				t.Fatalf("instrument(%q) found no tags", tc.src)
			}
			w := newWatch(nil, 1<<30)
			got, err := renderSource(inst, watchVars(), w)
			if err != nil || got != want {
				t.Fatalf("instrumented:\n%s\nrenders %q, %v\nwant %q", inst, got, err, want)
			}
			if strings.Contains(tc.src, "in messages %}") && w.checks < 4 {
				t.Errorf("the watch was called %d times, want at least once per message (4)", w.checks)
			}
		})
	}
}

// FuzzInstrument: every template the engine compiles is instrumented and
// the instrumented copy compiles and renders the same text (or fails where
// the template fails), but for the escapes of non-printable characters in
// printed lists and dicts (TestPrintedReprIsPython). Templates that could run without end or recurse
// (range, repetition, macros, recursive loops) are left out: the engine
// itself cannot be stopped on them.
func FuzzInstrument(f *testing.F) {
	for _, s := range []string{
		"{% for m in messages %}{{ m.role }}{% endfor %}",
		"{%- for m in messages -%}\n {{- m.content -}}\n{%+ endfor +%}",
		"{% raw %}{{ x }}{% endraw %}{# c #}{{ '}}' }}",
		"{% for m in messages if m.role %}{% for c in m.content %}{{ c }}{% else %}-{% endfor %}{% endfor %}",
		"{{ {'a': [1, (2)]} | tojson }}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 1<<11 {
			return
		}
		for _, risky := range []string{"range", "*", "macro", "recursive", "loop(", "call", "include", "import", "extends"} {
			if strings.Contains(src, risky) {
				return
			}
		}
		if _, err := jinja.Compile(src); err != nil {
			return
		}
		want, wantErr := renderSource(src, watchVars(), newWatch(nil, 1<<30))
		inst, ok := instrument(src)
		if !ok {
			t.Fatalf("instrument(%q) found no tags in a template that compiles", src)
		}
		if _, err := jinja.Compile(inst); err != nil {
			t.Fatalf("instrumented %q does not compile: %v\n%s", src, err, inst)
		}
		got, err := renderSource(inst, watchVars(), newWatch(nil, 1<<30))
		// The instrumented copy prints lists and dicts as Python does,
		// escaping characters the engine's repr leaves as they are.
		if (err != nil) != (wantErr != nil) || (err == nil && pyPrintable(got) != pyPrintable(want)) {
			t.Fatalf("%q renders %q, %v; instrumented %q, %v\n%s", src, want, wantErr, got, err, inst)
		}
	})
}

// TestWhitespaceControlIsJinja2: trim_blocks, lstrip_blocks and the dash
// markers reach only the text right next to their tag, never past another
// tag, as in Jinja2 under transformers (the wants are Jinja2 3.1's output);
// instrumented or not. ardanlabs/jinja before v1.14.0 trimmed the first
// text after a run of tags: Command R+'s rag template lost the newline
// after each document's number.
func TestWhitespaceControlIsJinja2(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"{% for m in messages %}{{ m.content }}\n{% endfor %}END", "hi\nEND"},
		{"{% if true %}{{ messages[0].content }}\nB{% endif %}", "hi\nB"},
		{"{%- for m in messages -%}{{ m.content }}   tail{% endfor %}", "hi   tail"},
		{"{{ 'a' -}}{{ messages[0].content }}   c", "ahi   c"},
		{"{% for m in messages %}\n  {% if true %}\n{{ m.content }}\n  {% endif %}\n{% endfor %}", "hi\n"},
		{"{% for m in messages -%}\n\n  {{ m.content }}{%+ if true %} x {% endif +%}\n{% endfor %}", "hi x \n"},
		{"{% set ns = namespace(items=0) %}{% set ns.items = 3 %}{{ ns.items }}", "3"},
	} {
		m := jinja.NewDict()
		m.AsDict().Set("role", jinja.NewString("user"))
		m.AsDict().Set("content", jinja.NewString("hi"))
		vars := map[string]jinja.Value{"messages": jinja.NewList([]jinja.Value{m})}
		got, err := renderSource(tc.src, vars, newWatch(nil, 1<<30))
		if err != nil || got != tc.want {
			t.Errorf("%q renders %q, %v; Jinja2 renders %q", tc.src, got, err, tc.want)
		}
		inst, ok := instrument(tc.src)
		if !ok {
			t.Fatalf("instrument(%q) found no tags", tc.src)
		}
		if got, err := renderSource(inst, vars, newWatch(nil, 1<<30)); err != nil || got != tc.want {
			t.Errorf("%q instrumented renders %q, %v; Jinja2 renders %q", tc.src, got, err, tc.want)
		}
	}
}

// TestPrintedReprIsPython: a list or dict printed by an instrumented
// template is Python's str() of it, which escapes the characters
// str.isprintable rejects; the engine's own repr leaves them raw. Strings
// printed on their own stay as they are.
func TestPrintedReprIsPython(t *testing.T) {
	vars := map[string]jinja.Value{
		"items": jinja.NewList([]jinja.Value{
			jinja.NewString("a\u200bb"), jinja.NewString("\u00a0"), jinja.NewString("\u0085"), jinja.NewString("é"),
			jinja.NewString("\U000f0000"), jinja.NewString("\u2028"), jinja.NewString(" "), jinja.NewString("\ufeff"),
			jinja.NewString("日本"), jinja.NewString("😀"), jinja.NewString("\u0378"),
		}),
		"s": jinja.NewString("x\u200by"),
	}
	d := jinja.NewDict()
	d.AsDict().Set("k\u200b", jinja.NewList([]jinja.Value{jinja.NewString("\u00ad")}))
	vars["d"] = d
	src := "{{ items }}|{{ d }}|{{ s }}"
	// Python's output for the same values.
	want := `['a\u200bb', '\xa0', '\x85', 'é', '\U000f0000', '\u2028', ' ', '\ufeff', '日本', '😀', '\u0378']|{'k\u200b': ['\xad']}|x` + "\u200b" + `y`
	inst, ok := instrument(src)
	if !ok {
		t.Fatal("no tags")
	}
	tmpl, err := jinja.Compile(inst)
	if err != nil {
		t.Fatal(err)
	}
	all := maps.Clone(vars)
	w := newWatch(nil, 1<<30)
	w.vars(all)
	got, err := tmpl.RenderValues(all)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("printed\n%s\nwant\n%s", got, want)
	}
}

// alternatingChat is a chat request of a system prompt and n turns, user
// first and last (n odd).
func alternatingChat(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[{"role":"system","content":"You answer briefly."}`)
	for i := range n {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		fmt.Fprintf(&b, `,{"role":%q,"content":"turn %d: the router reads every request once"}`, role, i)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// TestRenderStops: a huge conversation's rendering gives up with
// ErrStopped at the first look at the stop signal after it is set, before
// the conversation is built, while it is, or in the template's loop, for
// each family's template and one of ours. Stopped, it returns no text,
// its error is not the template's (a refusal the gateway would count as
// vLLM's 400) and the gateway's tokenizer reads it as hf.ErrStopped.
func TestRenderStops(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine rendering 4,001 turns 35 times, seconds under the race detector; make norace runs it")
	}
	const turns = 4001
	p, err := tokenize.ParseChatRequest(alternatingChat(turns))
	if err != nil {
		t.Fatal(err)
	}
	type family struct {
		name string
		r    *Renderer
	}
	var families []family
	for _, fam := range chatFamilies {
		cfg, err := hf.LoadChatConfig(familyDir(fam))
		if err != nil || cfg == nil {
			t.Logf("%s: no tokenizer_config.json (make tokenizers); left out", fam)
			continue
		}
		r, err := newRenderer(nil, *cfg, Options{Now: fixedNow})
		if err != nil {
			t.Fatal(err)
		}
		families = append(families, family{fam, r})
	}
	ours := hf.ChatConfig{Template: json.RawMessage(`"{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"`)}
	r, err := newRenderer(nil, ours, Options{})
	if err != nil {
		t.Fatal(err)
	}
	families = append(families, family{"ours", r})
	for _, fam := range families {
		ct := fam.r.single
		if ct == nil { // named templates (Command R+): a chat without tools renders the default
			ct = fam.r.named["default"]
		}
		if !ct.watched {
			t.Errorf("%s: the template's instrumented copy does not compile", fam.name)
			continue
		}
		full := newWatch(nil, DefaultMaxOutput)
		text, err := fam.r.render(p.Chat, full)
		if err != nil || len(text) < turns*20 {
			t.Fatalf("%s: the whole rendering: %d bytes, %v", fam.name, len(text), err)
		}
		// Looks at the stop signal: one per stopEvery messages while
		// building the conversation, then the template's.
		building := (turns + 1 + stopEvery - 1) / stopEvery
		if full.checks < building+turns {
			t.Errorf("%s: %d looks at the stop signal in a whole rendering of %d messages, want at least one per message", fam.name, full.checks, turns+1)
		}
		for _, after := range []int{0, 1, building, building + 1, full.checks / 2, full.checks - 1} {
			t.Run(fmt.Sprintf("%s/after_%d_of_%d", fam.name, after, full.checks), func(t *testing.T) {
				w := newWatch(nil, DefaultMaxOutput)
				looks := 0
				w.stop = func() bool { looks++; return looks > after }
				out, err := fam.r.render(p.Chat, w)
				var te *Error
				switch {
				case !errors.Is(err, ErrStopped) || !errors.Is(err, hf.ErrStopped) || errors.As(err, &te):
					t.Errorf("stopped rendering: %v, want ErrStopped", err)
				case out != "":
					t.Errorf("stopped rendering returned %d bytes", len(out))
				case w.checks != after+1:
					t.Errorf("stopped after %d looks at the signal, want at the first look after it was set (%d)", w.checks, after+1)
				}
			})
		}
	}
}

func fixedNow() time.Time { return time.Date(2026, 3, 7, 14, 5, 9, 0, time.UTC) }

// TestChatIDsUntilStops: through the API the gateway calls, with its stop
// flag set while the template runs (by the template's own clock, at its
// tenth reading), the rendering gives up at the very next value printed;
// with the flag set before, it does no work.
func TestChatIDsUntilStops(t *testing.T) {
	var stop atomic.Bool
	readings := 0
	opts := Options{Now: func() time.Time {
		if readings++; readings == 10 {
			stop.Store(true)
		}
		return fixedNow()
	}}
	cfg := hf.ChatConfig{Template: json.RawMessage(`"{% for m in messages %}{{ strftime_now('%S') }}{{ m.content }}{% endfor %}"`)}
	r, err := newRenderer(nil, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tokenize.ParseChatRequest(alternatingChat(1001))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ChatIDsUntil(p, &stop); !errors.Is(err, ErrStopped) || readings != 10 {
		t.Errorf("ChatIDsUntil with the stop set at the 10th reading of the clock: %v after %d readings, want ErrStopped after 10", err, readings)
	}
	readings = 0
	if _, err := r.RenderUntil(p.Chat, &stop); !errors.Is(err, ErrStopped) || readings != 0 {
		t.Errorf("RenderUntil with the stop set before: %v after %d readings of the clock, want ErrStopped after none", err, readings)
	}
}

// TestRenderMaxOutput: a rendering that would outgrow Options.MaxOutput,
// by the template's own text or by the values it prints, is not followed
// (tokenize.ReasonSize), and one within it renders as it would without a
// bound.
func TestRenderMaxOutput(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine rendering megabytes, 20 s under the race detector; make norace runs it")
	}
	body := string(alternatingChat(999)) // 1,000 messages
	for _, tc := range []struct {
		name, tmpl string
		max        int
		wantLen    int // 0: refused
	}{
		// Within a bound, the text is the rendering's under the default
		// bound, of wantLen bytes.
		{"text_within", `{% for m in messages %}0123456789{% endfor %}`, 10_000, 10_000},
		{"text_over", `{% for m in messages %}0123456789{% endfor %}`, 9_999, 0},
		{"values_within", `{% for m in messages %}{{ loop.index0 % 10 }}{{ '0123456789' }}{% endfor %}`, 11_000, 11_000},
		{"values_over", `{% for m in messages %}{{ loop.index0 % 10 }}{{ '0123456789' }}{% endfor %}`, 10_999, 0},
		{"quadratic_default", `{% for m in messages %}{{ messages[:50] | tojson }}{% endfor %}`, 0, 3_937_000},
		{"quadratic_over", `{% for m in messages %}{{ messages | tojson }}{% endfor %}`, 1 << 20, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := renderWith(t, tc.tmpl, Options{MaxOutput: tc.max}, body)
			unbounded, uerr := renderWith(t, tc.tmpl, Options{}, body)
			var ue *tokenize.UnsupportedError
			switch {
			case tc.wantLen == 0 && (!errors.As(err, &ue) || ue.Reason != tokenize.ReasonSize):
				t.Errorf("rendering over a bound of %d: %d bytes, %v; want refused (%s)", tc.max, len(got), err, tokenize.ReasonSize)
			case tc.wantLen > 0 && (err != nil || uerr != nil || got != unbounded || len(got) != tc.wantLen):
				t.Errorf("rendering within a bound of %d: %d bytes, %v; want %d bytes, the same as under the default bound (%d bytes, %v)",
					tc.max, len(got), err, tc.wantLen, len(unbounded), uerr)
			}
		})
	}
	if _, err := newRenderer(nil, hf.ChatConfig{}, Options{MaxOutput: -1}); err == nil {
		t.Error("a negative MaxOutput was accepted")
	}
}

// BenchmarkRenderWatched is what the watch costs: each family's template
// rendering a conversation of 2,001 turns as written and instrumented
// (compare the two sub-benchmarks' ns/op).
func BenchmarkRenderWatched(b *testing.B) {
	p, err := tokenize.ParseChatRequest(alternatingChat(2001))
	if err != nil {
		b.Fatal(err)
	}
	for _, fam := range chatFamilies {
		cfg, err := hf.LoadChatConfig(familyDir(fam))
		if err != nil || cfg == nil {
			continue
		}
		watched, err := newRenderer(nil, *cfg, Options{Now: fixedNow})
		if err != nil {
			b.Fatal(err)
		}
		asWritten := *watched
		plain := *watched.single
		if plain.tmpl, err = jinja.Compile(mustString(b, cfg.Template)); err != nil {
			b.Fatal(err)
		}
		plain.watched = false
		asWritten.single = &plain
		for _, r := range []struct {
			name string
			r    *Renderer
		}{{"as_written", &asWritten}, {"instrumented", watched}} {
			b.Run(fam+"/"+r.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := r.r.Render(p.Chat); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func mustString(tb testing.TB, raw json.RawMessage) string {
	tb.Helper()
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		tb.Fatal(err)
	}
	return s
}

// TestMacroRecursionBounded: a macro (or a recursive loop) that calls
// itself without end fails its rendering as a template error at
// maxMacroDepth levels (Jinja2 raises RecursionError); the engine alone grew its stack until the Go
// runtime ended the process, taking the gateway with it (found by a
// review, with a chat_template set in the config). Recursion Jinja2
// renders (150 levels) still renders, and one that branches without end,
// never deep enough to be refused, still stops when told to.
func TestMacroRecursionBounded(t *testing.T) {
	chat, err := tokenize.ParseChatRequest([]byte(`{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	render := func(src string, w *watch) (string, error) {
		tmpl, _ := json.Marshal(src)
		r, err := newRenderer(nil, hf.ChatConfig{Template: tmpl}, Options{Now: fixedNow})
		if err != nil {
			t.Fatal(err)
		}
		if !r.single.watched {
			t.Fatalf("%q: the instrumented copy does not compile", src)
		}
		return r.render(chat.Chat, w)
	}
	for _, src := range []string{
		"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
		"{% macro f(n) %}{% set x = f(n + 1) %}{% endmacro %}{{ f(0) }}",
		"{% macro f(n) %}{{ g(n) }}{% endmacro %}{% macro g(n) %}{{ f(n) }}{% endmacro %}{{ f(0) }}",
		// A recursive loop whose loop() never runs out (found by a review:
		// the startup probe rendered it and the gateway died).
		"{% for m in messages recursive %}{{ loop(messages) }}{% endfor %}",
		"{% for m in messages recursive %}{% set x = loop(messages) %}{% endfor %}",
	} {
		_, err := render(src, newWatch(nil, DefaultMaxOutput))
		var te *Error
		if !errors.As(err, &te) || !strings.Contains(err.Error(), "nested deeper than 256") {
			t.Errorf("%q: %v, want a template error for macros nested too deep", src, err)
		}
	}
	// Recursion through a loop or caller kept in a namespace (found by a
	// review): the caller's call block is bounded as a macro is, and a
	// template that keeps a recursive loop's loop is refused.
	for _, src := range []string{
		"{% set ns = namespace(c=none) %}{% macro f() %}{% set ns.c = caller %}{{ caller() }}{% endmacro %}{% call f() %}{{ ns.c() }}{% endcall %}",
		"{% set ns = namespace(l=none) %}{% for m in messages recursive %}{% if ns.l is none %}{% set ns.l = loop %}{% endif %}{{ ns.l(messages) }}{% endfor %}",
	} {
		tmpl, _ := json.Marshal(src)
		r, err := newRenderer(nil, hf.ChatConfig{Template: tmpl}, Options{Now: fixedNow})
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.render(chat.Chat, newWatch(nil, DefaultMaxOutput))
		var te *Error
		if !errors.As(err, &te) {
			t.Errorf("%q: %v, want a template error", src, err)
		}
	}
	const deepest = "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% else %}x{% endif %}{% endmacro %}{{ f(150) }}{{ f(150) }}"
	if out, err := render(deepest, newWatch(nil, DefaultMaxOutput)); err != nil || out != "xx" {
		t.Errorf("150 levels, twice: %q, %v; want %q", out, err, "xx")
	}
	const deepLoop = "{% for m in messages recursive %}{% if loop.depth < 150 %}{{ loop(messages) }}{% else %}{{ loop.depth }}{% endif %}{% endfor %}"
	if out, err := render(deepLoop, newWatch(nil, DefaultMaxOutput)); err != nil || out != "150" {
		t.Errorf("a recursive loop 150 deep: %q, %v; want %q", out, err, "150")
	}
	// 2^200 calls, never more than 200 deep: only the stop signal ends it.
	const branching = "{% macro f(n) %}{% if n > 0 %}{% set a = f(n - 1) %}{% set b = f(n - 1) %}{% endif %}{% endmacro %}{{ f(200) }}"
	w := newWatch(nil, DefaultMaxOutput)
	looks := 0
	w.stop = func() bool { looks++; return looks > 10000 }
	if _, err := render(branching, w); !errors.Is(err, ErrStopped) {
		t.Errorf("branching recursion: %v, want ErrStopped", err)
	}
}
