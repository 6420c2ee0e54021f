package sim

import (
	"net/http"
	"strings"
	"testing"
)

// TestToolChoiceNeedsAutoToolFlag: as vLLM, a chat whose tool_choice is
// "auto" (sent, or implied by tools sent without one), "required" or a
// named tool is a 400 unless the engine started with
// --enable-auto-tool-choice (and so a parser); "none", null and no tools
// are served either way.
func TestToolChoiceNeedsAutoToolFlag(t *testing.T) {
	const (
		hi      = `"messages":[{"role":"user","content":"hi"}],"max_tokens":2`
		tools   = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
		autoMsg = `"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`
		// vLLM names the parser alone, though it loads one only with both
		// flags.
		requiredMsg = `tool_choice="required" requires --tool-call-parser to be set`
		namedMsg    = `tool_choice=function "get_weather" requires --tool-call-parser to be set`
	)
	off := zeroLatencyConfig()
	parserOnly := zeroLatencyConfig()
	parserOnly.ToolCallParser = "hermes"
	on := zeroLatencyConfig()
	on.EnableAutoToolChoice, on.ToolCallParser = true, "hermes"
	urls := map[string]string{}
	for name, cfg := range map[string]Config{"off": off, "parser only": parserOnly, "on": on} {
		_, urls[name] = startServer(t, cfg)
	}
	tests := []struct {
		name, path, body string
		// refused is the message without the flag; empty for a 200.
		// onRefused is the simulator's own refusal with it: a forced tool
		// call it cannot imitate.
		refused, onRefused string
	}{
		{"tools without tool_choice", "/v1/chat/completions", `{` + hi + `,` + tools + `}`, autoMsg, ""},
		{"tools without tool_choice, streamed", "/v1/chat/completions", `{` + hi + `,` + tools + `,"stream":true}`, autoMsg, ""},
		{"tool_choice auto", "/v1/chat/completions", `{` + hi + `,` + tools + `,"tool_choice":"auto"}`, autoMsg, ""},
		{"tool_choice none", "/v1/chat/completions", `{` + hi + `,` + tools + `,"tool_choice":"none"}`, "", ""},
		{"tool_choice null", "/v1/chat/completions", `{` + hi + `,` + tools + `,"tool_choice":null}`, "", ""},
		{"tool_choice required", "/v1/chat/completions", `{` + hi + `,` + tools + `,"tool_choice":"required"}`, requiredMsg,
			`tool_choice "required" is not supported by inferrail-sim: its model calls no tools.`},
		{"named function", "/v1/chat/completions",
			`{` + hi + `,` + tools + `,"tool_choice":{"type":"function","function":{"name":"get_weather"}}}`, namedMsg,
			`A named tool_choice is not supported by inferrail-sim: its model calls no tools.`},
		{"no tools", "/v1/chat/completions", `{` + hi + `}`, "", ""},
		// /tokenize renders the tools but makes no tool choice.
		{"tokenize with tools", "/tokenize", `{` + hi + `,` + tools + `}`, "", ""},
	}
	for _, tt := range tests {
		for _, server := range []string{"off", "parser only", "on"} {
			code, ctype, body := post(t, urls[server]+tt.path, tt.body)
			if server == "on" && tt.onRefused != "" {
				if msg, _, param := errorOf(t, body); code != http.StatusBadRequest || msg != tt.onRefused || param != "tool_choice" {
					t.Errorf("%s, %s: %d %s, want a 400 naming tool_choice", tt.name, server, code, body)
				}
				continue
			}
			if tt.refused == "" || server == "on" {
				if code != http.StatusOK {
					t.Errorf("%s, %s: %d %s, want 200", tt.name, server, code, body)
				}
				continue
			}
			// The refusal comes before any stream starts: a JSON body.
			if code != http.StatusBadRequest || !strings.HasPrefix(ctype, "application/json") {
				t.Errorf("%s, %s: %d %s %.200s, want vLLM's 400 %q", tt.name, server, code, ctype, body, tt.refused)
				continue
			}
			if msg, typ, param := errorOf(t, body); msg != tt.refused || typ != "BadRequestError" || param != nil ||
				!strings.Contains(body, `"code":400`) {
				t.Errorf("%s, %s: %d %s %s, want vLLM's 400 %q", tt.name, server, code, ctype, body, tt.refused)
			}
		}
	}
	// The model is looked up first, and the body validated before that.
	if code, _, body := post(t, urls["off"]+"/v1/chat/completions", `{"model":"nope",`+hi+`,`+tools+`}`); code != http.StatusNotFound {
		t.Errorf("unknown model with tools: %d %s, want 404", code, body)
	}
	if code, _, body := post(t, urls["off"]+"/v1/chat/completions", `{`+hi+`,`+tools+`,"temperature":-1}`); code != http.StatusBadRequest ||
		!strings.Contains(body, "temperature must be non-negative") {
		t.Errorf("bad temperature with tools: %d %s, want its own 400", code, body)
	}
}
