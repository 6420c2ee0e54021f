package tokenize

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Prompt is what decides a request's prompt tokens: the chat to render, or
// the completion prompt, and the flags that change its tokens.
type Prompt struct {
	Chat       *Chat  // chat requests; nil for completions
	Text       string // completion prompt text
	IDs        []int  // completion prompt given as token ids
	HasIDs     bool
	AddSpecial bool   // add the tokenizer's special tokens (BOS); vLLM's default is false for chat, true for completions
	CacheSalt  string // vLLM's per-request cache_salt; salts the block hashes
}

// UnsupportedError says why a request's prompt cannot be followed, as the
// reason the gateway counts it under: it is routed without a prediction.
type UnsupportedError struct{ Reason string }

func (e *UnsupportedError) Error() string { return "prompt not followed: " + e.Reason }

// Reasons for UnsupportedError.
const (
	ReasonMultimodal = "multimodal" // content parts other than text
	ReasonTemplate   = "template"   // a chat template in the request
	ReasonBatch      = "batch"      // several prompts in one completion request
	ReasonDeveloper  = "developer"  // a developer message, for a Hugging Face chat template
	ReasonNumber     = "number"     // a JSON number Python keeps exactly and Go cannot (beyond 64 bits)
	ReasonDepth      = "depth"      // JSON nested deeper than the renderer follows
	ReasonControl    = "control"    // U+001C…U+001F in text a template trims: Python strips them, the template engine does not
)

func unsupported(reason string) error { return &UnsupportedError{Reason: reason} }

// object decodes a JSON object keeping keys exactly as written: vLLM's
// request models match keys case-sensitively, and encoding/json into a
// struct would not. A repeated key keeps its last value, as in Python.
func object(raw json.RawMessage) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// present reports whether a field holds a value other than null.
func present(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && string(raw) != "null"
}

