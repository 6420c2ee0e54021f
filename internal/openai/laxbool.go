package openai

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// LaxBool reads a JSON value as vLLM's request models read a boolean field:
// pydantic's lax mode, which takes more than true and false. v is a decoded
// JSON value with numbers as json.Number. errType is "" when v is a
// boolean, else pydantic's error type: bool_parsing for a string or whole
// number it does not know, bool_type for anything else.
func LaxBool(v any) (value bool, errType string) {
	switch t := v.(type) {
	case bool:
		return t, ""
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		switch {
		case err != nil:
			return false, "bool_type"
		case f == 0 || f == 1:
			return f == 1, ""
		case f == math.Trunc(f) && math.Abs(f) < 1<<63:
			return false, "bool_parsing"
		}
		return false, "bool_type"
	case string:
		switch strings.ToLower(t) {
		case "0", "off", "f", "false", "n", "no":
			return false, ""
		case "1", "on", "t", "true", "y", "yes":
			return true, ""
		}
		return false, "bool_parsing"
	}
	return false, "bool_type"
}

// laxTrue is whether raw, one valid JSON value, is a boolean LaxBool reads
// as true. Only a number or a short string can be: no word LaxBool knows
// is longer than five letters, even with every letter escaped.
func laxTrue(raw []byte) bool {
	switch {
	case string(raw) == "true":
		return true
	case raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9':
		b, errType := LaxBool(json.Number(raw))
		return b && errType == ""
	case raw[0] == '"' && len(raw) <= maxLaxString:
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return false
		}
		b, errType := LaxBool(s)
		return b && errType == ""
	}
	return false
}

// maxLaxString is the longest JSON string that can hold a word LaxBool
// knows: five letters escaped as \uXXXX, and the quotes.
const maxLaxString = 5*6 + 2

// LaxWhole reads raw, one valid JSON value, as a count of at least 1 the
// way vLLM's request models read an integer field (max_tokens, n), in
// pydantic's lax mode: an integer, a float with no fraction, or a string
// holding either (spaces around it, a plus sign and underscores allowed,
// as Python's int() takes them). It returns 0 for anything else, or for
// less than 1; a count past an int64 reads as math.MaxInt64. It may read a
// count from a string pydantic refuses: the engine then answers 400, and a
// count read too high costs nothing but that.
func LaxWhole(raw []byte) int64 {
	if raw[0] == '"' {
		var s string
		if len(raw) > maxLaxNumber || json.Unmarshal(raw, &s) != nil {
			return 0
		}
		s = strings.ReplaceAll(strings.TrimPrefix(strings.TrimSpace(s), "+"), "_", "")
		if raw = []byte(s); len(raw) == 0 {
			return 0
		}
	}
	var n int64
	for i, c := range raw {
		if c < '0' || c > '9' {
			if i == 0 && c != '.' {
				return 0 // a sign, or not a number
			}
			return wholeFloat(raw)
		}
		if n > (math.MaxInt64-int64(c-'0'))/10 {
			n = math.MaxInt64 // saturates; a later non-digit still decides
			continue
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// wholeFloat is LaxWhole of a number with a fraction or an exponent.
func wholeFloat(raw []byte) int64 {
	f, err := strconv.ParseFloat(string(raw), 64)
	switch {
	case err != nil || f < 1 || f != math.Trunc(f):
		return 0
	case f >= math.MaxInt64:
		return math.MaxInt64
	}
	return int64(f)
}

// maxLaxNumber is the longest JSON string LaxWhole reads: longer ones are
// not counts a client means.
const maxLaxNumber = 64
