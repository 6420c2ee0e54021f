package chattemplate

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ardanlabs/jinja"
	"github.com/google/go-cmp/cmp"

	"github.com/inferrail/inferrail/internal/tokenize"
	"github.com/inferrail/inferrail/internal/tokenize/hf"
	"github.com/inferrail/inferrail/internal/tokenize/tokenizetest"
)

// chatFamilies have chat templates and goldens in testdata, written by
// scripts/goldens/chat_goldens.py; llama2 there holds completion requests.
var chatFamilies = []string{"qwen3", "llama3_1", "deepseek_v3", "gemma3", "llama3_2", "mistral_nemo", "command_r_plus"}

// chatHF loads a family's tokenizer for the chat tests, once for all of
// them, or skips the test when its files have not been fetched.
func chatHF(tb testing.TB, family string) *hf.Tokenizer {
	tb.Helper()
	dir := familyDir(family)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		tb.Skipf("%s: no tokenizer files in %s: run `make tokenizers` (make test fetches them first)", family, dir)
	}
	if tok, ok := loaded.Load(family); ok {
		return tok.(*hf.Tokenizer)
	}
	tok, err := hf.Load(dir)
	if err != nil {
		tb.Fatalf("hf.Load(%s): %v", family, err)
	}
	actual, _ := loaded.LoadOrStore(family, tok)
	return actual.(*hf.Tokenizer)
}

var loaded sync.Map // family → *hf.Tokenizer, shared by the chat tests

// familyDir is where `make tokenizers` puts a family's files.
func familyDir(family string) string {
	return filepath.Join("..", "..", "..", ".cache", "tokenizers", family)
}

type chatGolden struct {
	Request string `json:"request"`
	Text    string `json:"text"`
	IDs     []int  `json:"ids"`
	Error   string `json:"error"` // "request" or "template"
	Message string `json:"message"`
}

type chatGoldenHeader struct {
	SpecialTokensMap map[string]any `json:"special_tokens_map"`
	// Now is the templates' clock when the goldens were made (the script
	// freezes it): a template that prints today's date renders at it.
	Now time.Time `json:"now"`
}

