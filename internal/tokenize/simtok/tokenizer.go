// Package simtok is the builtin:sim tokenizer, the simulators' stand-in
// vocabulary, which the gateway reads through the very code the simulator
// uses: its encoding, its chat template, the prompt ids of a parsed request,
// and the babbler that generates its replies.
package simtok

import (
	"strings"

	"github.com/inferrail/inferrail/internal/tokenize/piececache"
)

// Tokenizer is the builtin:sim tokenizer: a deterministic stand-in for a real
// vocabulary that the simulator and the gateway share, so a gateway configured
// with builtin:sim sees exactly the token ids its simulators compute.
//
// Text is cut into pieces of at most three bytes; a piece also ends right after
// an ASCII space, control or punctuation byte. Whether a piece ends at a byte
// therefore depends only on the text to its left, so two prompts that share a
// prefix share every token of it but possibly the last. Every byte string of
// one to three bytes has its own id, which makes encoding reversible:
// Decode(Encode(s)) == s for any s, and text the simulator generates from
// whole pieces encodes back to the ids it was generated from.
//
// Special tokens are matched as literal text before pieces are cut, so they
// always stand alone and start a fresh piece after them.
//
// The zero value is not usable; use New. A *Tokenizer is safe for
// concurrent use.
type Tokenizer struct {
	pieces *piececache.Cache // nil: no piece cache (see WithCache)
}

// Special token texts of the builtin:sim vocabulary, in id order.
const (
	EOS         = "<|endoftext|>"
	BOS         = "<|bos|>"
	IMStart     = "<|im_start|>"
	IMEnd       = "<|im_end|>"
	ToolCall    = "<tool_call>"
	ToolCallEnd = "</tool_call>"
	Think       = "<think>"
	ThinkEnd    = "</think>"
)

var specials = [...]string{EOS, BOS, IMStart, IMEnd, ToolCall, ToolCallEnd, Think, ThinkEnd}

// Ids of the special tokens.
const (
	EOSID = 0
	BOSID = 1
)

const (
	firstPiece = len(specials)
	base1      = firstPiece    // one-byte pieces
	base2      = base1 + 1<<8  // two-byte pieces
	base3      = base2 + 1<<16 // three-byte pieces
	vocabSize  = base3 + 1<<24 // one past the largest id
	maxPiece   = 3             // bytes
)

// New returns the builtin:sim tokenizer.
func New() *Tokenizer { return &Tokenizer{} }

// VocabSize is one past the largest token id.
func (*Tokenizer) VocabSize() int { return vocabSize }

// EOS is the end-of-sequence token id.
func (*Tokenizer) EOS() int { return EOSID }

// BOS is the beginning-of-sequence token id, added to completion prompts
// when add_special_tokens is true.
func (*Tokenizer) BOS() int { return BOSID }

// IsSpecial reports whether id is a special token.
func (*Tokenizer) IsSpecial(id int) bool { return id >= 0 && id < firstPiece }

// Encode appends the ids of text to dst and returns the extended slice.
// Special token texts inside text are encoded as their special ids, as
// vLLM does for text that contains them.
func (t *Tokenizer) Encode(dst []int, text string) []int {
	for len(text) > 0 {
		i, sp := nextSpecial(text)
		dst = t.encodeText(dst, text[:i])
		if sp < 0 {
			break
		}
		dst = append(dst, sp)
		text = text[i+len(specials[sp]):]
	}
	return dst
}

// Count returns len(Encode(nil, text)) without building the slice.
func (t *Tokenizer) Count(text string) int {
	n := 0
	for len(text) > 0 {
		i, sp := nextSpecial(text)
		n += countPieces(text[:i])
		if sp < 0 {
			break
		}
		n++
		text = text[i+len(specials[sp]):]
	}
	return n
}

// WithCache returns a builtin:sim tokenizer that keeps the ids of the pieces
// it encodes, up to maxTokens tokens in all. Its pieces are the texts
// between two special tokens at least 64 bytes long: a special token always
// ends a piece, and whether a piece ends at a byte depends only on the text
// to its left, so encoding starts afresh after every special token. With
// maxTokens <= 0 the result has no cache.
func (*Tokenizer) WithCache(maxTokens int) *Tokenizer {
	return &Tokenizer{pieces: piececache.New(maxTokens)}
}