// optString reads an optional string field; null and absent give "".
func optString(raw json.RawMessage) (string, error) {
	if !present(raw) {
		return "", nil
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

// laxBool reads a boolean as vLLM's request models do (pydantic's lax
// mode): true and false, 0 and 1, and strings such as "yes" and "off".
// Absent or null gives def.
func laxBool(raw json.RawMessage, def bool) (bool, error) {
	if !present(raw) {
		return def, nil
	}
	switch strings.ToLower(strings.Trim(string(bytes.TrimSpace(raw)), `"`)) {
	case "true", "1", "1.0", "on", "t", "y", "yes":
		return true, nil
	case "false", "0", "0.0", "off", "f", "n", "no":
		return false, nil
	}
	return false, fmt.Errorf("not a boolean: %s", raw)
}

// ParseChatRequest reads the prompt of a chat completion request the way
// vLLM prepares it: content parts joined with newlines, the developer role
// as system, reasoning and tool calls kept, tools as compact JSON (the
// builtin:sim template's view), and the fields Hugging Face chat templates
// read, as sent (ChatRenderer's view).
func ParseChatRequest(body []byte) (*Prompt, error) {
	req, err := object(body)
	if err != nil {
		return nil, fmt.Errorf("chat request: %w", err)
	}
	if present(req["chat_template"]) {
		return nil, unsupported(ReasonTemplate)
	}
	c := &Chat{}
	if present(req["chat_template_kwargs"]) {
		kw, err := object(req["chat_template_kwargs"])
		if err != nil {
			return nil, fmt.Errorf("chat_template_kwargs: %w", err)
		}
		if present(kw["chat_template"]) {
			return nil, unsupported(ReasonTemplate)
		}
		c.TemplateKwargs = req["chat_template_kwargs"]
	}
	if present(req["documents"]) {
		c.Documents = req["documents"]
	}
	if c.ReasoningEffort, err = optString(req["reasoning_effort"]); err != nil {
		return nil, fmt.Errorf("reasoning_effort: %w", err)
	}
	if c.AddGenerationPrompt, err = laxBool(req["add_generation_prompt"], true); err != nil {
		return nil, fmt.Errorf("add_generation_prompt: %w", err)
	}
	if c.ContinueFinalMessage, err = laxBool(req["continue_final_message"], false); err != nil {
		return nil, fmt.Errorf("continue_final_message: %w", err)
	}
	p := &Prompt{Chat: c}
	if p.AddSpecial, err = laxBool(req["add_special_tokens"], false); err != nil {
		return nil, fmt.Errorf("add_special_tokens: %w", err)
	}
	if p.CacheSalt, err = optString(req["cache_salt"]); err != nil {
		return nil, fmt.Errorf("cache_salt: %w", err)
	}
	var messages []json.RawMessage
	if err := json.Unmarshal(req["messages"], &messages); err != nil {
		return nil, fmt.Errorf("messages: %w", err)
	}
	c.RawMessages = messages
	for i, raw := range messages {
		msg, err := chatMessage(raw)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		c.Messages = append(c.Messages, msg)
	}
	if present(req["tools"]) {
		c.RawTools = req["tools"]
		var tools []json.RawMessage
		if err := json.Unmarshal(req["tools"], &tools); err != nil {
			return nil, fmt.Errorf("tools: %w", err)
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

func chatMessage(raw json.RawMessage) (ChatMessage, error) {
	var msg ChatMessage
	m, err := object(raw)
	if err != nil {
		return msg, err
	}
	if msg.Role, err = optString(m["role"]); err != nil {
		return msg, fmt.Errorf("role: %w", err)
	}
	if msg.Role == "developer" {
		msg.Role = "system"
	}
	if msg.Content, err = contentText(m["content"]); err != nil {
		return msg, fmt.Errorf("content: %w", err)
	}
	for _, key := range []string{"reasoning", "reasoning_content"} {
		r, err := optString(m[key])
		if err != nil {
			return msg, fmt.Errorf("%s: %w", key, err)
		}
		if r != "" {
			msg.Reasoning = r
		}
	}
	if present(m["tool_calls"]) {
		var calls []json.RawMessage
		if err := json.Unmarshal(m["tool_calls"], &calls); err != nil {
			return msg, fmt.Errorf("tool_calls: %w", err)
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

func toolCall(raw json.RawMessage) (ToolCall, error) {
	var call ToolCall
	c, err := object(raw)
	if err != nil {
		return call, err
	}
	fn, err := object(c["function"])
	if err != nil {
		return call, err
	}
	if call.Name, err = optString(fn["name"]); err != nil {
		return call, err
	}
	call.Arguments, err = optString(fn["arguments"])
	return call, err
}

// contentText reduces message content to its text: a string, null, or text
// parts joined with "\n".
func contentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if !present(raw) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("must be a string, null or a list of parts")
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		var s string
		if json.Unmarshal(p, &s) == nil {
			texts = append(texts, s)
			continue
		}
		part, err := object(p)
		if err != nil {
			return "", errors.New("a content part must be an object")
		}
		typ, _ := optString(part["type"])
		if typ != "text" {
			return "", unsupported(ReasonMultimodal)
		}
		if !present(part["text"]) {
			continue // vLLM skips a text part without text
		}
		text, err := optString(part["text"])
		if err != nil {
			return "", fmt.Errorf("a text part's text: %w", err)
		}
		texts = append(texts, text)
	}
	return strings.Join(texts, "\n"), nil
}

// ParseCompletionRequest reads the prompt of a completion request: text or
// token ids, alone or as a batch of one.
func ParseCompletionRequest(body []byte) (*Prompt, error) {
	req, err := object(body)
	if err != nil {
		return nil, fmt.Errorf("completion request: %w", err)
	}
	p := &Prompt{}
	if p.AddSpecial, err = laxBool(req["add_special_tokens"], true); err != nil {
		return nil, fmt.Errorf("add_special_tokens: %w", err)
	}
	if p.CacheSalt, err = optString(req["cache_salt"]); err != nil {
		return nil, fmt.Errorf("cache_salt: %w", err)
	}
	raw := bytes.TrimSpace(req["prompt"])
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("prompt: required")
	}
	var list []json.RawMessage
	if raw[0] == '[' {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("prompt: %w", err)
		}
		if len(list) == 1 {
			if first := bytes.TrimSpace(list[0]); len(first) > 0 && (first[0] == '"' || first[0] == '[') {
				raw = first // a batch of one prompt
			}
		}
	}
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &p.Text); err != nil {
			return nil, fmt.Errorf("prompt: %w", err)
		}
		return p, nil
	}
	var ids []int
	if err := json.Unmarshal(raw, &ids); err != nil {
		if json.Unmarshal(raw, &list) == nil && len(list) > 1 {
			return nil, unsupported(ReasonBatch)
		}
		return nil, fmt.Errorf("prompt: %w", err)
	}
	p.IDs, p.HasIDs = ids, true
	return p, nil
}

// PromptIDs returns the builtin:sim token ids of p, as the simulator
// computes them.
func (t *Sim) PromptIDs(p *Prompt) []int {
	var ids []int
	if p.AddSpecial {
		ids = append(ids, t.BOS())
	}
	switch {
	case p.Chat != nil:
		return t.Encode(ids, RenderSimChat(p.Chat))
	case p.HasIDs:
		if p.AddSpecial {
			// vLLM adds no special tokens to a prompt given as ids.
			return append([]int(nil), p.IDs...)
		}
		return append(ids, p.IDs...)
	}
	return t.Encode(ids, p.Text)
}
