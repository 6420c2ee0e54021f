package hf

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"
)

// backendClass is transformers' TokenizersBackend (PreTrainedTokenizerFast):
// tokenizer.json taken as it is.
const backendClass = "TokenizersBackend"

// genericClasses load tokenizer.json as it is.
var genericClasses = map[string]bool{
	backendClass: true, "PreTrainedTokenizer": true, "PythonBackend": true, "MistralCommonBackend": true,
	"BloomTokenizer": true, // removed in transformers 5, read as the generic class
}

// modelConfig is what AutoTokenizer reads of the model's config.json, when
// the tokenizer directory has one.
type modelConfig struct {
	ModelType      string `json:"model_type"`
	TokenizerClass string `json:"tokenizer_class"`
}

// remoteCode is chooseClass's answer for a tokenizer_config.json whose
// auto_map names a class of the repository's own code: transformers runs it
// only when trusted (vLLM's --trust-remote-code), and Load cannot.
const remoteCode = "remote code (auto_map)"

// chooseClass is the tokenizer class AutoTokenizer builds, without "Fast",
// for the directory loaded as name (what the engine was given: a path or a
// repository id), its tokenizer_config.json's tokenizer_class (hub, "" when
// absent) and auto_map (remote), and its config.json (nil when absent).
func chooseClass(name, hub string, remote bool, model *modelConfig) string {
	hub = strings.TrimSuffix(hub, "Fast")
	fromConfig := hub != ""
	modelType := ""
	if model != nil {
		modelType = model.ModelType
		if hub == "" {
			hub = strings.TrimSuffix(model.TokenizerClass, "Fast")
		}
	}
	if !remote {
		lower := strings.ToLower(name)
		for _, p := range backendRepoPatterns {
			if ok, _ := path.Match(p, lower); ok {
				return backendClass
			}
		}
	}
	if reg := strings.TrimSuffix(registeredClasses[modelType], "Fast"); !remote && hub != "" && reg != "" && reg != hub {
		// The model type registers another class: transformers takes the
		// registered one where it knows the Hub's to be wrong, the Hub's
		// otherwise, and tokenizer.json as it is when either is generic
		// or unknown.
		if !genericClasses[reg] {
			cls := hub
			if wrongHubClass[modelType] {
				cls = reg
			}
			if !genericClasses[cls] && transformersClasses[cls] {
				return cls
			}
		}
		return backendClass
	}
	if remote && !wrongHubClass[modelType] {
		return remoteCode
	}
	cls := hub
	switch {
	case cls == "":
		cls = strings.TrimSuffix(registeredClasses[modelType], "Fast")
	case fromConfig && !transformersClasses[cls]:
		// A tokenizer_class transformers does not have falls back to
		// tokenizer.json as it is (config.json's would fail to load).
		return backendClass
	}
	if cls == "" || genericClasses[cls] {
		return backendClass
	}
	return cls
}

// classPipeline is what a tokenizer class's constructor builds in
// transformers 5: it keeps tokenizer.json's vocabulary, merges and
// post-processor and replaces the rest with its own.
type classPipeline struct {
	normalizer, preTokenizer, decoder json.RawMessage // null: none
	fuseUnk, byteFallback             bool
	unkToken                          bool // the model's unk_token is the config's unk_token
}

// classInput is what a constructor reads of tokenizer_config.json.
type classInput struct {
	addPrefixSpace *bool // nil: not set
	legacy         bool
}

// byteLevelSettings is a ByteLevel pre-tokenizer with the given prefix space.
func byteLevelSettings(addPrefixSpace, useRegex bool) string {
	return `{"type":"ByteLevel","add_prefix_space":` + boolJSON(addPrefixSpace) +
		`,"trim_offsets":true,"use_regex":` + boolJSON(useRegex) + `}`
}

