package pyjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"unicode/utf8"
)

// TestDecodeNonFinite: NaN, Infinity and -Infinity are read where
// json.loads reads them, a value's whole token, and nowhere else (in a
// string, another case, a sign Python does not take, letters or digits
// run on); each case's verdict and character offset are CPython 3.12's.
func TestDecodeNonFinite(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		lits     []NonFinite // where it parses
		err      string      // Python's message, "" when it parses
		pos      int
	}{
		{name: "NaN", in: `{"a":NaN}`, lits: []NonFinite{{5, 8, "a"}}},
		{name: "Infinity", in: `{"a":Infinity}`, lits: []NonFinite{{5, 13, "a"}}},
		{name: "minus_Infinity", in: `{"a":-Infinity}`, lits: []NonFinite{{5, 14, "a"}}},
		{name: "nested", in: `{"a":1,"b":{"5":[NaN, -Infinity ]}}`, lits: []NonFinite{{17, 20, "b"}, {22, 31, "b"}}},
		{name: "top_level", in: ` NaN `, lits: []NonFinite{{1, 4, ""}}},
		{name: "in_string", in: `{"a":"NaN Infinity -Infinity nan"}`},
		{name: "key_named_NaN", in: `{"NaN":"Infinity"}`},
		{name: "minus_NaN", in: `{"a":-NaN}`, err: "Expecting value", pos: 5},
		{name: "lower_nan", in: `{"a":nan}`, err: "Expecting value", pos: 5},
		{name: "lower_infinity", in: `{"a":infinity}`, err: "Expecting value", pos: 5},
		{name: "plus_Infinity", in: `{"a":+Infinity}`, err: "Expecting value", pos: 5},
		{name: "minus_space_Infinity", in: `{"a":- Infinity}`, err: "Expecting value", pos: 5},
		{name: "Infinityx", in: `{"a":Infinityx}`, err: "Expecting ',' delimiter", pos: 13},
		{name: "NaNa", in: `{"a":NaNa}`, err: "Expecting ',' delimiter", pos: 8},
		{name: "digit_then_NaN", in: `{"a":1NaN}`, err: "Expecting ',' delimiter", pos: 6},
		{name: "NaN_then_exponent", in: `{"a":NaNe5}`, err: "Expecting ',' delimiter", pos: 8},
		{name: "Infinity_fraction", in: `{"a":Infinity.5}`, err: "Expecting ',' delimiter", pos: 13},
		{name: "NaN_key", in: `{NaN:1}`, err: "Expecting property name enclosed in double quotes", pos: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, lits, err := Decode([]byte(tt.in), nil)
			var se *SyntaxError
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("Decode(%s): %v, want it parsed", tt.in, err)
			case tt.err != "" && (!errors.As(err, &se) || se.Msg != tt.err || se.Pos != tt.pos):
				t.Fatalf("Decode(%s): %v, want %s at %d", tt.in, err, tt.err, tt.pos)
			case !slices.Equal(lits, tt.lits):
				t.Errorf("Decode(%s) literals %v, want %v", tt.in, lits, tt.lits)
			}
		})
	}
}

