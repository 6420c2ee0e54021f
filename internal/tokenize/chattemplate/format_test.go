package chattemplate

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/tokenize/hf"
)

// FuzzDetectContentFormat: a model's chat template is outside bytes, read
// when the gateway starts or reloads, so the analysis must finish on any
// template and give one of the two formats. Two rewrites must not change
// its answer: reassigning messages from itself first (as Llama 3.x's
// templates do, which once sent the analysis into an endless loop), and a
// cycle of names through a fresh variable.
func FuzzDetectContentFormat(f *testing.F) {
	for _, s := range []string{
		`{% for m in messages %}{% for p in m['content'] %}{{ p.text }}{% endfor %}{% endfor %}`,
		`{%- set messages = messages[1:] %}{% for m in messages %}{{ m.content }}{% endfor %}`,
		`{% set a = messages %}{% set b = a|list %}{% for m in b %}{% for p in m.content %}{% endfor %}{% endfor %}`,
		`{% set ns.msgs = messages %}{% for i, m in messages %}{% endfor %}`,
		`{% macro r(content) %}{% for item in content %}{{ item }}{% endfor %}{% endmacro %}`,
		`{% raw %}{% for m in messages %}{% endraw %}{# {% set x = messages %} #}`,
	} {
		f.Add(s)
	}
	for _, fam := range chatFamilies {
		if cc, err := hf.LoadChatConfig(familyDir(fam)); err == nil && cc != nil {
			var src string
			if json.Unmarshal(cc.Template, &src) == nil {
				f.Add(src)
			}
		}
	}
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 1<<14 {
			return
		}
		fresh := "fresh"
		for strings.Contains(src, fresh) {
			fresh += "_"
		}
		want := detectWithin(t, src)
		if want != FormatString && want != FormatOpenAI {
			t.Fatalf("DetectContentFormat(%q) = %q", src, want)
		}
		for _, prefix := range []string{
			"{% set messages = messages %}",
			"{% set " + fresh + " = messages %}{% set messages = " + fresh + " %}",
		} {
			if got := detectWithin(t, prefix+src); got != want {
				t.Fatalf("DetectContentFormat(%q) = %s, but %s after the prefix %q", src, want, got, prefix)
			}
		}
	})
}

// detectWithin runs DetectContentFormat, failing the test when it has not
// returned after ten seconds: an analysis that does not end is the defect
// looked for, and a fuzzing worker has no timeout of its own per input.
func detectWithin(t *testing.T, src string) string {
	t.Helper()
	done := make(chan string, 1)
	go func() { done <- DetectContentFormat(src) }()
	select {
	case got := <-done:
		return got
	case <-time.After(10 * time.Second):
		t.Fatalf("DetectContentFormat(%q) did not return", src)
		return ""
	}
}
