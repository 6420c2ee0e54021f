package tokenize

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"

	"github.com/inferrail/inferrail/internal/tokenize/hf"
	"github.com/inferrail/inferrail/internal/tokenize/rawjson"
)

// ChatOptions are a model's server-side chat settings, vLLM's
// --chat-template, --chat-template-content-format and
// --default-chat-template-kwargs. The zero value uses the tokenizer's
// template, detects the content format and adds no kwargs.
type ChatOptions struct {
	// Template replaces the chat template of tokenizer_config.json; ""
	// keeps it. A name of one of the tokenizer's named templates
	// ("tool_use") selects that template.
	Template string
	// ContentFormat is FormatAuto (or ""), FormatString or FormatOpenAI.
	ContentFormat string
	// Kwargs is a JSON object of template variables every request gets;
	// a request's chat_template_kwargs override them key by key. Empty
	// means none.
	Kwargs json.RawMessage
	// Now is the clock of the templates' strftime_now; nil means time.Now.
	Now func() time.Time
}

// ErrNoChatTemplate is returned for chat requests to a model whose
// tokenizer has no chat template and whose options set none.
var ErrNoChatTemplate = errors.New("no chat template")

// TemplateError is a chat template refusing a request (raise_exception)
// or failing on it: vLLM answers such requests with 400.
type TemplateError struct{ Err error }

func (e *TemplateError) Error() string { return "chat template: " + e.Err.Error() }
func (e *TemplateError) Unwrap() error { return e.Err }

// RequestError is a chat request vLLM refuses before rendering (400).
type RequestError struct{ Msg string }

func (e *RequestError) Error() string { return "chat request: " + e.Msg }

func badRequest(format string, args ...any) error {
	return &RequestError{Msg: fmt.Sprintf(format, args...)}
}

// ChatRenderer renders chat requests with a model's chat template as vLLM
// prepares them (transformers' apply_chat_template over Jinja2) and
// tokenizes the result. It is safe for concurrent use.
type ChatRenderer struct {
	tok      *hf.Tokenizer
	special  hf.ChatConfig            // the special tokens the template sees
	single   *chatTemplate            // the template, when there is one
	named    map[string]*chatTemplate // named templates ("default", "tool_use"), when there are several
	format   string                   // FormatAuto, FormatString or FormatOpenAI
	defaults []kwarg                  // ChatOptions.Kwargs, in order
	now      func() time.Time
}

type kwarg struct {
	key string
	val jinja.Value
}

// chatTemplate is one compiled template and its detected content format.
type chatTemplate struct {
	tmpl   *jinja.Template
	err    error // compile error, reported when the template is used
	format string
	// trims: the template uses the trim filter, which in the template
	// engine keeps the characters U+001C to U+001F that Python's strip
	// removes.
	trims bool
}

func compileTemplate(src string) *chatTemplate {
	t, err := jinja.Compile(src)
	return &chatTemplate{tmpl: t, err: err, format: DetectContentFormat(src), trims: usesFilter(src, "trim")}
}

// usesFilter reports whether a template applies the named filter; when it
// cannot be lexed, it says yes.
func usesFilter(src, name string) bool {
	toks, err := templateTokens(src)
	if err != nil {
		return true
	}
	for i := 0; i+1 < len(toks); i++ {
		if toks[i].is("|") && toks[i+1].kind == tokName && toks[i+1].text == name {
			return true
		}
	}
	return false
}

// hasPyOnlySpace reports whether any string in v holds U+001C to U+001F,
// which Python counts as whitespace and Go does not.
func hasPyOnlySpace(v jinja.Value) bool {
	switch {
	case v.IsString():
		return strings.ContainsAny(v.AsString(), "\x1c\x1d\x1e\x1f")
	case v.IsList():
		for _, it := range v.AsList().Items {
			if hasPyOnlySpace(it) {
				return true
			}
		}
	case v.IsDict():
		d := v.AsDict()
		for _, k := range d.OrderedKeys() {
			if val, _ := d.Get(k); hasPyOnlySpace(val) {
				return true
			}
		}
	}
	return false
}

