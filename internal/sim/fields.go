package sim

import (
	"math/big"

	"github.com/inferrail/inferrail/internal/tokenize/simtok"
)

// fieldType is a request field's declared type, checked as pydantic's lax
// mode checks it.
type fieldType uint8

const (
	typeStr            fieldType = iota
	typeInt                      // int: laxInt's coercions
	typeInt64                    // int with vLLM's Field(ge=-2**63, le=2**63-1)
	typeFloat                    // float: numbers, numeric strings, booleans
	typeBool                     // bool: openai.LaxBool's coercions
	typeDict                     // dict[str, Any]
	typeFloatDict                // dict[str, float] (logit_bias)
	typeIntList                  // list[int]
	typeStrList                  // list[str]
	typeDocuments                // list[dict[str, str]]
	typeResponseFormat           // one of vLLM's three response format models
	typeStreamOptions            // StreamOptions
	typeMessages                 // chat messages, validateMessages
	typePrompt                   // completion prompt, validatePrompt
	typeStop                     // str | list[str], validateStop
	typeTools                    // list[ChatCompletionToolsParam], validateTools
)

// declared is one field of a vLLM request model. A nullable field takes
// null; vLLM declares it "T | None".
type declared struct {
	name     string
	typ      fieldType
	nullable bool
}

// The fields of vLLM's request models whose types the simulator checks, in
// the order the models declare them, which is the order pydantic reports
// their errors in (chat_completion/protocol.py, completion/protocol.py,
// serve/tokenize/protocol.py). Left out are the fields whose types are
// literals or unions of models the simulator does not otherwise read
// (tool_choice, which checkToolUsage vets first, reasoning_effort,
// truncation_side, structured_outputs, thinking_token_budget,
// repetition_detection, prompt_embeds, media_io_kwargs): vLLM checks them
// and the simulator does not.
var (
	chatFields = []declared{
		{"messages", typeMessages, false},
		{"model", typeStr, true},
		{"frequency_penalty", typeFloat, true},
		{"logit_bias", typeFloatDict, true},
		{"logprobs", typeBool, true},
		{"top_logprobs", typeInt, true},
		{"max_tokens", typeInt, true},
		{"max_completion_tokens", typeInt, true},
		{"n", typeInt, true},
		{"presence_penalty", typeFloat, true},
		{"response_format", typeResponseFormat, true},
		{"seed", typeInt64, true},
		{"stop", typeStop, true},
		{"stream", typeBool, true},
		{"stream_options", typeStreamOptions, true},
		{"temperature", typeFloat, true},
		{"top_p", typeFloat, true},
		{"tools", typeTools, true},
		{"include_reasoning", typeBool, false},
		{"parallel_tool_calls", typeBool, true},
		{"user", typeStr, true},
		{"use_beam_search", typeBool, false},
		{"top_k", typeInt, true},
		{"min_p", typeFloat, true},
		{"repetition_penalty", typeFloat, true},
		{"watermarking", typeBool, true},
		{"length_penalty", typeFloat, false},
		{"stop_token_ids", typeIntList, true},
		{"include_stop_str_in_output", typeBool, false},
		{"ignore_eos", typeBool, false},
		{"min_tokens", typeInt, false},
		{"skip_special_tokens", typeBool, false},
		{"spaces_between_special_tokens", typeBool, false},
		{"truncate_prompt_tokens", typeInt, true},
		{"prompt_logprobs", typeInt, true},
		{"logprob_token_ids", typeIntList, true},
		{"allowed_token_ids", typeIntList, true},
		{"bad_words", typeStrList, false},
		{"echo", typeBool, false},
		{"add_generation_prompt", typeBool, false},
		{"continue_final_message", typeBool, false},
		{"add_special_tokens", typeBool, false},
		{"documents", typeDocuments, true},
		{"chat_template", typeStr, true},
		{"chat_template_kwargs", typeDict, true},
		{"mm_processor_kwargs", typeDict, true},
		{"priority", typeInt64, false},
		{"request_id", typeStr, false},
		{"session_id", typeStr, true},
		{"return_tokens_as_token_ids", typeBool, true},
		{"return_token_ids", typeBool, true},
		{"routed_experts_prompt_start", typeInt, false},
		{"return_token_offsets", typeBool, true},
		{"return_prompt_text", typeBool, true},
		{"return_mm_kwargs", typeBool, false},
		{"cache_salt", typeStr, true},
		{"kv_transfer_params", typeDict, true},
		{"ec_transfer_params", typeDict, true},
		{"vllm_xargs", typeDict, true},
		{"stream_interval", typeInt, true},
	}
	completionFields = []declared{
		{"model", typeStr, true},
		{"prompt", typePrompt, true},
		{"echo", typeBool, true},
		{"frequency_penalty", typeFloat, true},
		{"logit_bias", typeFloatDict, true},
		{"logprobs", typeInt, true},
		{"max_tokens", typeInt, true},
		{"n", typeInt, false},
		{"best_of", typeInt, true},
		{"presence_penalty", typeFloat, true},
		{"seed", typeInt64, true},
		{"stop", typeStop, true},
		{"stream", typeBool, true},
		{"stream_options", typeStreamOptions, true},
		{"suffix", typeStr, true},
		{"temperature", typeFloat, true},
		{"top_p", typeFloat, true},
		{"user", typeStr, true},
		{"use_beam_search", typeBool, false},
		{"top_k", typeInt, true},
		{"min_p", typeFloat, true},
		{"repetition_penalty", typeFloat, true},
		{"watermarking", typeBool, true},
		{"length_penalty", typeFloat, false},
		{"stop_token_ids", typeIntList, true},
		{"include_stop_str_in_output", typeBool, false},
		{"ignore_eos", typeBool, false},
		{"min_tokens", typeInt, false},
		{"skip_special_tokens", typeBool, false},
		{"spaces_between_special_tokens", typeBool, false},
		{"truncate_prompt_tokens", typeInt, true},
		{"allowed_token_ids", typeIntList, true},
		{"prompt_logprobs", typeInt, true},
		{"logprob_token_ids", typeIntList, true},
		{"bad_words", typeStrList, false},
		{"add_special_tokens", typeBool, false},
		{"response_format", typeResponseFormat, true},
		{"priority", typeInt64, false},
		{"request_id", typeStr, false},
		{"session_id", typeStr, true},
		{"return_tokens_as_token_ids", typeBool, true},
		{"return_token_ids", typeBool, true},
		{"routed_experts_prompt_start", typeInt, false},
		{"return_token_offsets", typeBool, true},
		{"return_mm_kwargs", typeBool, false},
		{"cache_salt", typeStr, true},
		{"kv_transfer_params", typeDict, true},
		{"ec_transfer_params", typeDict, true},
		{"vllm_xargs", typeDict, true},
		{"stream_interval", typeInt, true},
	}
)

