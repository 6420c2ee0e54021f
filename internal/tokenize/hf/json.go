package hf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// ErrUnsupported is wrapped by Load errors for tokenizer.json components (or
// options of them) that this package does not implement. Such a tokenizer is
// refused rather than approximated: one wrong token shifts every later block hash.
var ErrUnsupported = errors.New("unsupported")

// tokenizerJSON is the top level of tokenizer.json. Components stay raw until
// their "type" is known. Truncation and padding are ignored: transformers
// resets them on every call and vLLM truncates only when a request asks for
// it.
type tokenizerJSON struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         json.RawMessage  `json:"model"`
}

type addedTokenJSON struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// patternJSON is the {"String": ...} or {"Regex": ...} of Split and Replace.
type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// readSequence reads the components of a Sequence, path[i] each, with
// read, and keeps those it does not return nil for (null, an empty
// Sequence).
func readSequence[T comparable](path string, raws []json.RawMessage, read func(string, json.RawMessage) (T, error)) ([]T, error) {
	var seq []T
	var null T
	for i, raw := range raws {
		c, err := read(fmt.Sprintf("%s[%d]", path, i), raw)
		if err != nil {
			return nil, err
		}
		if c != null {
			seq = append(seq, c)
		}
	}
	return seq, nil
}

// byteLevelJSON is a ByteLevel pre-tokenizer, post-processor or decoder:
// one object with the same fields in all three places.
type byteLevelJSON struct {
	Type           string `json:"type"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	TrimOffsets    bool   `json:"trim_offsets"`
	UseRegex       bool   `json:"use_regex"`
}

// modelJSON is the "model" object; only BPE is implemented.
type modelJSON struct {
	Type                    string         `json:"type"`
	Dropout                 *float64       `json:"dropout"`
	UnkToken                *string        `json:"unk_token"`
	ContinuingSubwordPrefix *string        `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string        `json:"end_of_word_suffix"`
	FuseUnk                 bool           `json:"fuse_unk"`
	ByteFallback            bool           `json:"byte_fallback"`
	IgnoreMerges            bool           `json:"ignore_merges"`
	Vocab                   map[string]int `json:"vocab"`
	Merges                  mergesJSON     `json:"merges"`
}

// mergesJSON holds merges written either as "a b" strings or as ["a", "b"]
// pairs.
type mergesJSON [][2]string

func (m *mergesJSON) UnmarshalJSON(data []byte) error {
	rest := bytes.TrimLeft(data, " \t\r\n")
	if len(rest) > 0 && rest[0] == '[' {
		rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	}
	if len(rest) > 0 && rest[0] == '[' {
		var pairs [][2]string
		if err := json.Unmarshal(data, &pairs); err != nil {
			return err
		}
		*m = pairs
		return nil
	}
	var lines []string
	if err := json.Unmarshal(data, &lines); err != nil {
		return err
	}
	out := make([][2]string, 0, len(lines))
	for i, line := range lines {
		// As tokenizers' convert_merges_to_hashmap: "#version" lines are
		// skipped, every other line is exactly two space-separated parts.
		if strings.HasPrefix(line, "#version") {
			continue
		}
		a, b, ok := cutSpace(line)
		if !ok {
			return fmt.Errorf("merges[%d]: %q is not two space-separated tokens", i, line)
		}
		out = append(out, [2]string{a, b})
	}
	*m = out
	return nil
}

func cutSpace(s string) (a, b string, ok bool) {
	a, b, ok = strings.Cut(s, " ")
	if !ok || strings.IndexByte(b, ' ') >= 0 {
		return "", "", false
	}
	return a, b, true
}

// readTokenizerJSON reads tokenizer.json's top level as tokenizers does:
// a key is one of its names exactly or is ignored ("Model" is no model),
// and of a key given twice the last counts.
func readTokenizerJSON(data []byte) (tokenizerJSON, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err != nil {
		return tokenizerJSON{}, err
	}
	f := tokenizerJSON{Normalizer: keys["normalizer"], PreTokenizer: keys["pre_tokenizer"], PostProcessor: keys["post_processor"],
		Decoder: keys["decoder"], Model: keys["model"]}
	if raw, ok := keys["added_tokens"]; ok {
		if err := caseSensitiveUnmarshal(raw, &f.AddedTokens); err != nil {
			return tokenizerJSON{}, fmt.Errorf("added_tokens: %w", err)
		}
	}
	return f, nil
}

