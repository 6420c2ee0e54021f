package simtok

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/inferrail/inferrail/internal/tokenize"
)

// RenderChat renders chat with the fixed builtin:sim template, a ChatML
// dialect: an optional tools block, then each message as
// "<|im_start|>role\n" + content + "<|im_end|>\n", and "<|im_start|>assistant\n"
// when a generation prompt is asked for. With ContinueFinalMessage the last
// message is left open so the reply continues it. Developer messages are
// first made system ones (developerAsSystem).
func RenderChat(c *tokenize.Chat) string {
	msgs := developerAsSystem(c.Messages)
	var b strings.Builder
	if len(c.Tools) > 0 {
		b.WriteString(IMStart + "system\n# Tools\n")
		for _, tool := range c.Tools {
			writeCompactJSON(&b, tool)
			b.WriteByte('\n')
		}
		b.WriteString(IMEnd + "\n")
	}
	for i, m := range msgs {
		b.WriteString(IMStart)
		b.WriteString(m.Role)
		b.WriteByte('\n')
		if m.Reasoning != "" {
			b.WriteString(Think + m.Reasoning + ThinkEnd + "\n")
		}
		b.WriteString(m.Content)
		for _, tc := range m.ToolCalls {
			b.WriteString(ToolCall + `{"name":`)
			name, _ := json.Marshal(tc.Name)
			b.Write(name)
			b.WriteString(`,"arguments":`)
			args := strings.TrimSpace(tc.Arguments)
			if args == "" {
				args = "{}"
			}
			writeCompactJSON(&b, []byte(args))
			b.WriteString("}" + ToolCallEnd)
		}
		if c.ContinueFinalMessage && i == len(msgs)-1 {
			break
		}
		b.WriteString(IMEnd + "\n")
	}
	if c.AddGenerationPrompt {
		b.WriteString(IMStart + "assistant\n")
	}
	return b.String()
}

// developerAsSystem fits msgs to the builtin:sim template as vLLM's Hugging
// Face renderer fits a conversation to a template that does not name the
// developer role, as this one does not: developer messages become system
// messages, and then, if a system message stands anywhere but first, all
// system messages are merged into one at the front, their contents in order
// joined with "\n\n", an empty one left out; the other messages keep their
// order. A chat without developer messages is left as it is, however many
// system messages it has.
func developerAsSystem(msgs []tokenize.ChatMessage) []tokenize.ChatMessage {
	if !slices.ContainsFunc(msgs, func(m tokenize.ChatMessage) bool { return m.Role == "developer" }) {
		return msgs
	}
	out := make([]tokenize.ChatMessage, len(msgs))
	merge := false
	for i, m := range msgs {
		if m.Role == "developer" {
			m.Role = "system"
		}
		merge = merge || i > 0 && m.Role == "system"
		out[i] = m
	}
	if !merge {
		return out
	}
	var texts []string
	merged := []tokenize.ChatMessage{{Role: "system"}}
	for _, m := range out {
		switch {
		case m.Role != "system":
			merged = append(merged, m)
		case m.Content != "":
			texts = append(texts, m.Content)
		}
	}
	merged[0].Content = strings.Join(texts, "\n\n")
	return merged
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

// PromptIDs returns the builtin:sim token ids of p, as the simulator
// computes them.
func (t *Tokenizer) PromptIDs(p *tokenize.Prompt) []int {
	var ids []int
	if p.AddSpecial {
		ids = append(ids, t.BOS())
	}
	switch {
	case p.Chat != nil:
		return t.Encode(ids, RenderChat(p.Chat))
	case p.HasIDs:
		if p.AddSpecial {
			// vLLM adds no special tokens to a prompt given as ids.
			return append([]int(nil), p.IDs...)
		}
		return append(ids, p.IDs...)
	}
	return t.Encode(ids, p.Text)
}
