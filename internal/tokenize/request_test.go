package tokenize

import (
	"errors"
	"testing"
)

func TestParseChatRequest(t *testing.T) {
	p, err := ParseChatRequest([]byte(`{"messages":[
		{"role":"developer","content":"Be brief."},
		{"role":"user","content":[{"type":"text","text":"a"},"b",{"type":"text","text":"c"}]},
		{"role":"assistant","content":null,"reasoning_content":"hmm","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"x\": 1}"}}]}],
		"tools":[{"type": "function", "function": {"name": "f", "parameters": {"b": 1.0, "a": "\u00e9"}}}],
		"add_generation_prompt":"yes","add_special_tokens":1,"cache_salt":"s"}`))
	if err != nil {
		t.Fatal(err)
	}
	c := p.Chat
	if !c.AddGenerationPrompt || !p.AddSpecial || p.CacheSalt != "s" {
		t.Errorf("flags %+v %+v", p, c)
	}
	if c.Messages[0].Role != "developer" || c.Messages[1].Content != "a\nb\nc" || c.Messages[2].Reasoning != "hmm" {
		t.Errorf("messages %+v", c.Messages)
	}
	if tc := c.Messages[2].ToolCalls; len(tc) != 1 || tc[0].Name != "f" || tc[0].Arguments != `{"x": 1}` {
		t.Errorf("tool calls %+v", tc)
	}
	if got, want := string(c.Tools[0]), `{"type":"function","function":{"name":"f","parameters":{"b":1.0,"a":"\u00e9"}}}`; got != want {
		t.Errorf("tool %s, want key order, number text and escapes kept: %s", got, want)
	}

	for body, reason := range map[string]string{
		`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`: ReasonMultimodal,
		`{"messages":[],"chat_template":"{{x}}"}`:                                                 ReasonTemplate,
	} {
		_, err := ParseChatRequest([]byte(body))
		var ue *UnsupportedError
		if !errors.As(err, &ue) || ue.Reason != reason {
			t.Errorf("ParseChatRequest(%s) = %v, want unsupported %s", body, err, reason)
		}
	}
}

// TestParseKeysCaseSensitive: vLLM's request models match keys exactly, so
// "Content" is not content (encoding/json alone would take it).
func TestParseKeysCaseSensitive(t *testing.T) {
	p, err := ParseChatRequest([]byte(`{"messages":[{"role":"user","Content":[{"type":"image_url"}],"content":"kept"}],"Add_Generation_Prompt":false}`))
	if err != nil {
		t.Fatal(err)
	}
	if m := p.Chat.Messages[0]; m.Content != "kept" || !p.Chat.AddGenerationPrompt {
		t.Errorf("parsed %+v, generation prompt %v: keys matched without regard to case", m, p.Chat.AddGenerationPrompt)
	}
}

