package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/tokenize"
	"github.com/inferrail/inferrail/internal/tokenize/simtok"
)

// genRequest is a validated chat or completion request, reduced to what the
// engine needs.
type genRequest struct {
	chat      bool
	generate  bool   // a chat or completion, not /tokenize
	model     string // as the client named it; "" for the default
	requestID string // body request_id, "" when absent

	prompt        *tokenize.Prompt // what decides the prompt tokens, shared with the gateway
	addGenPrompt  bool             // chat: add_generation_prompt
	continueFinal bool             // chat: continue_final_message
	messages      int              // chat: number of messages
	lastRole      string

	maxTokens int // 0 means not set
	minTokens int
	// maxSent and minSent are max_tokens (or max_completion_tokens) and
	// min_tokens as sent, which messages quote: the ints above are
	// clamped, Python's are not.
	maxSent, minSent any
	ignoreEOS        bool
	stream           bool
	includeUsage     bool
	continuousUsage  bool
	// reportFull: vllm_xargs asks for kv_cache_report_mode "full", so the
	// engine reports the prefix-cache hits it reuses as stored again.
	reportFull   bool
	responseRole string
	// optionsNoStream: stream_options is set and stream is not, as vLLM's
	// check reads the raw body (Python truthiness: {} and null options
	// pass, and so does any stream that is not false, 0, "" or null).
	optionsNoStream bool
	toolChoice      toolChoice // chat
}

// fieldError is one pydantic validation error.
type fieldError struct {
	typ   string
	loc   []any // path below "body"
	msg   string
	input any
	ctx   *object // pydantic's ctx, nil for none
}

// validator collects pydantic-style errors for one body.
type validator struct {
	errs []fieldError
}

func (v *validator) add(typ string, loc []any, msg string, input any) {
	v.errs = append(v.errs, fieldError{typ: typ, loc: loc, msg: msg, input: input})
}

// addCtx adds an error whose dict pydantic gives a ctx.
func (v *validator) addCtx(typ string, loc []any, msg string, input any, ctx *object) {
	v.errs = append(v.errs, fieldError{typ: typ, loc: loc, msg: msg, input: input, ctx: ctx})
}

// err renders the collected errors as vLLM's handler for request validation
// errors does: 400, type "Bad Request", param the dotted location.
func (v *validator) err() *openai.Error {
	if len(v.errs) == 0 {
		return nil
	}
	var b strings.Builder
	label := "error"
	if len(v.errs) > 1 {
		label = "errors"
	}
	fmt.Fprintf(&b, "%d validation %s:\n", len(v.errs), label)
	for i, e := range v.errs {
		b.WriteString("  {'type': ")
		pyStr(&b, e.typ)
		b.WriteString(", 'loc': ('body'")
		for _, l := range e.loc {
			b.WriteString(", ")
			switch t := l.(type) {
			case int:
				b.WriteString(strconv.Itoa(t))
			case string:
				pyStr(&b, t)
			case unionTag:
				pyStr(&b, string(t))
			}
		}
		if len(e.loc) == 0 {
			b.WriteString(",")
		}
		b.WriteString("), 'msg': ")
		pyStr(&b, e.msg)
		b.WriteString(", 'input': ")
		pyRepr(&b, e.input)
		if e.ctx != nil {
			b.WriteString(", 'ctx': ")
			pyRepr(&b, e.ctx)
		}
		b.WriteString("}")
		if i < len(v.errs)-1 {
			b.WriteString("\n")
		}
	}
	param := "body"
	for _, l := range v.errs[0].loc {
		if _, isTag := l.(unionTag); !isTag {
			param += "." + fmt.Sprint(l)
		}
	}
	return &openai.Error{Status: 400, Type: "Bad Request", Message: b.String(), Param: param}
}

func (v *validator) str(o *object, key string, nullable bool) (string, bool) {
	val, ok := o.get(key)
	if !ok || (val == nil && nullable) {
		return "", false
	}
	s, isStr := val.(string)
	if !isStr {
		v.add("string_type", []any{key}, "Input should be a valid string", val)
		return "", false
	}
	return s, true
}

// integer reads an int field in pydantic's lax mode: JSON integers, floats
// without a fraction, numeric strings and booleans.
func (v *validator) integer(o *object, key string, nullable bool) (int, bool) {
	val, ok := o.get(key)
	if !ok || (val == nil && nullable) {
		return 0, false
	}
	n, kind := laxInt(val)
	if kind != "" {
		v.add(kind, []any{key}, intMessages[kind], val)
		return 0, false
	}
	return n, true
}

