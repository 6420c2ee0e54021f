package chattemplate

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/ardanlabs/jinja"

	"github.com/inferrail/inferrail/internal/tokenize"
	"github.com/inferrail/inferrail/internal/tokenize/rawjson"
)

// toolDicts is vLLM's [tool.model_dump() for tool in request.tools]: each
// tool as {"type", "function": {"name", "description", "parameters",
// extra fields…}, extra fields…}, declared fields first with their null
// defaults, extra fields after them in request order.
func toolDicts(raw json.RawMessage) (jinja.Value, error) {
	v, err := jsonValue(raw)
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("tools: %w", err)
	}
	if v.IsNone() {
		return v, nil
	}
	if !v.IsList() {
		return jinja.Undefined(), badRequest("tools: not a list")
	}
	out := make([]jinja.Value, 0, v.AsList().Len())
	for i, t := range v.AsList().Items {
		if !t.IsDict() {
			return jinja.Undefined(), badRequest("tools[%d]: not an object", i)
		}
		td := t.AsDict()
		typ, ok := td.Get("type")
		if ok && !(typ.IsString() && typ.AsString() == "function") {
			return jinja.Undefined(), badRequest("tools[%d].type: want \"function\"", i)
		}
		fn, ok := td.Get("function")
		if !ok || !fn.IsDict() {
			return jinja.Undefined(), badRequest("tools[%d].function: want an object", i)
		}
		fd := fn.AsDict()
		name, ok := fd.Get("name")
		if !ok || !name.IsString() {
			return jinja.Undefined(), badRequest("tools[%d].function.name: want a string", i)
		}
		dumpFn := jinja.NewDict()
		dfn := dumpFn.AsDict()
		dfn.Set("name", name)
		for _, k := range []string{"description", "parameters"} {
			val, ok := fd.Get(k)
			switch {
			case !ok:
				val = jinja.None()
			case k == "description" && !val.IsNone() && !val.IsString():
				return jinja.Undefined(), badRequest("tools[%d].function.description: want a string", i)
			case k == "parameters" && !val.IsNone() && !val.IsDict():
				return jinja.Undefined(), badRequest("tools[%d].function.parameters: want an object", i)
			}
			dfn.Set(k, val)
		}
		copyExtra(dfn, fd, "name", "description", "parameters")
		dump := jinja.NewDict()
		dd := dump.AsDict()
		dd.Set("type", jinja.NewString("function"))
		dd.Set("function", dumpFn)
		copyExtra(dd, td, "type", "function")
		out = append(out, dump)
	}
	return jinja.NewList(out), nil
}

