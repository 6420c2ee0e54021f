package tokenize

// The first implementation of ParseChatRequest and ParseCompletionRequest,
// kept as the reference the single-pass parsers are checked against
// (request_diff_test.go): every level of the body decoded with
// json.Unmarshal, which is slow for long chats but plainly right.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// refObject decodes a JSON object into a map, keys exactly as written and
// a repeated key keeping its last value.
func refObject(raw json.RawMessage) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// refPresent reports whether a field holds a value other than null.
func refPresent(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && string(raw) != "null"
}

// refOptString reads an optional string field; null and absent give "".
func refOptString(raw json.RawMessage) (string, error) {
	if !refPresent(raw) {
		return "", nil
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

// refLaxBool reads a boolean in pydantic's lax mode; absent or null gives
// def.
func refLaxBool(raw json.RawMessage, def bool) (bool, error) {
	if !refPresent(raw) {
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

// parseChatRequestReference is ParseChatRequest as it was written first,
// decoding each level of the body with json.Unmarshal into maps and raw
// messages.
func parseChatRequestReference(body []byte) (*Prompt, error) {
	req, err := refObject(body)
	if err != nil {
		return nil, fmt.Errorf("chat request: %w", err)
	}
	if refPresent(req["chat_template"]) {
		return nil, unsupported(ReasonTemplate)
	}
	c := &Chat{}
	if refPresent(req["chat_template_kwargs"]) {
		kw, err := refObject(req["chat_template_kwargs"])
		if err != nil {
			return nil, fmt.Errorf("chat_template_kwargs: %w", err)
		}
		if refPresent(kw["chat_template"]) {
			return nil, unsupported(ReasonTemplate)
		}
		c.TemplateKwargs = req["chat_template_kwargs"]
	}
	if refPresent(req["documents"]) {
		c.Documents = req["documents"]
	}
	if c.ReasoningEffort, err = refOptString(req["reasoning_effort"]); err != nil {
		return nil, fmt.Errorf("reasoning_effort: %w", err)
	}
	if c.AddGenerationPrompt, err = refLaxBool(req["add_generation_prompt"], true); err != nil {
		return nil, fmt.Errorf("add_generation_prompt: %w", err)
	}
	if c.ContinueFinalMessage, err = refLaxBool(req["continue_final_message"], false); err != nil {
		return nil, fmt.Errorf("continue_final_message: %w", err)
	}
	p := &Prompt{Chat: c}
	if p.AddSpecial, err = refLaxBool(req["add_special_tokens"], false); err != nil {
		return nil, fmt.Errorf("add_special_tokens: %w", err)
	}
	if p.CacheSalt, err = refOptString(req["cache_salt"]); err != nil {
		return nil, fmt.Errorf("cache_salt: %w", err)
	}
	p.CacheSalt = cacheKeySalt(p.CacheSalt, bytes.TrimSpace(req["extra_key"]), bytes.TrimSpace(req["lora_path"]))
	if p.SkipsCache, err = refSkipsCache(req["prompt_logprobs"], req["echo"], req["top_logprobs"], true); err != nil {
		return nil, err
	}
	var messages []json.RawMessage
	if err := json.Unmarshal(req["messages"], &messages); err != nil {
		return nil, fmt.Errorf("messages: %w", err)
	}
	c.RawMessages = messages
	for i, raw := range messages {
		msg, err := refChatMessage(raw)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		c.Messages = append(c.Messages, msg)
	}
	if refPresent(req["tools"]) {
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

func refChatMessage(raw json.RawMessage) (ChatMessage, error) {
	var msg ChatMessage
	m, err := refObject(raw)
	if err != nil {
		return msg, err
	}
	if msg.Role, err = refOptString(m["role"]); err != nil {
		return msg, fmt.Errorf("role: %w", err)
	}
	if msg.Content, err = refContentText(m["content"]); err != nil {
		return msg, fmt.Errorf("content: %w", err)
	}
	for _, key := range []string{"reasoning", "reasoning_content"} {
		r, err := refOptString(m[key])
		if err != nil {
			return msg, fmt.Errorf("%s: %w", key, err)
		}
		if r != "" {
			msg.Reasoning = r
		}
	}
	if refPresent(m["tool_calls"]) {
		var calls []json.RawMessage
		if err := json.Unmarshal(m["tool_calls"], &calls); err != nil {
			return msg, fmt.Errorf("tool_calls: %w", err)
		}
		for _, rc := range calls {
			call, err := refToolCall(rc)
			if err != nil {
				return msg, fmt.Errorf("tool_calls: %w", err)
			}
			msg.ToolCalls = append(msg.ToolCalls, call)
		}
	}
	return msg, nil
}

func refToolCall(raw json.RawMessage) (ToolCall, error) {
	var call ToolCall
	c, err := refObject(raw)
	if err != nil {
		return call, err
	}
	fn, err := refObject(c["function"])
	if err != nil {
		return call, err
	}
	if call.Name, err = refOptString(fn["name"]); err != nil {
		return call, err
	}
	call.Arguments, err = refOptString(fn["arguments"])
	return call, err
}

// refContentText reduces message content to its text: a string, null, or text
// parts joined with "\n", the empty ones left out.
func refContentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if !refPresent(raw) {
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
			if s != "" {
				texts = append(texts, s)
			}
			continue
		}
		part, err := refObject(p)
		if err != nil {
			return "", errors.New("a content part must be an object")
		}
		typ, _ := refOptString(part["type"])
		field, ok := map[string]string{
			"text": "text", "input_text": "text", "output_text": "text",
			"refusal": "refusal", "thinking": "thinking",
		}[typ]
		if !ok {
			return "", unsupported(ReasonMultimodal)
		}
		if !refPresent(part[field]) {
			continue // vLLM skips a text part without text
		}
		text, err := refOptString(part[field])
		if err != nil {
			return "", fmt.Errorf("a %s part's %s: %w", typ, field, err)
		}
		if text != "" { // an empty text parses to nothing
			texts = append(texts, text)
		}
	}
	return strings.Join(texts, "\n"), nil
}

// parseCompletionRequestReference is ParseCompletionRequest as it was
// written first.
func parseCompletionRequestReference(body []byte) (*Prompt, error) {
	req, err := refObject(body)
	if err != nil {
		return nil, fmt.Errorf("completion request: %w", err)
	}
	if refPresent(req["prompt_embeds"]) {
		return nil, unsupported(ReasonEmbeds)
	}
	p := &Prompt{}
	if p.AddSpecial, err = refLaxBool(req["add_special_tokens"], true); err != nil {
		return nil, fmt.Errorf("add_special_tokens: %w", err)
	}
	if p.CacheSalt, err = refOptString(req["cache_salt"]); err != nil {
		return nil, fmt.Errorf("cache_salt: %w", err)
	}
	p.CacheSalt = cacheKeySalt(p.CacheSalt, bytes.TrimSpace(req["extra_key"]), bytes.TrimSpace(req["lora_path"]))
	if p.SkipsCache, err = refSkipsCache(req["prompt_logprobs"], req["echo"], req["logprobs"], false); err != nil {
		return nil, err
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
	ids, err := refTokenIDs(raw)
	if err != nil {
		if json.Unmarshal(raw, &list) == nil && len(list) > 1 {
			if first := bytes.TrimSpace(list[0]); first[0] == '"' || first[0] == '[' {
				return nil, unsupported(ReasonBatch)
			}
		}
		return nil, fmt.Errorf("prompt: %w", err)
	}
	p.IDs, p.HasIDs = ids, true
	return p, nil
}

// refSkipsCache: prompt logprobs asked for outright, or by echo with
// logprobs (a chat's top_logprobs, absent, is 0: chat).
func refSkipsCache(promptLogprobs, echo, logprobs json.RawMessage, chat bool) (bool, error) {
	echoes, err := refLaxBool(echo, false)
	switch {
	case err != nil:
		return false, fmt.Errorf("echo: %w", err)
	case refPresent(promptLogprobs):
		return true, nil
	case !echoes:
		return false, nil
	case chat && logprobs == nil:
		return true, nil
	}
	return refPresent(logprobs), nil
}

// refTokenIDs reads ids one number at a time: an integer, or a float
// whose value is one (pydantic's lax int), within 64 bits.
func refTokenIDs(raw []byte) ([]int, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var vals []any
	if err := d.Decode(&vals); err != nil {
		return nil, err
	}
	var ids []int
	for i, v := range vals {
		n, ok := v.(json.Number)
		if !ok {
			return nil, fmt.Errorf("token id %d is not a number", i)
		}
		if id, err := n.Int64(); err == nil {
			ids = append(ids, int(id))
			continue
		}
		f, err := n.Float64()
		if err != nil || !big.NewFloat(f).IsInt() || f <= -(1<<63) || f >= 1<<63 {
			return nil, fmt.Errorf("token id %s is not a 64-bit integer", n)
		}
		ids = append(ids, int(f))
	}
	return append([]int{}, ids...), nil
}
