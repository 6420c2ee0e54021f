package openai

import (
	"strconv"
	"unicode/utf8"
)

// AppendString appends s as a JSON string the way Python's json.dumps with
// ensure_ascii=False and pydantic's serializer write it: raw UTF-8, with only
// quotes, backslashes and control characters escaped. Invalid UTF-8 becomes
// U+FFFD.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = AppendEscaped(dst, s)
	return append(dst, '"')
}

// AppendEscaped appends s escaped as AppendString escapes it, without the
// quotes: for a string written in parts.
func AppendEscaped(dst []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = appendEscape(dst, c)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\ufffd"...)
			i++
			start = i
			continue
		}
		i += size
	}
	return append(dst, s[start:]...)
}

// AppendASCIIString appends s as Python's json.dumps with its default
// ensure_ascii=True writes it: every non-ASCII character as \uXXXX escapes,
// astral ones as surrogate pairs.
func AppendASCIIString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for _, r := range s {
		switch {
		case r < 0x7f && r >= 0x20 && r != '"' && r != '\\':
			dst = append(dst, byte(r))
		case r < 0x80:
			dst = appendEscape(dst, byte(r))
		case r < 0x10000:
			dst = appendU(dst, r)
		default:
			r -= 0x10000
			dst = appendU(dst, 0xd800+(r>>10))
			dst = appendU(dst, 0xdc00+(r&0x3ff))
		}
	}
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

func appendU(dst []byte, r rune) []byte {
	return append(dst, '\\', 'u', hexDigits[r>>12&0xf], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
}

// shortEscapes are the ASCII characters JSON escapes with a backslash and a
// letter, by the letter; the other control characters take \u00XX.
var shortEscapes = [utf8.RuneSelf]byte{'"': '"', '\\': '\\', '\n': 'n', '\r': 'r', '\t': 't', '\b': 'b', '\f': 'f'}

// appendEscape appends the escape of ASCII character c.
func appendEscape(dst []byte, c byte) []byte {
	if e := shortEscapes[c]; e != 0 {
		return append(dst, '\\', e)
	}
	return appendU(dst, rune(c))
}

// AppendInt appends a JSON integer.
func AppendInt(dst []byte, v int) []byte { return strconv.AppendInt(dst, int64(v), 10) }
