package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// normalizer is one tokenizer.json normalizer. normalize returns s itself
// when nothing changes, so the common case allocates nothing.
type normalizer interface {
	normalize(s string) string
	// normalizeHead is normalize for text at the start of the input, whose
	// first head bytes tokenizers aligns with the input's offset 0. It
	// also returns how many bytes of the result are so aligned (the
	// characters that replace them, and any inserted before the first
	// character past them), which Metaspace's prepend_scheme "first" asks.
	normalizeHead(s string, head int) (string, int)
}

// newNormalizer builds the normalizer at path (for error messages) from raw;
// it returns nil for null and for an empty Sequence.
func newNormalizer(path string, raw json.RawMessage) (normalizer, error) {
	typ, err := componentType(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	switch typ {
	case "":
		return nil, nil
	case "NFC", "NFD", "NFKC", "NFKD":
		var c struct {
			Type string `json:"type"`
		}
		if err := strictUnmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return unicodeNorm{form: map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}[typ]}, nil
	case "Sequence":
		var c struct {
			Type        string            `json:"type"`
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := strictUnmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		seq, err := readSequence(path+".normalizers", c.Normalizers, newNormalizer)
		if err != nil {
			return nil, err
		}
		switch len(seq) {
		case 0:
			return nil, nil
		case 1:
			return seq[0], nil
		}
		return normSequence(seq), nil
	case "Prepend":
		var c struct {
			Type    string `json:"type"`
			Prepend string `json:"prepend"`
		}
		if err := strictUnmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return prependNorm(c.Prepend), nil
	case "Replace":
		r, err := newReplace(path, raw)
		if err != nil {
			return nil, err
		}
		return r, nil
	case "Strip":
		var c struct {
			Type  string `json:"type"`
			Left  bool   `json:"strip_left"`
			Right bool   `json:"strip_right"`
		}
		if err := strictUnmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return stripNorm{left: c.Left, right: c.Right}, nil
	}
	return nil, fmt.Errorf("%s: normalizer type %q: %w", path, typ, ErrUnsupported)
}

type unicodeNorm struct{ form norm.Form }

func (n unicodeNorm) normalize(s string) string { return normalize(n.form, s) }

func (n unicodeNorm) normalizeHead(s string, head int) (string, int) {
	return normalize(n.form, s), unicodeHead(n.form, s, head)
}

type normSequence []normalizer

func (seq normSequence) normalize(s string) string {
	for _, n := range seq {
		s = n.normalize(s)
	}
	return s
}

func (seq normSequence) normalizeHead(s string, head int) (string, int) {
	for _, n := range seq {
		s, head = n.normalizeHead(s, head)
	}
	return s, head
}

// prependNorm adds its text in front of every non-empty string.
type prependNorm string

func (p prependNorm) normalize(s string) string {
	if s == "" {
		return s
	}
	return string(p) + s
}

// normalizeHead: the text takes the place of the first character, which is
// inserted after it, so both are aligned with it.
func (p prependNorm) normalizeHead(s string, head int) (string, int) {
	if head > 0 && s != "" {
		head += len(p)
	}
	return p.normalize(s), head
}

type replaceNorm struct {
	m       matcher
	content string
}

// newReplace reads a Replace component, the same JSON as a normalizer and
// as a decoder: a pattern and the text that replaces each match.
func newReplace(path string, raw json.RawMessage) (replaceNorm, error) {
	var c struct {
		Type    string      `json:"type"`
		Pattern patternJSON `json:"pattern"`
		Content string      `json:"content"`
	}
	if err := strictUnmarshal(raw, &c); err != nil {
		return replaceNorm{}, fmt.Errorf("%s: %w", path, err)
	}
	m, err := newMatcher(c.Pattern)
	if err != nil {
		return replaceNorm{}, fmt.Errorf("%s.pattern: %w", path, err)
	}
	return replaceNorm{m: m, content: c.Content}, nil
}

func (r replaceNorm) normalize(s string) string {
	if lit, ok := r.m.(literalMatcher); ok {
		return strings.ReplaceAll(s, string(lit), r.content)
	}
	matches := r.m.find(nil, s, nil)
	if len(matches) == 0 {
		return s
	}
	var b strings.Builder
	last := 0
	for _, m := range matches {
		b.WriteString(s[last:m[0]])
		b.WriteString(r.content)
		last = m[1]
	}
	b.WriteString(s[last:])
	return b.String()
}

// normalizeHead: a match's replacement is aligned with the match's last
// character (with the one before an empty match, with the start before
// any), so it stays in the head if the match ends inside it; a match that
// ends past the head cuts it where the match starts.
func (r replaceNorm) normalizeHead(s string, head int) (string, int) {
	shift := 0
	for _, m := range r.m.find(nil, s, nil) {
		if m[1] > head {
			return r.normalize(s), min(m[0], head) + shift
		}
		shift += len(r.content) - (m[1] - m[0])
	}
	return r.normalize(s), head + shift
}

type stripNorm struct{ left, right bool }

func (n stripNorm) normalize(s string) string {
	if n.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

// normalizeHead: what is left of the head once leading spaces are gone.
func (n stripNorm) normalizeHead(s string, head int) (string, int) {
	out := n.normalize(s)
	left := 0
	if n.left {
		left = len(s) - len(strings.TrimLeftFunc(s, unicode.IsSpace))
	}
	return out, max(0, min(head-left, len(out)))
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

var errEmptyPattern = errors.New("empty pattern")
