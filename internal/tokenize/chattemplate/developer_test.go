package chattemplate

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/inferrail/inferrail/internal/tokenize"
)

// TestChatDeveloperRole: developer messages reach the template as vLLM's
// Hugging Face renderer passes them. A template that names the role as a
// quoted string gets them unchanged, with their tools (null); any other
// gets them as system messages without tools, all system messages merged
// into one at the front ("\n\n" between their texts, an empty one left
// out) when one stands elsewhere.
func TestChatDeveloperRole(t *testing.T) {
	// The templates print each message's role, content, name and whether
	// it has tools; the last two name the developer role.
	const (
		plain       = `{% for m in messages %}[{{ m.role }}:{{ m.content }}{% if m.name is defined %}|name={{ m.name }}{% endif %}{% if m.tools is defined %}|tools={{ m.tools }}{% endif %}]{% endfor %}`
		unquoted    = `{# a developer role is not named here #}` + plain
		doubleQuote = `{% if false %}{{ "developer" }}{% endif %}` + plain
		singleQuote = `{% if false %}{{ 'developer' }}{% endif %}` + plain
		// openai takes content as parts.
		openai = `{% for m in messages %}[{{ m.role }}:{% if m.content is string %}s={{ m.content }}{% else %}{% for p in m.content %}p={{ p.text }};{% endfor %}{% endif %}]{% endfor %}`
	)
	msg := func(role, content string) string {
		return `{"role":"` + role + `","content":` + string(mustJSON(t, content)) + `}`
	}
	chat := func(msgs ...string) string {
		return `{"messages":[` + strings.Join(msgs, ",") + `],"add_generation_prompt":false}`
	}
	tests := []struct {
		name, tmpl, body, want string
	}{
		{"alone", plain, chat(msg("developer", "D")), "[system:D]"},
		{"first_keeps_name", plain, chat(`{"role":"developer","content":"D","name":"n"}`, msg("user", "U")), "[system:D|name=n][user:U]"},
		{"after_system_merged", plain, chat(msg("system", "S"), msg("developer", "D"), msg("user", "U")), "[system:S\n\nD][user:U]"},
		{"after_user_moved_first", plain, chat(msg("user", "U"), msg("developer", "D")), "[system:D][user:U]"},
		{"later_system_merged_in_order", plain, chat(msg("developer", "D"), msg("user", "U"), msg("system", "S"), msg("assistant", "A")), "[system:D\n\nS][user:U][assistant:A]"},
		{"empty_left_out", plain, chat(msg("system", ""), msg("user", "U"), msg("developer", "D")), "[system:D][user:U]"},
		{"all_empty", plain, chat(msg("user", "U"), msg("developer", "")), "[system:][user:U]"},
		{"merged_has_no_name", plain, chat(`{"role":"system","content":"S","name":"a"}`, `{"role":"developer","content":"D","name":"b"}`), "[system:S\n\nD]"},
		{"parts_joined", plain, chat(msg("system", "S"), `{"role":"developer","content":[{"type":"text","text":"a"},"b"]}`), "[system:S\n\na\nb]"},
		{"tools_dropped", plain, chat(`{"role":"developer","content":"D","tools":[{"type":"function","function":{"name":"f"}}]}`, msg("user", "U")), "[system:D][user:U]"},
		{"no_developer_no_merge", plain, chat(msg("system", "S1"), msg("user", "U"), msg("system", "S2")), "[system:S1][user:U][system:S2]"},
		{"unquoted_mention_converts", unquoted, chat(msg("user", "U"), msg("developer", "D")), "[system:D][user:U]"},
		{"named_double_quotes", doubleQuote, chat(msg("system", "S"), msg("developer", "D"), msg("user", "U")), "[system:S][developer:D|tools=None][user:U]"},
		{"named_single_quotes", singleQuote, chat(msg("user", "U"), msg("developer", "D")), "[user:U][developer:D|tools=None]"},
		{"named_null_tools", singleQuote, chat(`{"role":"developer","content":"D","tools":null}`), "[developer:D|tools=None]"},
		{"openai_first_keeps_parts", openai, chat(`{"role":"developer","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`, msg("user", "U")), "[system:p=a;p=b;][user:p=U;]"},
		{"openai_merged_is_string", openai, chat(msg("system", "S"), `{"role":"developer","content":[{"type":"text","text":"a"},{"type":"text","text":""}]}`, msg("user", "U")), "[system:s=S\n\na\n][user:p=U;]"},
		// The final message is the last after the merge.
		{"continue_final_after_merge", plain, `{"messages":[` + msg("user", "U") + `,` + msg("developer", "D") + `],"continue_final_message":true,"add_generation_prompt":false}`, "[system:D][user:U"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := renderWith(t, tt.tmpl, Options{}, tt.body)
			if err != nil || got != tt.want {
				t.Errorf("Render(%s) = %q, %v; want %q", tt.body, got, err, tt.want)
			}
		})
	}

	// vLLM passes a developer message's tools as pydantic validated them,
	// which we do not reproduce: not followed, for a template that names
	// the role.
	_, err := renderWith(t, doubleQuote, Options{}, chat(`{"role":"developer","content":"D","tools":[{"type":"function","function":{"name":"f"}}]}`))
	var ue *tokenize.UnsupportedError
	if !errors.As(err, &ue) || ue.Reason != tokenize.ReasonDeveloper {
		t.Errorf("developer tools for a template naming the role: %v, want unsupported %s", err, tokenize.ReasonDeveloper)
	}
}

