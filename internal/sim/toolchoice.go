package sim

import (
	"strings"

	"github.com/inferrail/inferrail/internal/openai"
)

// toolChoice is a chat's tool_choice as vLLM's request model leaves it.
type toolChoice struct {
	// kind is "none", "auto", "required" or "function" (a named tool);
	// empty for null, for another value and for a completion.
	kind string
	name string // the named tool's function
}

// readToolChoice reads the tool_choice of a chat body. As vLLM's request
// model defaults it: "auto" when tools are sent without one, else "none".
func readToolChoice(o *object) toolChoice {
	tc, ok := o.get("tool_choice")
	if !ok {
		// An empty list is falsy in vLLM's check too.
		if tools, _ := o.get("tools"); isNonEmptyList(tools) {
			return toolChoice{kind: "auto"}
		}
		return toolChoice{kind: "none"}
	}
	switch t := tc.(type) {
	case string:
		switch t {
		case "none", "auto", "required":
			return toolChoice{kind: t}
		}
	case *object:
		var name string
		if fn, ok := t.get("function"); ok {
			if f, ok := fn.(*object); ok {
				n, _ := f.get("name")
				name, _ = n.(string)
			}
		}
		return toolChoice{kind: "function", name: name}
	}
	return toolChoice{}
}

func isNonEmptyList(v any) bool {
	l, ok := v.([]any)
	return ok && len(l) > 0
}

// refuseToolChoice is vLLM's 400 for a tool choice its API server has no
// tool call parser for: vLLM loads one only with --enable-auto-tool-choice,
// so --tool-call-parser alone does not do. Since vLLM's pull request 30613
// (December 2025) that holds for "required" and a named tool too, whose
// calls only a parser turns into tool_calls.
//
// With the flag, "required" and a named tool are refused too, as what the
// simulator cannot imitate is: vLLM forces such a chat to call a tool, and
// the stand-in model calls none ("auto" lets it answer in text).
func (c *Config) refuseToolChoice(tc toolChoice) *openai.Error {
	if c.EnableAutoToolChoice {
		switch tc.kind {
		case "required":
			return openai.BadRequest(`tool_choice "required" is not supported by inferrail-sim: its model calls no tools.`, "tool_choice")
		case "function":
			return openai.BadRequest(`A named tool_choice is not supported by inferrail-sim: its model calls no tools.`, "tool_choice")
		}
		return nil
	}
	switch tc.kind {
	case "auto":
		return openai.BadRequest(`"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`, "")
	case "required":
		return openai.BadRequest(`tool_choice="required" requires --tool-call-parser to be set`, "")
	case "function":
		return openai.BadRequest(`tool_choice=function "`+tc.name+`" requires --tool-call-parser to be set`, "")
	}
	return nil
}

// checkToolUsage is vLLM's check of tools and tool_choice, made on the raw
// body before any field is read (chat_completion/protocol.py,
// check_tool_usage), in its order: the message of the first failure, or
// "". A tool without a function name never matches a named choice.
func checkToolUsage(o *object) string {
	tools, hasTools := o.get("tools")
	if l, ok := tools.([]any); ok && len(l) == 0 {
		return "`tools` must not be an empty array. Either provide at least one tool or omit the field entirely."
	}
	tc, ok := o.get("tool_choice")
	if !ok || tc == nil || tc == "none" {
		return ""
	}
	if !hasTools || tools == nil {
		return "When using `tool_choice`, `tools` must be set."
	}
	named, isObj := tc.(*object)
	if !isObj {
		if tc == "auto" || tc == "required" {
			return ""
		}
		return "Invalid value for `tool_choice`: " + pyFormat(tc) + `! Only named tools, "none", "auto" or "required" are supported.`
	}
	const usage = "Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`"
	fn, _ := named.get("function")
	f, isObj := fn.(*object)
	if !isObj {
		return "Invalid value for `function`: `" + pyFormat(fn) + "` in `tool_choice`! " + usage
	}
	name, ok := f.get("name")
	if !ok {
		return "Expected field `name` in `function` in `tool_choice`! " + usage
	}
	if s, isStr := name.(string); !isStr || s == "" {
		return "Invalid `name` in `function`: `" + pyFormat(name) + "` in `tool_choice`! " + usage
	}
	list, _ := tools.([]any)
	for _, t := range list {
		if obj, ok := t.(*object); ok {
			if tf, ok := obj.get("function"); ok {
				if tfo, ok := tf.(*object); ok {
					if n, _ := tfo.get("name"); n == name {
						return ""
					}
				}
			}
		}
	}
	return "The tool specified in `tool_choice` does not match any of the specified `tools`"
}

// pyFormat is how Python's f-string shows v: a string as itself, anything
// else as its repr.
func pyFormat(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	var b strings.Builder
	pyRepr(&b, v)
	return b.String()
}
