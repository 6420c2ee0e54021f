package hf

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// decoder is one tokenizer.json decoder: tokenizers' decode_chain, which maps
// a list of token strings to another.
type decoder interface {
	decodeChain(toks []string) []string
}

func newDecoder(path string, raw json.RawMessage) (decoder, error) {
	typ, err := componentType(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	bad := func(err error) (decoder, error) { return nil, fmt.Errorf("%s: %w", path, err) }
	switch typ {
	case "":
		return nil, nil
	case "Sequence":
		var c struct {
			Type     string            `json:"type"`
			Decoders []json.RawMessage `json:"decoders"`
		}
		if err := strictUnmarshal(raw, &c); err != nil {
			return bad(err)
		}
		seq, err := readSequence(path+".decoders", c.Decoders, newDecoder)
		if err != nil {
			return nil, err
		}
		return decSequence(seq), nil
	case "ByteLevel":
		var c byteLevelJSON
		if err := strictUnmarshal(raw, &c); err != nil {
			return bad(err)
		}
		return decByteLevel{}, nil
	case "Metaspace":
		m, err := newMetaspace(raw)
		if err != nil {
			return bad(err)
		}
		return decMetaspace{repl: []rune(m.repl)[0], skipFirst: m.prepend != "never"}, nil
	case "Replace":
		r, err := newReplace(path, raw)
		if err != nil {
			return nil, err
		}
		return decReplace{r: r}, nil
	case "ByteFallback", "Fuse":
		var c struct {
			Type string `json:"type"`
		}
		if err := strictUnmarshal(raw, &c); err != nil {
			return bad(err)
		}
		if typ == "Fuse" {
			return decFuse{}, nil
		}
		return decByteFallback{}, nil
	case "Strip":
		var c struct {
			Type    string `json:"type"`
			Content string `json:"content"`
			Start   int    `json:"start"`
			Stop    int    `json:"stop"`
		}
		if err := strictUnmarshal(raw, &c); err != nil {
			return bad(err)
		}
		if utf8.RuneCountInString(c.Content) != 1 || c.Start < 0 || c.Stop < 0 {
			return bad(fmt.Errorf("content %q, start %d, stop %d: invalid", c.Content, c.Start, c.Stop))
		}
		return decStrip{content: []rune(c.Content)[0], start: c.Start, stop: c.Stop}, nil
	}
	return nil, fmt.Errorf("%s: decoder type %q: %w", path, typ, ErrUnsupported)
}

type decSequence []decoder

func (seq decSequence) decodeChain(toks []string) []string {
	for _, d := range seq {
		toks = d.decodeChain(toks)
	}
	return toks
}

// decByteLevel maps GPT-2 characters back to bytes over all tokens at once,
// then reads the bytes as UTF-8 with replacement, as String::from_utf8_lossy.
type decByteLevel struct{}

func (decByteLevel) decodeChain(toks []string) []string {
	var buf []byte
	for _, t := range toks {
		n := len(buf)
		ok := true
		for _, r := range t {
			b, found := byteLevelBytes[r]
			if !found {
				ok = false
				break
			}
			buf = append(buf, b)
		}
		if !ok {
			buf = append(buf[:n], t...)
		}
	}
	return []string{lossyUTF8(buf)}
}

type decMetaspace struct {
	repl      rune
	skipFirst bool
}

func (d decMetaspace) decodeChain(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		var b strings.Builder
		for _, r := range t {
			switch {
			case r != d.repl:
				b.WriteRune(r)
			case i == 0 && d.skipFirst:
			default:
				b.WriteByte(' ')
			}
		}
		out[i] = b.String()
	}
	return out
}

type decReplace struct{ r replaceNorm }

func (d decReplace) decodeChain(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		out[i] = d.r.normalize(t)
	}
	return out
}

// decByteFallback turns runs of <0xXX> tokens back into text; a run that is
// not valid UTF-8 becomes one U+FFFD per byte.
type decByteFallback struct{}

func (decByteFallback) decodeChain(toks []string) []string {
	out := make([]string, 0, len(toks))
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			for range run {
				out = append(out, "\uFFFD")
			}
		}
		run = run[:0]
	}
	for _, t := range toks {
		if b, ok := parseByteToken(t); ok {
			run = append(run, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// parseByteToken reads a "<0xXX>" token.
func parseByteToken(t string) (byte, bool) {
	if len(t) != 6 || t[:3] != "<0x" || t[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexVal(t[3])
	lo, ok2 := hexVal(t[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

type decFuse struct{}

func (decFuse) decodeChain(toks []string) []string {
	return []string{strings.Join(toks, "")}
}

// decStrip removes up to start leading and stop trailing content characters
// from each token.
type decStrip struct {
	content     rune
	start, stop int
}

func (d decStrip) decodeChain(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		rs := []rune(t)
		lo := 0
		for lo < d.start && lo < len(rs) && rs[lo] == d.content {
			lo++
		}
		hi := len(rs)
		for k := 0; k < d.stop && hi > lo && rs[hi-1] == d.content; k++ {
			hi--
		}
		out[i] = string(rs[lo:hi])
	}
	return out
}

// lossyUTF8 is Rust's String::from_utf8_lossy: each maximal prefix of a
// valid sequence that is cut short, and each other invalid byte, becomes one
// U+FFFD.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			sb.Write(b[i : i+n])
			i += n
			continue
		}
		sb.WriteString("\uFFFD")
		i += maximalSubpart(b[i:])
	}
	return sb.String()
}

// maximalSubpart is the length of the longest prefix of b (at least 1) that
// starts a well-formed UTF-8 sequence, for b not starting with one.
func maximalSubpart(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if k > 0 {
			lo, hi = 0x80, 0xBF
		}
		if x < lo || x > hi {
			break
		}
		n++
	}
	return n
}
