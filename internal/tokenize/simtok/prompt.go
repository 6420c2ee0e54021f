package simtok

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/inferrail/inferrail/internal/tokenize"
)

// RenderChat renders chat with the fixed builtin:sim template, a ChatML
// dialect: an optional tools block, then each message as
// "<|im_start|>role\n" + content + "<|im_end|>\n", and "<|im_start|>assistant\n"
// when a generation prompt is asked for. With ContinueFinalMessage the last
// message is left open so the reply continues it.
func RenderChat(c *tokenize.Chat) string {
	var b strings.Builder
	if len(c.Tools) > 0 {
		b.WriteString(IMStart + "system\n# Tools\n")
		for _, tool := range c.Tools {
			writeCompactJSON(&b, tool)
			b.WriteByte('\n')
		}
		b.WriteString(IMEnd + "\n")
	}
	for i, m := range c.Messages {
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
		if c.ContinueFinalMessage && i == len(c.Messages)-1 {
			break
		}
		b.WriteString(IMEnd + "\n")
	}
	if c.AddGenerationPrompt {
		b.WriteString(IMStart + "assistant\n")
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