// boolean reads a bool field in pydantic's lax mode.
func (v *validator) boolean(o *object, key string, nullable bool) (bool, bool) {
	val, ok := o.get(key)
	if !ok || (val == nil && nullable) {
		return false, false
	}
	b, kind := laxBool(val)
	if kind != "" {
		v.add(kind, []any{key}, boolMessages[kind], val)
		return false, false
	}
	return b, true
}

// number reads a float field in pydantic's lax mode: JSON numbers,
// numeric strings and booleans.
func (v *validator) number(o *object, key string) (float64, bool) {
	val, ok := o.get(key)
	if !ok || val == nil {
		return 0, false
	}
	f, kind := laxFloat(val)
	if kind != "" {
		v.add(kind, []any{key}, floatMessages[kind], val)
		return 0, false
	}
	return f, true
}

// parseGenRequest validates a chat (chat true) or completion body. The first
// error is a 400 in vLLM's shape.
func parseGenRequest(body []byte, chat bool, tok *simtok.Tokenizer) (*genRequest, *openai.Error) {
	return parseRequest(body, chat, true, tok)
}

// parseRequest is parseGenRequest for generation (generate true) or
// /tokenize, whose request models lack some of the generation checks.
func parseRequest(body []byte, chat, generate bool, tok *simtok.Tokenizer) (*genRequest, *openai.Error) {
	root, nonFinite, err := decodeBody(body)
	if err != nil {
		return nil, bodyError(err)
	}
	o, ok := root.(*object)
	if !ok {
		v := &validator{}
		v.add("model_attributes_type", nil, "Input should be a valid dictionary or object to extract fields from", root)
		return nil, v.err()
	}
	if chat && generate {
		// A check vLLM makes before it reads the fields.
		if msg := checkToolUsage(o); msg != "" {
			v := &validator{}
			v.add("value_error", nil, "Value error, "+msg, o)
			return nil, v.err()
		}
	}
	v := &validator{}
	g := &genRequest{chat: chat, generate: generate}
	if chat && generate {
		g.toolChoice = readToolChoice(o)
	}
	c := g.readFields(v, o, tok)
	if e := v.err(); e != nil {
		return nil, e
	}
	if e := g.check(o, &c); e != nil {
		return nil, e
	}
	if chat {
		g.responseRole = "assistant"
		if !g.addGenPrompt && g.messages > 0 {
			g.responseRole = g.lastRole
		}
	}
	if g.stream {
		g.continuousUsage = g.includeUsage && g.continuousUsage
	} else {
		g.includeUsage, g.continuousUsage = false, false
	}
	// The prompt itself is read by the code the gateway uses too, so both
	// compute the same tokens. That code reads JSON as Go does.
	body, e := finiteBody(body, nonFinite)
	if e != nil {
		return nil, e
	}
	var err2 error
	if chat {
		g.prompt, err2 = tokenize.ParseChatRequest(body)
	} else {
		g.prompt, err2 = tokenize.ParseCompletionRequest(body)
	}
	if ue, ok := errors.AsType[*tokenize.UnsupportedError](err2); ok && ue.Reason == tokenize.ReasonEmbeds {
		// The gateway predicts nothing for it; vLLM started without
		// --enable-prompt-embeds, as the simulator always is, refuses it.
		return nil, openai.BadRequest("You must set `--enable-prompt-embeds` to input `prompt_embeds`.", "")
	}
	if err2 != nil {
		return nil, openai.BadRequest(err2.Error(), "")
	}
	return g, nil
}

// laterChecks are what readFields read for the checks vLLM makes once
// the whole body parsed.
type laterChecks struct {
	n                       int
	hasN                    bool
	salt                    string
	hasSalt, echo, logprobs bool
	bestOf                  int
	hasBestOf               bool
	sampling                samplingFields
	emptyStop               bool // stop holds ""
	// What vLLM answers with data the simulator does not have: token ids
	// in the response, prompt logprobs, beam search.
	returnTokenIDs, hasPromptLogprobs, beamSearch, truncates bool
}

