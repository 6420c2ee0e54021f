package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ardanlabs/jinja"

	"github.com/inferrail/inferrail/internal/filewatch"
	"github.com/inferrail/inferrail/internal/tokenize"
	"github.com/inferrail/inferrail/internal/tokenize/hf"
)

// Options are a model's server-side chat settings, vLLM's
// --chat-template, --chat-template-content-format and
// --default-chat-template-kwargs. The zero value uses the tokenizer's
// template, detects the content format and adds no kwargs.
type Options struct {
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
	// MaxOutput bounds a rendered prompt, in bytes: a request whose
	// rendering would outgrow it is not followed (tokenize.ReasonSize).
	// 0 means DefaultMaxOutput.
	MaxOutput int
}

// ErrMissing is returned for chat requests to a model whose
// tokenizer has no chat template and whose options set none.
var ErrMissing = errors.New("no chat template")

// Error is a chat template refusing a request (raise_exception)
// or failing on it: vLLM answers such requests with 400.
type Error struct{ Err error }

func (e *Error) Error() string { return "chat template: " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// RequestError is a chat request vLLM refuses before rendering (400).
type RequestError struct{ Msg string }

func (e *RequestError) Error() string { return "chat request: " + e.Msg }

func badRequest(format string, args ...any) error {
	return &RequestError{Msg: fmt.Sprintf(format, args...)}
}

// unsupported is a request the renderer cannot follow, for reason (one of
// tokenize's Reason constants): it is routed without a prediction.
func unsupported(reason string) error { return &tokenize.UnsupportedError{Reason: reason} }

// Renderer renders chat requests with a model's chat template as vLLM
// prepares them (transformers' apply_chat_template over Jinja2) and
// tokenizes the result. It is safe for concurrent use.
type Renderer struct {
	tok      *hf.Tokenizer
	special  hf.ChatConfig                // the special tokens the template sees
	single   *compiledTemplate            // the template, when there is one
	named    map[string]*compiledTemplate // named templates ("default", "tool_use"), when there are several
	format   string                       // FormatAuto, FormatString or FormatOpenAI
	defaults []kwarg                      // Options.Kwargs, in order
	now      func() time.Time
	maxOut   int // Options.MaxOutput
}

type kwarg struct {
	key string
	val jinja.Value
}

// compiledTemplate is one compiled template and its detected content format.
type compiledTemplate struct {
	// tmpl is instrumented to call a rendering's watch (see instrument),
	// unless watched is false: the instrumented copy did not compile, and
	// the template as written cannot be stopped or bounded.
	tmpl    *jinja.Template
	watched bool
	err     error // compile error, reported when the template is used
	format  string
	// developer: the source names the developer role (namesDeveloper), so
	// developer messages reach it unchanged.
	developer bool
}

func compileTemplate(src string) *compiledTemplate {
	src = jinjaSource(src)
	ct := &compiledTemplate{format: DetectContentFormat(src), developer: namesDeveloper(src)}
	src = overrideFilters(src)
	if why := tooDeep(src); why != "" {
		// Compiling it could end the process (see maxBlockDepth).
		ct.err = fmt.Errorf("nested too deeply for the template engine, which recurses once a level: %s", why)
		return ct
	}
	ct.tmpl, ct.err = jinja.Compile(src)
	if ct.err != nil {
		return ct
	}
	if what := unreadConstruct(src); what != "" {
		ct.tmpl, ct.err = nil, fmt.Errorf("the template engine cannot render %s", what)
		return ct
	}
	if inst, ok := instrument(src); ok {
		if ti, err := jinja.Compile(inst); err == nil {
			ct.tmpl, ct.watched = ti, true
		}
	}
	if !ct.watched && (strings.Contains(src, "macro") || strings.Contains(src, "recursive")) {
		// Unwatched, a template that can call itself has no bound on its
		// depth, and its stack would grow until the process ended.
		ct.tmpl, ct.err = nil, errors.New("it defines macros or recursive loops, and its depth could not be bounded")
	}
	return ct
}

// jinjaSource is src as Jinja2's lexer reads it with transformers' settings
// (keep_trailing_newline off): every line break ("\r\n", "\r" or "\n")
// becomes "\n", and one line break at the very end is dropped.
func jinjaSource(src string) string {
	if strings.Contains(src, "\r") {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	return strings.TrimSuffix(src, "\n")
}

// New returns a renderer for tok's chat template (from
// tokenizer_config.json) with opts.
func New(tok *hf.Tokenizer, opts Options) (*Renderer, error) {
	return newRenderer(tok, tok.ChatConfig(), opts)
}

// newRenderer returns a renderer of the chat template and special
// tokens of cfg that encodes with tok.
func newRenderer(tok *hf.Tokenizer, cfg hf.ChatConfig, opts Options) (*Renderer, error) {
	r := &Renderer{tok: tok, special: cfg, now: opts.Now, maxOut: opts.MaxOutput}
	if r.now == nil {
		r.now = time.Now
	}
	switch {
	case r.maxOut < 0:
		return nil, fmt.Errorf("chat template max output %d: must be >= 0", r.maxOut)
	case r.maxOut == 0:
		r.maxOut = DefaultMaxOutput
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
	case opts.Template != "" && !strings.ContainsAny(opts.Template, "{}\n"):
		// As vLLM's --chat-template: text without Jinja's characters is a
		// file's path, and one that cannot be opened is an error. It is
		// read as the tokenizer's files are (a named pipe or a device
		// there is refused, not waited on or read without end).
		text, err := filewatch.ReadFile(opts.Template, hf.MaxFileBytes)
		if err != nil {
			return nil, fmt.Errorf("chat template %q looks like a file path, but it failed to be opened: %w", opts.Template, err)
		}
		single, named = string(text), nil
	case opts.Template != "":
		single, named = opts.Template, nil
	}
	if single != "" {
		r.single = compileTemplate(single)
	}
	if len(named) > 0 {
		r.named = map[string]*compiledTemplate{}
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

// Problems says which of the renderer's templates do not compile: chat
// requests that would use one go without a prediction, and --check and
// the startup log should say so before the first request does.
func (r *Renderer) Problems() []string {
	var out []string
	if r.single != nil && r.single.err != nil {
		out = append(out, fmt.Sprintf("chat template does not compile: %v", r.single.err))
	}
	for _, name := range slices.Sorted(maps.Keys(r.named)) {
		if err := r.named[name].err; err != nil {
			out = append(out, fmt.Sprintf("chat template %q does not compile: %v", name, err))
		}
	}
	return out
}

var errNotTemplates = errors.New("tokenizer_config.json: chat_template: want a string or a list of named templates")

// parseChatTemplates reads tokenizer_config.json's chat_template: a string,
// or a list of {"name", "template"} objects.
func parseChatTemplates(raw json.RawMessage) (named map[string]string, single string, err error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return nil, "", nil
	}
	if err := json.Unmarshal(raw, &single); err == nil {
		return nil, single, nil
	}
	// transformers reads each entry as a dict, template["name"] and
	// template["template"], case and all: an entry with "Name" alone fails
	// there (KeyError), where encoding/json would take it for "name".
	var list []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, "", errNotTemplates
	}
	named = map[string]string{}
	for _, entry := range list {
		var name, text string
		if json.Unmarshal(entry["name"], &name) != nil || json.Unmarshal(entry["template"], &text) != nil {
			return nil, "", errNotTemplates
		}
		named[name] = text
	}
	return named, "", nil
}

// template picks the template for a request as transformers'
// get_chat_template does: "tool_use" when tools are given and it exists,
// else "default".
func (r *Renderer) template(tools bool) (*compiledTemplate, error) {
	if r.single != nil {
		return r.single, nil
	}
	if r.named == nil {
		return nil, ErrMissing
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
	return nil, &Error{Err: fmt.Errorf("several chat templates and no default: %v", names)}
}

// ChatIDs renders p's chat and tokenizes it with p.AddSpecial (false
// unless the request set add_special_tokens), as vLLM does.
func (r *Renderer) ChatIDs(p *tokenize.Prompt) ([]int, error) {
	return r.ChatIDsUntil(p, nil)
}

// ChatIDsUntil is ChatIDs that gives up once stop is set: while rendering
// (RenderUntil, with ErrStopped), after it, or while encoding
// (hf.Tokenizer.EncodeUntil, with hf.ErrStopped; ErrStopped matches it). A
// nil stop never stops.
func (r *Renderer) ChatIDsUntil(p *tokenize.Prompt, stop *atomic.Bool) ([]int, error) {
	text, err := r.RenderUntil(p.Chat, stop)
	if err != nil {
		return nil, err
	}
	if stop != nil && stop.Load() {
		return nil, hf.ErrStopped
	}
	return r.tok.EncodeUntil(nil, text, p.AddSpecial, stop)
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
func (r *Renderer) Render(c *tokenize.Chat) (string, error) {
	return r.RenderUntil(c, nil)
}

// RenderUntil is Render that gives up with ErrStopped once stop is set:
// it looks while building the conversation (every stopEvery messages), at
// each iteration of the template's loops and before each value it prints.
// A rendering longer than Options.MaxOutput gives up at the same points
// with a tokenize.UnsupportedError (tokenize.ReasonSize). A nil stop never
// stops.
func (r *Renderer) RenderUntil(c *tokenize.Chat, stop *atomic.Bool) (string, error) {
	return r.render(c, newWatch(stop, r.maxOut))
}

// render is RenderUntil with the watch given.
func (r *Renderer) render(c *tokenize.Chat, w *watch) (string, error) {
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
				return "", unsupported(tokenize.ReasonTemplate)
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
	conv, err := conversation(c.RawMessages, c.Contents, format, w)
	if err != nil {
		return "", err
	}
	if conv, err = adaptDeveloper(conv, tmpl.developer); err != nil {
		return "", err
	}
	if tmpl.err != nil {
		return "", &Error{Err: tmpl.err}
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
	return r.renderConversation(tmpl.tmpl, conv, vars, c.ContinueFinalMessage, w)
}
