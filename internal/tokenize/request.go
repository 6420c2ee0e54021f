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
)

func unsupported(reason string) error { return &UnsupportedError{Reason: reason} }

// chatRequest holds the fields of a chat request that shape its prompt.
type chatRequest struct {
	Messages             []chatMessage     `json:"messages"`
	Tools                []json.RawMessage `json:"tools"`
	AddGenerationPrompt  *laxBool          `json:"add_generation_prompt"`
	ContinueFinalMessage laxBool           `json:"continue_final_message"`
	AddSpecialTokens     laxBool           `json:"add_special_tokens"`
	ChatTemplate         *string           `json:"chat_template"`
	CacheSalt            *string           `json:"cache_salt"`
}

// laxBool reads a boolean as vLLM's request models do (pydantic's lax
// mode): true and false, 0 and 1, and strings such as "yes" and "off".
type laxBool bool

func (b *laxBool) UnmarshalJSON(data []byte) error {
	s := strings.ToLower(strings.Trim(string(data), `"`))
	switch s {
	case "true", "1", "1.0", "on", "t", "y", "yes":
		*b = true
	case "false", "0", "0.0", "off", "f", "n", "no", "null":
		*b = false
	default:
		return fmt.Errorf("not a boolean: %s", data)
	}
	return nil
}

type chatMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	Reasoning        *string         `json:"reasoning"`
	ReasoningContent *string         `json:"reasoning_content"`
	ToolCalls        []struct {
		Function struct {
			Name      string  `json:"name"`
			Arguments *string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// ParseChatRequest reads the prompt of a chat completion request the way
// vLLM prepares it: content parts joined with newlines, the developer role
// as system, reasoning and tool calls kept, tools as compact JSON.
func ParseChatRequest(body []byte) (*Prompt, error) {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("chat request: %w", err)
	}
	if req.ChatTemplate != nil {
		return nil, unsupported(ReasonTemplate)
	}
	c := &Chat{AddGenerationPrompt: req.AddGenerationPrompt == nil || bool(*req.AddGenerationPrompt), ContinueFinalMessage: bool(req.ContinueFinalMessage)}
	for i, m := range req.Messages {
		msg := ChatMessage{Role: m.Role}
		if msg.Role == "developer" {
			msg.Role = "system"
		}
		text, err := contentText(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		msg.Content = text
		for _, r := range []*string{m.Reasoning, m.ReasoningContent} {
			if r != nil && *r != "" {
				msg.Reasoning = *r
			}
		}
		for _, tc := range m.ToolCalls {
			call := ToolCall{Name: tc.Function.Name}
			if tc.Function.Arguments != nil {
				call.Arguments = *tc.Function.Arguments
			}
			msg.ToolCalls = append(msg.ToolCalls, call)
		}
		c.Messages = append(c.Messages, msg)
	}
	for _, t := range req.Tools {
		var buf bytes.Buffer
		if err := json.Compact(&buf, t); err != nil {
			return nil, fmt.Errorf("tools: %w", err)
		}
		c.Tools = append(c.Tools, json.RawMessage(buf.Bytes()))
	}
	p := &Prompt{Chat: c, AddSpecial: bool(req.AddSpecialTokens)}
	if req.CacheSalt != nil {
		p.CacheSalt = *req.CacheSalt
	}
	return p, nil
}

// contentText reduces message content to its text: a string, null, or text
// parts joined with "\n".
func contentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
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
		var part struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(p, &part); err != nil {
			return "", errors.New("a content part must be an object")
		}
		if part.Type != "text" || part.Text == nil {
			return "", unsupported(ReasonMultimodal)
		}
		texts = append(texts, *part.Text)
	}
	return strings.Join(texts, "\n"), nil
}

// completionRequest holds the fields of a completion request that shape its
// prompt.
type completionRequest struct {
	Prompt           json.RawMessage `json:"prompt"`
	AddSpecialTokens *laxBool        `json:"add_special_tokens"`
	CacheSalt        *string         `json:"cache_salt"`
}

// ParseCompletionRequest reads the prompt of a completion request: text or
// token ids, alone or as a batch of one.
func ParseCompletionRequest(body []byte) (*Prompt, error) {
	var req completionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("completion request: %w", err)
	}
	p := &Prompt{AddSpecial: req.AddSpecialTokens == nil || bool(*req.AddSpecialTokens)}
	if req.CacheSalt != nil {
		p.CacheSalt = *req.CacheSalt
	}
	raw := bytes.TrimSpace(req.Prompt)
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
