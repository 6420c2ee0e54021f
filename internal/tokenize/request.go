package tokenize

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/inferrail/inferrail/internal/tokenize/rawjson"
)

// ParseChatRequest reads the prompt of a chat completion request the way
// vLLM prepares it: content parts joined with newlines, roles as sent (the
// renderers fit the developer role to their templates), reasoning and tool
// calls kept, tools as compact JSON (the builtin:sim template's view), and
// the fields Hugging Face chat templates read, as sent (package
// chattemplate's view).
//
// Keys match case-sensitively, as in vLLM's request models (encoding/json
// into a struct would not), and a repeated key keeps its last value, as in
// Python. The body is read in one pass; the Chat's raw fields are slices of
// body, which must not change while the Prompt is in use.
func ParseChatRequest(body []byte) (*Prompt, error) {
	var f chatFields
	if err := readObject(body, f.read); err != nil {
		return nil, fmt.Errorf("chat request: %w", err)
	}
	if present(f.template) {
		return nil, unsupported(ReasonTemplate)
	}
	c := &Chat{}
	if present(f.kwargs) {
		kw, ok := objectFields(f.kwargs, [2]string{"chat_template"})
		if !ok {
			return nil, fmt.Errorf("chat_template_kwargs: %w", objectError(f.kwargs))
		}
		if present(kw[0]) {
			return nil, unsupported(ReasonTemplate)
		}
		c.TemplateKwargs = f.kwargs
	}
	if present(f.documents) {
		c.Documents = f.documents
	}
	var err error
	if c.ReasoningEffort, err = optString(f.reasoningEffort); err != nil {
		return nil, fmt.Errorf("reasoning_effort: %w", err)
	}
	if c.AddGenerationPrompt, err = laxBool(f.addGenerationPrompt, true); err != nil {
		return nil, fmt.Errorf("add_generation_prompt: %w", err)
	}
	if c.ContinueFinalMessage, err = laxBool(f.continueFinalMessage, false); err != nil {
		return nil, fmt.Errorf("continue_final_message: %w", err)
	}
	p := &Prompt{Chat: c}
	if p.AddSpecial, err = laxBool(f.addSpecialTokens, false); err != nil {
		return nil, fmt.Errorf("add_special_tokens: %w", err)
	}
	if p.CacheSalt, err = optString(f.cacheSalt); err != nil {
		return nil, fmt.Errorf("cache_salt: %w", err)
	}
	p.CacheSalt = cacheKeySalt(p.CacheSalt, f.extraKey, f.loraPath)
	if err := p.readTruncate(f.truncate); err != nil {
		return nil, err
	}
	// A chat's echo asks for prompt logprobs at top_logprobs, whose
	// default is 0, not null.
	if p.SkipsCache, err = skipsCache(f.promptLogprobs, f.echo, f.topLogprobs, true); err != nil {
		return nil, err
	}
	m := &f.messages
	if !m.list {
		// Absent, null or not a list: json.Unmarshal says which.
		var list []json.RawMessage
		if err := json.Unmarshal(m.raw, &list); err != nil {
			return nil, fmt.Errorf("messages: %w", err)
		}
		m.raws = list
	}
	if m.err != nil {
		return nil, m.err
	}
	c.RawMessages, c.Messages, c.Contents = m.raws, m.msgs, m.contents
	if present(f.tools) {
		c.RawTools = f.tools
		tools, ok := elements(f.tools)
		if !ok {
			return nil, fmt.Errorf("tools: %w", arrayError(f.tools))
		}
		for _, t := range tools {
			var buf bytes.Buffer
			if err := json.Compact(&buf, t); err != nil {
				return nil, fmt.Errorf("tools: %w", err)
			}
			c.Tools = append(c.Tools, json.RawMessage(buf.Bytes()))
		}
	}
	return p, nil
}

// chatFields are the members of a chat request that ParseChatRequest
// reads, as slices of the body (nil when absent); a repeated member keeps
// its last value.
type chatFields struct {
	messages chatMessages

	template, kwargs, documents, reasoningEffort, tools []byte

	addGenerationPrompt, continueFinalMessage, addSpecialTokens, cacheSalt, truncate []byte

	echo, promptLogprobs, topLogprobs []byte

	// SGLang keys its radix cache by extra_key (joined to cache_salt) and
	// by the adapter lora_path names; the gateway's hashes see neither.
	extraKey, loraPath []byte
}

