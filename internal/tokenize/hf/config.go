package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/inferrail/inferrail/internal/filewatch"
	"github.com/inferrail/inferrail/internal/tokenize/rawjson"
)

// config is what Load reads of tokenizer_config.json: what transformers 5
// changes in the tokenizer it builds from tokenizer.json. Its fields are
// read by exactUnmarshal, keys case and all.
type config struct {
	TokenizerClass     string                 `json:"tokenizer_class"`
	AddPrefixSpace     *bool                  `json:"add_prefix_space"`
	Legacy             bool                   `json:"legacy"`
	SplitSpecialTokens bool                   `json:"split_special_tokens"`
	AddedTokensDecoder map[string]configToken `json:"added_tokens_decoder"`
	ChatTemplate       json.RawMessage        `json:"chat_template"`
	AutoMap            json.RawMessage        `json:"auto_map"` // remote code; nil when absent

	// specials are the special tokens by attribute (bos_token …) as the
	// config sets them: a nil entry is set to null, a missing one is not
	// set (the class's default then applies; see withDefaults).
	specials map[string]*configToken
	// modelSpecific are the named special tokens beyond specialAttrs, in
	// order: the config's other *_token strings, then an
	// extra_special_tokens object's (Gemma 3's image_token). They are
	// template variables too.
	modelSpecific []SpecialToken
	// extra are the unnamed special tokens: an extra_special_tokens list,
	// else additional_special_tokens.
	extra []configToken
	// noDecoder is a config without added_tokens_decoder, written before
	// transformers 4.34: special_tokens_map.json then overrides it, and the
	// added tokens are tokenizer.json's.
	noDecoder bool
	// legacyAdded are added_tokens.json's tokens by id, which such a
	// config adds beside tokenizer.json's (see readLegacyAdded).
	legacyAdded map[int]configToken
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
	// An AddedToken's keys are its constructor's arguments: transformers
	// refuses "Content" (AddedToken(**token) takes no such argument), so
	// a key naming a field in another case is refused, not read as it.
	type plain configToken
	var p plain
	if err := caseSensitiveUnmarshal(data, &p); err != nil {
		return err
	}
	*c = configToken(p)
	return nil
}

// MaxFileBytes bounds each file Load reads. The largest tokenizer.json in
// use is Gemma 3's, about 33 MB for 262,144 tokens; the bound leaves room
// for vocabularies several times larger, while a runaway file cannot take
// more than a fraction of the memory the gateway serves with (building the
// tokenizer takes a few times its file's size again).
const MaxFileBytes = 256 << 20

// readFile reads the file at path, at most MaxFileBytes of it. A named
// pipe or a device there is refused rather than waited on or read without
// end (filewatch.ReadFile): the gateway loads tokenizers before it serves,
// and one that never came back kept it from serving and from stopping.
func readFile(path string) ([]byte, error) {
	return filewatch.ReadFile(path, MaxFileBytes)
}

