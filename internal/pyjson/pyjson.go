// Package pyjson reads JSON as Python's json.loads does, which is how vLLM
// (Starlette's request.json()) reads a request body: NaN, Infinity and
// -Infinity are numbers, and a malformed text fails where and with the
// message Python gives. The simulator answers as vLLM from it; the
// gateway reads with it the bodies encoding/json refuses for those
// literals alone.
package pyjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// SyntaxError is Python's json.JSONDecodeError: its message and the
// position where the parse failed, counted in characters of the text
// (after a byte order mark), as FastAPI reports it.
type SyntaxError struct {
	Msg string // Python's message ("Expecting value")
	Pos int    // in characters of the text
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("%s: char %d", e.Msg, e.Pos) }

// ErrUnparsable is what Python's parse raises other than a
// JSONDecodeError: a RecursionError for a text nested too deeply, a
// ValueError for an integer of more than 4,300 digits. FastAPI answers
// it with a plain 400 ("There was an error parsing the body").
var ErrUnparsable = errors.New("json.loads raised an error other than a JSONDecodeError")

// ErrEmpty is an empty text, which FastAPI does not parse: the request
// model is then missing.
var ErrEmpty = errors.New("empty body")

// maxDepth bounds Decode's nesting so hostile bodies cannot exhaust the
// stack. Python's limit depends on its stack (about 990 levels under
// vLLM); this one is lower.
const maxDepth = 256

// maxIntDigits is CPython's default limit on the digits of an integer
// read from text (sys.int_info.default_max_str_digits).
const maxIntDigits = 4300

// nonFinite are Python's literals json.loads reads as floats, each with
// its value made once: a text of millions costs no allocation each.
var nonFinite = [...]struct {
	text string
	val  any
}{{"NaN", json.Number("NaN")}, {"Infinity", json.Number("Infinity")}, {"-Infinity", json.Number("-Infinity")}}

// NonFinite is where a NaN, Infinity or -Infinity literal lies in a text,
// as the byte span [Start, End), and the top-level member it lies in (""
// for none: the text is no object, or the literal is its top level).
type NonFinite struct {
	Start, End int
	Member     string
}

// ObjectFunc builds the value of an object from its keys and values in
// order, a repeated key in each of its places.
type ObjectFunc func(keys []string, vals []any) any

// decoder reads one JSON document as json.loads does.
type decoder struct {
	data      []byte
	i         int
	object    ObjectFunc // nil: values are checked, not built
	member    string     // the top-level member being read
	nonFinite []NonFinite
}

// Decode parses one JSON value as json.loads does, into nil, bool,
// json.Number, string, []any and what object builds of an object; NaN and
// the infinities are the json.Numbers "NaN", "Infinity" and "-Infinity".
// It also returns where the text holds such literals, in order. With a nil
// object it checks the text and finds the literals, building no value
// (the value returned is then meaningless). Its errors are a *SyntaxError,
// ErrUnparsable and ErrEmpty.
func Decode(data []byte, object ObjectFunc) (any, []NonFinite, error) {
	if len(data) == 0 {
		return nil, nil, ErrEmpty
	}
	d := &decoder{data: data, object: object}
	v, err := d.document()
	if err != nil {
		return nil, nil, err
	}
	return v, d.nonFinite, nil
}

// document reads the one value data holds, with only whitespace around it.
func (d *decoder) document() (any, error) {
	d.skipSpace()
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.skipSpace()
	if d.i != len(d.data) {
		return nil, d.fail("Extra data", d.i)
	}
	return v, nil
}

// fail is the JSONDecodeError Python raises at byte offset at.
func (d *decoder) fail(msg string, at int) error {
	return &SyntaxError{Msg: msg, Pos: utf8.RuneCount(d.data[:at])}
}

// skipSpace skips the only whitespace Python's json knows.
func (d *decoder) skipSpace() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) hasPrefix(lit string) bool {
	return len(d.data)-d.i >= len(lit) && string(d.data[d.i:d.i+len(lit)]) == lit
}

// value reads the value at d.i: "Expecting value" where there is none.
func (d *decoder) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, ErrUnparsable
	}
	if d.i >= len(d.data) {
		return nil, d.fail("Expecting value", d.i)
	}
	for _, lit := range []struct {
		text string
		val  any
	}{{"null", nil}, {"true", true}, {"false", false}} {
		if d.hasPrefix(lit.text) {
			d.i += len(lit.text)
			return lit.val, nil
		}
	}
	for _, lit := range nonFinite {
		if d.hasPrefix(lit.text) {
			d.nonFinite = append(d.nonFinite, NonFinite{Start: d.i, End: d.i + len(lit.text), Member: d.member})
			d.i += len(lit.text)
			return lit.val, nil
		}
	}
	switch c := d.data[d.i]; {
	case c == '"':
		return d.str()
	case c == '{':
		return d.obj(depth)
	case c == '[':
		return d.array(depth)
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	}
	return nil, d.fail("Expecting value", d.i)
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?, Python's
// number: a fraction or exponent without digits is left unread.
func (d *decoder) number() (any, error) {
	start := d.i
	digits := func(from int) int {
		for from < len(d.data) && d.data[from] >= '0' && d.data[from] <= '9' {
			from++
		}
		return from
	}
	i := start
	if d.data[i] == '-' {
		i++
	}
	switch {
	case i < len(d.data) && d.data[i] == '0':
		i++
	case i < len(d.data) && d.data[i] >= '1' && d.data[i] <= '9':
		i = digits(i)
	default:
		return nil, d.fail("Expecting value", start)
	}
	isInt := true
	if i+1 < len(d.data) && d.data[i] == '.' && d.data[i+1] >= '0' && d.data[i+1] <= '9' {
		i, isInt = digits(i+1), false
	}
	if i < len(d.data) && (d.data[i] == 'e' || d.data[i] == 'E') {
		j := i + 1
		if j < len(d.data) && (d.data[j] == '+' || d.data[j] == '-') {
			j++
		}
		if end := digits(j); end > j {
			i, isInt = end, false
		}
	}
	d.i = i
	text := string(d.data[start:i])
	if isInt && len(text) > maxIntDigits {
		if n := len(text); n-1 > maxIntDigits || text[0] != '-' {
			return nil, ErrUnparsable
		}
	}
	return json.Number(text), nil
}

