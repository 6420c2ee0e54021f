package pyjson

import (
	"bytes"
	"encoding/json"
)

// ZeroNonFinite returns a copy of data with each NaN, Infinity and
// -Infinity that stands where json.loads reads it as a number replaced by
// a zero of the same length ("0.0", "0.000000", "-0.000000"), so that
// offsets into the copy are offsets into data; zeroed is nil when there is
// none. outside reports whether one lies where inside is false of the
// top-level member holding it (its key decoded), or in no member (the text
// is no object). inside must not keep the slice it is given.
//
// It checks nothing else: a caller reads the copy with encoding/json,
// which then accepts it exactly when it accepts data but for the literals.
// A literal only stands as a whole value, after '[', ':', ',' or nothing
// and before whitespace, ',', ']', '}' or the end, which is where a number
// may stand, so a zero put anywhere Python refuses the literal (-NaN,
// NaNa, 1NaN, {NaN: 1}) leaves the copy refused too. It reads data once,
// without recursion and without allocating but for the copy: a hostile
// body of millions of literals or of deep nesting costs no more.
func ZeroNonFinite(data []byte, inside func(member []byte) bool) (zeroed []byte, outside bool) {
	var (
		depth    int
		member   []byte // the top-level member's key, as written
		escaped  bool   // member holds an escape, to be decoded
		judged   int8   // 0: inside not yet asked of member; 1 it holds, -1 not
		lastKey  []byte // the last string read at depth 1
		keyEsc   bool
		previous byte // the last byte outside strings and whitespace
	)
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			end, esc := stringEnd(data, i)
			if end < 0 {
				return zeroed, outside // left open: nothing is read past it
			}
			if depth == 1 {
				lastKey, keyEsc = data[i+1:end-1], esc
			}
			i = end - 1
			previous = '"'
			continue
		case ':':
			if depth == 1 && previous == '"' {
				member, escaped, judged = lastKey, keyEsc, 0
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case 'N', 'I', '-':
			if n := literalAt(data, i); n > 0 && (previous == 0 || previous == '[' || previous == ':' || previous == ',') {
				if zeroed == nil {
					zeroed = bytes.Clone(data)
				}
				zeroSpan(zeroed[i : i+n])
				if judged == 0 { // once a member, however many it holds
					judged = -1
					if depth > 0 && inside(memberName(member, escaped)) {
						judged = 1
					}
				}
				outside = outside || depth == 0 || judged < 0
				i += n - 1
				previous = '0'
				continue
			}
		}
		previous = c
	}
	return zeroed, outside
}

// literalAt returns the length of the NaN, Infinity or -Infinity at
// data[i] when it ends there as a token ends, else 0.
func literalAt(data []byte, i int) int {
	for _, lit := range nonFinite {
		n := len(lit.text)
		if len(data)-i >= n && string(data[i:i+n]) == lit.text {
			if i+n == len(data) {
				return n
			}
			switch data[i+n] {
			case ' ', '\t', '\n', '\r', ',', ']', '}':
				return n
			}
			return 0
		}
	}
	return 0
}

// stringEnd returns the index just past the string whose opening quote is
// at data[i] (-1 for one left open), and whether it holds an escape.
func stringEnd(data []byte, i int) (end int, escaped bool) {
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j + 1, escaped
		}
	}
	return -1, escaped
}

// memberName is a key as written, decoded when it holds an escape (an
// undecodable one names no member: nil).
func memberName(key []byte, escaped bool) []byte {
	if !escaped {
		return key
	}
	var s string
	if json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &s) != nil {
		return nil
	}
	return []byte(s)
}

// zeroSpan overwrites a literal with a zero of its length.
func zeroSpan(span []byte) {
	if span[0] == '-' {
		span = span[1:]
	}
	span[0], span[1] = '0', '.'
	for i := 2; i < len(span); i++ {
		span[i] = '0'
	}
}
