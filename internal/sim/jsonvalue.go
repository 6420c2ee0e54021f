package sim

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// object is a JSON object that keeps its keys in order, as Python's json
// module does; validation messages quote request bodies back in that order.
type object struct {
	keys []string
	vals []any
}

// get returns the value of key and whether it is present. A repeated key
// takes its last value, as in Python.
func (o *object) get(key string) (any, bool) {
	for i := len(o.keys) - 1; i >= 0; i-- {
		if o.keys[i] == key {
			return o.vals[i], true
		}
	}
	return nil, false
}

// pyRepr writes v as Python's repr of the value json.loads would give.
func pyRepr(b *strings.Builder, v any) {
	switch t := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if t {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case json.Number:
		s := string(t)
		if strings.ContainsAny(s, ".eEIN") { // a float, NaN or an infinity
			// Past a double's range, a float literal is an infinity to
			// Python, as ParseFloat returns it.
			f, _ := strconv.ParseFloat(s, 64)
			b.WriteString(pyFloat(f))
			return
		}
		if s == "-0" { // Python's int has no negative zero
			s = "0"
		}
		b.WriteString(s)
	case string:
		pyStr(b, t)
	case []any:
		b.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				b.WriteString(", ")
			}
			pyRepr(b, e)
		}
		b.WriteByte(']')
	case *object:
		b.WriteByte('{')
		seen := make(map[string]bool, len(t.keys))
		first := true
		for _, k := range t.keys {
			if seen[k] {
				continue
			}
			seen[k] = true
			if !first {
				b.WriteString(", ")
			}
			first = false
			pyStr(b, k)
			b.WriteString(": ")
			last, _ := t.get(k)
			pyRepr(b, last)
		}
		b.WriteByte('}')
	default:
		fmt.Fprintf(b, "%v", t)
	}
}

// pyStr writes a Python str repr: single quotes unless the text holds a
// single quote and no double one.
func pyStr(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
	b.WriteByte(q)
}

// truthy is Python's truth of a JSON value as json.loads gives it: null,
// false, zero, "" and empty arrays and objects are false.
func truthy(v any) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case json.Number:
		f, err := v.Float64()
		return err != nil || f != 0
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case *object:
		return len(v.keys) > 0
	}
	return true
}
