package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// config is what Load reads of tokenizer_config.json: what transformers
// 4.x changes in the tokenizer it builds from tokenizer.json.
type config struct {
	TokenizerClass     string                 `json:"tokenizer_class"`
	AddBOSToken        *bool                  `json:"add_bos_token"`
	AddEOSToken        *bool                  `json:"add_eos_token"`
	AddPrefixSpace     *bool                  `json:"add_prefix_space"`
	SplitSpecialTokens bool                   `json:"split_special_tokens"`
	FromSlow           bool                   `json:"from_slow"`
	AddedTokensDecoder map[string]configToken `json:"added_tokens_decoder"`
	Additional         []configToken          `json:"additional_special_tokens"`
	Extra              map[string]configToken `json:"extra_special_tokens"`
	ChatTemplate       json.RawMessage        `json:"chat_template"`

	class    tokenizerClass
	specials map[string]*configToken // by attribute (bos_token …), with the class defaults; nil: none
	// legacy is a config without added_tokens_decoder, written before
	// transformers 4.34: special_tokens_map.json then overrides it.
	legacy bool
}

// configToken is a token in tokenizer_config.json: a string, or an
// AddedToken object.
type configToken struct {
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    *bool  `json:"special"`
}

func (c *configToken) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		*c = configToken{Content: s}
		return nil
	}
	type plain configToken
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*c = configToken(p)
	return nil
}

// specialAttrs are transformers' SPECIAL_TOKENS_ATTRIBUTES, in order.
var specialAttrs = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// tokenizerClass is what a transformers 4.x fast tokenizer class does beyond
// PreTrainedTokenizerFast, as far as encoding is concerned.
type tokenizerClass struct {
	// defaults are the constructor's special tokens (by attribute), used
	// when tokenizer_config.json does not set them; transformers adds
	// those the vocabulary lacks as special tokens.
	defaults map[string]string
	// template classes rebuild the post-processor as
	// "<bos>:0 $A:0 <eos>:0" from add_bos_token and add_eos_token
	// (update_post_processor), which default to addBOS and addEOS.
	template       bool
	addBOS, addEOS bool
	// prefixSpaceNone classes pass add_prefix_space=None on unless it is
	// set, which leaves a top-level pre-tokenizer's as it is.
	prefixSpaceNone bool
}

const endOfText = "<|endoftext|>"

// tokenizerClasses are the supported tokenizer_class values, without "Fast"
// (AutoTokenizer takes the fast class either way). Load refuses others:
// their constructors may change the tokenizer in ways not reproduced here.
var tokenizerClasses = map[string]tokenizerClass{
	"PreTrainedTokenizer": {},
	"GPT2Tokenizer":       {defaults: map[string]string{"unk_token": endOfText, "bos_token": endOfText, "eos_token": endOfText}},
	"Qwen2Tokenizer":      {defaults: map[string]string{"unk_token": endOfText, "eos_token": endOfText, "pad_token": endOfText}},
	"LlamaTokenizer": {
		defaults: map[string]string{"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"},
		template: true, addBOS: true, prefixSpaceNone: true,
	},
	"GemmaTokenizer": {
		defaults: map[string]string{"unk_token": "<unk>", "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
		template: true, addBOS: true,
	},
	"GPTNeoXTokenizer": {
		defaults: map[string]string{"unk_token": endOfText, "bos_token": endOfText, "eos_token": endOfText},
		template: true,
	},
	// Command R and Aya.
	"CohereTokenizer": {
		defaults: map[string]string{"unk_token": "<UNK>", "bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>"},
		template: true, addBOS: true,
	},
}

// readConfig reads dir's tokenizer_config.json (nil when there is none)
// and, for a legacy one, the special_tokens_map.json beside it.
func readConfig(dir string) (*config, error) {
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cfg, err := parseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	if cfg.legacy {
		if err := cfg.applySpecialTokensMap(dir); err != nil {
			return nil, fmt.Errorf("special_tokens_map.json: %w", err)
		}
	}
	return cfg, nil
}

// applySpecialTokensMap applies dir's special_tokens_map.json, when there
// is one, as transformers' legacy loading does: its special tokens replace
// the config's (null removes one), and its additional special tokens join
// the config's.
func (c *config) applySpecialTokensMap(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "special_tokens_map.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	for _, k := range specialAttrs {
		v, ok := m[k]
		switch {
		case !ok:
		case isNull(v):
			delete(c.specials, k)
		default:
			var tok configToken
			if err := json.Unmarshal(v, &tok); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			c.specials[k] = &tok
		}
	}
	if v := m["additional_special_tokens"]; !isNull(v) {
		var more []configToken
		if err := json.Unmarshal(v, &more); err != nil {
			return fmt.Errorf("additional_special_tokens: %w", err)
		}
		for _, tok := range more {
			if !slices.ContainsFunc(c.Additional, func(a configToken) bool { return a.Content == tok.Content }) {
				c.Additional = append(c.Additional, tok)
			}
		}
	}
	return nil
}