// readFields reads the request's fields into g, adding to v every
// validation error.
func (g *genRequest) readFields(v *validator, o *object, tok *simtok.Tokenizer) laterChecks {
	chat := g.chat
	var c laterChecks
	checkDeclared(v, o, declaredFields(chat, g.generate), tok, g.generate)
	// The table reported every error, in vLLM's order; the reads below
	// only take the values.
	v = &validator{}
	if chat {
		g.messages, g.lastRole = validateMessages(v, o)
	}
	g.model, _ = v.str(o, "model", true)
	if !chat {
		validatePrompt(v, o, tok, g.generate)
	}
	g.requestID, _ = v.str(o, "request_id", false)
	if mt, ok := v.integer(o, "max_tokens", true); ok {
		g.maxTokens = mt
		g.maxSent, _ = o.get("max_tokens")
	}
	if chat {
		if mct, ok := v.integer(o, "max_completion_tokens", true); ok {
			g.maxTokens = mct
			g.maxSent, _ = o.get("max_completion_tokens")
		}
	}
	c.n, c.hasN = v.integer(o, "n", true)
	g.minTokens, _ = v.integer(o, "min_tokens", false)
	g.minSent, _ = o.get("min_tokens")
	g.ignoreEOS, _ = v.boolean(o, "ignore_eos", false)
	g.stream, _ = v.boolean(o, "stream", true)
	v.boolean(o, "add_special_tokens", false)
	c.salt, c.hasSalt = v.str(o, "cache_salt", true)
	c.echo, _ = v.boolean(o, "echo", false)
	c.sampling = readSampling(v, o)
	validateStop(v, o)
	// SamplingParams refuses it; /tokenize builds none.
	c.emptyStop = g.generate && slices.Contains(stopStrings(o), "")
	v.integer(o, "seed", true)
	v.integer(o, "priority", false)
	c.returnTokenIDs, _ = v.boolean(o, "return_token_ids", true)
	_, c.hasPromptLogprobs = v.integer(o, "prompt_logprobs", true)
	c.beamSearch, _ = v.boolean(o, "use_beam_search", false)
	_, c.truncates = v.integer(o, "truncate_prompt_tokens", true)

	if xa, ok := o.get("vllm_xargs"); ok {
		if xo, ok := xa.(*object); ok {
			mode, _ := xo.get("kv_cache_report_mode")
			g.reportFull = mode == "full"
		}
	}
	rawStream, _ := o.get("stream")
	if so, present := o.get("stream_options"); present && so != nil {
		g.optionsNoStream = truthy(so) && !truthy(rawStream)
		g.includeUsage, g.continuousUsage = readStreamOptions(v, so)
	}

	if chat {
		c.logprobs, _ = v.boolean(o, "logprobs", true)
		if tl, ok := v.integer(o, "top_logprobs", true); ok && tl > 0 {
			c.logprobs = true
		}
		g.addGenPrompt = true
		if b, ok := v.boolean(o, "add_generation_prompt", false); ok {
			g.addGenPrompt = b
		}
		g.continueFinal, _ = v.boolean(o, "continue_final_message", false)
		validateTools(v, o)
	} else {
		_, c.logprobs = v.integer(o, "logprobs", true)
		c.bestOf, c.hasBestOf = v.integer(o, "best_of", true)
	}
	return c
}

// readStreamOptions reads stream_options, a StreamOptions, adding its
// errors to v.
func readStreamOptions(v *validator, so any) (includeUsage, continuousUsage bool) {
	sop, ok := so.(*object)
	if !ok {
		v.addCtx("model_type", []any{"stream_options"}, "Input should be a valid dictionary or instance of StreamOptions", so,
			&object{keys: []string{"class_name"}, vals: []any{"StreamOptions"}})
		return false, false
	}
	member := func(key string) bool {
		val, ok := sop.get(key)
		if !ok || val == nil {
			return false
		}
		b, kind := laxBool(val)
		if kind != "" {
			v.add(kind, []any{"stream_options", key}, boolMessages[kind], val)
		}
		return b
	}
	return member("include_usage"), member("continuous_usage_stats")
}