// chatMessages is the messages member, decoded while it is read so that
// its text is walked once.
type chatMessages struct {
	list bool   // the value is a list: raws and msgs hold it
	raw  []byte // the value when it is not a list; nil when absent
	raws []json.RawMessage
	msgs []ChatMessage
	err  error // the first message's error, with its index: reported after the fields before messages

	contents []rawjson.Decoded // for Chat.Contents
}

func (f *chatFields) read(r *rawjson.Reader, name []byte) error {
	var dst *[]byte
	switch string(name) {
	case "messages":
		return readMessages(r, &f.messages)
	case "chat_template":
		dst = &f.template
	case "chat_template_kwargs":
		dst = &f.kwargs
	case "documents":
		dst = &f.documents
	case "reasoning_effort":
		dst = &f.reasoningEffort
	case "tools":
		dst = &f.tools
	case "add_generation_prompt":
		dst = &f.addGenerationPrompt
	case "continue_final_message":
		dst = &f.continueFinalMessage
	case "add_special_tokens":
		dst = &f.addSpecialTokens
	case "cache_salt":
		dst = &f.cacheSalt
	case "truncate_prompt_tokens":
		dst = &f.truncate
	case "echo":
		dst = &f.echo
	case "prompt_logprobs":
		dst = &f.promptLogprobs
	case "top_logprobs":
		dst = &f.topLogprobs
	case "extra_key":
		dst = &f.extraKey
	case "lora_path":
		dst = &f.loraPath
	default:
		return r.Dec.SkipValue()
	}
	var err error
	*dst, err = r.Value()
	return err
}

// readMessages reads the messages member into m, replacing an earlier one.
func readMessages(r *rawjson.Reader, m *chatMessages) error {
	*m = chatMessages{}
	if r.Dec.PeekKind() != '[' {
		var err error
		m.raw, err = r.Value()
		return err
	}
	if _, err := r.Dec.ReadToken(); err != nil {
		return err
	}
	m.list, m.raws = true, []json.RawMessage{}
	for i := 0; r.Dec.PeekKind() != ']'; i++ {
		var f messageFields
		raw, err := readMessage(r, &f)
		if err != nil {
			return err
		}
		m.raws = append(m.raws, raw)
		if m.err != nil {
			continue // the rest is still read: a syntax error later in the body comes first
		}
		msg, err := f.message()
		if err != nil {
			m.err = fmt.Errorf("messages[%d]: %w", i, err)
			continue
		}
		m.msgs = append(m.msgs, msg)
		var content rawjson.Decoded
		if len(f.content) > 0 && f.content[0] == '"' {
			content = rawjson.Decoded{Raw: f.content, Value: msg.Content}
		}
		m.contents = append(m.contents, content)
	}
	_, err := r.Dec.ReadToken()
	return err
}

// messageFields are the members of a message that ParseChatRequest reads.
type messageFields struct {
	role, content, reasoning, reasoningContent, toolCalls []byte

	other []byte // the message when it is not an object
}

// readMessage reads one message into f and returns it whole.
func readMessage(r *rawjson.Reader, f *messageFields) ([]byte, error) {
	if r.Dec.PeekKind() != '{' {
		raw, err := r.Value()
		f.other = raw
		return raw, err
	}
	if _, err := r.Dec.ReadToken(); err != nil {
		return nil, err
	}
	start := int(r.Dec.InputOffset()) - len("{")
	for r.Dec.PeekKind() != '}' {
		name, err := r.Name()
		if err != nil {
			return nil, err
		}
		var dst *[]byte
		switch string(name) {
		case "role":
			dst = &f.role
		case "content":
			dst = &f.content
		case "reasoning":
			dst = &f.reasoning
		case "reasoning_content":
			dst = &f.reasoningContent
		case "tool_calls":
			dst = &f.toolCalls
		default:
			if err := r.Dec.SkipValue(); err != nil {
				return nil, err
			}
			continue
		}
		if *dst, err = r.Value(); err != nil {
			return nil, err
		}
	}
	if _, err := r.Dec.ReadToken(); err != nil {
		return nil, err
	}
	end := int(r.Dec.InputOffset())
	return r.Slice(start, end), nil
}