func parseConfig(data []byte) (*config, error) {
	var cfg config
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	name := strings.TrimSuffix(cfg.TokenizerClass, "Fast")
	class, ok := tokenizerClasses[name]
	if !ok {
		return nil, fmt.Errorf("tokenizer_class %q: %w", cfg.TokenizerClass, ErrUnsupported)
	}
	cfg.class = class
	_, hasDecoder := raw["added_tokens_decoder"]
	cfg.legacy = !hasDecoder
	if cfg.FromSlow {
		return nil, fmt.Errorf("from_slow: %w (it needs the slow tokenizer)", ErrUnsupported)
	}
	if cfg.AddPrefixSpace != nil && name == "LlamaTokenizer" {
		return nil, fmt.Errorf("add_prefix_space with %s: %w (transformers then converts the slow tokenizer)", cfg.TokenizerClass, ErrUnsupported)
	}
	if cfg.AddPrefixSpace != nil && *cfg.AddPrefixSpace && name == "CohereTokenizer" {
		return nil, fmt.Errorf("add_prefix_space with %s: %w (transformers then rewrites the nested pre-tokenizer)", cfg.TokenizerClass, ErrUnsupported)
	}
	cfg.specials = map[string]*configToken{}
	for _, k := range specialAttrs {
		v, ok := raw[k]
		switch {
		case !ok:
			if def, ok := class.defaults[k]; ok {
				cfg.specials[k] = &configToken{Content: def}
			}
		case !isNull(v):
			var tok configToken
			if err := json.Unmarshal(v, &tok); err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			cfg.specials[k] = &tok
		}
	}
	return &cfg, nil
}

// overridePrefixSpace applies PreTrainedTokenizerFast's rule: a top-level
// pre-tokenizer with an add_prefix_space different from the tokenizer's
// (tokenizer_config.json's, false by default) gets the tokenizer's.
func (c *config) overridePrefixSpace(raw json.RawMessage) (json.RawMessage, error) {
	if isNull(raw) {
		return raw, nil
	}
	var state map[string]json.RawMessage
	if err := json.Unmarshal(raw, &state); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	cur, ok := state["add_prefix_space"]
	if !ok {
		return raw, nil
	}
	want := false
	switch {
	case c.AddPrefixSpace != nil:
		want = *c.AddPrefixSpace
	case c.class.prefixSpaceNone:
		return raw, nil
	}
	var have bool
	if err := json.Unmarshal(cur, &have); err != nil {
		return nil, fmt.Errorf("pre_tokenizer.add_prefix_space: %w", err)
	}
	if have == want {
		return raw, nil
	}
	state["add_prefix_space"] = json.RawMessage(strconv.FormatBool(want))
	return json.Marshal(state)
}

// addTokens adds what transformers adds from tokenizer_config.json: entries
// of added_tokens_decoder that differ from the tokenizer's (by content or any
// flag), then special tokens the tokenizer lacks.
func (c *config) addTokens(t *Tokenizer) error {
	var specialList []configToken
	for _, k := range specialAttrs {
		if tok := c.specials[k]; tok != nil {
			specialList = append(specialList, *tok)
		}
	}
	specialList = append(specialList, c.Additional...)
	extra := make([]string, 0, len(c.Extra))
	for k := range c.Extra {
		extra = append(extra, k)
	}
	sort.Strings(extra)
	for _, k := range extra {
		specialList = append(specialList, c.Extra[k])
	}
	specials := map[string]bool{}
	for _, tok := range specialList {
		specials[tok.Content] = true
	}

	var toAdd []addedToken
	inToAdd := map[string]bool{}
	ids := make([]int, 0, len(c.AddedTokensDecoder))
	for k := range c.AddedTokensDecoder {
		id, err := strconv.Atoi(k)
		if err != nil {
			return fmt.Errorf("tokenizer_config.json: added_tokens_decoder[%q]: not an id", k)
		}
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		ct := c.AddedTokensDecoder[strconv.Itoa(id)]
		tok := ct.added(false)
		if cur, ok := t.added.byContent[tok.content]; ok && *t.added.byID[cur] == tok {
			continue
		}
		tok.special = tok.special || specials[tok.content]
		toAdd = append(toAdd, tok)
		inToAdd[tok.content] = true
	}
	for _, ct := range specialList {
		if _, ok := t.added.byContent[ct.Content]; ok || inToAdd[ct.Content] || ct.Content == "" {
			continue
		}
		toAdd = append(toAdd, ct.added(true))
		inToAdd[ct.Content] = true
	}
	if len(toAdd) > 0 {
		t.added.add(toAdd, t.model.size, t.model.lookup, t.norm)
	}
	return nil
}