// readChatGoldens reads testdata/<family>.jsonl.gz, or the same file under
// $CHAT_GOLDENS_DIR (see scripts/goldens/chat_goldens.py).
func readChatGoldens(t testing.TB, family string) (chatGoldenHeader, []chatGolden) {
	t.Helper()
	dir := "testdata"
	if d := os.Getenv("CHAT_GOLDENS_DIR"); d != "" {
		dir = d
	}
	f, err := os.Open(filepath.Join(dir, family+".jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 1<<24)
	var head chatGoldenHeader
	var out []chatGolden
	for first := true; sc.Scan(); first = false {
		if first {
			if err := json.Unmarshal(sc.Bytes(), &head); err != nil {
				t.Fatal(err)
			}
			continue
		}
		var g chatGolden
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatal(err)
		}
		out = append(out, g)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return head, out
}

// errorKind classifies a renderer error as the goldens do.
func errorKind(err error) string {
	var re *RequestError
	var te *Error
	switch {
	case errors.As(err, &re):
		return "request"
	case errors.As(err, &te):
		return "template"
	}
	return "other: " + err.Error()
}

// lenientErrors are the Python exceptions the template engine does not
// raise: it treats an undefined value as empty where Jinja2's Undefined
// raises on use (UndefinedError), and it concatenates a string with any
// value where Python raises TypeError. Such requests are refused by vLLM
// (400) while the renderer gives them a prompt; predicting tokens for a
// request that fails anyway is harmless, so the goldens count these apart.
var lenientErrors = []string{"UndefinedError:", "TypeError:"}

// TestChatGoldens renders every golden request and compares the text and
// the token ids with what transformers gave, and errors with errors; the
// cached subtests encode the matching texts again through a piece cache,
// cold and warm (checkGoldensCached). $CHAT_GOLDENS_FAMILIES (a comma list)
// checks other families instead, to try a model's template before
// committing it.
func TestChatGoldens(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine rendering every golden, minutes under the race detector; make norace runs it")
	}
	fams, tried := chatFamilies, os.Getenv("CHAT_GOLDENS_FAMILIES")
	if tried != "" {
		fams = strings.Split(tried, ",")
	}
	for _, fam := range fams {
		t.Run(fam, func(t *testing.T) {
			tok := chatHF(t, fam)
			head, goldens := readChatGoldens(t, fam)
			if head.Now.IsZero() {
				t.Fatal(`the goldens' first line has no "now": remake them with scripts/goldens/chat_goldens.py`)
			}
			r, err := New(tok, Options{Now: func() time.Time { return head.Now }})
			if err != nil {
				t.Fatal(err)
			}
			var ok, lenient int
			var matched []goldenIDs
			for i, g := range goldens {
				p, err := tokenize.ParseChatRequest([]byte(g.Request))
				var ids []int
				var text string
				if err == nil {
					if text, err = r.Render(p.Chat); err == nil {
						ids = tok.Encode(nil, text, p.AddSpecial)
					}
				}
				switch {
				case g.Error == "template" && err == nil && slices.ContainsFunc(lenientErrors, func(p string) bool { return strings.HasPrefix(g.Message, p) }):
					lenient++
				case g.Error != "" && err == nil:
					t.Errorf("#%d %s: rendered, want %s error (%s)\n%q", i, g.Request, g.Error, g.Message, text)
				case g.Error != "" && errorKind(err) != g.Error:
					t.Errorf("#%d %s: error %v (%s), want a %s error (%s)", i, g.Request, err, errorKind(err), g.Error, g.Message)
				case g.Error != "":
					ok++
				case err != nil:
					t.Errorf("#%d %s: %v, want\n%q", i, g.Request, err, g.Text)
				case text != g.Text:
					t.Errorf("#%d %s: text\n%q, want\n%q", i, g.Request, text, g.Text)
				case !slices.Equal(ids, g.IDs):
					t.Errorf("#%d %s: ids differ at the same text %q", i, g.Request, text)
				default:
					ok++
					matched = append(matched, goldenIDs{fmt.Sprintf("#%d %s", i, g.Request), text, p.AddSpecial, g.IDs})
				}
			}
			t.Run("cached", func(t *testing.T) { checkGoldensCached(t, tok, matched) })
			t.Logf("%s: %d golden requests: %d match, %d rendered where Python raised %v",
				fam, len(goldens), ok, lenient, lenientErrors)
			// The committed goldens must keep their size and their share
			// of exact matches; a template only being tried is judged by
			// the requests that differ, reported above.
			if tried == "" && (len(goldens) < 150 || ok < len(goldens)*9/10) {
				t.Errorf("%d of %d goldens match: too few", ok, len(goldens))
			}
		})
	}
}

// TestChatSpecialTokens: the template variables of special tokens are
// transformers' special_tokens_map.
func TestChatSpecialTokens(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine rendering every template over many conversations, minutes under the race detector; make norace runs it")
	}
	for _, fam := range append(slices.Clone(chatFamilies), "llama2") {
		t.Run(fam, func(t *testing.T) {
			tok := chatHF(t, fam)
			head, _ := readChatGoldens(t, fam)
			got := map[string]any{}
			for k, v := range specialTokenVars(tok.ChatConfig()) {
				if v.IsList() {
					var items []any
					for _, it := range v.AsList().Items {
						items = append(items, it.AsString())
					}
					got[k] = items
					continue
				}
				got[k] = v.AsString()
			}
			if diff := cmp.Diff(head.SpecialTokensMap, got); diff != "" {
				t.Errorf("special tokens (-transformers +ours):\n%s", diff)
			}
		})
	}
}

// TestCompletionGoldens: Llama 2 completion prompts, with and without
// add_special_tokens, then again through a piece cache, cold and warm.
func TestCompletionGoldens(t *testing.T) {
	tok := chatHF(t, "llama2")
	_, goldens := readChatGoldens(t, "llama2")
	var all []goldenIDs
	for i, g := range goldens {
		p, err := tokenize.ParseCompletionRequest([]byte(g.Request))
		if err != nil {
			t.Fatalf("#%d %s: %v", i, g.Request, err)
		}
		if got := tok.Encode(nil, p.Text, p.AddSpecial); !slices.Equal(got, g.IDs) {
			t.Errorf("#%d %s: ids %v, want %v", i, g.Request, got, g.IDs)
		}
		all = append(all, goldenIDs{fmt.Sprintf("#%d %s", i, g.Request), p.Text, p.AddSpecial, g.IDs})
	}
	if len(goldens) < 50 {
		t.Errorf("only %d goldens", len(goldens))
	}
	t.Run("cached", func(t *testing.T) { checkGoldensCached(t, tok, all) })
}

