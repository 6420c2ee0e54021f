package auth

import (
	"regexp"
	"strings"
	"testing"
)

func TestNewSecret(t *testing.T) {
	form := regexp.MustCompile(`^irk-[A-Za-z0-9_-]{43}$`)
	seen := map[string]bool{}
	for range 100 {
		secret, h := NewSecret()
		if !form.MatchString(secret) {
			t.Fatalf("NewSecret() = %q, want irk- and 43 base64url characters", secret)
		}
		if seen[secret] {
			t.Fatalf("NewSecret() repeated %q", secret)
		}
		seen[secret] = true
		if h != HashOf(secret) {
			t.Fatalf("NewSecret's hash is not HashOf its secret")
		}
		if tok, f := parseBearer("Bearer " + secret); f != FailureNone || tok != secret {
			t.Fatalf("a new secret does not read back from its header: %q, %q", tok, f)
		}
		back, err := ParseHash(h.String())
		if err != nil || back != h {
			t.Fatalf("ParseHash(%s) = %v, %v", h, back, err)
		}
	}
}

func TestParseHash(t *testing.T) {
	good := "sha256:" + strings.Repeat("ab", 32)
	tests := []struct {
		in string
		ok bool
	}{
		{good, true},
		{strings.ToUpper(good[:7]) + good[7:], false},
		{"sha256:" + strings.Repeat("AB", 32), true},
		{"sha256:" + strings.Repeat("ab", 31), false},
		{"sha256:" + strings.Repeat("zz", 32), false},
		{strings.Repeat("ab", 32), false},
		{"sha512:" + strings.Repeat("ab", 32), false},
		{"", false},
	}
	for _, tc := range tests {
		if _, err := ParseHash(tc.in); (err == nil) != tc.ok {
			t.Errorf("ParseHash(%q) = %v, want ok %v", tc.in, err, tc.ok)
		}
	}
	// The well-known SHA-256 of "test", so the file's hash is what any
	// sha256sum prints.
	if got := HashOf("test").String(); got != "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" {
		t.Errorf("HashOf(\"test\") = %s", got)
	}
}
