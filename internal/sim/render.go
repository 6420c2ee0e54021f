package sim

import (
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/inferrail/inferrail/internal/openai"
)

// vLLM serves POST /v1/chat/completions/render and /v1/completions/render
// beside generation (vllm/entrypoints/scale_out/render/api_router.py): the
// request validated, its model checked and its prompt rendered and
// tokenized exactly as for generation, answered with the GenerateRequest
// the engine would get (scale_out/token_in_token_out/protocol.py), nothing
// generated. A chat gives one object, a completion a list of one per
// prompt. vllm-router's cache_aware policy asks for it to route tool
// calling chats by their tokens; without it, it routes them blind.

// render answers the render endpoints. It refuses what generation
// refuses, with the same errors, but not a request the KV cache is too
// small for, which only the simulator refuses and only when it generates.
func (s *Server) render(w http.ResponseWriter, r *http.Request, chat bool) {
	body, e := readJSONBody(w, r)
	if e != nil {
		e.Write(w)
		return
	}
	defer s.holdIfBig(body)()
	p, e := s.tokenized(body, chat)
	if e != nil {
		e.Write(w)
		return
	}
	// The body parsed once already; what the answer echoes is read again
	// from it rather than kept on every generation request.
	root, _ := decodeJSON(body)
	o := root.(*object)
	var b []byte
	if !chat {
		b = append(b, '[')
	}
	b = s.appendGenerateRequest(b, p, o)
	if !chat {
		b = append(b, ']')
	}
	writeJSON(w, b)
}