// str reads a string, d.i at its opening quote.
func (d *decoder) str() (string, error) {
	begin := d.i
	i := begin + 1
	// Most strings hold no escape: they are their bytes, copied once.
	for i < len(d.data) && d.data[i] != '"' && d.data[i] != '\\' && d.data[i] >= 0x20 {
		i++
	}
	if i < len(d.data) && d.data[i] == '"' {
		d.i = i + 1
		return string(d.data[begin+1 : i]), nil
	}
	out := append(make([]byte, 0, i-begin+16), d.data[begin+1:i]...)
	for {
		if i >= len(d.data) {
			return "", d.fail("Unterminated string starting at", begin)
		}
		c := d.data[i]
		switch {
		case c == '"':
			d.i = i + 1
			return string(out), nil
		case c < 0x20:
			return "", d.fail("Invalid control character at", i)
		case c != '\\':
			out = append(out, c)
			i++
			continue
		}
		if i+1 >= len(d.data) {
			return "", d.fail("Unterminated string starting at", begin)
		}
		esc := d.data[i+1]
		if simple, ok := simpleEscapes[esc]; ok {
			out = append(out, simple)
			i += 2
			continue
		}
		if esc != 'u' {
			return "", d.fail(`Invalid \escape`, i)
		}
		r, next, err := d.unicodeEscape(i)
		if err != nil {
			return "", err
		}
		out = utf8.AppendRune(out, r)
		i = next
	}
}

var simpleEscapes = map[byte]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// unicodeEscape reads the \uXXXX escape at i, and the low surrogate
// escape after it that a high surrogate pairs with. A lone surrogate,
// which Python keeps, becomes U+FFFD, as Go's strings cannot hold it.
func (d *decoder) unicodeEscape(i int) (rune, int, error) {
	// CPython's scanner wants a character after the four digits, and
	// pairs a low surrogate's escape only with more after it: at the end
	// of the body the escape itself is called invalid.
	r, ok := d.hex4(i + 2)
	if !ok || i+6 >= len(d.data) {
		return 0, 0, d.fail(`Invalid \uXXXX escape`, i+1)
	}
	next := i + 6
	if utf16.IsSurrogate(r) && r < 0xdc00 && next+6 < len(d.data) && d.hasPrefixAt(next, `\u`) {
		low, ok := d.hex4(next + 2)
		if !ok {
			return 0, 0, d.fail(`Invalid \uXXXX escape`, next+1)
		}
		if low >= 0xdc00 && low <= 0xdfff {
			return utf16.DecodeRune(r, low), next + 6, nil
		}
	}
	if utf16.IsSurrogate(r) {
		r = utf8.RuneError
	}
	return r, next, nil
}

func (d *decoder) hasPrefixAt(at int, lit string) bool {
	return len(d.data)-at >= len(lit) && string(d.data[at:at+len(lit)]) == lit
}

// hex4 reads four hexadecimal digits at i.
func (d *decoder) hex4(i int) (rune, bool) {
	if len(d.data)-i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range d.data[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// obj reads an object, d.i at its opening brace.
func (d *decoder) obj(depth int) (any, error) {
	var keys []string
	var vals []any
	d.i++
	d.skipSpace()
	if d.i < len(d.data) && d.data[d.i] == '}' {
		d.i++
		return d.built(keys, vals), nil
	}
	for {
		if d.i >= len(d.data) || d.data[d.i] != '"' {
			return nil, d.fail("Expecting property name enclosed in double quotes", d.i)
		}
		key, err := d.str()
		if err != nil {
			return nil, err
		}
		d.skipSpace()
		if d.i >= len(d.data) || d.data[d.i] != ':' {
			return nil, d.fail("Expecting ':' delimiter", d.i)
		}
		d.i++
		d.skipSpace()
		if depth == 0 {
			d.member = key
		}
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		if d.object != nil {
			keys, vals = append(keys, key), append(vals, v)
		}
		d.skipSpace()
		if d.i < len(d.data) && d.data[d.i] == '}' {
			d.i++
			return d.built(keys, vals), nil
		}
		if d.i >= len(d.data) || d.data[d.i] != ',' {
			return nil, d.fail("Expecting ',' delimiter", d.i)
		}
		d.i++
		d.skipSpace()
	}
}

// built is the object of keys and vals; nil when values are not built.
func (d *decoder) built(keys []string, vals []any) any {
	if d.object == nil {
		return nil
	}
	return d.object(keys, vals)
}

// array reads an array, d.i at its opening bracket.
func (d *decoder) array(depth int) (any, error) {
	list := []any{}
	d.i++
	d.skipSpace()
	if d.i < len(d.data) && d.data[d.i] == ']' {
		d.i++
		return list, nil
	}
	for {
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		if d.object != nil {
			list = append(list, v)
		}
		d.skipSpace()
		if d.i < len(d.data) && d.data[d.i] == ']' {
			d.i++
			return list, nil
		}
		if d.i >= len(d.data) || d.data[d.i] != ',' {
			return nil, d.fail("Expecting ',' delimiter", d.i)
		}
		d.i++
		d.skipSpace()
	}
}