// componentType reads the "type" of a component; null gives "".
func componentType(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var t struct {
		Type string `json:"type"`
	}
	if err := caseSensitiveUnmarshal(raw, &t); err != nil {
		return "", err
	}
	if t.Type == "" {
		return "", errors.New("missing \"type\"")
	}
	return t.Type, nil
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// strictUnmarshal decodes raw into v, rejecting fields v does not know, so a
// component option this package would ignore fails the load instead. Keys
// match v's fields case and all (caseSensitive).
func strictUnmarshal(raw json.RawMessage, v any) error {
	if err := caseSensitive(raw, reflect.TypeOf(v)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// caseSensitiveUnmarshal is json.Unmarshal with keys matched case and all
// (caseSensitive); a key no field has in any case is ignored.
func caseSensitiveUnmarshal(raw json.RawMessage, v any) error {
	if err := caseSensitive(raw, reflect.TypeOf(v)); err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

// exactUnmarshal decodes the JSON object data into the struct v points
// to as Python reads a dict: a member sets the field its key names exactly,
// and a key naming a field only in another case ("Chat_Template",
// "Model_Type") is ignored, as transformers ignores it where encoding/json
// would take it for the field. Of a key given twice the last counts, as in
// json.loads. Field values are read with caseSensitiveUnmarshal.
func exactUnmarshal(data []byte, v any) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return err
	}
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		f := rv.Type().Field(i)
		name := jsonName(f)
		raw, ok := obj[name]
		if !ok || !f.IsExported() || name == "-" {
			continue
		}
		if err := caseSensitiveUnmarshal(raw, rv.Field(i).Addr().Interface()); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// caseSensitive returns an error for a key of raw, at any depth that a
// value of type t reads, that names one of the struct's fields in another
// case only. encoding/json takes such a key for the field (bytes.EqualFold:
// "Model" for "model", "ſ" for "s"), where tokenizers (serde) matches keys
// exactly and ignores the rest: refusing it is the one reading that never
// tokenizes otherwise. A value of a type with its own UnmarshalJSON, or
// raw JSON, is left to its own reading; what is not JSON is left to the
// decoder to refuse.
func caseSensitive(raw json.RawMessage, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if !holdsStruct(t, 0) || reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return nil
		}
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			f, ok := fieldNamed(t, key)
			switch {
			case ok:
				if err := caseSensitive(obj[key], f.Type); err != nil {
					return fmt.Errorf("%s: %w", key, err)
				}
			case f.Name != "":
				return fmt.Errorf("unknown field %q: keys are case-sensitive, and the field is %q", key, jsonName(f))
			}
		}
	case reflect.Slice, reflect.Array:
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return nil
		}
		for i, item := range items {
			if err := caseSensitive(item, t.Elem()); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
	case reflect.Map:
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return nil
		}
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			if err := caseSensitive(obj[key], t.Elem()); err != nil {
				return fmt.Errorf("[%q]: %w", key, err)
			}
		}
	}
	return nil
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// holdsStruct reports whether a value of type t decodes a struct
// somewhere within (its keys are then matched by name), looking depth
// levels deep at most: the types read here nest a few levels.
func holdsStruct(t reflect.Type, depth int) bool {
	if depth > 8 || reflect.PointerTo(t).Implements(unmarshalerType) {
		return false
	}
	switch t.Kind() {
	case reflect.Struct:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		return holdsStruct(t.Elem(), depth+1)
	}
	return false
}

// fieldNamed returns the field of struct t that key names exactly, and ok;
// or, when key names one only in another case, that field and not ok; or
// the zero field and not ok. The types read here embed no structs.
func fieldNamed(t reflect.Type, key string) (reflect.StructField, bool) {
	var folded reflect.StructField
	for i := range t.NumField() {
		f := t.Field(i)
		name := jsonName(f)
		switch {
		case !f.IsExported() || name == "-":
		case name == key:
			return f, true
		case strings.EqualFold(name, key):
			folded = f
		}
	}
	return folded, false
}

// jsonName is the key encoding/json reads a field from: its tag's name,
// else the field's own.
func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "" {
		return f.Name
	}
	return name
}
