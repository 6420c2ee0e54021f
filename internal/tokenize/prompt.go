package tokenize

import (
	"encoding/json"

	"github.com/inferrail/inferrail/internal/tokenize/rawjson"
)

// Prompt is what decides a request's prompt tokens: the chat to render, or
// the completion prompt, and the flags that change its tokens.
type Prompt struct {
	Chat       *Chat  // chat requests; nil for completions
	Text       string // completion prompt text
	IDs        []int  // completion prompt given as token ids
	HasIDs     bool
	AddSpecial bool   // add the tokenizer's special tokens (BOS); vLLM's default is false for chat, true for completions
	CacheSalt  string // vLLM's per-request cache_salt, with SGLang's extra_key and lora_path folded in; salts the block hashes
	// SkipsCache: the engine reads none of its prefix cache for this
	// prompt (it asks for prompt logprobs), though it stores its blocks.
	SkipsCache bool

	// Truncate is truncate_prompt_tokens when HasTruncate: the engine keeps
	// at most that many of the prompt's tokens (-1: the model's length).
	Truncate    int
	HasTruncate bool
}

// Cuts reports whether the engine truncates a prompt of n tokens. Which
// tokens it then keeps (the last ones, around the special tokens) the
// predictions do not follow: such a prompt gets none. -1 truncates to the
// model's context length, contextLen (0 when unknown: taken to cut); a
// prompt that fits it is kept whole. Below -1 the engine refuses.
func (p *Prompt) Cuts(n, contextLen int) bool {
	switch {
	case !p.HasTruncate:
		return false
	case p.Truncate >= 0:
		return n > p.Truncate
	case p.Truncate == -1:
		return contextLen <= 0 || n > contextLen
	}
	return true
}

// ChatMessage is one message of a chat request, reduced to what a chat
// template reads.
type ChatMessage struct {
	Role      string
	Content   string // string content, or its text parts joined by "\n"
	Reasoning string
	ToolCalls []ToolCall
}

// ToolCall is an assistant's call of a tool.
type ToolCall struct {
	Name      string
	Arguments string // JSON text as the client sent it
}

// Chat is a chat request as a template sees it.
type Chat struct {
	Messages             []ChatMessage
	Tools                []json.RawMessage
	AddGenerationPrompt  bool
	ContinueFinalMessage bool

	// The request's fields as sent, for Hugging Face chat templates
	// (package chattemplate), which need their key order and number
	// types: the messages, tools (nil if absent or null),
	// chat_template_kwargs and documents (nil if absent or null), and
	// reasoning_effort ("" if absent or null).
	RawMessages     []json.RawMessage
	RawTools        json.RawMessage
	TemplateKwargs  json.RawMessage
	Documents       json.RawMessage
	ReasoningEffort string

	// Contents are the messages' contents that ParseChatRequest decoded
	// from JSON strings, by message, for the chat renderer to reuse rather
	// than decode again: it takes one only for the very bytes it was
	// decoded from (rawjson.Decoded.Of).
	Contents []rawjson.Decoded
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
	ReasonDeveloper  = "developer"  // a developer message with tools, for a Hugging Face chat template that names the developer role
	ReasonNumber     = "number"     // a JSON number Python keeps exactly and Go cannot (beyond 64 bits)
	ReasonDepth      = "depth"      // JSON nested deeper than the renderer follows
	ReasonSize       = "size"       // a rendered chat longer than the renderer's bound
	ReasonTruncate   = "truncate"   // truncate_prompt_tokens that is not an integer, or that cuts the prompt
	ReasonEmbeds     = "embeds"     // completions' prompt_embeds: the engine starts from vectors, not tokens
)

func unsupported(reason string) error { return &UnsupportedError{Reason: reason} }

// TextPartField names the field a chat content part of type typ keeps its
// text in, for the part types vLLM reads as text (chat_utils.py's
// MM_PARSER_MAP: text, refusal, input_text, output_text and thinking); ok
// is false for any other type.
func TextPartField(typ string) (field string, ok bool) {
	switch typ {
	case "text", "input_text", "output_text":
		return "text", true
	case "refusal", "thinking":
		return typ, true
	}
	return "", false
}
