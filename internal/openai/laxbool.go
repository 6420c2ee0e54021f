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
