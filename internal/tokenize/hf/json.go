package hf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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

// componentType reads the "type" of a component; null gives "".
func componentType(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var t struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &t); err != nil {
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
// component option this package would ignore fails the load instead.
func strictUnmarshal(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