// readOptional reads dir/name; nil, and no error, when there is no such file.
func readOptional(dir, name string) ([]byte, error) {
	data, err := readFile(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return data, err
}

// specialAttrs are transformers' SPECIAL_TOKENS_ATTRIBUTES, in order.
var specialAttrs = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// readConfig reads dir's tokenizer_config.json (nil when there is none)
// and, for one without added_tokens_decoder, the special_tokens_map.json
// beside it.
func readConfig(dir string) (*config, error) {
	data, err := readOptional(dir, "tokenizer_config.json")
	if data == nil || err != nil {
		return nil, err
	}
	cfg, err := parseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	if cfg.noDecoder {
		if err := cfg.applySpecialTokensMap(dir); err != nil {
			return nil, fmt.Errorf("special_tokens_map.json: %w", err)
		}
		if err := cfg.readLegacyAdded(dir); err != nil {
			return nil, fmt.Errorf("added_tokens.json: %w", err)
		}
	}
	return cfg, nil
}

// readLegacyAdded reads dir's added_tokens.json, {"token": id, ...}, as
// transformers reads it for a config without added_tokens_decoder: each
// token is special when it is one of the config's special tokens, and
// normalized when it is not.
func (c *config) readLegacyAdded(dir string) error {
	data, err := readOptional(dir, "added_tokens.json")
	if data == nil || err != nil {
		return err
	}
	var byContent map[string]int
	if err := json.Unmarshal(data, &byContent); err != nil {
		return err
	}
	special := map[string]bool{}
	for _, tok := range c.specials {
		if tok != nil {
			special[tok.Content] = true
		}
	}
	for _, tok := range c.extra {
		special[tok.Content] = true
	}
	c.legacyAdded = make(map[int]configToken, len(byContent))
	for content, id := range byContent {
		isSpecial, normalized := special[content], !special[content]
		c.legacyAdded[id] = configToken{Content: content, Special: &isSpecial, Normalized: &normalized}
	}
	return nil
}

// mergeLegacyAdded makes added_tokens.json's tokens the config's
// added_tokens_decoder, but for the ids tokenizer.json's added tokens take
// (they win in transformers).
func (c *config) mergeLegacyAdded(fromJSON []addedTokenJSON) {
	for _, a := range fromJSON {
		delete(c.legacyAdded, a.ID)
	}
	if c.AddedTokensDecoder == nil {
		c.AddedTokensDecoder = map[string]configToken{}
	}
	for id, tok := range c.legacyAdded {
		c.AddedTokensDecoder[strconv.Itoa(id)] = tok
	}
}

// applySpecialTokensMap applies dir's special_tokens_map.json, when there
// is one, as transformers' legacy loading does: its special tokens replace
// the config's (null removes one), and an extra_special_tokens list joins
// the config's (its additional_special_tokens is ignored).
func (c *config) applySpecialTokensMap(dir string) error {
	data, err := readOptional(dir, "special_tokens_map.json")
	if data == nil || err != nil {
		return err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	if err := c.setSpecials(m); err != nil {
		return err
	}
	// transformers 5 reads the map after renaming additional_special_tokens
	// to extra_special_tokens, so only a list under the new name joins.
	if v := m["extra_special_tokens"]; len(v) > 0 && v[0] == '[' {
		var more []configToken
		if err := json.Unmarshal(v, &more); err != nil {
			return fmt.Errorf("extra_special_tokens: %w", err)
		}
		for _, tok := range more {
			if !slices.ContainsFunc(c.extra, func(a configToken) bool { return a.Content == tok.Content }) {
				c.extra = append(c.extra, tok)
			}
		}
	}
	return nil
}

// setSpecials sets the special tokens an object (tokenizer_config.json,
// special_tokens_map.json) names: a token, or nil for null; an attribute
// it leaves out keeps what it had.
func (c *config) setSpecials(obj map[string]json.RawMessage) error {
	for _, k := range specialAttrs {
		v, ok := obj[k]
		switch {
		case !ok:
		case isNull(v):
			c.specials[k] = nil
		default:
			var tok configToken
			if err := json.Unmarshal(v, &tok); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			c.specials[k] = &tok
		}
	}
	return nil
}

func parseConfig(data []byte) (*config, error) {
	var cfg config
	if err := exactUnmarshal(data, &cfg); err != nil {
		return nil, err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	_, hasDecoder := raw["added_tokens_decoder"]
	cfg.noDecoder = !hasDecoder
	cfg.specials = map[string]*configToken{}
	if err := cfg.setSpecials(raw); err != nil {
		return nil, err
	}
	if err := cfg.readExtraTokens(data); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// readExtraTokens reads the special tokens beyond specialAttrs as
// transformers 5 does: additional_special_tokens becomes
// extra_special_tokens unless that is set; a list of them is unnamed
// tokens, an object names them; and any other member named *_token whose
// value is a string (or a serialized AddedToken) names one too.
func (c *config) readExtraTokens(data []byte) error {
	names, values, err := members(data)
	if err != nil {
		return err
	}
	var extra, additional json.RawMessage
	var explicit []SpecialToken
	for i, name := range names {
		v := values[i]
		switch {
		case name == "extra_special_tokens":
			extra = v
		case name == "additional_special_tokens":
			additional = v
		case strings.HasSuffix(name, "_token") && !slices.Contains(specialAttrs, name) && isTokenValue(v):
			var tok configToken
			if err := json.Unmarshal(v, &tok); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			c.modelSpecific = setSpecial(c.modelSpecific, name, tok.Content)
		}
	}
	if isNull(extra) {
		extra = additional
	}
	switch {
	case isNull(extra):
	case extra[0] == '[':
		if err := json.Unmarshal(extra, &c.extra); err != nil {
			return fmt.Errorf("extra_special_tokens: %w", err)
		}
	default:
		names, values, err := members(extra)
		if err != nil {
			return fmt.Errorf("extra_special_tokens: %w", err)
		}
		for i, name := range names {
			var tok configToken
			if err := json.Unmarshal(values[i], &tok); err != nil {
				return fmt.Errorf("extra_special_tokens.%s: %w", name, err)
			}
			explicit = setSpecial(explicit, name, tok.Content)
		}
	}
	for _, st := range explicit {
		c.modelSpecific = setSpecial(c.modelSpecific, st.Attr, st.Content)
	}
	return nil
}

// setSpecial sets attr in list, in place if it is there, else at the end,
// as a Python dict does.
func setSpecial(list []SpecialToken, attr, content string) []SpecialToken {
	if i := slices.IndexFunc(list, func(st SpecialToken) bool { return st.Attr == attr }); i >= 0 {
		list[i].Content = content
		return list
	}
	return append(list, SpecialToken{Attr: attr, Content: content})
}

// isTokenValue reports whether a config value is a token as transformers
// reads one: a string, or an object serialized from an AddedToken.
func isTokenValue(v json.RawMessage) bool {
	switch {
	case len(v) > 0 && v[0] == '"':
		return true
	case len(v) > 0 && v[0] == '{':
		// transformers looks "__type" up in the dict, case and all.
		var obj map[string]json.RawMessage
		var typ string
		return json.Unmarshal(v, &obj) == nil && json.Unmarshal(obj["__type"], &typ) == nil && typ == "AddedToken"
	}
	return false
}

// members returns an object's member names and values in order; a
// repeated name keeps its first place and its last value, as json.loads
// builds a dict.
func members(data []byte) ([]string, []json.RawMessage, error) {
	var names []string
	var values []json.RawMessage
	r := rawjson.NewReader(data)
	defer r.Release()
	err := r.Members(func(r *rawjson.Reader, name []byte) error {
		v, err := r.Value()
		if err != nil {
			return err
		}
		if i := slices.Index(names, string(name)); i >= 0 {
			values[i] = json.RawMessage(v)
			return nil
		}
		names = append(names, string(name))
		values = append(values, json.RawMessage(v))
		return nil
	})
	return names, values, err
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
	for _, st := range c.modelSpecific {
		specialList = append(specialList, configToken{Content: st.Content})
	}
	specialList = append(specialList, c.extra...)
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

// ChatConfig is what chat templates read of a model's
// tokenizer_config.json, and of the chat template files beside it.
type ChatConfig struct {
	// Template is chat_template as written: a string, a list of
	// {"name", "template"} objects, or nil when absent. Template files
	// (chat_template.jinja, additional_chat_templates/NAME.jinja) take its
	// place, as in transformers.
	Template json.RawMessage
	// SpecialTokens are the special tokens as transformers 5's
	// special_tokens_map has them: each attribute (bos_token …) whose
	// token is set, then the model-specific named ones (Gemma 3's
	// image_token). Unnamed extra special tokens are not among them.
	SpecialTokens []SpecialToken
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
		if tok := c.specials[k]; tok != nil {
			cc.SpecialTokens = append(cc.SpecialTokens, SpecialToken{Attr: k, Content: tok.Content})
		}
	}
	cc.SpecialTokens = append(cc.SpecialTokens, c.modelSpecific...)
	return cc
}