// NewChatRenderer returns a renderer for tok's chat template (from
// tokenizer_config.json) with opts.
func NewChatRenderer(tok *hf.Tokenizer, opts ChatOptions) (*ChatRenderer, error) {
	return newChatRenderer(tok, tok.ChatConfig(), opts)
}

// newChatRenderer returns a renderer of the chat template and special
// tokens of cfg that encodes with tok.
func newChatRenderer(tok *hf.Tokenizer, cfg hf.ChatConfig, opts ChatOptions) (*ChatRenderer, error) {
	r := &ChatRenderer{tok: tok, special: cfg, now: opts.Now}
	if r.now == nil {
		r.now = time.Now
	}
	switch opts.ContentFormat {
	case "", FormatAuto:
		r.format = FormatAuto
	case FormatString, FormatOpenAI:
		r.format = opts.ContentFormat
	default:
		return nil, fmt.Errorf("chat template content format %q: want auto, string or openai", opts.ContentFormat)
	}
	named, single, err := parseChatTemplates(cfg.Template)
	if err != nil {
		return nil, err
	}
	switch {
	case opts.Template != "" && named[opts.Template] != "":
		single, named = named[opts.Template], nil
	case opts.Template != "":
		single, named = opts.Template, nil
	}
	if single != "" {
		r.single = compileTemplate(single)
	}
	if len(named) > 0 {
		r.named = map[string]*chatTemplate{}
		for name, src := range named {
			r.named[name] = compileTemplate(src)
		}
	}
	if len(opts.Kwargs) > 0 {
		v, err := jsonValue(opts.Kwargs)
		if err != nil {
			return nil, fmt.Errorf("chat template kwargs: %w", err)
		}
		if !v.IsDict() {
			return nil, errors.New("chat template kwargs: not a JSON object")
		}
		d := v.AsDict()
		for _, k := range d.OrderedKeys() {
			val, _ := d.Get(k)
			r.defaults = append(r.defaults, kwarg{k, val})
		}
	}
	return r, nil
}

// parseChatTemplates reads tokenizer_config.json's chat_template: a string,
// or a list of {"name", "template"} objects.
func parseChatTemplates(raw json.RawMessage) (named map[string]string, single string, err error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return nil, "", nil
	}
	if err := json.Unmarshal(raw, &single); err == nil {
		return nil, single, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, "", fmt.Errorf("tokenizer_config.json: chat_template: want a string or a list of named templates")
	}
	named = map[string]string{}
	for _, t := range list {
		named[t.Name] = t.Template
	}
	return named, "", nil
}

// template picks the template for a request as transformers'
// get_chat_template does: "tool_use" when tools are given and it exists,
// else "default".
func (r *ChatRenderer) template(tools bool) (*chatTemplate, error) {
	if r.single != nil {
		return r.single, nil
	}
	if r.named == nil {
		return nil, ErrNoChatTemplate
	}
	if t := r.named["tool_use"]; tools && t != nil {
		return t, nil
	}
	if t := r.named["default"]; t != nil {
		return t, nil
	}
	names := make([]string, 0, len(r.named))
	for n := range r.named {
		names = append(names, n)
	}
	sort.Strings(names)
	return nil, &TemplateError{Err: fmt.Errorf("several chat templates and no default: %v", names)}
}

// ChatIDs renders p's chat and tokenizes it with p.AddSpecial (false
// unless the request set add_special_tokens), as vLLM does.
func (r *ChatRenderer) ChatIDs(p *Prompt) ([]int, error) {
	text, err := r.Render(p.Chat)
	if err != nil {
		return nil, err
	}
	return r.tok.Encode(nil, text, p.AddSpecial), nil
}

// apply_chat_template parameters that a chat_template_kwargs key set
// reaches instead of the template, with no effect on the text.
var inertParams = map[string]bool{
	"padding": true, "truncation": true, "max_length": true, "return_tensors": true,
	"return_dict": true, "tokenizer_kwargs": true, "return_assistant_tokens_mask": true,
	"continue_final_message": true,
}