// check makes the checks vLLM makes once a request's fields read cleanly,
// then refuses the features the simulator does not answer as vLLM would.
func (g *genRequest) check(o *object, c *laterChecks) *openai.Error {
	chat := g.chat
	switch {
	case g.optionsNoStream:
		return openai.BadRequest("Stream options can only be defined when `stream=True`.", "stream_options")
	case c.hasSalt && c.salt == "":
		return openai.BadRequest("Parameter 'cache_salt' must be a non-empty string if provided.", "cache_salt")
	}
	if e := c.sampling.check(); e != nil {
		return e
	}
	switch {
	case g.maxTokens < 0 || (hasMax(o, chat) && g.maxTokens == 0):
		return openai.BadRequest(fmt.Sprintf("max_tokens must be at least 1, got %s.", sentInt(g.maxSent, g.maxTokens)), "max_tokens")
	case g.minTokens < 0:
		return openai.BadRequest(fmt.Sprintf("min_tokens must be greater than or equal to 0, got %s.", sentInt(g.minSent, g.minTokens)), "min_tokens")
	case g.maxTokens > 0 && g.minTokens > g.maxTokens:
		return openai.BadRequest(fmt.Sprintf("min_tokens must be less than or equal to max_tokens=%s, got %s.",
			sentInt(g.maxSent, g.maxTokens), sentInt(g.minSent, g.minTokens)), "min_tokens")
	case c.emptyStop:
		return openai.BadRequest("stop cannot contain an empty string.", "")
	case c.hasN && c.n < 1:
		return openai.BadRequest(fmt.Sprintf("n must be at least 1, got %d.", c.n), "n")
	case c.hasN && c.n > 1:
		return openai.BadRequest("n > 1 is not supported by inferrail-sim: it returns exactly one choice.", "n")
	case c.logprobs:
		return openai.BadRequest("logprobs are not supported by inferrail-sim.", "logprobs")
	case c.echo:
		return openai.BadRequest("echo is not supported by inferrail-sim.", "echo")
	case c.hasBestOf && c.bestOf != 1:
		return openai.BadRequest("best_of is not supported by inferrail-sim.", "best_of")
	case c.returnTokenIDs:
		return openai.BadRequest("return_token_ids is not supported by inferrail-sim.", "return_token_ids")
	case c.hasPromptLogprobs:
		return openai.BadRequest("prompt_logprobs are not supported by inferrail-sim.", "prompt_logprobs")
	case c.beamSearch:
		return openai.BadRequest("use_beam_search is not supported by inferrail-sim.", "use_beam_search")
	case c.truncates:
		// vLLM keeps the prompt's last tokens; which, beside the special
		// tokens, the spec does not say, so the simulator refuses rather
		// than count a prompt the engine would not see.
		return openai.BadRequest("truncate_prompt_tokens is not supported by inferrail-sim.", "truncate_prompt_tokens")
	case chat && g.addGenPrompt && g.continueFinal:
		return openai.BadRequest("Cannot set both `continue_final_message` and `add_generation_prompt` to True.", "")
	}
	if chat {
		if t, ok := o.get("chat_template"); ok && t != nil {
			return openai.BadRequest("Chat template is passed with request, but --trust-request-chat-template is not set. Refused request with untrusted chat template.", "")
		}
		if g.messages == 0 && g.continueFinal {
			return openai.BadRequest("continue_final_message requires a final message to continue.", "messages")
		}
	} else if s, ok := o.get("suffix"); ok && s != nil {
		return openai.BadRequest("suffix is not currently supported", "suffix")
	}
	return nil
}

func hasMax(o *object, chat bool) bool {
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if !chat && k == "max_completion_tokens" {
			continue
		}
		if v, ok := o.get(k); ok && v != nil {
			return true
		}
	}
	return false
}

// validateMessages checks the messages' shape and returns how many there
// are and the role of the last.
func validateMessages(v *validator, o *object) (int, string) {
	raw, ok := o.get("messages")
	if !ok {
		v.add("missing", []any{"messages"}, "Field required", o)
		return 0, ""
	}
	list, ok := raw.([]any)
	if !ok {
		v.add("list_type", []any{"messages"}, "Input should be a valid list", raw)
		return 0, ""
	}
	last := ""
	for i, item := range list {
		m, ok := item.(*object)
		if !ok {
			v.add("model_type", []any{"messages", i}, "Input should be a valid dictionary", item)
			continue
		}
		role, ok := m.get("role")
		rs, isStr := role.(string)
		if !ok {
			v.add("missing", []any{"messages", i, "role"}, "Field required", m)
			continue
		}
		if !isStr {
			v.add("string_type", []any{"messages", i, "role"}, "Input should be a valid string", role)
			continue
		}
		last = rs
		content, _ := m.get("content")
		switch c := content.(type) {
		case nil, string:
		case []any:
			for j, p := range c {
				if !textPart(p) {
					v.add("value_error", []any{"messages", i, "content", j},
						"Value error, inferrail-sim accepts only text content parts", p)
				}
			}
		default:
			v.add("string_type", []any{"messages", i, "content"}, "Input should be a valid string", content)
		}
		for _, key := range []string{"reasoning", "reasoning_content"} {
			if r, ok := m.get(key); ok && r != nil {
				if _, isStr := r.(string); !isStr {
					v.add("string_type", []any{"messages", i, key}, "Input should be a valid string", r)
				}
			}
		}
		if tcs, ok := m.get("tool_calls"); ok && tcs != nil {
			list, ok := tcs.([]any)
			if !ok {
				v.add("list_type", []any{"messages", i, "tool_calls"}, "Input should be a valid list", tcs)
			}
			for j, tc := range list {
				if !validToolCall(tc) {
					v.add("model_type", []any{"messages", i, "tool_calls", j}, "Input should be a valid dictionary", tc)
				}
			}
		}
	}
	return len(list), last
}