// TestChatDeveloperFamilies: with every cached family's chat template (a
// ChatML template for gpt4o and llama2, which have none) a chat with
// developer messages tokenizes as the same chat with them turned into
// system messages and merged where vLLM merges them. None of these
// templates names the developer role.
func TestChatDeveloperFamilies(t *testing.T) {
	const chatML = `{% for m in messages %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`
	pairs := []struct {
		name, developer, system, text string
	}{
		{
			"first",
			`{"messages":[{"role":"developer","content":"Be brief."},{"role":"user","content":"Hi"}]}`,
			`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}`,
			"Be brief.",
		},
		{
			"merged_after_system",
			`{"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"},{"role":"developer","content":"Answer in French."},{"role":"user","content":"Bye"}]}`,
			`{"messages":[{"role":"system","content":"You are terse.\n\nAnswer in French."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"},{"role":"user","content":"Bye"}]}`,
			"Answer in French.",
		},
		{
			"parts_moved_first",
			`{"messages":[{"role":"user","content":"Hi"},{"role":"developer","content":[{"type":"text","text":"one"},{"type":"text","text":"two"}]}]}`,
			`{"messages":[{"role":"system","content":"one\ntwo"},{"role":"user","content":"Hi"}]}`,
			"one\ntwo",
		},
	}
	for _, fam := range append(slices.Clone(chatFamilies), "gpt4o", "llama2") {
		t.Run(fam, func(t *testing.T) {
			tok := chatHF(t, fam)
			var opts Options
			if fam == "gpt4o" || fam == "llama2" {
				opts.Template = chatML
			}
			r, err := New(tok, opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pairs {
				dev, err := tokenize.ParseChatRequest([]byte(p.developer))
				if err != nil {
					t.Fatal(err)
				}
				sys, err := tokenize.ParseChatRequest([]byte(p.system))
				if err != nil {
					t.Fatal(err)
				}
				text, err := r.Render(dev.Chat)
				if err != nil {
					t.Fatalf("%s: Render: %v", p.name, err)
				}
				if !strings.Contains(text, p.text) {
					t.Errorf("%s: rendered %q, want the developer text %q in it", p.name, text, p.text)
				}
				got, err := r.ChatIDs(dev)
				if err != nil {
					t.Fatalf("%s: ChatIDs: %v", p.name, err)
				}
				want, err := r.ChatIDs(sys)
				if err != nil {
					t.Fatalf("%s: ChatIDs of the system form: %v", p.name, err)
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s: ids\n%v, want those of the system form\n%v\n(text %q)", p.name, got, want, text)
				}
			}
		})
	}
}
