package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/inferrail/inferrail/internal/openai"
)

// vLLM's server reads a body with Starlette's request.json(), which is
// Python's json.loads: what it accepts (NaN, Infinity and -Infinity
// among numbers) and where and how it says a body is malformed decide
// vLLM's answer, so the simulator parses bodies as that module does.

// jsonSyntaxError is Python's json.JSONDecodeError: its message and the
// position where the parse failed, counted in characters of the body
// (after a byte order mark), as FastAPI reports it.
type jsonSyntaxError struct {
	msg string
	pos int
}

func (e *jsonSyntaxError) Error() string { return fmt.Sprintf("%s: char %d", e.msg, e.pos) }

// errBodyUnparsable is what Python's parse raises other than a
// JSONDecodeError: a RecursionError for a body nested too deeply, a
// ValueError for an integer of more than 4,300 digits. FastAPI answers
// it with a plain 400, bodyUnparsable.
var errBodyUnparsable = errors.New("json.loads raised an error other than a JSONDecodeError")

// bodyUnparsable is the message of FastAPI's 400 for a body it could not
// parse for a reason other than its JSON syntax.
const bodyUnparsable = "There was an error parsing the body"

// errEmptyBody is an empty body, which FastAPI does not parse: the
// request model is then missing.
var errEmptyBody = errors.New("empty body")

// maxDepth bounds nesting so hostile bodies cannot exhaust the stack.
// Python's limit depends on its stack; the simulator's is lower.
const maxDepth = 256

// maxIntDigits is CPython's default limit on the digits of an integer
// read from text (sys.int_info.default_max_str_digits).
const maxIntDigits = 4300

// nonFinite is where a NaN, Infinity or -Infinity literal lies in a body,
// and the top-level member it lies in ("" for none).
type nonFinite struct {
	start, end int
	member     string
}

// pyDecoder reads one JSON document as json.loads does.
type pyDecoder struct {
	data      []byte
	i         int
	member    string // the top-level member being read
	nonFinite []nonFinite
}

// decodeJSON parses one JSON value into nil, bool, json.Number, string,
// []any and *object, as json.loads does; NaN and the infinities are the
// json.Numbers "NaN", "Infinity" and "-Infinity".
func decodeJSON(data []byte) (any, error) {
	v, _, err := decodeBody(data)
	return v, err
}

// decodeBody is decodeJSON, also returning where the body holds
// non-finite numbers.
func decodeBody(data []byte) (any, []nonFinite, error) {
	if len(data) == 0 {
		return nil, nil, errEmptyBody
	}
	d := &pyDecoder{data: data}
	d.skipSpace()
	v, err := d.value(0)
	if err != nil {
		return nil, nil, err
	}
	d.skipSpace()
	if d.i != len(d.data) {
		return nil, nil, d.fail("Extra data", d.i)
	}
	return v, d.nonFinite, nil
}

// fail is the JSONDecodeError Python raises at byte offset at.
func (d *pyDecoder) fail(msg string, at int) error {
	return &jsonSyntaxError{msg: msg, pos: utf8.RuneCount(d.data[:at])}
}

// skipSpace skips the only whitespace Python's json knows.
func (d *pyDecoder) skipSpace() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *pyDecoder) hasPrefix(lit string) bool {
	return len(d.data)-d.i >= len(lit) && string(d.data[d.i:d.i+len(lit)]) == lit
}

// value reads the value at d.i: "Expecting value" where there is none.
func (d *pyDecoder) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, errBodyUnparsable
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
	for _, lit := range []string{"NaN", "Infinity", "-Infinity"} {
		if d.hasPrefix(lit) {
			d.nonFinite = append(d.nonFinite, nonFinite{start: d.i, end: d.i + len(lit), member: d.member})
			d.i += len(lit)
			return json.Number(lit), nil
		}
	}
	switch c := d.data[d.i]; {
	case c == '"':
		return d.str()
	case c == '{':
		return d.object(depth)
	case c == '[':
		return d.array(depth)
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	}
	return nil, d.fail("Expecting value", d.i)
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?, Python's
// number: a fraction or exponent without digits is left unread.
func (d *pyDecoder) number() (any, error) {
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
			return nil, errBodyUnparsable
		}
	}
	return json.Number(text), nil
}

// str reads a string, d.i at its opening quote.
func (d *pyDecoder) str() (string, error) {
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
func (d *pyDecoder) unicodeEscape(i int) (rune, int, error) {
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

func (d *pyDecoder) hasPrefixAt(at int, lit string) bool {
	return len(d.data)-at >= len(lit) && string(d.data[at:at+len(lit)]) == lit
}

// hex4 reads four hexadecimal digits at i.
func (d *pyDecoder) hex4(i int) (rune, bool) {
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

// object reads an object, d.i at its opening brace.
func (d *pyDecoder) object(depth int) (any, error) {
	o := &object{}
	d.i++
	d.skipSpace()
	if d.i < len(d.data) && d.data[d.i] == '}' {
		d.i++
		return o, nil
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
		o.keys = append(o.keys, key)
		o.vals = append(o.vals, v)
		d.skipSpace()
		if d.i < len(d.data) && d.data[d.i] == '}' {
			d.i++
			return o, nil
		}
		if d.i >= len(d.data) || d.data[d.i] != ',' {
			return nil, d.fail("Expecting ',' delimiter", d.i)
		}
		d.i++
		d.skipSpace()
	}
}

// array reads an array, d.i at its opening bracket.
func (d *pyDecoder) array(depth int) (any, error) {
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
		list = append(list, v)
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

// bodyError is vLLM's 400 for a body json.loads refuses: FastAPI's
// json_invalid error at the character where the parse failed, or its
// plain 400 for the other errors Python raises; for an empty body, the
// error of a missing request.
func bodyError(err error) *openai.Error {
	v := &validator{}
	var syntax *jsonSyntaxError
	switch {
	case errors.Is(err, errEmptyBody):
		v.add("missing", nil, "Field required", nil)
		return v.err()
	case !errors.As(err, &syntax):
		return openai.HTTPError(http.StatusBadRequest, bodyUnparsable)
	}
	v.addCtx("json_invalid", []any{syntax.pos}, "JSON decode error", &object{}, &object{keys: []string{"error"}, vals: []any{syntax.msg}})
	return v.err()
}

// promptMembers are the members a chat template may render whole, where
// Python writes a non-finite number as NaN or Infinity and Go's JSON
// cannot.
var promptMembers = map[string]bool{"messages": true, "tools": true, "chat_template_kwargs": true, "documents": true, "prompt": true}

// finiteBody is body for the prompt parsers, which read JSON as Go does:
// its non-finite numbers, which the checks before refused wherever they
// mattered, become 0. One in a member a prompt renders from the simulator
// cannot render as vLLM would, and refuses.
func finiteBody(body []byte, lits []nonFinite) ([]byte, *openai.Error) {
	if len(lits) == 0 {
		return body, nil
	}
	out := make([]byte, 0, len(body))
	last := 0
	for _, l := range lits {
		if promptMembers[l.member] {
			return nil, openai.BadRequest("NaN and Infinity in "+l.member+" are not supported by inferrail-sim.", l.member)
		}
		out = append(out, body[last:l.start]...)
		out = append(out, '0')
		last = l.end
	}
	return append(out, body[last:]...), nil
}
