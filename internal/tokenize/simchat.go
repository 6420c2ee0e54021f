package tokenize

import (
	"bytes"
	"encoding/json"
	"strings"

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
	// (ChatRenderer), which need their key order and number types: the
	// messages, tools (nil if absent or null), chat_template_kwargs and
	// documents (nil if absent or null), and reasoning_effort ("" if
	// absent or null).
	RawMessages     []json.RawMessage
	RawTools        json.RawMessage
	TemplateKwargs  json.RawMessage
	Documents       json.RawMessage
	ReasoningEffort string

	// contents are the messages' contents that ParseChatRequest decoded
	// from JSON strings, by message, for ChatRenderer to reuse rather than
	// decode again: it takes one only for the very bytes it was decoded
	// from.
	contents []rawjson.Decoded
}

// RenderSimChat renders chat with the fixed builtin:sim template, a ChatML
// dialect: an optional tools block, then each message as
// "<|im_start|>role\n" + content + "<|im_end|>\n", and "<|im_start|>assistant\n"
// when a generation prompt is asked for. With ContinueFinalMessage the last
// message is left open so the reply continues it.
func RenderSimChat(c *Chat) string {
	var b strings.Builder
	if len(c.Tools) > 0 {
		b.WriteString(SimIMStart + "system\n# Tools\n")
		for _, tool := range c.Tools {
			writeCompactJSON(&b, tool)
			b.WriteByte('\n')
		}
		b.WriteString(SimIMEnd + "\n")
	}
	for i, m := range c.Messages {
		b.WriteString(SimIMStart)
		b.WriteString(m.Role)
		b.WriteByte('\n')
		if m.Reasoning != "" {
			b.WriteString(SimThink + m.Reasoning + SimThinkEnd + "\n")
		}
		b.WriteString(m.Content)
		for _, tc := range m.ToolCalls {
			b.WriteString(SimToolCall + `{"name":`)
			name, _ := json.Marshal(tc.Name)
			b.Write(name)
			b.WriteString(`,"arguments":`)
			args := strings.TrimSpace(tc.Arguments)
			if args == "" {
				args = "{}"
			}
			writeCompactJSON(&b, []byte(args))
			b.WriteString("}" + SimToolCallEnd)
		}
		if c.ContinueFinalMessage && i == len(c.Messages)-1 {
			break
		}
		b.WriteString(SimIMEnd + "\n")
	}
	if c.AddGenerationPrompt {
		b.WriteString(SimIMStart + "assistant\n")
	}
	return b.String()
}

// writeCompactJSON writes raw compacted, or as it is when it is not JSON.
func writeCompactJSON(b *strings.Builder, raw []byte) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		b.Write(raw)
		return
	}
	b.Write(buf.Bytes())
}
