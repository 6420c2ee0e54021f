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

// laxTrue is whether raw, one JSON value, is a boolean LaxBool reads as
// true.
func laxTrue(raw []byte) bool {
	switch string(raw) {
	case "true":
		return true
	case "false", "null":
		return false
	}
	var v any
	d := json.NewDecoder(strings.NewReader(string(raw)))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return false
	}
	b, errType := LaxBool(v)
	return b && errType == ""
}