func boolJSON(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// qwen2Pattern is Qwen2Tokenizer's PRETOKENIZE_REGEX.
const qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

const (
	nfcJSON            = `{"type":"NFC"}`
	byteLevelDecoder   = `{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true}`
	spaceFallbackFused = `{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"}`
)

// tokenizerClass is what a transformers 5 tokenizer class's constructor
// does, as far as encoding is concerned.
type tokenizerClass struct {
	// defaults are the constructor's special tokens (by attribute), used
	// when tokenizer_config.json does not set them; transformers adds
	// those the vocabulary lacks as special tokens.
	defaults map[string]string
	// pipeline builds the rest; nil for the generic class, which takes
	// tokenizer.json as it is.
	pipeline func(in classInput) classPipeline
	// bare classes replace tokenizer.json's post-processor by one that
	// adds nothing (GPT-NeoX calls update_post_processor after
	// add_bos_token and add_eos_token were dropped).
	bare bool
}

const endOfText = "<|endoftext|>"

// tokenizerClasses are the classes Load reproduces, by name without
// "Fast". It refuses other classes transformers has: their constructors
// build tokenizers not reproduced here.
var tokenizerClasses = map[string]tokenizerClass{
	backendClass: {},
	"GPT2Tokenizer": {
		defaults: map[string]string{"unk_token": endOfText, "bos_token": endOfText, "eos_token": endOfText},
		pipeline: gpt2Pipeline,
	},
	"GPTNeoXTokenizer": {
		defaults: map[string]string{"unk_token": endOfText, "bos_token": endOfText, "eos_token": endOfText, "pad_token": "<|padding|>"},
		pipeline: gptNeoXPipeline, bare: true,
	},
	"Qwen2Tokenizer": {
		defaults: map[string]string{"unk_token": endOfText, "eos_token": endOfText, "pad_token": endOfText},
		pipeline: qwen2Pipeline,
	},
	// Command R and Aya.
	"CohereTokenizer": {
		defaults: map[string]string{"unk_token": "<UNK>", "bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>",
			"pad_token": "<PAD>", "cls_token": "<CLS>", "sep_token": "<SEP>", "mask_token": "<MASK_TOKEN>"},
		pipeline: coherePipeline,
	},
	"GemmaTokenizer": {
		defaults: map[string]string{"unk_token": "<unk>", "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "mask_token": "<mask>"},
		pipeline: gemmaPipeline,
	},
	"LlamaTokenizer": {
		defaults: map[string]string{"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"},
		pipeline: llamaPipeline,
	},
}

func gpt2Pipeline(in classInput) classPipeline {
	return classPipeline{
		preTokenizer: json.RawMessage(byteLevelSettings(isTrue(in.addPrefixSpace), true)),
		decoder:      json.RawMessage(byteLevelDecoder),
	}
}

func gptNeoXPipeline(in classInput) classPipeline {
	return classPipeline{
		normalizer:   json.RawMessage(nfcJSON),
		preTokenizer: json.RawMessage(byteLevelSettings(isTrue(in.addPrefixSpace), true)),
		decoder:      json.RawMessage(byteLevelDecoder),
	}
}

func qwen2Pipeline(in classInput) classPipeline {
	pattern, _ := json.Marshal(qwen2Pattern)
	return classPipeline{
		normalizer: json.RawMessage(nfcJSON),
		preTokenizer: json.RawMessage(`{"type":"Sequence","pretokenizers":[` +
			`{"type":"Split","pattern":{"Regex":` + string(pattern) + `},"behavior":"Isolated","invert":false},` +
			byteLevelSettings(isTrue(in.addPrefixSpace), false) + `]}`),
		decoder: json.RawMessage(byteLevelDecoder),
	}
}

func coherePipeline(in classInput) classPipeline {
	return classPipeline{
		normalizer: json.RawMessage(nfcJSON),
		preTokenizer: json.RawMessage(`{"type":"Sequence","pretokenizers":[` +
			`{"type":"Digits","individual_digits":true},` + byteLevelSettings(isTrue(in.addPrefixSpace), true) + `]}`),
		decoder: json.RawMessage(byteLevelDecoder),
	}
}

func gemmaPipeline(classInput) classPipeline {
	return classPipeline{
		normalizer:   json.RawMessage(`{"type":"Replace","pattern":{"String":" "},"content":"▁"}`),
		preTokenizer: json.RawMessage(`{"type":"Split","pattern":{"String":" "},"behavior":"MergedWithPrevious","invert":false}`),
		decoder:      json.RawMessage(`{"type":"Sequence","decoders":[` + spaceFallbackFused + `]}`),
		fuseUnk:      true, byteFallback: true, unkToken: true,
	}
}

func llamaPipeline(in classInput) classPipeline {
	// add_prefix_space defaults to true; legacy (false unless set)
	// prepends the space to every piece between added tokens, else only
	// to the text's start.
	scheme, strip := "never", ""
	if in.addPrefixSpace == nil || *in.addPrefixSpace {
		scheme, strip = "first", `,{"type":"Strip","content":" ","start":1,"stop":0}`
		if in.legacy {
			scheme = "always"
		}
	}
	return classPipeline{
		preTokenizer: json.RawMessage(`{"type":"Metaspace","replacement":"▁","prepend_scheme":"` + scheme + `","split":false}`),
		decoder:      json.RawMessage(`{"type":"Sequence","decoders":[` + spaceFallbackFused + strip + `]}`),
		fuseUnk:      true, byteFallback: true,
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

// rebuild replaces what the class's constructor builds itself in f and m.
// The added tokens are then the config's (added_tokens_decoder), not
// tokenizer.json's, unless the config predates added_tokens_decoder.
func (c *config) rebuild(f *tokenizerJSON, m *modelJSON, pipeline func(classInput) classPipeline) {
	p := pipeline(classInput{addPrefixSpace: c.AddPrefixSpace, legacy: c.Legacy})
	f.Normalizer, f.PreTokenizer, f.Decoder = orNull(p.normalizer), orNull(p.preTokenizer), orNull(p.decoder)
	m.FuseUnk, m.ByteFallback, m.IgnoreMerges = p.fuseUnk, p.byteFallback, false
	m.Dropout, m.ContinuingSubwordPrefix, m.EndOfWordSuffix, m.UnkToken = nil, nil, nil, nil
	if unk := c.specials["unk_token"]; p.unkToken && unk != nil {
		m.UnkToken = &unk.Content
	}
	if !c.noDecoder {
		f.AddedTokens = nil
	}
}

func orNull(raw json.RawMessage) json.RawMessage {
	if raw == nil {
		return json.RawMessage("null")
	}
	return raw
}

// remoteTokenizer reports whether auto_map names a tokenizer class of the
// repository's own code: a list (the old form), or an AutoTokenizer entry.
func (c *config) remoteTokenizer() bool {
	var list []json.RawMessage
	if json.Unmarshal(c.AutoMap, &list) == nil && list != nil {
		return true
	}
	var m map[string]json.RawMessage
	return json.Unmarshal(c.AutoMap, &m) == nil && !isNull(m["AutoTokenizer"])
}

// withDefaults sets the special tokens the config leaves unset (not those
// it sets to null) to the class constructor's defaults.
func (c *config) withDefaults(defaults map[string]string) {
	for _, k := range specialAttrs {
		if _, set := c.specials[k]; !set {
			if def, ok := defaults[k]; ok {
				c.specials[k] = &configToken{Content: def}
			}
		}
	}
}

// readModelConfig reads what chooseClass needs of dir/config.json; nil when
// there is none.
func readModelConfig(dir string) (*modelConfig, error) {
	data, err := readOptional(dir, "config.json")
	if data == nil || err != nil {
		return nil, err
	}
	// AutoConfig keeps config.json as a dict: a key in another case
	// ("Model_Type") is no model type.
	var m modelConfig
	if err := exactUnmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	return &m, nil
}

// unsupportedClass says which class was chosen and why.
func unsupportedClass(class, hub string, model *modelConfig) error {
	why := "tokenizer_config.json's tokenizer_class"
	switch {
	case hub == "" && model != nil && model.TokenizerClass != "":
		why = "config.json's tokenizer_class"
	case class == remoteCode:
		return fmt.Errorf("tokenizer class %s: %w (transformers runs it only with trust_remote_code)", class, ErrUnsupported)
	case hub == "":
		why = "config.json's model_type"
	case model != nil && strings.TrimSuffix(hub, "Fast") != class:
		why = fmt.Sprintf("model_type %q with tokenizer_class %q", model.ModelType, hub)
	}
	return fmt.Errorf("tokenizer class %s (from %s, as transformers %s picks it): %w", class, why, transformersVersion, ErrUnsupported)
}
