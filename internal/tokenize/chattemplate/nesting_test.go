package chattemplate

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/tokenize"
	"github.com/inferrail/inferrail/internal/tokenize/hf"
)

// deepTemplates are templates nested past what the template engine can
// parse or render without ending the process, a megabyte or more each
// (found by a review: 500,000 nested brackets in a chat template, given
// in the config or a model folder's tokenizer_config.json, took the
// gateway and --check down with a fatal stack overflow).
var deepTemplates = []struct {
	name string
	src  func() string
}{
	{"brackets", func() string {
		return "{{ " + strings.Repeat("(", 500_000) + "1" + strings.Repeat(")", 500_000) + " }}"
	}},
	{"lists", func() string { return "{{ " + strings.Repeat("[", 500_000) + strings.Repeat("]", 500_000) + " }}" }},
	{"dicts", func() string {
		return "{{ " + strings.Repeat("{'a': ", 200_000) + "1" + strings.Repeat("}", 200_000) + " }}"
	}},
	{"in_an_if", func() string {
		return "{% if " + strings.Repeat("(", 500_000) + "1" + strings.Repeat(")", 500_000) + " %}{% endif %}"
	}},
	{"additions", func() string { return "{{ 1" + strings.Repeat("+1", 1_000_000) + " }}" }},
	{"concatenations", func() string { return "{{ 'a'" + strings.Repeat("~'a'", 1_000_000) + " }}" }},
	{"ands", func() string { return "{{ 1" + strings.Repeat(" and 1", 1_000_000) + " }}" }},
	{"powers", func() string { return "{{ 1" + strings.Repeat("**1", 1_000_000) + " }}" }},
	{"filters", func() string { return "{{ 1" + strings.Repeat("|abs", 1_000_000) + " }}" }},
	{"calls", func() string { return "{{ x" + strings.Repeat("()", 1_000_000) + " }}" }},
	{"nots", func() string { return "{{ " + strings.Repeat("not ", 1_000_000) + "1 }}" }},
	{"signs", func() string { return "{{ " + strings.Repeat("- ", 1_000_000) + "x }}" }},
	{"inline_ifs", func() string { return "{{ " + strings.Repeat("1 if x else ", 100_000) + "1 }}" }},
	{"ifs", func() string {
		return strings.Repeat("{% if x %}", 1_000_000) + strings.Repeat("{% endif %}", 1_000_000)
	}},
	{"fors", func() string {
		return strings.Repeat("{% for a in x %}", 100_000) + strings.Repeat("{% endfor %}", 100_000)
	}},
	{"set_blocks", func() string { return strings.Repeat("{% set a %}", 100_000) + strings.Repeat("{% endset %}", 100_000) }},
}

// deepTemplateEnv names the deepTemplates entry a child process of
// TestDeepTemplatesDoNotCompile compiles.
const deepTemplateEnv = "INFERRAIL_TEST_DEEP_TEMPLATE"

// TestDeepTemplatesDoNotCompile: a template nested past the bounds is
// refused as one that does not compile, saying why, and a request to
// it fails as a template that does not compile does, where the engine
// used to overflow its stack (all but inline_ifs, which it compiled). An
// overflow ends the process whatever recovers, so each template is
// compiled in a child process (this test binary run again), whose stack
// is held to 64 MB for a quick and light failure; with the gateway's
// 1 GB, brackets, additions, concatenations, ands, powers, filters, calls
// and ifs overflow too.
func TestDeepTemplatesDoNotCompile(t *testing.T) {
	if name := os.Getenv(deepTemplateEnv); name != "" {
		compileDeepTemplate(name)
		return
	}
	if testing.Short() {
		t.Skip("compiles templates of megabytes in child processes")
	}
	if raceEnabled {
		// Six minutes under the detector, which has nothing to find in
		// single-goroutine children; make norace runs it.
		t.Skip("long single-goroutine children; run by make norace")
	}
	for _, tc := range deepTemplates {
		t.Run(tc.name, func(t *testing.T) {
			// Generous: the child takes well under a second.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDeepTemplatesDoNotCompile$")
			cmd.Env = append(os.Environ(), deepTemplateEnv+"="+tc.name)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the child compiling it failed (%v):\n%.2000s", err, out)
			}
			if !strings.Contains(string(out), "chat template does not compile: nested too deeply for the template engine") ||
				!strings.Contains(string(out), "render: chat template:") {
				t.Errorf("not refused as a template that does not compile:\n%.2000s", out)
			}
		})
	}
}