// CacheStats returns the piece cache's hits and misses, as the Hugging
// Face tokenizer's CacheStats does.
func (t *Tokenizer) CacheStats() (hits, misses uint64) { return t.pieces.Stats() }

// encodeText encodes text without special tokens, through the piece cache
// when there is one.
func (t *Tokenizer) encodeText(dst []int, text string) []int {
	if t.pieces == nil || len(text) < piececache.MinBytes {
		return encodePieces(dst, text)
	}
	key := t.pieces.Key(text, false)
	dst, ok := t.pieces.AppendCached(dst, key, text, false)
	if ok {
		return dst
	}
	n := len(dst)
	dst = encodePieces(dst, text)
	t.pieces.Put(key, text, false, dst[n:])
	return dst
}

// nextSpecial finds the leftmost special token in text. It returns its byte
// offset and id, or len(text) and -1 when there is none. At one offset the
// longest special wins.
func nextSpecial(text string) (int, int) {
	off := 0
	for {
		j := strings.IndexByte(text[off:], '<')
		if j < 0 {
			return len(text), -1
		}
		at := off + j
		best := -1
		for id, sp := range specials {
			if strings.HasPrefix(text[at:], sp) && (best < 0 || len(sp) > len(specials[best])) {
				best = id
			}
		}
		if best >= 0 {
			return at, best
		}
		off = at + 1
	}
}

// endsPiece reports whether a piece ends right after byte b.
func endsPiece(b byte) bool {
	switch {
	case b <= ' ': // space and control characters, newline included
		return true
	case b >= 0x80:
		return false
	case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		return false
	case b == 0x7f:
		return true
	default: // ASCII punctuation
		return true
	}
}

func encodePieces(dst []int, text string) []int {
	start := 0
	for i := 0; i < len(text); i++ {
		if i+1-start == maxPiece || endsPiece(text[i]) {
			dst = append(dst, pieceID(text[start:i+1]))
			start = i + 1
		}
	}
	if start < len(text) {
		dst = append(dst, pieceID(text[start:]))
	}
	return dst
}

func countPieces(text string) int {
	n, start := 0, 0
	for i := 0; i < len(text); i++ {
		if i+1-start == maxPiece || endsPiece(text[i]) {
			n++
			start = i + 1
		}
	}
	if start < len(text) {
		n++
	}
	return n
}

// pieceID maps a piece of one to three bytes to its id.
func pieceID(p string) int {
	switch len(p) {
	case 1:
		return base1 + int(p[0])
	case 2:
		return base2 + (int(p[0])<<8 | int(p[1]))
	default:
		return base3 + (int(p[0])<<16 | int(p[1])<<8 | int(p[2]))
	}
}

// appendPiece appends the text of a valid non-special id to dst.
func appendPiece(dst []byte, id int) []byte {
	switch {
	case id >= base3:
		v := id - base3
		return append(dst, byte(v>>16), byte(v>>8), byte(v))
	case id >= base2:
		v := id - base2
		return append(dst, byte(v>>8), byte(v))
	default:
		return append(dst, byte(id-base1))
	}
}

// Valid reports whether id belongs to the vocabulary.
func (*Tokenizer) Valid(id int) bool { return id >= 0 && id < vocabSize }

// Decode returns the text of ids. Special tokens are left out when
// skipSpecial is true, as vLLM's default skip_special_tokens does.
// Ids outside the vocabulary are skipped; callers validate them first.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	return string(t.AppendDecoded(nil, ids, skipSpecial))
}

// AppendDecoded appends the text of ids to dst.
func (t *Tokenizer) AppendDecoded(dst []byte, ids []int, skipSpecial bool) []byte {
	for _, id := range ids {
		switch {
		case id < 0 || id >= vocabSize:
		case id < firstPiece:
			if !skipSpecial {
				dst = append(dst, specials[id]...)
			}
		default:
			dst = appendPiece(dst, id)
		}
	}
	return dst
}