func TestDetectContentFormat(t *testing.T) {
	tests := []struct {
		name, template, want string
	}{
		{"plain", `{% for m in messages %}{{ m.content }}{% endfor %}`, FormatString},
		{"loop_item_key", `{% for m in messages %}{% for p in m['content'] %}{{ p.text }}{% endfor %}{% endfor %}`, FormatOpenAI},
		{"loop_item_attr", `{% for m in messages %}{% for p in m.content %}{% endfor %}{% endfor %}`, FormatOpenAI},
		{"assigned_slice", `{% set loop_messages = messages[1:] %}{% for m in loop_messages %}{% for p in m['content'] | selectattr('type', 'equalto', 'text') %}{% endfor %}{% endfor %}`, FormatOpenAI},
		{"assigned_chain", `{% set a = messages %}{% set b = a|list %}{% for m in b %}{% for p in m.content %}{% endfor %}{% endfor %}`, FormatOpenAI},
		{"reversed", `{% for m in messages[::-1] %}{% for p in m.content %}{% endfor %}{% endfor %}`, FormatOpenAI},
		{"content_variable", `{% macro r(content) %}{% for item in content %}{{ item }}{% endfor %}{% endmacro %}`, FormatOpenAI},
		{"index_not_slice", `{% set first = messages[0] %}{% for p in first.content %}{% endfor %}`, FormatString},
		{"not_a_messages_loop", `{% for m in other %}{% for p in m.content %}{% endfor %}{% endfor %}`, FormatString},
		{"call_breaks_chain", `{% for m in messages %}{% for p in m.content.split() %}{% endfor %}{% endfor %}`, FormatString},
		{"negated_test", `{% set x = messages is not none %}{% for m in x %}{% for p in m.content %}{% endfor %}{% endfor %}`, FormatString},
		{"tuple_target", `{% for i, m in messages %}{% endfor %}`, FormatString},
		{"namespace_target", `{% set ns.msgs = messages %}{% for m in messages %}{% for p in m.content %}{% endfor %}{% endfor %}`, FormatString},
		{"string_contains_tag_end", `{% set x = "%}" %}{% for m in messages %}{% for p in m['content'] %}{% endfor %}{% endfor %}`, FormatOpenAI},
		{"comment", `{# {% for m in messages %}{% for p in m.content %}{% endfor %}{% endfor %} #}`, FormatString},
		{"raw", `{% raw %}{% for m in messages %}{% for p in m.content %}{% endfor %}{% endfor %}{% endraw %}`, FormatString},
		{"loop_with_condition", `{% for m in messages if m.role != 'system' %}{% for p in m.content if p.type == 'text' %}{% endfor %}{% endfor %}`, FormatOpenAI},
		{"unterminated", `{% for m in messages %}{% for p in m.content`, FormatString},
		// Llama 3.x's official templates drop the system message this way.
		{"self_assigned", `{% set messages = messages[1:] %}{% for m in messages %}{{ m.content }}{% endfor %}`, FormatString},
		{"self_assigned_openai", `{%- set messages = messages[1:] %}{% set messages = messages[1:] %}{% for m in messages %}{% for p in m.content %}{% endfor %}{% endfor %}`, FormatOpenAI},
		{"assigned_cycle", `{% set a = messages %}{% set messages = a %}{% set b = a|list %}{% for m in b %}{% for p in m.content %}{% endfor %}{% endfor %}`, FormatOpenAI},
		{"cycle_then_bad_target", `{% set a = messages %}{% set messages = a %}{% set ns.x = a %}{% for m in a %}{% for p in m.content %}{% endfor %}{% endfor %}`, FormatString},
	}
	for _, tt := range tests {
		if got := DetectContentFormat(tt.template); got != tt.want {
			t.Errorf("%s: DetectContentFormat(%q) = %s, want %s", tt.name, tt.template, got, tt.want)
		}
	}
	// The real templates, read without loading their tokenizers (four
	// loads take most of a minute under the race detector).
	for fam, want := range map[string]string{"qwen3": FormatString, "llama3_1": FormatString, "deepseek_v3": FormatString, "gemma3": FormatOpenAI, "llama3_2": FormatString, "mistral_nemo": FormatString} {
		cc, err := hf.LoadChatConfig(familyDir(fam))
		if err != nil {
			t.Fatal(err)
		}
		if cc == nil {
			t.Skipf("%s: no tokenizer files in %s: run `make tokenizers` (make test fetches them first)", fam, familyDir(fam))
		}
		var src string
		if err := json.Unmarshal(cc.Template, &src); err != nil {
			t.Fatal(err)
		}
		if got := DetectContentFormat(src); got != want {
			t.Errorf("%s: content format %s, want %s", fam, got, want)
		}
	}
}

