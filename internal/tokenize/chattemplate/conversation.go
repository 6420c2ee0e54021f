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
// both reasoning and reasoning_content; tool_call_id and name copied.
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
	if role.AsString() == "developer" {
		// vLLM's handling of the developer role has changed between
		// versions (kept, or turned into system and merged); predicting
		// either could be wrong.
		return jinja.Undefined(), unsupported(tokenize.ReasonDeveloper)
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
	return out, nil
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