// textPart reports whether a content part is text: a string, or an object
// of type text with a string text.
func textPart(p any) bool {
	switch t := p.(type) {
	case string:
		return true
	case *object:
		typ, _ := t.get("type")
		text, ok := t.get("text")
		_, isStr := text.(string)
		return typ == "text" && ok && isStr
	}
	return false
}

// validToolCall reports whether an assistant's tool call has a function
// with a string name and string (or absent) arguments.
func validToolCall(tc any) bool {
	o, ok := tc.(*object)
	if !ok {
		return false
	}
	fn, _ := o.get("function")
	f, ok := fn.(*object)
	if !ok {
		return false
	}
	name, _ := f.get("name")
	args, _ := f.get("arguments")
	_, nameOK := name.(string)
	_, argsOK := args.(string)
	return nameOK && (argsOK || args == nil)
}

// validateTools checks each tool names its function.
func validateTools(v *validator, o *object) {
	raw, ok := o.get("tools")
	if !ok || raw == nil {
		return
	}
	list, ok := raw.([]any)
	if !ok {
		v.add("list_type", []any{"tools"}, "Input should be a valid list", raw)
		return
	}
	for i, t := range list {
		obj, ok := t.(*object)
		if !ok {
			v.add("model_type", []any{"tools", i}, "Input should be a valid dictionary", t)
			continue
		}
		fn, ok := obj.get("function")
		fo, isObj := fn.(*object)
		if !ok || !isObj {
			v.add("missing", []any{"tools", i, "function"}, "Field required", obj)
			continue
		}
		if name, ok := fo.get("name"); !ok {
			v.add("missing", []any{"tools", i, "function", "name"}, "Field required", fo)
			continue
		} else if _, isStr := name.(string); !isStr {
			v.add("string_type", []any{"tools", i, "function", "name"}, "Input should be a valid string", name)
			continue
		}
	}
}

// validatePrompt checks a completion prompt: a string, a list of token ids,
// or a batch of one of either. Batches of several prompts are refused.
func validatePrompt(v *validator, o *object, tok *simtok.Tokenizer, generate bool) {
	raw, ok := o.get("prompt")
	if !ok || raw == nil {
		v.add("value_error", nil, "Value error, Either prompt or prompt_embeds must be provided and non-empty.", o)
		return
	}
	if list, ok := raw.([]any); ok && len(list) == 1 {
		switch list[0].(type) {
		case string, []any:
			raw = list[0]
		}
	}
	switch t := raw.(type) {
	case string:
		// Completions refuse an empty string, as a missing prompt;
		// /tokenize takes it.
		if orig, _ := o.get("prompt"); orig == "" && generate {
			v.add("value_error", nil, "Value error, Either prompt or prompt_embeds must be provided and non-empty.", o)
		}
		return
	case []any:
		if len(t) == 0 {
			v.add("value_error", []any{"prompt"}, "Value error, Either prompt or prompt_embeds must be provided and non-empty.", raw)
			return
		}
		for i, e := range t {
			switch e.(type) {
			case string, []any:
				v.add("value_error", []any{"prompt"}, "Value error, inferrail-sim serves one prompt per request, not a batch.", raw)
				return
			}
			// A float with no fractional part is the integer (pydantic's
			// lax int), as for every integer vLLM reads.
			n, isNum := e.(json.Number)
			id, ok := exactInt(n)
			if !isNum || !ok || !id.IsInt64() || !tok.Valid(int(id.Int64())) {
				v.add("value_error", []any{"prompt", i}, fmt.Sprintf("Value error, token id %v is out of vocabulary", e), e)
				return
			}
		}
	default:
		v.add("string_type", []any{"prompt"}, "Input should be a valid string", raw)
	}
}