// Render returns the prompt text of c: the conversation vLLM builds from
// the request, rendered with the model's chat template.
func (r *ChatRenderer) Render(c *Chat) (string, error) {
	if c.ContinueFinalMessage && c.AddGenerationPrompt {
		return "", badRequest("continue_final_message and add_generation_prompt cannot both be set")
	}
	// Kwargs: the model's defaults, tools, the request's
	// chat_template_kwargs, then the request's own fields.
	kw := jinja.NewDict().AsDict()
	for _, d := range r.defaults {
		kw.Set(d.key, d.val)
	}
	tools := jinja.None()
	if len(c.RawTools) > 0 {
		var err error
		if tools, err = toolDicts(c.RawTools); err != nil {
			return "", err
		}
	}
	kw.Set("tools", tools)
	if len(c.TemplateKwargs) > 0 {
		v, err := jsonValue(c.TemplateKwargs)
		if err != nil {
			return "", fmt.Errorf("chat_template_kwargs: %w", err)
		}
		if !v.IsDict() {
			return "", badRequest("chat_template_kwargs: not an object")
		}
		d := v.AsDict()
		for _, k := range d.OrderedKeys() {
			val, _ := d.Get(k)
			switch {
			case k == "chat_template":
				return "", unsupported(ReasonTemplate)
			case k == "tokenize":
				return "", badRequest("chat_template_kwargs: unexpected key %q", k)
			case val.IsNone(), val.IsString() && val.AsString() == "auto":
				continue
			}
			kw.Set(k, val)
		}
	}
	kw.Set("add_generation_prompt", jinja.NewBool(c.AddGenerationPrompt))
	if len(c.Documents) > 0 {
		docs, err := documents(c.Documents)
		if err != nil {
			return "", err
		}
		kw.Set("documents", docs)
	}
	if c.ReasoningEffort != "" {
		kw.Set("reasoning_effort", jinja.NewString(c.ReasoningEffort))
		if !kw.Has("enable_thinking") {
			kw.Set("enable_thinking", jinja.NewBool(c.ReasoningEffort != "none"))
		}
	}
	if v, ok := kw.Get("return_assistant_tokens_mask"); ok && v.IsTruthy() {
		return "", badRequest("return_assistant_tokens_mask is incompatible with return_dict=False")
	}

	tools, _ = kw.Get("tools")
	tmpl, err := r.template(!tools.IsNone())
	if err != nil {
		return "", err
	}
	format := r.format
	if format == FormatAuto {
		format = tmpl.format
	}
	conv, err := conversation(c.RawMessages, c.contents, format)
	if err != nil {
		return "", err
	}
	if tmpl.err != nil {
		return "", &TemplateError{Err: tmpl.err}
	}
	if tmpl.trims && hasPyOnlySpace(jinja.NewList(conv)) {
		return "", unsupported(ReasonControl)
	}

	// The template's variables: special tokens, kwargs, then what
	// apply_chat_template passes itself.
	vars := specialTokenVars(r.special)
	for _, k := range kw.OrderedKeys() {
		if inertParams[k] {
			continue
		}
		if k == "messages" || k == "conversation" {
			return "", badRequest("chat_template_kwargs: %q given twice", k)
		}
		vars[k], _ = kw.Get(k)
	}
	if _, ok := vars["documents"]; !ok {
		vars["documents"] = jinja.None()
	}
	return r.renderConversation(tmpl.tmpl, conv, vars, c.ContinueFinalMessage)
}

// continueTag marks the end of the final message while rendering with
// continue_final_message, as transformers does.
const continueTag = "CONTINUE_FINAL_MESSAGE_TAG "

