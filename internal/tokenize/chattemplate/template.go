package chattemplate

import (
	"errors"
	"strings"

	"github.com/ardanlabs/jinja"

	"github.com/inferrail/inferrail/internal/tokenize/hf"
)

// continueTag marks the end of the final message while rendering with
// continue_final_message, as transformers does.
const continueTag = "CONTINUE_FINAL_MESSAGE_TAG "

// renderConversation renders, and with cont cuts the text after the final
// message's content the way transformers' render_jinja_template does.
// w's callables are among the template's variables, and it says why a
// rendering it cut short failed.
func (r *Renderer) renderConversation(t *jinja.Template, conv []jinja.Value, vars map[string]jinja.Value, cont bool, w *watch) (string, error) {
	if len(conv) == 0 {
		// transformers indexes the first message (IndexError).
		return "", &Error{Err: errors.New("no messages")}
	}
	var final string
	if cont {
		last := conv[len(conv)-1].AsDict()
		content, _ := last.Get("content")
		switch {
		case content.IsString():
			final = content.AsString()
			last.Set("content", jinja.NewString(final+continueTag))
		case content.IsList():
			items := content.AsList().Items
			found := false
			for i := len(items) - 1; i >= 0 && !found; i-- {
				if !items[i].IsDict() {
					continue
				}
				block := items[i].AsDict()
				if text, ok := block.Get("text"); ok && text.IsString() {
					final = text.AsString()
					block.Set("text", jinja.NewString(final+continueTag))
					found = true
				}
			}
			if !found {
				return "", badRequest("continue_final_message is set but the final message has no text to continue")
			}
		default:
			return "", badRequest("continue_final_message is set but the final message has no content")
		}
	}
	vars["messages"] = jinja.NewList(conv)
	var raised error
	vars["raise_exception"] = jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		msg := ""
		if len(args) > 0 {
			msg = pyStr(args[0])
		}
		raised = errors.New(msg)
		return jinja.Undefined(), raised
	})
	vars["format"] = formatCallable // a filter the engine lacks, looked up here
	vars["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return jinja.Undefined(), errors.New("strftime_now takes one format string")
		}
		return jinja.NewString(strftime(r.now(), args[0].AsString())), nil
	})
	w.vars(vars)
	filterVars(vars)
	out, err := t.RenderValues(vars)
	if err != nil {
		if werr := w.err(); werr != nil {
			return "", werr
		}
		if raised != nil {
			return "", &Error{Err: raised}
		}
		return "", &Error{Err: err}
	}
	if !cont {
		return out, nil
	}
	tag := strings.TrimRight(continueTag, " ")
	if !strings.Contains(out, pyStrip(final)) || !strings.Contains(out, tag) {
		return "", &Error{Err: errors.New("continue_final_message is set but the final message does not appear in the rendered chat")}
	}
	loc := strings.LastIndex(out, tag)
	if strings.HasPrefix(out[loc:], continueTag) {
		return out[:loc], nil
	}
	return pyRStrip(out[:loc]), nil
}

// pyStr is Python's str() of a template value (Jinja2's Undefined prints
// as nothing; a list or dict is its repr, a namespace Jinja2's repr of
// one; the engine prints one as a dict).
func pyStr(v jinja.Value) string {
	switch {
	case v.IsString():
		return v.AsString()
	case v.IsUndefined():
		return ""
	case isNamespace(v):
		return "<Namespace " + pyPrintable(v.String()) + ">"
	}
	return pyPrintable(v.String())
}

// specialTokenVars are transformers 5's special_tokens_map: each named
// special token that is set (additional_special_tokens no longer is one).
func specialTokenVars(cfg hf.ChatConfig) map[string]jinja.Value {
	vars := make(map[string]jinja.Value, len(cfg.SpecialTokens)+len(overriddenFilters)+16)
	for _, st := range cfg.SpecialTokens {
		vars[st.Attr] = jinja.NewString(st.Content)
	}
	return vars
}
