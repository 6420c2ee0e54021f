package sim

import (
	"strconv"

	"github.com/inferrail/inferrail/internal/openai"
)

// This file writes response bodies byte for byte as vLLM does: field order
// as declared in its pydantic models, explicit nulls in full responses, and
// only constructor-set fields in stream chunks (vllm-spec §1).

// usage is what a response reports of its tokens.
type usage struct {
	prompt, completion int
	cached, created    int
	details            bool // --enable-prompt-tokens-details
}

func (u usage) appendCounts(b []byte) []byte {
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(u.prompt), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(u.prompt+u.completion), 10)
	b = append(b, `,"completion_tokens":`...)
	return strconv.AppendInt(b, int64(u.completion), 10)
}

// appendFull writes usage as in a full response: prompt_tokens_details is
// null without the flag; chat fills every member, completions only
// cached_tokens.
func (u usage) appendFull(b []byte, chat bool) []byte {
	b = u.appendCounts(b)
	b = append(b, `,"prompt_tokens_details":`...)
	switch {
	case !u.details:
		b = append(b, "null"...)
	case chat:
		b = append(b, `{"cached_tokens":`...)
		b = strconv.AppendInt(b, int64(u.cached), 10)
		b = append(b, `,"created_cache_tokens":`...)
		b = strconv.AppendInt(b, int64(u.created), 10)
		b = append(b, `,"multimodal_tokens":null}`...)
	default:
		b = append(b, `{"cached_tokens":`...)
		b = strconv.AppendInt(b, int64(u.cached), 10)
		b = append(b, `,"created_cache_tokens":null,"multimodal_tokens":null}`...)
	}
	return append(b, '}')
}