// vLLM's /tokenize takes a completion's prompt or a chat's messages, each
// with fields of its own; extra fields are allowed and go unchecked.
var (
	tokenizeCompletionFields = []declared{
		{"model", typeStr, true},
		{"prompt", typePrompt, false},
		{"add_special_tokens", typeBool, false},
		{"return_token_strs", typeBool, true},
	}
	tokenizeChatFields = []declared{
		{"model", typeStr, true},
		{"messages", typeMessages, false},
		{"add_generation_prompt", typeBool, false},
		{"return_token_strs", typeBool, true},
		{"continue_final_message", typeBool, false},
		{"add_special_tokens", typeBool, false},
		{"chat_template", typeStr, true},
		{"chat_template_kwargs", typeDict, true},
		{"mm_processor_kwargs", typeDict, true},
		{"tools", typeTools, true},
	}
)

// declaredFields are the fields of the request model of a chat (chat
// true) or a completion, for generation or for /tokenize.
func declaredFields(chat, generate bool) []declared {
	switch {
	case chat && generate:
		return chatFields
	case generate:
		return completionFields
	case chat:
		return tokenizeChatFields
	}
	return tokenizeCompletionFields
}

// responseFormats are the models vLLM's response_format may be, in the
// order of its union; pydantic names each in the location of its errors.
var responseFormats = []string{"ResponseFormat", "StructuralTagResponseFormat", "LegacyStructuralTagResponseFormat"}

// int64 bounds, as vLLM's seed and priority declare them.
var (
	int64Max = big.NewInt(1<<63 - 1)
	int64Min = big.NewInt(-1 << 63)
)

// checkDeclared adds to v an error for every field of o whose value its
// declared type refuses, in declaration order. Absent fields take their
// defaults, which no check refuses.
func checkDeclared(v *validator, o *object, fields []declared, tok *simtok.Tokenizer, generate bool) {
	for _, f := range fields {
		switch f.typ {
		case typeMessages:
			validateMessages(v, o) // required: it reports a missing list itself
			continue
		case typePrompt:
			validatePrompt(v, o, tok, generate) // it reports a missing prompt itself
			continue
		}
		val, ok := o.get(f.name)
		if !ok || val == nil && f.nullable {
			continue
		}
		checkValue(v, []any{f.name}, f.typ, val)
	}
}

