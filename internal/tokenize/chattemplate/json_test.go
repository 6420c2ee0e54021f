package chattemplate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"

	"github.com/inferrail/inferrail/internal/tokenize"
	"github.com/inferrail/inferrail/internal/tokenize/tokenizetest"
)

// FuzzJSONValueAgainstStream: jsonValue, which reads with jsontext, gives
// what streamJSONValue, which reads with json.Decoder, gives: the same
// value, key order and number kinds included, or the same error.
func FuzzJSONValueAgainstStream(f *testing.F) {
	for _, s := range tokenizetest.RequestSeeds {
		f.Add([]byte(s))
	}
	for _, s := range []string{
		`{"z": 1, "a": [1.0, 2, {"y": null, "b": false}], "z": 3}`, `1e400`, `-0`, `-0.0`, `1E2`, `123456789012345678901234567890`,
		`9223372036854775807`, `-9223372036854775808`, `9223372036854775808`, `[1e400, ` + strings.Repeat(`[`, 300) + strings.Repeat(`]`, 300) + `]`,
		strings.Repeat(`[`, 201) + strings.Repeat(`]`, 201), strings.Repeat(`[`, 202) + strings.Repeat(`]`, 202),
		"{\"\xff\": \"\xfe\", \"\\ud800\": 1}", ` "x" `, `"x" "y"`, `[1,]`, `{"a" 1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 1<<14 {
			return
		}
		got, err := jsonValue(raw)
		want, wantErr := streamJSONValue(raw)
		if errKind(err) != errKind(wantErr) {
			t.Fatalf("jsonValue(%q): error %v, want %v", raw, err, wantErr)
		}
		if err == nil && dumpValue(got) != dumpValue(want) {
			t.Fatalf("jsonValue(%q) = %s, want %s", raw, dumpValue(got), dumpValue(want))
		}
	})
}

// dumpValue writes a template value with its kinds, for comparisons.
func dumpValue(v jinja.Value) string {
	var b strings.Builder
	var dump func(v jinja.Value)
	dump = func(v jinja.Value) {
		switch {
		case v.IsNone():
			b.WriteString("None")
		case v.IsBool():
			fmt.Fprintf(&b, "bool(%v)", v.IsTruthy())
		case v.IsInt():
			fmt.Fprintf(&b, "int(%d)", v.AsInt())
		case v.IsFloat():
			b.WriteString("float(" + strconv.FormatFloat(v.AsFloat(), 'g', -1, 64) + ")")
		case v.IsString():
			b.WriteString(strconv.Quote(v.AsString()))
		case v.IsList():
			b.WriteString("[")
			for _, it := range v.AsList().Items {
				dump(it)
				b.WriteString(",")
			}
			b.WriteString("]")
		case v.IsDict():
			b.WriteString("{")
			d := v.AsDict()
			for _, k := range d.OrderedKeys() {
				val, _ := d.Get(k)
				b.WriteString(strconv.Quote(k) + ":")
				dump(val)
				b.WriteString(",")
			}
			b.WriteString("}")
		default:
			fmt.Fprintf(&b, "other(%s)", v.String())
		}
	}
	dump(v)
	return b.String()
}

// errKind is an error's type, its UnsupportedError reason and its message,
// as package tokenize's parser tests tell errors apart.
func errKind(err error) string {
	var ue *tokenize.UnsupportedError
	switch {
	case err == nil:
		return "nil"
	case errors.As(err, &ue):
		return fmt.Sprintf("unsupported %s: %s", ue.Reason, err)
	}
	return fmt.Sprintf("%T: %s", errors.Unwrap(err), err)
}