// renderConversation renders, and with cont cuts the text after the final
// message's content the way transformers' render_jinja_template does.
func (r *ChatRenderer) renderConversation(t *jinja.Template, conv []jinja.Value, vars map[string]jinja.Value, cont bool) (string, error) {
	if len(conv) == 0 {
		// transformers indexes the first message (IndexError).
		return "", &TemplateError{Err: errors.New("no messages")}
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
	vars["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return jinja.Undefined(), errors.New("strftime_now takes one format string")
		}
		return jinja.NewString(strftime(r.now(), args[0].AsString())), nil
	})
	out, err := t.RenderValues(vars)
	if err != nil {
		if raised != nil {
			return "", &TemplateError{Err: raised}
		}
		return "", &TemplateError{Err: err}
	}
	if !cont {
		return out, nil
	}
	tag := strings.TrimRight(continueTag, " ")
	if !strings.Contains(out, pyStrip(final)) || !strings.Contains(out, tag) {
		return "", &TemplateError{Err: errors.New("continue_final_message is set but the final message does not appear in the rendered chat")}
	}
	loc := strings.LastIndex(out, tag)
	if strings.HasPrefix(out[loc:], continueTag) {
		return out[:loc], nil
	}
	return pyRStrip(out[:loc]), nil
}

// pyStr is Python's str() of a template value.
func pyStr(v jinja.Value) string {
	if v.IsString() {
		return v.AsString()
	}
	return v.String()
}

// specialTokenVars are transformers' special_tokens_map: each special token
// attribute that is set, and additional_special_tokens when not empty.
func specialTokenVars(cfg hf.ChatConfig) map[string]jinja.Value {
	vars := make(map[string]jinja.Value, len(cfg.SpecialTokens)+8)
	for _, st := range cfg.SpecialTokens {
		vars[st.Attr] = jinja.NewString(st.Content)
	}
	if len(cfg.AdditionalSpecialTokens) > 0 {
		items := make([]jinja.Value, len(cfg.AdditionalSpecialTokens))
		for i, s := range cfg.AdditionalSpecialTokens {
			items[i] = jinja.NewString(s)
		}
		vars["additional_special_tokens"] = jinja.NewList(items)
	}
	return vars
}

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
// contents are the contents ParseChatRequest decoded, by message; they
// spare decoding long texts twice.
func conversation(raw []json.RawMessage, contents []rawjson.Decoded, format string) ([]jinja.Value, error) {
	conv := make([]jinja.Value, 0, len(raw))
	for i, rm := range raw {
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
		return jinja.Undefined(), unsupported(ReasonDeveloper)
	}
	texts, err := textParts(msg)
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
		o.Set("content", jinja.NewString(strings.Join(texts, "\n")))
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
func textParts(msg *jinja.Dict) ([]string, error) {
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
			return nil, unsupported(ReasonMultimodal)
		}
		field := ""
		switch {
		case !typ.IsString():
			return nil, unsupported(ReasonMultimodal)
		case typ.AsString() == "text", typ.AsString() == "refusal":
			field = typ.AsString()
		default:
			return nil, unsupported(ReasonMultimodal)
		}
		text, ok := pd.Get(field)
		if !ok || text.IsNone() {
			continue // vLLM skips text parts without text
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

// pyIsSpace is Python's str.isspace for one code point.
func pyIsSpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\v', '\f', '\r', 0x1c, 0x1d, 0x1e, 0x1f, 0x85, 0xa0, 0x1680,
		0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

func pyStrip(s string) string  { return strings.TrimFunc(s, pyIsSpace) }
func pyRStrip(s string) string { return strings.TrimRightFunc(s, pyIsSpace) }

// strftime formats t as Python's time.strftime does for the common
// directives; others are written as they are, as glibc does.
func strftime(t time.Time, format string) string {
	var b bytes.Buffer
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		switch format[i] {
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			fmt.Fprintf(&b, "%02d", h)
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'w':
			fmt.Fprintf(&b, "%d", int(t.Weekday()))
		case 'Z':
			name, _ := t.Zone()
			b.WriteString(name)
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'F':
			b.WriteString(t.Format("2006-01-02"))
		case 'T':
			b.WriteString(t.Format("15:04:05"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	if !utf8.Valid(b.Bytes()) {
		return strings.ToValidUTF8(b.String(), "\uFFFD")
	}
	return b.String()
}