// checkValue checks one value present at loc against typ.
func checkValue(v *validator, loc []any, typ fieldType, val any) {
	switch typ {
	case typeStr:
		if _, ok := val.(string); !ok {
			v.add("string_type", loc, "Input should be a valid string", val)
		}
	case typeInt, typeInt64:
		checkInt(v, loc, val, typ == typeInt64)
	case typeFloat:
		if _, kind := laxFloat(val); kind != "" {
			v.add(kind, loc, floatMessages[kind], val)
		}
	case typeBool:
		checkBool(v, loc, val)
	case typeDict, typeFloatDict:
		o, ok := val.(*object)
		if !ok {
			v.add("dict_type", loc, "Input should be a valid dictionary", val)
			return
		}
		if typ == typeFloatDict {
			eachMember(o, func(key string, m any) { checkValue(v, append(loc[:len(loc):len(loc)], key), typeFloat, m) })
		}
	case typeIntList, typeStrList, typeDocuments:
		checkList(v, loc, typ, val)
	case typeResponseFormat:
		if _, ok := val.(*object); !ok {
			// A dict's members the simulator leaves to vLLM's own checks.
			for _, name := range responseFormats {
				v.addCtx("model_type", append(loc[:len(loc):len(loc)], name),
					"Input should be a valid dictionary or instance of "+name, val, &object{keys: []string{"class_name"}, vals: []any{name}})
			}
		}
	case typeStreamOptions:
		readStreamOptions(v, val)
	case typeStop:
		validateStop(v, &object{keys: []string{"stop"}, vals: []any{val}})
	case typeTools:
		validateTools(v, &object{keys: []string{"tools"}, vals: []any{val}})
	}
}

// checkList checks a list of ints, of strings, or of string dicts.
func checkList(v *validator, loc []any, typ fieldType, val any) {
	list, ok := val.([]any)
	if !ok {
		v.add("list_type", loc, "Input should be a valid list", val)
		return
	}
	for i, e := range list {
		at := append(loc[:len(loc):len(loc)], i)
		switch typ {
		case typeIntList:
			checkInt(v, at, e, false)
		case typeStrList:
			checkValue(v, at, typeStr, e)
		case typeDocuments:
			doc, ok := e.(*object)
			if !ok {
				v.add("dict_type", at, "Input should be a valid dictionary", e)
				continue
			}
			eachMember(doc, func(key string, m any) { checkValue(v, append(at[:len(at):len(at)], key), typeStr, m) })
		}
	}
}

// eachMember calls fn for each key of o once, with its last value, in the
// order Python's dict keeps: where the key first appeared.
func eachMember(o *object, fn func(key string, val any)) {
	last := make(map[string]int, len(o.keys))
	for i, k := range o.keys {
		last[k] = i
	}
	for _, k := range o.keys {
		if j, ok := last[k]; ok {
			fn(k, o.vals[j])
			delete(last, k)
		}
	}
}

// checkInt adds the error pydantic gives for val as an int, and for one
// out of int64's range when bounded.
func checkInt(v *validator, loc []any, val any, bounded bool) {
	if _, kind := laxInt(val); kind != "" {
		v.add(kind, loc, intMessages[kind], val)
		return
	}
	if !bounded {
		return
	}
	n, _ := exactInt(val)
	switch {
	case n.Cmp(int64Max) > 0:
		v.addCtx("less_than_equal", loc, "Input should be less than or equal to "+int64Max.String(), val,
			&object{keys: []string{"le"}, vals: []any{jsonInt(int64Max)}})
	case n.Cmp(int64Min) < 0:
		v.addCtx("greater_than_equal", loc, "Input should be greater than or equal to "+int64Min.String(), val,
			&object{keys: []string{"ge"}, vals: []any{jsonInt(int64Min)}})
	}
}

func checkBool(v *validator, loc []any, val any) {
	if _, kind := laxBool(val); kind != "" {
		v.add(kind, loc, boolMessages[kind], val)
	}
}

// The messages of pydantic's errors, by type.
var (
	intMessages = map[string]string{
		"int_type":         "Input should be a valid integer",
		"int_parsing":      "Input should be a valid integer, unable to parse string as an integer",
		"int_from_float":   "Input should be a valid integer, got a number with a fractional part",
		"int_parsing_size": "Unable to parse input string as an integer, exceeded maximum size",
		"finite_number":    "Input should be a finite number",
	}
	floatMessages = map[string]string{
		"float_type":    "Input should be a valid number",
		"float_parsing": "Input should be a valid number, unable to parse string as a number",
	}
	boolMessages = map[string]string{
		"bool_type":    "Input should be a valid boolean",
		"bool_parsing": "Input should be a valid boolean, unable to interpret input",
	}
)
