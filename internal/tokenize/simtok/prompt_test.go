package simtok

import (
	"errors"
	"slices"
	"testing"

	"github.com/inferrail/inferrail/internal/tokenize"
)

// TestParseCompletionRequest: completion prompts, parsed, in builtin:sim
// ids (a float with no fractional part is the integer, as pydantic reads
// it into vLLM's list[int]); a batch of two, a missing prompt and ids that
// are not integers are refused.
func TestParseCompletionRequest(t *testing.T) {
	sim := New()
	tests := []struct {
		body string
		ids  []int
	}{
		{`{"prompt":"hi"}`, append([]int{BOSID}, sim.Encode(nil, "hi")...)},
		{`{"prompt":["hi"],"add_special_tokens":false}`, sim.Encode(nil, "hi")},
		{`{"prompt":[5,6]}`, []int{5, 6}},
		{`{"prompt":[[5,6]]}`, []int{5, 6}},
		{`{"prompt":[5.0,6e0,70E-1]}`, []int{5, 6, 7}},
		{`{"prompt":[[5.0,6]]}`, []int{5, 6}},
	}
	for _, tt := range tests {
		p, err := tokenize.ParseCompletionRequest([]byte(tt.body))
		if err != nil {
			t.Fatalf("%s: %v", tt.body, err)
		}
		if got := sim.PromptIDs(p); !slices.Equal(got, tt.ids) {
			t.Errorf("%s: ids %v, want %v", tt.body, got, tt.ids)
		}
	}
	_, err := tokenize.ParseCompletionRequest([]byte(`{"prompt":[[1],[2]]}`))
	var ue *tokenize.UnsupportedError
	if !errors.As(err, &ue) || ue.Reason != tokenize.ReasonBatch {
		t.Errorf("a batch of two: %v, want unsupported batch", err)
	}
	if _, err := tokenize.ParseCompletionRequest([]byte(`{"prompt":["a","b"]}`)); !errors.As(err, &ue) || ue.Reason != tokenize.ReasonBatch {
		t.Errorf("a batch of two strings: %v, want unsupported batch", err)
	}
	for _, body := range []string{`{"max_tokens":1}`, `{"prompt":[5.5,6]}`, `{"prompt":[5,"6"]}`, `{"prompt":[1e19]}`, `{"prompt":[5,true]}`} {
		_, err := tokenize.ParseCompletionRequest([]byte(body))
		if err == nil || errors.As(err, &ue) {
			t.Errorf("%s: %v, want refused as not a prompt", body, err)
		}
	}
}
