package sim

import (
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/inferrail/inferrail/internal/openai"
)

// The coercions of pydantic's lax mode, which vLLM's request models
// validate in: what each declared type makes of the JSON values
// json.loads gives, and the type of the error it gives for the others.

// laxInt is val as pydantic's lax int reads it, clamped, or the type of
// the error it gives: a float must be finite, whole and within int64; a
// string is Python's int literal, with a fraction of zeros allowed.
func laxInt(val any) (int, string) {
	switch t := val.(type) {
	case bool:
		if t {
			return 1, ""
		}
		return 0, ""
	case json.Number:
		if n, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return clampInt(n), ""
		}
		if isJSONInt(string(t)) { // past int64; Python's ints have no bound
			return clampSign(string(t)), ""
		}
		f, _ := strconv.ParseFloat(string(t), 64) // NaN and the infinities parse too
		switch {
		case math.IsNaN(f) || math.IsInf(f, 0):
			return 0, "finite_number"
		case f != math.Trunc(f):
			return 0, "int_from_float"
		case f >= 1<<63 || f < -(1<<63):
			return 0, "int_parsing_size"
		}
		return clampFloat(f), ""
	case string:
		digits, ok := pyIntText(t)
		if !ok {
			return 0, "int_parsing"
		}
		if n, err := strconv.ParseInt(digits, 10, 64); err == nil {
			return clampInt(n), ""
		}
		return clampSign(digits), ""
	}
	return 0, "int_type"
}

// isJSONInt reports whether s, a JSON number, is an integer literal.
func isJSONInt(s string) bool {
	return !strings.ContainsAny(s, ".eEIN")
}

// clampSign clamps an integer literal too large for int64 by its sign.
func clampSign(s string) int {
	if strings.HasPrefix(s, "-") {
		return clampInt(math.MinInt64)
	}
	return clampInt(math.MaxInt64)
}

// pyIntText returns the sign and digits of s as pydantic reads a string
// as an int: surrounding whitespace, a sign, digits with single
// underscores between them, and a fraction of zeros ("5.0") are allowed.
func pyIntText(s string) (string, bool) {
	s = strings.TrimSpace(s)
	var b strings.Builder
	if s != "" && (s[0] == '+' || s[0] == '-') {
		if s[0] == '-' {
			b.WriteByte('-')
		}
		s = s[1:]
	}
	whole, frac, hasFrac := strings.Cut(s, ".")
	digits, ok := pyDigits(whole)
	if !ok || hasFrac && (frac == "" || strings.Trim(frac, "0") != "") {
		return "", false
	}
	b.WriteString(digits)
	return b.String(), true
}

// pyDigits returns s without its underscores when s is decimal digits with
// single underscores between them, as Python's int and float take.
func pyDigits(s string) (string, bool) {
	if s == "" || s[0] == '_' || s[len(s)-1] == '_' || strings.Contains(s, "__") {
		return "", false
	}
	out := strings.ReplaceAll(s, "_", "")
	for i := 0; i < len(out); i++ {
		if out[i] < '0' || out[i] > '9' {
			return "", false
		}
	}
	return out, true
}

// exactInt is the int Python makes of a value laxInt accepts, unclamped.
func exactInt(val any) (*big.Int, bool) {
	switch t := val.(type) {
	case bool:
		if t {
			return big.NewInt(1), true
		}
		return big.NewInt(0), true
	case json.Number:
		if n, ok := new(big.Int).SetString(string(t), 10); ok {
			return n, true
		}
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || f != math.Trunc(f) {
			return nil, false
		}
		n, _ := big.NewFloat(f).Int(nil) // int(1e18) is the double's exact value
		return n, true
	case string:
		digits, ok := pyIntText(t)
		if !ok {
			return nil, false
		}
		return new(big.Int).SetString(digits, 10)
	}
	return nil, false
}

// jsonInt is n as the value json.loads gives for it.
func jsonInt(n *big.Int) json.Number { return json.Number(n.String()) }

// sentInt writes an int field for a message as the client sent it, which
// vLLM echoes however large; clamped is the value when it sent none.
func sentInt(sent any, clamped int) string {
	if n, ok := exactInt(sent); ok {
		return n.String()
	}
	return strconv.Itoa(clamped)
}

func clampInt(n int64) int {
	return int(max(min(n, math.MaxInt32*64), math.MinInt32*64))
}

func clampFloat(f float64) int {
	return int(max(min(f, math.MaxInt32*64), math.MinInt32*64))
}

// laxBool is val as pydantic's lax bool reads it, or the type of its error.
func laxBool(val any) (bool, string) { return openai.LaxBool(val) }

// laxFloat is val as pydantic's lax float reads it, or the type of its
// error. NaN and the infinities are floats, as pydantic allows them.
func laxFloat(val any) (float64, string) {
	switch t := val.(type) {
	case bool:
		if t {
			return 1, ""
		}
		return 0, ""
	case json.Number:
		// A float literal too large for a double is inf to Python too,
		// but an int literal that large is refused: it has no float.
		f, _ := strconv.ParseFloat(string(t), 64)
		if math.IsInf(f, 0) && isJSONInt(string(t)) {
			return 0, "float_type"
		}
		return f, ""
	case string:
		if f, ok := pyFloatText(t); ok {
			return f, ""
		}
		return 0, "float_parsing"
	}
	return 0, "float_type"
}

// pyFloatText parses s as Python's float() does: surrounding whitespace,
// underscores between digits, and nan, inf and infinity in any case.
func pyFloatText(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	if strings.ContainsAny(s, "xXpP") { // Go's hexadecimal floats, which Python refuses
		return 0, false
	}
	if strings.Contains(s, "_") {
		// Each run of digits may hold underscores between its digits.
		var b strings.Builder
		start := -1
		for i := 0; i <= len(s); i++ {
			isDigit := i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '_')
			switch {
			case isDigit && start < 0:
				start = i
			case !isDigit && start >= 0:
				d, ok := pyDigits(s[start:i])
				if !ok {
					return 0, false
				}
				b.WriteString(d)
				start = -1
			}
			if !isDigit && i < len(s) {
				b.WriteByte(s[i])
			}
		}
		s = b.String()
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return f, true
}