func (f *messageFields) message() (ChatMessage, error) {
	var msg ChatMessage
	if f.other != nil {
		// null is a message without fields, as json.Unmarshal reads it
		// into a map; anything else is an error.
		_, err := object(f.other)
		return msg, err
	}
	var err error
	if msg.Role, err = optString(f.role); err != nil {
		return msg, fmt.Errorf("role: %w", err)
	}
	if msg.Content, err = contentText(f.content); err != nil {
		return msg, fmt.Errorf("content: %w", err)
	}
	for _, r := range []struct {
		key string
		raw []byte
	}{{"reasoning", f.reasoning}, {"reasoning_content", f.reasoningContent}} {
		text, err := optString(r.raw)
		if err != nil {
			return msg, fmt.Errorf("%s: %w", r.key, err)
		}
		if text != "" {
			msg.Reasoning = text
		}
	}
	if present(f.toolCalls) {
		calls, ok := elements(f.toolCalls)
		if !ok {
			return msg, fmt.Errorf("tool_calls: %w", arrayError(f.toolCalls))
		}
		for _, rc := range calls {
			call, err := toolCall(rc)
			if err != nil {
				return msg, fmt.Errorf("tool_calls: %w", err)
			}
			msg.ToolCalls = append(msg.ToolCalls, call)
		}
	}
	return msg, nil
}

func toolCall(raw []byte) (ToolCall, error) {
	var call ToolCall
	c, ok := objectFields(raw, [2]string{"function"})
	if !ok {
		return call, objectError(raw)
	}
	fn, ok := objectFields(c[0], [2]string{"name", "arguments"})
	if !ok {
		return call, objectError(c[0]) // absent too: a tool call needs a function
	}
	var err error
	if call.Name, err = optString(fn[0]); err != nil {
		return call, err
	}
	call.Arguments, err = optString(fn[1])
	return call, err
}

// contentText reduces message content to its text, as vLLM does for a
// template that takes strings: a string, null, or the texts of its text
// parts joined with "\n", where a part without text or with an empty one
// parses to nothing and is left out.
func contentText(raw []byte) (string, error) {
	if !present(raw) {
		return "", nil
	}
	if raw[0] == '"' {
		return rawjson.Unquote(raw), nil
	}
	parts, ok := elements(raw)
	if !ok {
		return "", errors.New("must be a string, null or a list of parts")
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		text, err := partText(p)
		if err != nil {
			return "", err
		}
		if text != "" {
			texts = append(texts, text)
		}
	}
	return strings.Join(texts, "\n"), nil
}

// partText is the text of one content part: a string is its own, null and
// a text part without text have none.
func partText(p []byte) (string, error) {
	switch p[0] {
	case '"':
		return rawjson.Unquote(p), nil
	case 'n':
		return "", nil
	}
	typ, ok := objectFields(p, [2]string{"type"})
	if !ok {
		return "", errors.New("a content part must be an object")
	}
	name, _ := optString(typ[0])
	field, ok := TextPartField(name)
	if !ok {
		return "", unsupported(ReasonMultimodal)
	}
	val, _ := objectFields(p, [2]string{field})
	text, err := optString(val[0])
	if err != nil {
		return "", fmt.Errorf("a %s part's %s: %w", name, field, err)
	}
	return text, nil
}