// appendChunkUsage writes the final usage chunk's usage: nulls dropped.
func (u usage) appendChunkUsage(b []byte, chat bool) []byte {
	b = u.appendCounts(b)
	if u.details {
		b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
		b = strconv.AppendInt(b, int64(u.cached), 10)
		if chat {
			b = append(b, `,"created_cache_tokens":`...)
			b = strconv.AppendInt(b, int64(u.created), 10)
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

func appendHead(b []byte, id, object string, created int64, model string) []byte {
	b = append(b, `{"id":`...)
	b = openai.AppendString(b, id)
	b = append(b, `,"object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, created, 10)
	b = append(b, `,"model":`...)
	return openai.AppendString(b, model)
}

func appendChatResponse(b []byte, p *prepared, created int64, fp, text, finish string, u usage) []byte {
	b = appendHead(b, p.id, "chat.completion", created, p.model)
	b = append(b, `,"choices":[{"index":0,"message":{"role":`...)
	b = openai.AppendString(b, p.g.responseRole)
	b = append(b, `,"content":`...)
	b = openai.AppendString(b, text)
	b = append(b, `,"refusal":null,"annotations":null,"audio":null,"function_call":null,"reasoning":null},"logprobs":null,"finish_reason":"`...)
	b = append(b, finish...)
	b = append(b, `","stop_reason":null,"token_ids":null,"routed_experts":null}],"service_tier":null,"system_fingerprint":`...)
	b = openai.AppendString(b, fp)
	b = append(b, `,"usage":`...)
	b = u.appendFull(b, true)
	return append(b, `,"prompt_logprobs":null,"prompt_token_ids":null,"prompt_text":null,"kv_transfer_params":null,"ec_transfer_params":null,"metrics":null}`...)
}

func appendCompletionResponse(b []byte, p *prepared, created int64, fp, text, finish string, u usage) []byte {
	b = appendHead(b, p.id, "text_completion", created, p.model)
	b = append(b, `,"choices":[{"index":0,"text":`...)
	b = openai.AppendString(b, text)
	b = append(b, `,"logprobs":null,"finish_reason":"`...)
	b = append(b, finish...)
	b = append(b, `","stop_reason":null,"token_ids":null,"prompt_logprobs":null,"prompt_token_ids":null,"routed_experts":null}],"service_tier":null,"system_fingerprint":`...)
	b = openai.AppendString(b, fp)
	b = append(b, `,"usage":`...)
	b = u.appendFull(b, false)
	return append(b, `,"kv_transfer_params":null,"ec_transfer_params":null,"metrics":null}`...)
}

// streamWriter writes the events of one streamed response.
type streamWriter struct {
	p           *prepared
	created     int64
	fingerprint string
	prompt      int
	scratch     []byte
}

// event frames the chunk built in scratch and appends it to b.
func (s *streamWriter) event(b []byte) []byte {
	return openai.AppendEvent(b, s.scratch)
}

func (s *streamWriter) continuous(b []byte, completion int) []byte {
	if !s.p.g.continuousUsage {
		return b
	}
	b = append(b, `,"usage":`...)
	b = usage{prompt: s.prompt, completion: completion}.appendCounts(b)
	return append(b, '}')
}

// appendRoleChunk writes the chat stream's first chunk.
func (s *streamWriter) appendRoleChunk(b []byte) []byte {
	c := appendHead(s.scratch[:0], s.p.id, "chat.completion.chunk", s.created, s.p.model)
	c = append(c, `,"choices":[{"index":0,"delta":{"role":`...)
	c = openai.AppendString(c, s.p.g.responseRole)
	c = append(c, `,"content":""},"logprobs":null,"finish_reason":null}]`...)
	c = s.continuous(c, 0)
	c = append(c, `,"prompt_token_ids":null,"prompt_text":null}`...)
	s.scratch = c
	return s.event(b)
}

// appendChunk writes a content chunk, the finish chunk when finish is set.
func (s *streamWriter) appendChunk(b, text []byte, total int, finish string) []byte {
	if s.p.g.chat {
		c := appendHead(s.scratch[:0], s.p.id, "chat.completion.chunk", s.created, s.p.model)
		c = append(c, `,"choices":[{"index":0,"delta":{"content":`...)
		c = openai.AppendString(c, string(text))
		c = append(c, `},"logprobs":null,"finish_reason":`...)
		if finish == "" {
			c = append(c, `null,"token_ids":null}]`...)
		} else {
			c = append(c, '"')
			c = append(c, finish...)
			c = append(c, `","stop_reason":null,"token_ids":null}]`...)
		}
		c = s.finishTail(c, total, finish)
		s.scratch = c
		return s.event(b)
	}
	c := appendHead(s.scratch[:0], s.p.id, "text_completion", s.created, s.p.model)
	c = append(c, `,"choices":[{"index":0,"text":`...)
	c = openai.AppendString(c, string(text))
	c = append(c, `,"logprobs":null,"finish_reason":`...)
	if finish == "" {
		c = append(c, "null"...)
	} else {
		c = append(c, '"')
		c = append(c, finish...)
		c = append(c, '"')
	}
	c = append(c, `,"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]`...)
	c = s.finishTail(c, total, finish)
	s.scratch = c
	return s.event(b)
}

// finishTail closes a content chunk: continuous usage, then the fingerprint
// on the finish chunk when no usage chunk follows.
func (s *streamWriter) finishTail(c []byte, total int, finish string) []byte {
	c = s.continuous(c, total)
	if finish != "" && !s.p.g.includeUsage {
		c = append(c, `,"system_fingerprint":`...)
		c = openai.AppendString(c, s.fingerprint)
	}
	return append(c, '}')
}

// appendUsageChunk writes the final usage chunk.
func (s *streamWriter) appendUsageChunk(b []byte, u usage) []byte {
	object := "text_completion"
	if s.p.g.chat {
		object = "chat.completion.chunk"
	}
	c := appendHead(s.scratch[:0], s.p.id, object, s.created, s.p.model)
	c = append(c, `,"choices":[],"usage":`...)
	c = u.appendChunkUsage(c, s.p.g.chat)
	c = append(c, `,"system_fingerprint":`...)
	c = openai.AppendString(c, s.fingerprint)
	s.scratch = append(c, '}')
	return s.event(b)
}
