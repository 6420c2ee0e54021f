package auth

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

func TestBearer(t *testing.T) {
	tests := []struct {
		name   string
		values []string // the Authorization header's values; nil: absent
		tok    string
		fail   Failure
	}{
		{"absent", nil, "", Missing},
		{"empty", []string{""}, "", Missing},
		{"ok", []string{"Bearer irk-abc"}, "irk-abc", FailureNone},
		{"scheme_any_case", []string{"bEaReR tok"}, "tok", FailureNone},
		{"several_spaces", []string{"Bearer    tok"}, "tok", FailureNone},
		{"padding", []string{"Bearer abc+/=="}, "abc+/==", FailureNone},
		{"every_char", []string{"Bearer aZ09-._~+/"}, "aZ09-._~+/", FailureNone},
		{"basic", []string{"Basic dXNlcjpwYXNz"}, "", Malformed},
		{"no_space", []string{"Bearertok"}, "", Malformed},
		{"scheme_only", []string{"Bearer"}, "", Malformed},
		{"tab", []string{"Bearer\ttok"}, "", Malformed},
		{"two_tokens", []string{"Bearer a b"}, "", Malformed},
		{"only_padding", []string{"Bearer =="}, "", Malformed},
		{"padding_inside", []string{"Bearer a=b"}, "", Malformed},
		{"non_ascii", []string{"Bearer tök"}, "", Malformed},
		{"control", []string{"Bearer a\x00b"}, "", Malformed},
		{"longest", []string{"Bearer " + strings.Repeat("a", MaxTokenBytes)}, strings.Repeat("a", MaxTokenBytes), FailureNone},
		{"too_long", []string{"Bearer " + strings.Repeat("a", MaxTokenBytes+1)}, "", Malformed},
		{"huge", []string{"Bearer " + strings.Repeat("a", 1<<20)}, "", Malformed},
		{"twice", []string{"Bearer a", "Bearer a"}, "", Malformed},
		{"wrong_key_format", []string{"Bearer sk-proj-123"}, "sk-proj-123", FailureNone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.values != nil {
				h["Authorization"] = tc.values
			}
			tok, fail := Bearer(h)
			if tok != tc.tok || fail != tc.fail {
				t.Errorf("Bearer(%q) = %q, %q; want %q, %q", tc.values, tok, fail, tc.tok, tc.fail)
			}
		})
	}
}

// bearerRef is RFC 6750 §2.1 as a regular expression: the reference the
// hand-written parser must agree with.
var bearerRef = regexp.MustCompile(`^(?i:bearer) +([A-Za-z0-9._~+/-]+=*)$`)

func FuzzParseBearer(f *testing.F) {
	for _, s := range []string{"Bearer irk-abc", "bearer  x==", "Bearer", "Basic x", "Bearer a b", "Bearer =", "BEARER a/+.~_-", "Bearer a=b", "Bearer\ta"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if len(v) > 4*MaxTokenBytes {
			v = v[:4*MaxTokenBytes]
		}
		tok, fail := parseBearer(v)
		m := bearerRef.FindStringSubmatch(v)
		wantOK := m != nil && len(m[1]) <= MaxTokenBytes
		if (fail == FailureNone) != wantOK {
			t.Fatalf("parseBearer(%q) = %q, %q; the RFC's grammar says ok %v", v, tok, fail, wantOK)
		}
		if wantOK && tok != m[1] {
			t.Fatalf("parseBearer(%q) = %q, want %q", v, tok, m[1])
		}
		if fail != FailureNone && fail != Malformed {
			t.Fatalf("parseBearer(%q) failed with %q", v, fail)
		}
	})
}