// appendGenerateRequest writes the GenerateRequest vLLM's render makes of
// p: every field in declaration order, unset ones null. The request id is
// chatcmpl- or cmpl- and a random id, never the client's; features, the
// multimodal part, is null for text.
func (s *Server) appendGenerateRequest(b []byte, p *prepared, o *object) []byte {
	g := p.g
	prefix := "cmpl-"
	if g.chat {
		prefix = "chatcmpl-"
	}
	b = append(b, `{"request_id":"`+prefix+randomID()+`","token_ids":[`...)
	for i, id := range p.prompt {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	b = append(b, `],"assistant_tokens_mask":null,"token_offsets":null,"features":null,"content_parts":null,"sampling_params":`...)
	b = s.appendSamplingParams(b, p, o)
	b = append(b, `,"model":`...)
	if m, ok := o.get("model"); ok && m != nil {
		b = openai.AppendString(b, g.model)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, g.stream)
	b = append(b, `,"stream_options":`...)
	b = appendStreamOptions(b, g.stream, o)
	b = append(b, `,"cache_salt":`...)
	if g.prompt.CacheSalt != "" {
		b = openai.AppendString(b, g.prompt.CacheSalt)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"priority":`...)
	raw, _ := o.get("priority")
	b = append(b, sentInt(raw, 0)...)
	return append(b, `,"kv_transfer_params":null,"ec_transfer_params":null}`...)
}

// appendStreamOptions writes stream_options as the request model holds
// them when streaming, else null.
func appendStreamOptions(b []byte, stream bool, o *object) []byte {
	so, _ := o.get("stream_options")
	opts, ok := so.(*object)
	if !stream || !ok {
		return append(b, "null"...)
	}
	for i, key := range []string{"include_usage", "continuous_usage_stats"} {
		if i == 0 {
			b = append(b, '{')
		} else {
			b = append(b, ',')
		}
		b = append(b, `"`+key+`":`...)
		switch val, present := opts.get(key); {
		case !present:
			b = append(b, "false"...)
		case val == nil:
			b = append(b, "null"...)
		default:
			v, _ := openai.LaxBool(val)
			b = strconv.AppendBool(b, v)
		}
	}
	return append(b, '}')
}

// appendSamplingParams writes the SamplingParams vLLM builds for the
// request, as its serializer writes them: msgspec's to_builtins with
// omit_defaults, private fields dropped. msgspec leaves a field out when
// its value is the very object of its default, not an equal one, so
// what is written follows where each value came from in Python:
//   - a number the client sent is a new object, written even when it
//     equals the default;
//   - the request models' own defaults (penalties 0.0; temperature, top_p,
//     min_p and repetition_penalty of 1.0, 1.0, 0.0 and 1.0 in their
//     place) are other modules' objects, so they are written too;
//   - an explicit null for presence_penalty or frequency_penalty takes
//     SamplingParams' own default, which is left out, as is what greedy
//     sampling (temperature under 1e-5) resets top_p, top_k and min_p to;
//   - ints from -5 to 256 are one object in CPython, so an int equal to
//     its default is left out;
//   - __post_init__ turns stop, stop_token_ids and bad_words into lists
//     and sets skip_reading_prefix_cache, so they are always written.
//
// Only the fields the simulator reads are echoed: stop_token_ids,
// bad_words, skip_special_tokens (but for hermes' tool calling change),
// include_stop_str_in_output, logit_bias, allowed_token_ids, vllm_xargs
// (extra_args), structured outputs and the rest are written as if absent.
// n, logprobs and prompt_logprobs are absent, the simulator refusing any
// other value.
func (s *Server) appendSamplingParams(b []byte, p *prepared, o *object) []byte {
	g := p.g
	b = appendSamplingNumbers(b, o)
	b = append(b, `,"stop":[`...)
	buffered := 0 // characters held back to match a stop string
	for i, st := range stopStrings(o) {
		if i > 0 {
			b = append(b, ',')
		}
		b = openai.AppendString(b, st)
		buffered = max(buffered, utf8.RuneCountInString(st)-1)
	}
	b = append(b, `],"stop_token_ids":[]`...)
	if g.ignoreEOS {
		b = append(b, `,"ignore_eos":true`...)
	}
	if p.max != 16 {
		b = append(b, `,"max_tokens":`...)
		b = strconv.AppendInt(b, int64(p.max), 10)
	}
	if g.minTokens != 0 {
		b = append(b, `,"min_tokens":`...)
		b = append(b, sentInt(g.minSent, g.minTokens)...)
	}
	if s.hermesAdjusts(g, o) {
		b = append(b, `,"skip_special_tokens":false`...)
	}
	kind := 2 // RequestOutputKind.FINAL_ONLY
	if g.stream {
		kind = 1 // DELTA
	}
	b = append(b, `,"output_kind":`...)
	b = strconv.AppendInt(b, int64(kind), 10)
	b = append(b, `,"skip_clone":true`...)
	if buffered != 0 {
		b = append(b, `,"output_text_buffer_length":`...)
		b = strconv.AppendInt(b, int64(buffered), 10)
	}
	return append(b, `,"bad_words":[],"skip_reading_prefix_cache":false}`...)
}

// appendSamplingNumbers opens SamplingParams and writes its fields from
// presence_penalty to seed; temperature is always among them.
func appendSamplingNumbers(b []byte, o *object) []byte {
	v := &validator{} // the body validated already: nothing is added
	sep := byte('{')
	field := func(key string) {
		b = append(b, sep, '"')
		b = append(b, key...)
		b = append(b, '"', ':')
		sep = ','
	}
	float := func(key string, f float64) {
		field(key)
		b = appendPyFloat(b, f)
	}
	for _, key := range []string{"presence_penalty", "frequency_penalty"} {
		f, ok := v.number(o, key)
		if _, present := o.get(key); !present || ok {
			float(key, f)
		}
	}
	repetition, ok := v.number(o, "repetition_penalty")
	if !ok {
		repetition = 1
	}
	float("repetition_penalty", repetition)
	temperature, ok := v.number(o, "temperature")
	switch {
	case !ok:
		temperature = 1
	case temperature > 0 && temperature < 1e-2:
		temperature = 1e-2 // vLLM raises it, warning of numerical errors
	}
	float("temperature", temperature)
	if temperature >= 1e-5 { // else greedy: the defaults, left out
		topP, ok := v.number(o, "top_p")
		if !ok {
			topP = 1
		}
		float("top_p", topP)
		if raw, _ := o.get("top_k"); raw != nil {
			if k := sentInt(raw, 0); k != "0" {
				field("top_k")
				b = append(b, k...)
			}
		}
		minP, _ := v.number(o, "min_p")
		float("min_p", minP)
	}
	if raw, _ := o.get("seed"); raw != nil {
		if seed := sentInt(raw, 0); seed != "-1" {
			field("seed")
			b = append(b, seed...)
		}
	}
	return b
}

// hermesAdjusts reports whether vLLM's hermes tool parser turns
// skip_special_tokens off for the request, as it does for a chat with
// tools whose tool_choice is not "none" (tool_parsers/hermes_tool_parser.py,
// adjust_request). vLLM builds the parser only with
// --enable-auto-tool-choice; other parsers' adjustments are not modelled.
func (s *Server) hermesAdjusts(g *genRequest, o *object) bool {
	if !g.chat || !s.cfg.EnableAutoToolChoice || s.cfg.ToolCallParser != "hermes" {
		return false
	}
	tools, _ := o.get("tools")
	return isNonEmptyList(tools) && g.toolChoice.kind != "none"
}