// added converts a config token to an added token; a plain string gets
// tokenizers' AddedToken defaults (normalized unless special).
func (ct configToken) added(special bool) addedToken {
	tok := addedToken{content: ct.Content, singleWord: ct.SingleWord, lstrip: ct.LStrip, rstrip: ct.RStrip, special: special}
	if ct.Special != nil {
		tok.special = *ct.Special || special
	}
	tok.normalized = !tok.special
	if ct.Normalized != nil {
		tok.normalized = *ct.Normalized
	}
	return tok
}

// overridePostProcessor is update_post_processor of the template classes:
// "<bos>:0 $A:0 <eos>:0" with the tokens add_bos_token and add_eos_token
// ask for.
func (c *config) overridePostProcessor(t *Tokenizer) error {
	if !c.class.template {
		return nil
	}
	addBOS, addEOS := c.class.addBOS, c.class.addEOS
	if c.AddBOSToken != nil {
		addBOS = *c.AddBOSToken
	}
	if c.AddEOSToken != nil {
		addEOS = *c.AddEOSToken
	}
	id := func(attr string) (int, error) {
		tok := c.specials[attr]
		if tok == nil {
			return 0, fmt.Errorf("tokenizer_config.json: add_%s = true but %s = null", attr, attr)
		}
		id, ok := t.TokenID(tok.Content)
		if !ok {
			return 0, fmt.Errorf("tokenizer_config.json: %s %q not in the vocabulary", attr, tok.Content)
		}
		return id, nil
	}
	t.prefix, t.suffix = nil, nil
	if addBOS {
		bos, err := id("bos_token")
		if err != nil {
			return err
		}
		t.prefix = []int{bos}
	}
	if addEOS {
		eos, err := id("eos_token")
		if err != nil {
			return err
		}
		t.suffix = []int{eos}
	}
	return nil
}

// ChatConfig is what chat templates read of a model's
// tokenizer_config.json, and of the chat template files beside it.
type ChatConfig struct {
	// Template is chat_template as written: a string, a list of
	// {"name", "template"} objects, or nil when absent. Template files
	// (chat_template.jinja, additional_chat_templates/NAME.jinja) take its
	// place, as in transformers.
	Template json.RawMessage
	// SpecialTokens are the special tokens as transformers'
	// special_tokens_map has them: each attribute (bos_token …) whose
	// token is set and not empty, extra_special_tokens included.
	SpecialTokens []SpecialToken
	// AdditionalSpecialTokens are additional_special_tokens.
	AdditionalSpecialTokens []string
}

// SpecialToken is a special token attribute (bos_token …) and its text.
type SpecialToken struct{ Attr, Content string }

// ChatConfig returns what t's chat templates read of its
// tokenizer_config.json; empty without one. Its slices are shared: do not
// modify them.
func (t *Tokenizer) ChatConfig() ChatConfig { return t.chat }

// LoadChatConfig reads dir/tokenizer_config.json and the chat template
// files beside it for the ChatConfig alone, without loading the tokenizer;
// nil when there are none of them. Its errors are Load's for the same files.
func LoadChatConfig(dir string) (*ChatConfig, error) {
	cfg, err := readConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	var cc ChatConfig
	if cfg != nil {
		cc = cfg.chatConfig()
	}
	if err := withTemplateFiles(&cc, dir); err != nil {
		return nil, err
	}
	if cfg == nil && cc.Template == nil {
		return nil, nil
	}
	return &cc, nil
}

// chatConfig is the ChatConfig of the config.
func (c *config) chatConfig() ChatConfig {
	cc := ChatConfig{Template: c.ChatTemplate}
	for _, k := range specialAttrs {
		if tok := c.specials[k]; tok != nil && tok.Content != "" {
			cc.SpecialTokens = append(cc.SpecialTokens, SpecialToken{Attr: k, Content: tok.Content})
		}
	}
	for _, tok := range c.Additional {
		cc.AdditionalSpecialTokens = append(cc.AdditionalSpecialTokens, tok.Content)
	}
	// extra_special_tokens become attributes too (Gemma 3's image_token).
	extra := make([]string, 0, len(c.Extra))
	for k := range c.Extra {
		extra = append(extra, k)
	}
	sort.Strings(extra)
	for _, k := range extra {
		if tok := c.Extra[k]; tok.Content != "" {
			cc.SpecialTokens = append(cc.SpecialTokens, SpecialToken{Attr: k, Content: tok.Content})
		}
	}
	return cc
}