// copyExtra copies src's keys other than declared into dst, in order.
func copyExtra(dst, src *jinja.Dict, declared ...string) {
	for _, k := range src.OrderedKeys() {
		if !contains(declared, k) {
			v, _ := src.Get(k)
			dst.Set(k, v)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// documents reads the request's documents: a list of objects whose values
// are strings.
func documents(raw json.RawMessage) (jinja.Value, error) {
	v, err := jsonValue(raw)
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("documents: %w", err)
	}
	if !v.IsList() {
		return jinja.Undefined(), badRequest("documents: not a list")
	}
	for i, d := range v.AsList().Items {
		if !d.IsDict() {
			return jinja.Undefined(), badRequest("documents[%d]: not an object", i)
		}
		for _, k := range d.AsDict().OrderedKeys() {
			if val, _ := d.AsDict().Get(k); !val.IsString() {
				return jinja.Undefined(), badRequest("documents[%d].%s: want a string", i, k)
			}
		}
	}
	return v, nil
}

// conversation builds the messages a template sees from the request's, as
// vLLM's parse_chat_messages does: content as a string (text parts joined
// with "\n", null as "") or, in the openai format, as a list of text parts;
// assistant tool calls with their arguments parsed from JSON; reasoning as
// both reasoning and reasoning_content; tool_call_id and name copied; a
// developer message's tools copied, null when it has none (adaptDeveloper
// then fits developer messages to the template).
//
// contents are the contents tokenize.ParseChatRequest decoded, by message;
// they spare decoding long texts twice. Every stopEvery messages it looks
// at w's stop signal, and gives up with ErrStopped once it is set.
func conversation(raw []json.RawMessage, contents []rawjson.Decoded, format string, w *watch) ([]jinja.Value, error) {
	conv := make([]jinja.Value, 0, len(raw))
	for i, rm := range raw {
		if i%stopEvery == 0 && w.stopping() {
			return nil, ErrStopped
		}
		var known rawjson.Decoded
		if i < len(contents) {
			known = contents[i]
		}
		v, err := jsonValueKnowing(rm, known)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		m, err := conversationMessage(v, format)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		conv = append(conv, m)
	}
	return conv, nil
}

func conversationMessage(v jinja.Value, format string) (jinja.Value, error) {
	if !v.IsDict() {
		return jinja.Undefined(), badRequest("not an object")
	}
	msg := v.AsDict()
	role, ok := msg.Get("role")
	if !ok || !role.IsString() {
		return jinja.Undefined(), badRequest("role: want a string")
	}
	texts, err := textParts(msg, format)
	if err != nil {
		return jinja.Undefined(), err
	}
	out := jinja.NewDict()
	o := out.AsDict()
	o.Set("role", role)
	if format == FormatOpenAI {
		parts := make([]jinja.Value, len(texts))
		for i, t := range texts {
			p := jinja.NewDict()
			p.AsDict().Set("type", jinja.NewString("text"))
			p.AsDict().Set("text", jinja.NewString(t))
			parts[i] = p
		}
		if role.AsString() == "tool" {
			// Tool results of text parts only are joined into a string.
			o.Set("content", jinja.NewString(strings.Join(texts, "\n")))
		} else {
			o.Set("content", jinja.NewList(parts))
		}
	} else {
		// Reduced to a string, an empty text is left out: vLLM keeps only
		// the parts that parse to something.
		o.Set("content", jinja.NewString(strings.Join(slices.DeleteFunc(texts, func(t string) bool { return t == "" }), "\n")))
	}
	switch role.AsString() {
	case "assistant":
		if calls, ok := msg.Get("tool_calls"); ok && !calls.IsNone() {
			parsed, err := toolCalls(calls)
			if err != nil {
				return jinja.Undefined(), err
			}
			if parsed.AsList().Len() > 0 {
				o.Set("tool_calls", parsed)
			}
		}
		reasoning, ok := msg.Get("reasoning")
		if !ok || reasoning.IsNone() {
			reasoning, ok = msg.Get("reasoning_content")
		}
		if ok && !reasoning.IsNone() {
			if !reasoning.IsString() {
				return jinja.Undefined(), badRequest("reasoning: want a string")
			}
			o.Set("reasoning", reasoning)
			o.Set("reasoning_content", reasoning)
		}
	case "tool":
		if id, ok := msg.Get("tool_call_id"); ok {
			if !id.IsNone() && !id.IsString() {
				return jinja.Undefined(), badRequest("tool_call_id: want a string")
			}
			o.Set("tool_call_id", id)
		}
	}
	for _, k := range []string{"name", "task"} {
		if val, ok := msg.Get(k); ok && val.IsString() {
			o.Set(k, val)
		}
	}
	if role.AsString() == "developer" {
		// vLLM gives every developer message its tools, null when it has
		// none; adaptDeveloper drops them again where the role becomes
		// system.
		tools, ok := msg.Get("tools")
		if !ok {
			tools = jinja.None()
		}
		o.Set("tools", tools)
	}
	return out, nil
}

// namesDeveloper reports whether a chat template's source names the
// developer role as a quoted string ("developer" or 'developer'), the test
// vLLM's Hugging Face renderer applies to the template it renders with
// (hf.py, _detect_developer_role_support). A mention without quotes does
// not count.
func namesDeveloper(src string) bool {
	return strings.Contains(src, `"developer"`) || strings.Contains(src, `'developer'`)
}

// adaptDeveloper prepares the developer messages of conv for a template as
// vLLM's Hugging Face renderer does (hf.py, safe_apply_chat_template). A
// template that names the role (see namesDeveloper) gets them as they are.
// For any other template each becomes a system message without its tools,
// and then, if a system message stands anywhere but first, all system
// messages are merged into one at the front (mergeSystem). A conversation
// without developer messages is left alone, however many system messages
// it has.
//
// A developer message that carries tools, for a template that names the
// role, is not followed (tokenize.ReasonDeveloper): vLLM passes them as
// pydantic validated them, and we do not reproduce that validation.
func adaptDeveloper(conv []jinja.Value, templateNamesDeveloper bool) ([]jinja.Value, error) {
	if !slices.ContainsFunc(conv, func(m jinja.Value) bool { return role(m) == "developer" }) {
		return conv, nil
	}
	if templateNamesDeveloper {
		for _, m := range conv {
			if tools, _ := m.AsDict().Get("tools"); role(m) == "developer" && !tools.IsNone() {
				return nil, unsupported(tokenize.ReasonDeveloper)
			}
		}
		return conv, nil
	}
	out := make([]jinja.Value, len(conv))
	for i, m := range conv {
		if role(m) != "developer" {
			out[i] = m
			continue
		}
		// A copy: its keys in the same order, the role now system and
		// without the tools vLLM gave it.
		sys := jinja.NewDict()
		src := m.AsDict()
		for _, k := range src.OrderedKeys() {
			v, _ := src.Get(k)
			switch k {
			case "tools":
				continue
			case "role":
				v = jinja.NewString("system")
			}
			sys.AsDict().Set(k, v)
		}
		out[i] = sys
	}
	return mergeSystem(out), nil
}

// mergeSystem merges the system messages of conv into one at the front
// when any stands elsewhere, as vLLM's _consolidate_system_messages does:
// the new message has only a role and a string content, the system
// messages' texts in order joined with "\n\n", each a string content or its
// text parts joined with "\n", an empty one left out. The other messages
// keep their order.
func mergeSystem(conv []jinja.Value) []jinja.Value {
	merge := false
	for i, m := range conv {
		if i > 0 && role(m) == "system" {
			merge = true
			break
		}
	}
	if !merge {
		return conv
	}
	var texts []string
	rest := make([]jinja.Value, 0, len(conv))
	for _, m := range conv {
		if role(m) != "system" {
			rest = append(rest, m)
			continue
		}
		if t := systemText(m); t != "" {
			texts = append(texts, t)
		}
	}
	merged := jinja.NewDict()
	merged.AsDict().Set("role", jinja.NewString("system"))
	merged.AsDict().Set("content", jinja.NewString(strings.Join(texts, "\n\n")))
	return append([]jinja.Value{merged}, rest...)
}

// systemText is a message's content as one string: a string as it is, a
// list of text parts joined with "\n".
func systemText(m jinja.Value) string {
	content, _ := m.AsDict().Get("content")
	if content.IsString() {
		return content.AsString()
	}
	if !content.IsList() {
		return ""
	}
	var parts []string
	for _, p := range content.AsList().Items {
		switch {
		case p.IsString():
			parts = append(parts, p.AsString())
		case p.IsDict():
			if t, ok := p.AsDict().Get("text"); ok && t.IsString() {
				parts = append(parts, t.AsString())
			}
		}
	}
	return strings.Join(parts, "\n")
}

// role is the role of a message conversation built.
func role(m jinja.Value) string {
	r, _ := m.AsDict().Get("role")
	return r.AsString()
}

// textParts returns a message's content as its text parts: a string is one
// part, null none.
func textParts(msg *jinja.Dict, format string) ([]string, error) {
	content, ok := msg.Get("content")
	if !ok || content.IsNone() {
		return nil, nil
	}
	if content.IsString() {
		return []string{content.AsString()}, nil
	}
	if !content.IsList() {
		return nil, badRequest("content: want a string, null or a list of parts")
	}
	var texts []string
	for _, p := range content.AsList().Items {
		if p.IsString() {
			texts = append(texts, p.AsString())
			continue
		}
		if !p.IsDict() {
			return nil, badRequest("content: a part must be an object or a string")
		}
		pd := p.AsDict()
		typ, _ := pd.Get("type")
		if u, ok := pd.Get("uuid"); ok && !u.IsNone() {
			return nil, unsupported(tokenize.ReasonMultimodal)
		}
		field, ok := "", false
		if typ.IsString() {
			field, ok = tokenize.TextPartField(typ.AsString())
		}
		if !ok {
			return nil, unsupported(tokenize.ReasonMultimodal)
		}
		text, ok := pd.Get(field)
		if !ok || text.IsNone() {
			if t := typ.AsString(); t != "text" && t != "refusal" && format == FormatOpenAI {
				// vLLM skips only a text or refusal part without its
				// text; the others would reach the template as a text
				// part whose text is None.
				return nil, unsupported(tokenize.ReasonMultimodal)
			}
			continue
		}
		if !text.IsString() {
			return nil, badRequest("content: a %s part's %s must be a string", field, field)
		}
		texts = append(texts, text.AsString())
	}
	return texts, nil
}

// toolCalls validates an assistant's tool calls as vLLM's request model
// does and rebuilds them in its field order ({"id", "function":
// {"arguments", "name"}, "type"}), with the arguments string parsed.
func toolCalls(calls jinja.Value) (jinja.Value, error) {
	if !calls.IsList() {
		return jinja.Undefined(), badRequest("tool_calls: want a list")
	}
	out := make([]jinja.Value, 0, calls.AsList().Len())
	for i, c := range calls.AsList().Items {
		if !c.IsDict() {
			return jinja.Undefined(), badRequest("tool_calls[%d]: want an object", i)
		}
		cd := c.AsDict()
		id, _ := cd.Get("id")
		typ, _ := cd.Get("type")
		fn, _ := cd.Get("function")
		if !id.IsString() || !typ.IsString() || typ.AsString() != "function" || !fn.IsDict() {
			return jinja.Undefined(), badRequest("tool_calls[%d]: want id, type \"function\" and function", i)
		}
		name, _ := fn.AsDict().Get("name")
		args, _ := fn.AsDict().Get("arguments")
		if !name.IsString() || !args.IsString() {
			return jinja.Undefined(), badRequest("tool_calls[%d].function: want name and arguments strings", i)
		}
		parsed, err := pyJSONLoads(args.AsString())
		if err != nil {
			return jinja.Undefined(), err
		}
		f := jinja.NewDict()
		f.AsDict().Set("arguments", parsed)
		f.AsDict().Set("name", name)
		call := jinja.NewDict()
		call.AsDict().Set("id", id)
		call.AsDict().Set("function", f)
		call.AsDict().Set("type", typ)
		out = append(out, call)
	}
	return jinja.NewList(out), nil
}
