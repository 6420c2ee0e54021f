package tokenize

import (
	"encoding/json"

	"github.com/inferrail/inferrail/internal/tokenize/rawjson"
)

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
	// (package chattemplate), which need their key order and number types: the
	// messages, tools (nil if absent or null), chat_template_kwargs and
	// documents (nil if absent or null), and reasoning_effort ("" if
	// absent or null).
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
