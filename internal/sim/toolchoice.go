package sim

import "github.com/inferrail/inferrail/internal/openai"

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
func (c *Config) refuseToolChoice(tc toolChoice) *openai.Error {
	if c.EnableAutoToolChoice {
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
