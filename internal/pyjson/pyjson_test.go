package pyjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
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

// TestZeroNonFinite: each literal becomes a zero of its length, which
// encoding/json reads, nothing else changes, and outside says whether one
// lies beyond the members inside accepts; a literal Python refuses is
// left for encoding/json to refuse.
func TestZeroNonFinite(t *testing.T) {
	sampling := func(m []byte) bool { return string(m) == "t" || string(m) == "logit_bias" }
	for _, tt := range []struct {
		in, want string
		outside  bool
	}{
		{`{"a":NaN,"b":"NaN"}`, `{"a":0.0,"b":"NaN"}`, true},
		{`{"logit_bias":{"5":Infinity,"6":-Infinity}}`, `{"logit_bias":{"5":0.000000,"6":-0.000000}}`, false},
		{`{"t":NaN,"m":[{"x":[Infinity]}]}`, `{"t":0.0,"m":[{"x":[0.000000]}]}`, true},
		{`{"t" : [ NaN , NaN ] , "x":1}`, `{"t" : [ 0.0 , 0.0 ] , "x":1}`, false},
		{`{"\u0074":NaN}`, `{"\u0074":0.0}`, false},  // "t", escaped
		{`{"m":{"t":NaN}}`, `{"m":{"t":0.0}}`, true}, // a nested key is no member
		{`[NaN]`, `[0.0]`, true},
		{`NaN`, `0.0`, true},
		{`{"a":1}`, "", false},
		{`{"a":"x\"NaN"}`, "", false},
		// What Python refuses stays for encoding/json to refuse.
		{`{"a":-NaN}`, "", false},
		{`{"a":NaNa}`, "", false},
		{`{"a":1NaN}`, "", false},
		{`{"a":Infinity.5}`, "", false},
		{`{NaN:1}`, "", false},
		{`{"a" NaN}`, "", false},
	} {
		got, outside := ZeroNonFinite([]byte(tt.in), sampling)
		if string(got) != tt.want || outside != tt.outside || (got != nil && !json.Valid(got)) {
			t.Errorf("ZeroNonFinite(%s) = %s, %v; want %s, %v", tt.in, got, outside, tt.want, tt.outside)
		}
	}
}

// FuzzZeroed: on any text Python's json reads, ZeroNonFinite agrees with
// a naive model built on Decode's list of literals: the same text with
// each listed span zeroed (nil when there is none), which encoding/json
// reads too (within its UTF-8 rules), and outside set exactly when a
// listed literal's member is not accepted. On UTF-8 text Python refuses
// as malformed, encoding/json refuses the copy too. Neither panics.
func FuzzZeroed(f *testing.F) {
	for _, s := range []string{`{"a":NaN}`, `{"t":Infinity,"b":{"5":-Infinity}}`, `[NaN,1,"NaN"]`, `{"a":-NaN}`,
		`{"a":NaNa}`, `{"a":1NaN}`, `NaN`, `{"a":"\"NaN"}`, `{"a":[1,2]}`, `{"a":Infinity.5}`, `{"\u0061":NaN}`} {
		f.Add([]byte(s))
	}
	inside := func(m []byte) bool { return bytes.IndexByte(m, 'a') >= 0 }
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<12 {
			return
		}
		_, lits, err := Decode(data, nil)
		got, outside := ZeroNonFinite(data, inside)
		var syntax *SyntaxError
		if errors.As(err, &syntax) && utf8.Valid(data) {
			copied := got
			if copied == nil {
				copied = data
			}
			if json.Valid(copied) {
				t.Fatalf("ZeroNonFinite(%q) = %q, which encoding/json reads; Python refuses it: %v", data, got, err)
			}
		}
		if err != nil {
			return
		}
		var want []byte
		wantOutside := false
		for _, l := range lits {
			if lit := string(data[l.Start:l.End]); lit != "NaN" && lit != "Infinity" && lit != "-Infinity" {
				t.Fatalf("Decode(%q): literal %q at %d", data, lit, l.Start)
			}
			if want == nil {
				want = bytes.Clone(data)
			}
			zero := "0." + strings.Repeat("0", l.End-l.Start-2)
			if data[l.Start] == '-' {
				zero = "-0." + strings.Repeat("0", l.End-l.Start-3)
			}
			copy(want[l.Start:l.End], zero)
			wantOutside = wantOutside || !inside([]byte(l.Member))
		}
		if !bytes.Equal(got, want) || (got == nil) != (want == nil) || outside != wantOutside {
			t.Fatalf("ZeroNonFinite(%q) = %q, %v; want %q, %v", data, got, outside, want, wantOutside)
		}
		if got != nil && utf8.Valid(data) && !json.Valid(got) {
			t.Fatalf("ZeroNonFinite(%q) = %q, which encoding/json refuses", data, got)
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