// ParseCompletionRequest reads the prompt of a completion request: text or
// token ids, alone or as a batch of one. Keys match as in ParseChatRequest.
func ParseCompletionRequest(body []byte) (*Prompt, error) {
	var addSpecial, cacheSalt, truncate, raw, echo, promptLogprobs, logprobs []byte
	var extraKey, loraPath, embeds []byte
	err := readObject(body, func(r *rawjson.Reader, name []byte) error {
		var dst *[]byte
		switch string(name) {
		case "echo":
			dst = &echo
		case "prompt_logprobs":
			dst = &promptLogprobs
		case "logprobs":
			dst = &logprobs
		case "add_special_tokens":
			dst = &addSpecial
		case "cache_salt":
			dst = &cacheSalt
		case "truncate_prompt_tokens":
			dst = &truncate
		case "prompt":
			dst = &raw
		case "extra_key":
			dst = &extraKey
		case "lora_path":
			dst = &loraPath
		case "prompt_embeds":
			dst = &embeds
		default:
			return r.Dec.SkipValue()
		}
		var err error
		*dst, err = r.Value()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("completion request: %w", err)
	}
	if present(embeds) {
		return nil, unsupported(ReasonEmbeds)
	}
	p := &Prompt{}
	if p.AddSpecial, err = laxBool(addSpecial, true); err != nil {
		return nil, fmt.Errorf("add_special_tokens: %w", err)
	}
	if p.CacheSalt, err = optString(cacheSalt); err != nil {
		return nil, fmt.Errorf("cache_salt: %w", err)
	}
	p.CacheSalt = cacheKeySalt(p.CacheSalt, extraKey, loraPath)
	if err := p.readTruncate(truncate); err != nil {
		return nil, err
	}
	if p.SkipsCache, err = skipsCache(promptLogprobs, echo, logprobs, false); err != nil {
		return nil, err
	}
	if !present(raw) {
		return nil, errors.New("prompt: required")
	}
	if raw[0] == '[' {
		list, ok := elements(raw)
		if !ok {
			return nil, fmt.Errorf("prompt: %w", arrayError(raw))
		}
		if len(list) == 1 && (list[0][0] == '"' || list[0][0] == '[') {
			raw = list[0] // a batch of one prompt
		}
	}
	if raw[0] == '"' {
		p.Text = rawjson.Unquote(raw)
		return p, nil
	}
	ids, err := tokenIDs(raw)
	if err != nil {
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) == nil && len(list) > 1 && (list[0][0] == '"' || list[0][0] == '[') {
			return nil, unsupported(ReasonBatch)
		}
		return nil, fmt.Errorf("prompt: %w", err)
	}
	p.IDs, p.HasIDs = ids, true
	return p, nil
}

// tokenIDs reads a list of token ids. A number with no fractional part
// written as a float (300.0, 3e2) is the integer, as pydantic's lax mode
// reads it into vLLM's list[int]; strings are not ids (a list of them is
// a batch of prompts).
func tokenIDs(raw []byte) ([]int, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var list []any
	if err := d.Decode(&list); err != nil {
		return nil, err
	}
	ids := make([]int, len(list))
	for i, e := range list {
		n, ok := e.(json.Number)
		if !ok {
			return nil, fmt.Errorf("token id %d is not a number", i)
		}
		id, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			f, ferr := strconv.ParseFloat(string(n), 64)
			if ferr != nil || f != math.Trunc(f) || math.Abs(f) >= math.MaxInt64 {
				return nil, fmt.Errorf("token id %s is not a 64-bit integer", n)
			}
			id = int64(f)
		}
		ids[i] = int(id)
	}
	return ids, nil
}

// skipsCache reports whether vLLM computes a request's whole prompt
// whatever its cache holds: it does for one that asks for prompt logprobs
// (its sampling parameters' skip_reading_prefix_cache), as prompt_logprobs
// does, and echo with the logprobs member it then takes them at
// (logprobs, whose default is null, for completions; top_logprobs for a
// chat, whose default is 0: absentDefaults).
func skipsCache(promptLogprobs, echo, logprobs []byte, absentDefaults bool) (bool, error) {
	echoes, err := laxBool(echo, false)
	if err != nil {
		return false, fmt.Errorf("echo: %w", err)
	}
	return present(promptLogprobs) || echoes && (present(logprobs) || absentDefaults && len(logprobs) == 0), nil
}

// readTruncate reads truncate_prompt_tokens, absent or null when raw is.
// Any value but an integer within int32 is left to the engine to judge:
// the prompt is then not followed.
func (p *Prompt) readTruncate(raw []byte) error {
	if !present(raw) {
		return nil
	}
	n, err := strconv.ParseInt(string(raw), 10, 32)
	if err != nil {
		return unsupported(ReasonTruncate)
	}
	p.Truncate, p.HasTruncate = int(n), true
	return nil
}