// compileDeepTemplate compiles the deepTemplates entry name as a model's
// tokenizer_config.json gives it, renders a request with it and prints
// the renderer's problems and the rendering's error.
func compileDeepTemplate(name string) {
	debug.SetMaxStack(64 << 20)
	for _, tc := range deepTemplates {
		if tc.name != name {
			continue
		}
		tmpl, err := json.Marshal(tc.src())
		if err != nil {
			panic(err)
		}
		r, err := newRenderer(nil, hf.ChatConfig{Template: tmpl}, Options{})
		if err != nil {
			panic(err)
		}
		fmt.Println(strings.Join(r.Problems(), "\n"))
		chat, err := tokenize.ParseChatRequest([]byte(`{"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			panic(err)
		}
		_, err = r.Render(chat.Chat)
		fmt.Printf("render: %v\n", err)
		return
	}
	panic("no deep template " + name)
}

// TestNestingBounds: templates nested up to the bounds compile, and one
// level past them does not; an assignment is no block, a set without
// one is.
func TestNestingBounds(t *testing.T) {
	nestedIfs := func(n int) string { return strings.Repeat("{% if x %}", n) + "y" + strings.Repeat("{% endif %}", n) }
	for _, tc := range []struct {
		name    string
		src     string
		refused string // what tooDeep says, "" for nothing
	}{
		{"ifs_at_bound", nestedIfs(maxBlockDepth), ""},
		{"ifs_past_bound", nestedIfs(maxBlockDepth + 1), "blocks nested deeper than 256 levels"},
		{"ifs_in_sequence", strings.Repeat(nestedIfs(200), 10), ""},
		{"elifs", "{% if x %}" + strings.Repeat("{% elif x %}", 10_000) + "{% endif %}", ""},
		{"mixed_blocks_past_bound", strings.Repeat("{% for a in x %}{% macro m() %}", 129) + strings.Repeat("{% endmacro %}{% endfor %}", 129), "blocks nested deeper than 256 levels"},
		{"assignments", strings.Repeat("{% if x %}{% set a = b == c %}{% set d = e %}", maxBlockDepth) + strings.Repeat("{% endif %}", maxBlockDepth), ""},
		{"set_blocks_past_bound", strings.Repeat("{% set a %}{% set b | trim %}", 129) + strings.Repeat("{% endset %}", 258), "blocks nested deeper than 256 levels"},
		{"operators_at_bound", "{{ 1" + strings.Repeat("+1", maxTagOperators) + " }}", ""},
		{"operators_past_bound", "{{ 1" + strings.Repeat("+1", maxTagOperators+1) + " }}", "a tag with 513 operators and brackets, more than 512"},
		{"brackets_past_bound", "{% set x = " + strings.Repeat("(", 512) + "1" + strings.Repeat(")", 512) + " %}", "a tag with 513 operators and brackets, more than 512"},
		{"spread_over_tags", strings.Repeat("{{ 1"+strings.Repeat("+1", 500)+" }}", 100), ""},
		{"in_strings_and_comments", "{{ '" + strings.Repeat("(", 100_000) + "' }}{# " + strings.Repeat("{% if %}((", 1000) + " #}", ""},
		{"raw", "{% raw %}" + strings.Repeat("{% if x %}", 1000) + "{% endraw %}", ""},
		{"lists_flat", "{{ [" + strings.Repeat("1, ", 100_000) + "1] }}", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tooDeep(tc.src); got != tc.refused {
				t.Errorf("tooDeep = %q, want %q", got, tc.refused)
			}
			ct := compileTemplate(tc.src)
			switch {
			case tc.refused == "" && ct.err != nil:
				t.Errorf("does not compile: %v", ct.err)
			case tc.refused != "" && (ct.err == nil || !strings.Contains(ct.err.Error(), tc.refused)):
				t.Errorf("compile error %v, want one saying %q", ct.err, tc.refused)
			}
		})
	}
}