// renderWith renders body with a template of ours and a fixed clock.
func renderWith(t *testing.T, tmpl string, opts Options, body string) (string, error) {
	t.Helper()
	cfg := hf.ChatConfig{Template: json.RawMessage(mustJSON(t, tmpl)), SpecialTokens: []hf.SpecialToken{{Attr: "bos_token", Content: "<s>"}}}
	if opts.Now == nil {
		opts.Now = func() time.Time { return time.Date(2026, 3, 7, 14, 5, 9, 0, time.UTC) }
	}
	r, err := newRenderer(nil, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tokenize.ParseChatRequest([]byte(body))
	if err != nil {
		return "", err
	}
	return r.Render(p.Chat)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestChatKwargs(t *testing.T) {
	const tmpl = `{{ a }}|{{ b }}|{{ c }}|{{ enable_thinking }}|{{ add_generation_prompt }}|{{ reasoning_effort is defined }}`
	opts := Options{Kwargs: json.RawMessage(`{"a": "model", "b": "model", "c": 1, "enable_thinking": true}`)}
	tests := []struct {
		name, body, want string
	}{
		{"defaults", `{"messages":[{"role":"user","content":"x"}]}`, "model|model|1|True|True|False"},
		{"request_wins", `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"b":"req","c":2.0}}`, "model|req|2.0|True|True|False"},
		{"null_and_auto_ignored", `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"a":null,"b":"auto"}}`, "model|model|1|True|True|False"},
		{"body_wins_over_kwargs", `{"messages":[{"role":"user","content":"x"}],"add_generation_prompt":false,"chat_template_kwargs":{"add_generation_prompt":true}}`, "model|model|1|True|False|False"},
		{"reasoning_effort_keeps_given_thinking", `{"messages":[{"role":"user","content":"x"}],"reasoning_effort":"none"}`, "model|model|1|True|True|True"},
		{"unused_keys_are_fine", `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"padding":true,"zzz":1}}`, "model|model|1|True|True|False"},
	}
	for _, tt := range tests {
		got, err := renderWith(t, tmpl, opts, tt.body)
		if err != nil || got != tt.want {
			t.Errorf("%s: Render = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	got, err := renderWith(t, `{{ enable_thinking }}`, Options{}, `{"messages":[{"role":"user","content":"x"}],"reasoning_effort":"none"}`)
	if err != nil || got != "False" {
		t.Errorf("reasoning_effort none: %q, %v; want enable_thinking False", got, err)
	}
	for name, body := range map[string]string{
		"tokenize":        `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"tokenize":true}}`,
		"messages":        `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"messages":[]}}`,
		"not_an_object":   `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":[1]}`,
		"assistant_masks": `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"return_assistant_tokens_mask":true}}`,
	} {
		if _, err := renderWith(t, tmpl, opts, body); err == nil {
			t.Errorf("%s: rendered, want an error", name)
		}
	}
	// vLLM reads a template's variables knowing transformers' {% generation %}
	// tag (renderers/hf.py), so such a template keeps its kwargs too: a
	// plain Jinja2 would find none and drop them all.
	const generation = `{{ bos_token }}{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}|{{ enable_thinking is defined }}|{{ documents | length }}|{{ add_generation_prompt }}`
	got, err = renderWith(t, generation, opts, `{"messages":[{"role":"user","content":"Q"}],"chat_template_kwargs":{"bos_token":"<custom-bos>","enable_thinking":false},"documents":[{"text":"d"}]}`)
	if want := "<custom-bos>Q|True|1|True"; err != nil || got != want {
		t.Errorf("generation tags: %q, %v; want %q", got, err, want)
	}
	_, err = renderWith(t, tmpl, opts, `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"chat_template":"{{1}}"}}`)
	var ue *tokenize.UnsupportedError
	if !errors.As(err, &ue) || ue.Reason != tokenize.ReasonTemplate {
		t.Errorf("chat_template in kwargs: %v, want unsupported template", err)
	}
}

func TestChatContinueFinalMessage(t *testing.T) {
	const tmpl = `{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}`
	const trimmed = `{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>{% endfor %}`
	tests := []struct {
		name, tmpl, last, want string
	}{
		{"plain", tmpl, "Sure", "<user>Hi</user><assistant>Sure"},
		{"trailing_space_kept", tmpl, "Sure ", "<user>Hi</user><assistant>Sure "},
		{"trimmed_by_template", trimmed, "Sure  ", "<user>Hi</user><assistant>Sure"},
		{"unicode_space_trimmed", trimmed, "Sure\u3000", "<user>Hi</user><assistant>Sure"},
	}
	for _, tt := range tests {
		body := `{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":` + string(mustJSON(t, tt.last)) + `}],"continue_final_message":true,"add_generation_prompt":false}`
		got, err := renderWith(t, tt.tmpl, Options{}, body)
		if err != nil || got != tt.want {
			t.Errorf("%s: Render = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	_, err := renderWith(t, tmpl, Options{}, `{"messages":[{"role":"user","content":"Hi"}],"continue_final_message":true}`)
	var re *RequestError
	if !errors.As(err, &re) {
		t.Errorf("with add_generation_prompt: %v, want a request error", err)
	}
	_, err = renderWith(t, `{{ messages[0].content[:2] }}`, Options{}, `{"messages":[{"role":"user","content":"Hello"}],"continue_final_message":true,"add_generation_prompt":false}`)
	var te *Error
	if !errors.As(err, &te) {
		t.Errorf("template cutting the final message: %v, want a template error", err)
	}
}

// TestChatToolCallArguments: arguments are parsed as Python's json.loads
// does, keeping key order and number types, and tools are dumped with their
// declared fields first.
func TestChatToolCallArguments(t *testing.T) {
	const tmpl = `{% for m in messages %}{% for c in m.tool_calls %}{{ c | tojson }}/{{ c.function.arguments }};{% endfor %}{% endfor %}{{ tools | tojson }}`
	call := func(args string) string {
		return `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"arguments":` + string(mustJSON(t, args)) + `,"name":"f"},"id":"c1"}]}],"tools":[{"function":{"parameters":{"b":1.0,"a":1},"name":"f","strict":true}}]}`
	}
	const tools = `[{"type": "function", "function": {"name": "f", "description": null, "parameters": {"b": 1.0, "a": 1}, "strict": true}}]`
	tests := []struct {
		args, want string
	}{
		{`{"b": 1.0, "a": 1, "c": 1e5, "d": -0.5}`, `{"id": "c1", "function": {"arguments": {"b": 1.0, "a": 1, "c": 100000.0, "d": -0.5}, "name": "f"}, "type": "function"}/{'b': 1.0, 'a': 1, 'c': 100000.0, 'd': -0.5};`},
		{`{"dup": 1, "x": 0, "dup": 2}`, `{"id": "c1", "function": {"arguments": {"dup": 2, "x": 0}, "name": "f"}, "type": "function"}/{'dup': 2, 'x': 0};`},
		{``, `{"id": "c1", "function": {"arguments": {}, "name": "f"}, "type": "function"}/{};`},
		{`not json`, `{"id": "c1", "function": {"arguments": {}, "name": "f"}, "type": "function"}/{};`},
		{` [1, "é", null, true] `, `{"id": "c1", "function": {"arguments": [1, "é", null, true], "name": "f"}, "type": "function"}/[1, 'é', None, True];`},
	}
	for _, tt := range tests {
		got, err := renderWith(t, tmpl, Options{}, call(tt.args))
		if want := tt.want + tools; err != nil || got != want {
			t.Errorf("arguments %q: Render =\n%q, %v; want\n%q", tt.args, got, err, want)
		}
	}
	_, err := renderWith(t, tmpl, Options{}, call(`{"n": 123456789012345678901234567890}`))
	var ue *tokenize.UnsupportedError
	if !errors.As(err, &ue) || ue.Reason != tokenize.ReasonNumber {
		t.Errorf("a 100-bit integer: %v, want unsupported number", err)
	}
}

func TestChatContentFormats(t *testing.T) {
	const tmpl = `{% for m in messages %}{{ m.content | tojson }};{% endfor %}`
	body := `{"messages":[{"role":"user","content":"a"},{"role":"user","content":["b",{"type":"text","text":"c"}]},{"role":"assistant","content":null},{"role":"tool","content":[{"type":"text","text":"d"},{"type":"text","text":"e"}]}]}`
	for format, want := range map[string]string{
		FormatString: `"a";"b\nc";"";"d\ne";`,
		FormatOpenAI: `[{"type": "text", "text": "a"}];[{"type": "text", "text": "b"}, {"type": "text", "text": "c"}];[];"d\ne";`,
	} {
		got, err := renderWith(t, tmpl, Options{ContentFormat: format}, body)
		if err != nil || got != want {
			t.Errorf("%s: Render = %q, %v; want %q", format, got, err, want)
		}
	}
}

func TestChatTemplateFunctions(t *testing.T) {
	got, err := renderWith(t, `{{ bos_token }}{{ strftime_now("%d %b %Y %H:%M:%S %A %j %%") }}{{ eos_token is defined }}`, Options{}, `{"messages":[{"role":"user","content":"x"}]}`)
	if want := "<s>07 Mar 2026 14:05:09 Saturday 066 %False"; err != nil || got != want {
		t.Errorf("Render = %q, %v; want %q", got, err, want)
	}
	_, err = renderWith(t, `{{ raise_exception("no " ~ messages[0].role) }}`, Options{}, `{"messages":[{"role":"user","content":"x"}]}`)
	var te *Error
	if !errors.As(err, &te) || te.Err.Error() != "no user" {
		t.Errorf("raise_exception: %v, want a template error saying no user", err)
	}
}

// TestChatTemplateLineBreaks: a template's source is read as Jinja2 reads
// it under transformers (keep_trailing_newline off): line breaks of any
// kind become "\n", string literals included, and one final line break is
// dropped. The wants are what Jinja2 3.1.6 renders.
func TestChatTemplateLineBreaks(t *testing.T) {
	body := `{"messages":[{"role":"user","content":"x"}]}`
	for _, tt := range []struct{ tmpl, want string }{
		{"{{ 'a' }} \n", "a "},
		{"{{ 'a' }}\n\n", "a\n"},
		{"x\r\ny\r\n", "x\ny"},
		{"x\ry", "x\ny"},
		{"{{ 'a\r\nb' }}", "a\nb"},
		{"{% if true %}\nx\n{% endif %}\n", "x\n"},
		{"x\r\n\r\n", "x\n"},
		{"\n", ""},
	} {
		if got, err := renderWith(t, tt.tmpl, Options{}, body); err != nil || got != tt.want {
			t.Errorf("template %q: Render = %q, %v; want %q", tt.tmpl, got, err, tt.want)
		}
	}
}

func TestChatNamedTemplates(t *testing.T) {
	named := `[{"name":"default","template":"D"},{"name":"tool_use","template":"T"}]`
	cfg := hf.ChatConfig{Template: json.RawMessage(named)}
	r, err := newRenderer(nil, cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for body, want := range map[string]string{
		`{"messages":[{"role":"user","content":"x"}]}`:                                            "D",
		`{"messages":[{"role":"user","content":"x"}],"tools":[]}`:                                 "T",
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"function":{"name":"f"}}]}`:        "T",
		`{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"tools":[{"a":1}]}}`: "T",
	} {
		p, err := tokenize.ParseChatRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := r.Render(p.Chat); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", body, got, err, want)
		}
	}
	r, err = newRenderer(nil, cfg, Options{Template: "tool_use"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.Render(&tokenize.Chat{RawMessages: []json.RawMessage{json.RawMessage(`{"role":"user","content":"x"}`)}}); err != nil || got != "T" {
		t.Errorf("option tool_use: %q, %v", got, err)
	}
	if _, err := New(&hf.Tokenizer{}, Options{}); err != nil {
		t.Fatal(err)
	} else if r, _ := New(&hf.Tokenizer{}, Options{}); true {
		if _, err := r.Render(&tokenize.Chat{}); !errors.Is(err, ErrMissing) {
			t.Errorf("no template: %v, want ErrMissing", err)
		}
	}
}

// TestChatReusesContents: the renderer takes the contents the parser
// decoded, for the bytes they were decoded from only.
func TestChatReusesContents(t *testing.T) {
	cfg := hf.ChatConfig{Template: json.RawMessage(`"{% for m in messages %}{{ m.content }};{% endfor %}"`)}
	r, err := newRenderer(nil, cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := tokenize.ParseChatRequest([]byte(`{"messages":[{"role":"user","content":"a"},{"role":"user","content":["b"]},{"role":"user","content":"c","content":"d"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for i := range p.Chat.Contents {
		p.Chat.Contents[i].Value += "!"
	}
	if got, err := r.Render(p.Chat); err != nil || got != "a!;b;d!;" {
		t.Errorf("Render = %q, %v; want the parsed contents, marked: %q", got, err, "a!;b;d!;")
	}
	copied := *p.Chat
	copied.RawMessages = []json.RawMessage{json.RawMessage(`{"role":"user","content":"a"}`)}
	if got, err := r.Render(&copied); err != nil || got != "a;" {
		t.Errorf("Render of other bytes = %q, %v; want %q", got, err, "a;")
	}
}

func TestJSONValueOrder(t *testing.T) {
	v, err := jsonValue([]byte(`{"z": 1, "a": [1.0, 2, {"y": null, "b": false}], "z": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := jinjaToJSON(v)
	if want := `{"z": 3, "a": [1.0, 2, {"y": null, "b": false}]}`; err != nil || out != want {
		t.Errorf("tojson = %q, %v; want %q", out, err, want)
	}
}

func jinjaToJSON(v jinja.Value) (string, error) {
	tmpl, err := jinja.Compile(`{{ v | tojson }}`)
	if err != nil {
		return "", err
	}
	return tmpl.RenderValues(map[string]jinja.Value{"v": v})
}

// FuzzChatRender: no request body panics the renderer. Every family's
// template renders (reading only tokenizer_config.json, so that workers
// start fast), and a synthetic one; the text of the family the first
// argument picks (chatFamilies, modulo their number) is also tokenized and
// checked as FuzzHFEncode checks text (tokenizetest's Families.Check), the
// input skipped there when that family's tokenizer files are missing.
func FuzzChatRender(f *testing.F) {
	if raceEnabled {
		f.Skip("one goroutine rendering the seed corpus, where the race detector has nothing to find; make norace runs it (and make fuzz mutates)")
	}
	type renderer struct {
		family string // "" for the synthetic template
		r      *Renderer
	}
	opts := Options{Now: func() time.Time { return time.Date(2026, 3, 7, 14, 5, 9, 0, time.UTC) }}
	var renderers []renderer
	for i, fam := range chatFamilies {
		cfg, err := hf.LoadChatConfig(familyDir(fam))
		if err != nil || cfg == nil {
			continue // not fetched: the synthetic template below still runs
		}
		r, err := newRenderer(nil, *cfg, opts)
		if err != nil {
			f.Fatal(err)
		}
		renderers = append(renderers, renderer{fam, r})
		_, goldens := readChatGoldens(f, fam)
		for j, g := range goldens {
			if j%5 == 0 {
				f.Add(uint8(i), []byte(g.Request))
			}
		}
	}
	cfg := hf.ChatConfig{Template: json.RawMessage(`"{% for m in messages %}{% for p in m.content %}{{ p | tojson }}{% endfor %}{{ m.tool_calls | tojson }}{% endfor %}{{ tools }}{{ documents }}"`)}
	r, err := newRenderer(nil, cfg, opts)
	if err != nil {
		f.Fatal(err)
	}
	renderers = append(renderers, renderer{"", r})
	f.Add(uint8(0), []byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"tools":[{"function":{"name":"f"}}]}`))
	f.Add(uint8(1), []byte(`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\\"a\\": [1.0, {\\"b\\": 1e400}]}"}}]}],"continue_final_message":true,"add_generation_prompt":false}`))
	tokenizers := tokenizetest.Families[*hf.Tokenizer]{Load: chatHF}
	f.Fuzz(func(t *testing.T, family uint8, body []byte) {
		if len(body) > 1<<14 {
			return
		}
		p, err := tokenize.ParseChatRequest(body)
		if err != nil {
			return
		}
		// Rendering with the contents the parser decoded is rendering
		// without them.
		fresh := *p.Chat
		fresh.Contents = nil
		picked := chatFamilies[int(family)%len(chatFamilies)]
		var text string
		rendered := false
		for _, r := range renderers {
			got, err := r.r.Render(p.Chat)
			want, wantErr := r.r.Render(&fresh)
			if got != want || errKind(err) != errKind(wantErr) {
				t.Fatalf("Render(%q) = %q, %v; without the parsed contents %q, %v", body, got, err, want, wantErr)
			}
			if r.family == picked && err == nil {
				text, rendered = got, true
			}
		}
		if rendered {
			tokenizers.Check(t, picked, text)
		}
	})
}

// goldenIDs is a text and the ids a golden gives for it.
type goldenIDs struct {
	name    string // names the golden in failures
	text    string
	special bool // add_special_tokens
	ids     []int
}

// checkGoldensCached encodes goldens through one piece cache as a gateway
// does, token for token: cold (an empty cache, where a piece is encoded the
// first time and found when a later golden repeats it), warm (the same
// cache, the same order) and warm again in another order, so that each
// golden takes pieces that others put. The cache keeps everything, so warm
// passes must find every piece.
func checkGoldensCached(t *testing.T, tok *hf.Tokenizer, goldens []goldenIDs) {
	t.Helper()
	c := tok.WithCache(4 << 20)
	inOrder := make([]int, len(goldens))
	for i := range inOrder {
		inOrder[i] = i
	}
	shuffled := rand.New(rand.NewPCG(7, 8)).Perm(len(goldens))
	for _, pass := range []struct {
		name  string
		order []int
	}{{"cold", inOrder}, {"warm", inOrder}, {"warm_shuffled", shuffled}} {
		_, missesBefore := c.CacheStats()
		failed := 0
		for _, i := range pass.order {
			g := goldens[i]
			if got := c.Encode(nil, g.text, g.special); !slices.Equal(got, g.ids) {
				if failed++; failed <= 10 {
					t.Errorf("%s: %s: Encode(%q, %v) with cache\n got %v\nwant %v", pass.name, g.name, g.text, g.special, got, g.ids)
				}
			}
		}
		if failed > 0 {
			t.Errorf("%s: %d of %d goldens differ", pass.name, failed, len(goldens))
		}
		if _, misses := c.CacheStats(); pass.name != "cold" && misses != missesBefore {
			t.Errorf("%s: %d pieces missed, want all found", pass.name, misses-missesBefore)
		}
	}
	hits, misses := c.CacheStats()
	if hits == 0 {
		t.Errorf("CacheStats() = %d hits, %d misses: no golden has a piece the cache keeps", hits, misses)
	}
	t.Logf("%d goldens, 3 passes: %d pieces found, %d encoded", len(goldens), hits, misses)
}

// BenchmarkChatRequest8k is the whole edge path of an 8,000-token chat
// request with Qwen3: the body parsed, the chat template rendered, the text
// tokenized. cold uses an empty piece cache each time; warm one that has
// seen the same request (BenchmarkHFChat8k's warm-system covers a seen
// system prompt before new turns).
func BenchmarkChatRequest8k(b *testing.B) {
	tok := chatHF(b, "qwen3")
	chunks, _ := tokenizetest.Corpus(b)
	var lines []string
	for _, c := range chunks {
		lines = append(lines, strings.SplitAfter(c, "\n")...)
	}
	take := func(tokens int) string {
		var sb strings.Builder
		for n := 0; n < tokens; {
			sb.WriteString(lines[0])
			n += len(tok.Encode(nil, lines[0], false))
			lines = lines[1:]
		}
		return sb.String()
	}
	system := take(5000)
	var turns []string
	for range 5 {
		turns = append(turns, take(600))
	}
	body := func(tag string) []byte {
		msgs := []map[string]string{{"role": "system", "content": system}}
		for i, t := range turns {
			msgs = append(msgs, map[string]string{"role": []string{"user", "assistant"}[i%2], "content": tag + t})
		}
		out, err := json.Marshal(map[string]any{"model": "m", "messages": msgs, "chat_template_kwargs": map[string]bool{"enable_thinking": false}})
		if err != nil {
			b.Fatal(err)
		}
		return out
	}
	same := body("")
	renderer := func(b *testing.B, c *hf.Tokenizer) *Renderer {
		r, err := New(c, Options{})
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	encode := func(b *testing.B, r *Renderer, req []byte) int {
		p, err := tokenize.ParseChatRequest(req)
		if err != nil {
			b.Fatal(err)
		}
		ids, err := r.ChatIDs(p)
		if err != nil {
			b.Fatal(err)
		}
		return len(ids)
	}
	n := encode(b, renderer(b, tok), same)
	b.Run("cold", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer() // the gateway builds its renderer once, at start
			r := renderer(b, tok.WithCache(4<<20))
			b.StartTimer()
			encode(b, r, same)
		}
		b.ReportMetric(float64(n), "tokens")
	})
	b.Run("warm", func(b *testing.B) {
		r := renderer(b, tok.WithCache(4<<20))
		encode(b, r, same)
		b.ReportAllocs()
		for b.Loop() {
			encode(b, r, same)
		}
		b.ReportMetric(float64(n), "tokens")
	})
}

// TestParseChatTemplatesKeysAreCaseSensitive: a list of named templates is
// read as transformers reads it, each entry's "name" and "template" case
// and all (found by a review: encoding/json took "Name" for "name"); an
// entry without them is refused, as transformers fails on it (KeyError).
func TestParseChatTemplatesKeysAreCaseSensitive(t *testing.T) {
	for _, tt := range []struct {
		name, raw string
		want      map[string]string // nil: refused
	}{
		{name: "exact", raw: `[{"name":"default","template":"a"}]`, want: map[string]string{"default": "a"}},
		{name: "Name", raw: `[{"Name":"default","template":"a"}]`},
		{name: "Template", raw: `[{"name":"default","Template":"a"}]`},
		{name: "other_case_beside", raw: `[{"name":"default","template":"a","Template":"b","NAME":"x"}]`,
			want: map[string]string{"default": "a"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			named, _, err := parseChatTemplates(json.RawMessage(tt.raw))
			switch {
			case tt.want == nil && err == nil:
				t.Fatalf("parseChatTemplates(%s) = %v, want an error", tt.raw, named)
			case tt.want != nil && err != nil:
				t.Fatalf("parseChatTemplates(%s): %v", tt.raw, err)
			case !maps.Equal(named, tt.want):
				t.Errorf("parseChatTemplates(%s) = %v, want %v", tt.raw, named, tt.want)
			}
		})
	}
}
