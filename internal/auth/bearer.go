package auth

import (
	"net/http"
	"strings"
)

// Failure is why a request's credential was refused, as
// inferrail_auth_failures_total counts it: a short fixed set, never the
// credential.
type Failure string

// Failures.
const (
	Missing      Failure = "missing"           // no Authorization header, or an empty one
	Malformed    Failure = "malformed"         // not "Bearer <token>", a token too long or of other characters, or several headers
	UnknownKey   Failure = "unknown_key"       // a well-formed token that is no configured key
	ModelDenied  Failure = "model_not_allowed" // a good key that may not use the model asked for
	FailureNone  Failure = ""
	headerName           = "Authorization"
	bearerScheme         = "bearer"
)

// MaxTokenBytes is the longest token read; longer ones are Malformed
// without being hashed. Keys from NewSecret are 47 bytes.
const MaxTokenBytes = 256

// Bearer returns the token of a request's "Authorization: Bearer <token>"
// header (RFC 6750 §2.1: the scheme in any case, one or more spaces, a
// b64token), or why there is none.
func Bearer(h http.Header) (string, Failure) {
	vs := h[headerName]
	switch {
	case len(vs) == 0 || len(vs) == 1 && vs[0] == "":
		return "", Missing
	case len(vs) > 1:
		return "", Malformed
	}
	return parseBearer(vs[0])
}

// parseBearer reads one Authorization value.
func parseBearer(v string) (string, Failure) {
	if len(v) < len(bearerScheme)+2 || !strings.EqualFold(v[:len(bearerScheme)], bearerScheme) || v[len(bearerScheme)] != ' ' {
		return "", Malformed
	}
	tok := strings.TrimLeft(v[len(bearerScheme):], " ")
	if len(tok) == 0 || len(tok) > MaxTokenBytes || !isB64Token(tok) {
		return "", Malformed
	}
	return tok, FailureNone
}

// isB64Token reports whether s is RFC 6750's b64token: 1*( ALPHA / DIGIT
// / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func isB64Token(s string) bool {
	end := len(strings.TrimRight(s, "="))
	if end == 0 {
		return false
	}
	for i := range end {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/') {
			return false
		}
	}
	return true
}