// TestZeroed: each literal becomes a zero of its length, which
// encoding/json reads, and nothing else changes.
func TestZeroed(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{"a":NaN,"b":"NaN"}`, `{"a":0.0,"b":"NaN"}`},
		{`{"logit_bias":{"5":Infinity,"6":-Infinity}}`, `{"logit_bias":{"5":0.000000,"6":-0.000000}}`},
		{`{"a":1}`, `{"a":1}`},
	} {
		_, lits, err := Decode([]byte(tt.in), nil)
		if err != nil {
			t.Fatalf("Decode(%s): %v", tt.in, err)
		}
		if got := Zeroed([]byte(tt.in), lits); string(got) != tt.want || !json.Valid(got) {
			t.Errorf("Zeroed(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// FuzzZeroed: on any text Python's json reads, Zeroed gives one of the
// same length that encoding/json reads too (within its UTF-8 and nesting
// rules), equal to it outside the literals, each of which is NaN,
// Infinity or -Infinity; and a text that holds none is returned as it is.
// Decode never panics.
func FuzzZeroed(f *testing.F) {
	for _, s := range []string{`{"a":NaN}`, `{"t":Infinity,"b":{"5":-Infinity}}`, `[NaN,1,"NaN"]`, `{"a":-NaN}`,
		`{"a":NaNa}`, `{"a":1NaN}`, `NaN`, `{"a":"\"NaN"}`, `{"a":[1,2]}`, `{"a":Infinity.5}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<12 {
			return
		}
		_, lits, err := Decode(data, nil)
		if err != nil {
			return
		}
		out := Zeroed(data, lits)
		if len(lits) == 0 && &out[0] != &data[0] {
			t.Fatalf("Zeroed copied a text without literals")
		}
		if len(out) != len(data) {
			t.Fatalf("Zeroed(%q) = %q: another length", data, out)
		}
		last := 0
		for _, l := range lits {
			if lit := string(data[l.Start:l.End]); lit != "NaN" && lit != "Infinity" && lit != "-Infinity" {
				t.Fatalf("Decode(%q): literal %q at %d", data, lit, l.Start)
			}
			if !bytes.Equal(out[last:l.Start], data[last:l.Start]) {
				t.Fatalf("Zeroed(%q) = %q: changed outside the literals", data, out)
			}
			last = l.End
		}
		if !bytes.Equal(out[last:], data[last:]) {
			t.Fatalf("Zeroed(%q) = %q: changed outside the literals", data, out)
		}
		if utf8.Valid(data) && !json.Valid(out) {
			t.Fatalf("Zeroed(%q) = %q, which encoding/json refuses", data, out)
		}
	})
}

// FuzzDecode: the decoder never panics, and on UTF-8 text without
// NaN or the infinities, nested and sized within Python's limits, it
// accepts what encoding/json deems valid JSON and nothing else, and
// reports errors inside the text.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5e3,"x\u00e9"]}`, `[NaN]`, `{"a":1,}`, `"\ud83d\ude00"`, `{"a":"\q"}`, " ", `[-0,1E+2]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<12 {
			return
		}
		v, nonFinite, err := Decode(data, nil)
		var syntax *SyntaxError
		if errors.As(err, &syntax) && (syntax.Pos < 0 || syntax.Pos > utf8.RuneCount(data)) {
			t.Fatalf("error %v outside the %d characters", err, utf8.RuneCount(data))
		}
		if !utf8.Valid(data) || errors.Is(err, ErrUnparsable) || len(nonFinite) > 0 {
			return
		}
		if valid := json.Valid(data); valid != (err == nil) {
			t.Fatalf("json.Valid = %v, Decode = %v, %v", valid, v, err)
		}
	})
}

// TestUnicodeEscapeAtTheEnd: an escape that ends the body is invalid to
// CPython's scanner, which wants a character after its four digits, and a
// surrogate pair at the end is read as two escapes (each case's message
// and character offset are CPython 3.11's; a review found the simulator
// called the first "Unterminated string").
func TestUnicodeEscapeAtTheEnd(t *testing.T) {
	for _, tc := range []struct {
		body string
		pos  int // -1: parses
	}{
		{`"\u0041`, 2}, {`"\u004`, 2}, {`"a\u0041`, 3}, {`["\u0041`, 3}, {`"é\u0041`, 3},
		{`"\ud83d\ude00`, 8}, {`"\ud83d\ude0`, 8}, {`"\ud83d\u`, 8}, {`"\ud83d\uzzzz"`, 8},
		{`"\ud83d\ude00"`, -1}, {`"\ud83d\u0041"`, -1}, {`"\ud83d"`, -1},
	} {
		_, _, err := Decode([]byte(tc.body), nil)
		var se *SyntaxError
		switch {
		case tc.pos < 0 && err != nil:
			t.Errorf("%s: %v, want it parsed", tc.body, err)
		case tc.pos >= 0 && (!errors.As(err, &se) || se.Msg != `Invalid \uXXXX escape` || se.Pos != tc.pos):
			t.Errorf("%s: %v, want Invalid \\uXXXX escape at %d", tc.body, err, tc.pos)
		}
	}
}