// TestParseChatRequestRaw: what Hugging Face chat templates read is kept as
// sent; a template inside chat_template_kwargs is a request template.
func TestParseChatRequestRaw(t *testing.T) {
	p, err := ParseChatRequest([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":null},{"type":"text","text":"kept"}]}],"tools":[],"chat_template_kwargs":{"b":1.0,"a":null},"documents":[{"title":"t"}],"reasoning_effort":"low"}`))
	if err != nil {
		t.Fatal(err)
	}
	c := p.Chat
	if c.Messages[0].Content != "kept" || len(c.RawMessages) != 1 || string(c.RawTools) != "[]" ||
		string(c.TemplateKwargs) != `{"b":1.0,"a":null}` || string(c.Documents) != `[{"title":"t"}]` || c.ReasoningEffort != "low" {
		t.Errorf("parsed %+v", c)
	}
	_, err = ParseChatRequest([]byte(`{"messages":[],"chat_template_kwargs":{"chat_template":"{{x}}"}}`))
	var ue *UnsupportedError
	if !errors.As(err, &ue) || ue.Reason != ReasonTemplate {
		t.Errorf("chat_template in chat_template_kwargs: %v, want unsupported template", err)
	}
}

// TestTruncatePromptTokens: truncate_prompt_tokens is read from chat and
// completion requests; a prompt it cuts, or a value other than an integer,
// is not followed (the engine sees other tokens, or judges the value). -1
// cuts to the context length: a prompt that fits a known one is whole.
func TestTruncatePromptTokens(t *testing.T) {
	for _, tt := range []struct {
		body  string
		chat  bool
		cuts8 bool   // a prompt of 8 tokens is cut, in a context of ctx (0 unknown)
		why   string // the unsupported reason when the body is not followed
		ctx   int
	}{
		{`{"prompt":"x"}`, false, false, "", 0},
		{`{"prompt":"x","truncate_prompt_tokens":null}`, false, false, "", 0},
		{`{"prompt":"x","truncate_prompt_tokens":8}`, false, false, "", 0},
		{`{"prompt":"x","truncate_prompt_tokens":7}`, false, true, "", 0},
		{`{"prompt":"x","truncate_prompt_tokens":-1}`, false, true, "", 0},
		{`{"prompt":"x","truncate_prompt_tokens":-1}`, false, false, "", 4096},
		{`{"prompt":"x","truncate_prompt_tokens":-1}`, false, false, "", 8},
		{`{"prompt":"x","truncate_prompt_tokens":-1}`, false, true, "", 7},
		{`{"messages":[{"role":"user","content":"x"}],"truncate_prompt_tokens":-1}`, true, false, "", 4096},
		{`{"prompt":"x","truncate_prompt_tokens":-2}`, false, true, "", 4096},
		{`{"prompt":"x","truncate_prompt_tokens":8}`, false, false, "", 4},
		{`{"messages":[{"role":"user","content":"x"}],"truncate_prompt_tokens":4}`, true, true, "", 0},
		{`{"messages":[{"role":"user","content":"x"}],"truncate_prompt_tokens":100}`, true, false, "", 0},
		{`{"prompt":"x","truncate_prompt_tokens":"4"}`, false, false, ReasonTruncate, 0},
		{`{"prompt":"x","truncate_prompt_tokens":4.0}`, false, false, ReasonTruncate, 0},
		{`{"messages":[],"truncate_prompt_tokens":99999999999}`, true, false, ReasonTruncate, 0},
	} {
		parse := ParseCompletionRequest
		if tt.chat {
			parse = ParseChatRequest
		}
		p, err := parse([]byte(tt.body))
		var ue *UnsupportedError
		switch {
		case tt.why != "":
			if !errors.As(err, &ue) || ue.Reason != tt.why {
				t.Errorf("%s: %v, want unsupported %s", tt.body, err, tt.why)
			}
		case err != nil:
			t.Errorf("%s: %v", tt.body, err)
		case p.Cuts(8, tt.ctx) != tt.cuts8:
			t.Errorf("%s in a context of %d: cuts 8 tokens %v, want %v", tt.body, tt.ctx, p.Cuts(8, tt.ctx), tt.cuts8)
		}
	}
}

// TestParseFieldsTheHashesCannotSee: SGLang keys its radix cache by
// extra_key and by the adapter lora_path names, so they salt the prompt
// (null and "" are none); vLLM starts a prompt_embeds completion from
// vectors, which no prediction from tokens can follow (a review's
// findings: both were predicted as the bare prompt).
func TestParseFieldsTheHashesCannotSee(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct {
		chat   bool
		body   string
		salted bool   // salted apart from the same request without the fields
		reason string // unsupported for this reason, "" when followed
	}{
		{true, `{` + msgs + `,"extra_key":"tenant-b"}`, true, ""},
		{true, `{` + msgs + `,"lora_path":"sql"}`, true, ""},
		{true, `{"extra_key":"", ` + msgs + `}`, false, ""},
		{true, `{` + msgs + `,"extra_key":null,"lora_path":null}`, false, ""},
		{true, `{` + msgs + `,"prompt_embeds":"AAAA"}`, false, ""}, // not a chat field
		{false, `{"prompt":"hi","extra_key":"tenant-b"}`, true, ""},
		{false, `{"prompt":[1,2,3],"lora_path":"sql"}`, true, ""},
		{false, `{"prompt_embeds":"AAAA"}`, false, ReasonEmbeds},
		{false, `{"prompt":"hi","prompt_embeds":"AAAA"}`, false, ReasonEmbeds},
		{false, `{"prompt":"hi","prompt_embeds":null,"extra_key":null}`, false, ""},
	} {
		parse := ParseCompletionRequest
		if c.chat {
			parse = ParseChatRequest
		}
		p, err := parse([]byte(c.body))
		var ue *UnsupportedError
		switch {
		case c.reason != "":
			if !errors.As(err, &ue) || ue.Reason != c.reason {
				t.Errorf("%s: %v, want unsupported %s", c.body, err, c.reason)
			}
		case err != nil:
			t.Errorf("%s: %v, want followed", c.body, err)
		case (p.CacheSalt != "") != c.salted:
			t.Errorf("%s: salt %q, want salted %v", c.body, p.CacheSalt, c.salted)
		}
	}
	// Each key salts apart from the others, and from a cache_salt alone.
	salts := map[string]string{}
	for _, extra := range []string{`"extra_key":"a"`, `"extra_key":"b"`, `"lora_path":"a"`, `"cache_salt":"a"`, `"cache_salt":"a","extra_key":"a"`} {
		p, err := ParseCompletionRequest([]byte(`{"prompt":"hi",` + extra + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if other, ok := salts[p.CacheSalt]; ok {
			t.Errorf("%s and %s salt alike: %q", extra, other, p.CacheSalt)
		}
		salts[p.CacheSalt] = extra
	}
}
