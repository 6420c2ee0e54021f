package tokenize

import (
	"strings"

	"github.com/inferrail/inferrail/internal/tokenize/piececache"
)

// Sim is the builtin:sim tokenizer: a deterministic stand-in for a real
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
// The zero value is not usable; use NewSim. A *Sim is safe for concurrent use.
type Sim struct {
	pieces *piececache.Cache // nil: no piece cache (see WithCache)
}

// Special token texts of the builtin:sim vocabulary, in id order.
const (
	SimEOS         = "<|endoftext|>"
	SimBOS         = "<|bos|>"
	SimIMStart     = "<|im_start|>"
	SimIMEnd       = "<|im_end|>"
	SimToolCall    = "<tool_call>"
	SimToolCallEnd = "</tool_call>"
	SimThink       = "<think>"
	SimThinkEnd    = "</think>"
)

var simSpecials = [...]string{SimEOS, SimBOS, SimIMStart, SimIMEnd, SimToolCall, SimToolCallEnd, SimThink, SimThinkEnd}

// Ids of the special tokens.
const (
	SimEOSID = 0
	SimBOSID = 1
)

const (
	simFirstPiece = len(simSpecials)
	simBase1      = simFirstPiece    // one-byte pieces
	simBase2      = simBase1 + 1<<8  // two-byte pieces
	simBase3      = simBase2 + 1<<16 // three-byte pieces
	simVocabSize  = simBase3 + 1<<24 // one past the largest id
	simMaxPiece   = 3                // bytes
)

// NewSim returns the builtin:sim tokenizer.
func NewSim() *Sim { return &Sim{} }

// VocabSize is one past the largest token id.
func (*Sim) VocabSize() int { return simVocabSize }

// EOS is the end-of-sequence token id.
func (*Sim) EOS() int { return SimEOSID }

// BOS is the beginning-of-sequence token id, added to completion prompts
// when add_special_tokens is true.
func (*Sim) BOS() int { return SimBOSID }

// IsSpecial reports whether id is a special token.
func (*Sim) IsSpecial(id int) bool { return id >= 0 && id < simFirstPiece }

// Encode appends the ids of text to dst and returns the extended slice.
// Special token texts inside text are encoded as their special ids, as
// vLLM does for text that contains them.
func (t *Sim) Encode(dst []int, text string) []int {
	for len(text) > 0 {
		i, sp := nextSpecial(text)
		dst = t.encodeText(dst, text[:i])
		if sp < 0 {
			break
		}
		dst = append(dst, sp)
		text = text[i+len(simSpecials[sp]):]
	}
	return dst
}

// Count returns len(Encode(nil, text)) without building the slice.
func (t *Sim) Count(text string) int {
	n := 0
	for len(text) > 0 {
		i, sp := nextSpecial(text)
		n += countPieces(text[:i])
		if sp < 0 {
			break
		}
		n++
		text = text[i+len(simSpecials[sp]):]
	}
	return n
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
		for id, sp := range simSpecials {
			if strings.HasPrefix(text[at:], sp) && (best < 0 || len(sp) > len(simSpecials[best])) {
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
		if i+1-start == simMaxPiece || endsPiece(text[i]) {
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
		if i+1-start == simMaxPiece || endsPiece(text[i]) {
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
		return simBase1 + int(p[0])
	case 2:
		return simBase2 + (int(p[0])<<8 | int(p[1]))
	default:
		return simBase3 + (int(p[0])<<16 | int(p[1])<<8 | int(p[2]))
	}
}

// appendPiece appends the text of a valid non-special id to dst.
func appendPiece(dst []byte, id int) []byte {
	switch {
	case id >= simBase3:
		v := id - simBase3
		return append(dst, byte(v>>16), byte(v>>8), byte(v))
	case id >= simBase2:
		v := id - simBase2
		return append(dst, byte(v>>8), byte(v))
	default:
		return append(dst, byte(id-simBase1))
	}
}

// Valid reports whether id belongs to the vocabulary.
func (*Sim) Valid(id int) bool { return id >= 0 && id < simVocabSize }

// Decode returns the text of ids. Special tokens are left out when
// skipSpecial is true, as vLLM's default skip_special_tokens does.
// Ids outside the vocabulary are skipped; callers validate them first.
func (t *Sim) Decode(ids []int, skipSpecial bool) string {
	return string(t.AppendDecoded(nil, ids, skipSpecial))
}

// AppendDecoded appends the text of ids to dst.
func (t *Sim) AppendDecoded(dst []byte, ids []int, skipSpecial bool) []byte {
	for _, id := range ids {
		switch {
		case id < 0 || id >= simVocabSize:
		case id < simFirstPiece:
			if !skipSpecial {
				dst = append(dst, simSpecials[id]...)
			}
		default:
			dst = appendPiece(dst, id)
		}
	}
	return dst
}
