// Package sdktest holds what the end-to-end tests that drive a server with
// the official OpenAI Go SDK share: prompts that do not share prefixes by
// accident, and the checks every usage block and error body must pass.
package sdktest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

// Words returns a prompt of n words that starts with tag, so tests that use
// their own tags never share a cached prefix.
func Words(tag string, n int) string {
	vocab := []string{"engine", "block", "cache", "token", "prefill", "decode", "batch", "queue",
		"router", "replica", "latency", "budget", "stream", "prompt", "kernel", "tensor"}
	var b strings.Builder
	b.WriteString(tag)
	for i := range n - 1 {
		b.WriteByte(' ')
		b.WriteString(vocab[(i*7+len(tag))%len(vocab)])
		if i%5 == 4 {
			b.WriteString(strconv.Itoa(i))
		}
	}
	return b.String()
}

// Context is t's context, ended after d at the latest.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// CheckUsage checks the counts every usage block must satisfy: all three
// present, a prompt, completion tokens as expected, and a total that adds up.
func CheckUsage(t testing.TB, what string, u openai.CompletionUsage, completion int64) {
	t.Helper()
	if !u.JSON.PromptTokens.Valid() || !u.JSON.CompletionTokens.Valid() || !u.JSON.TotalTokens.Valid() {
		t.Errorf("%s: usage lacks a count: %s", what, u.RawJSON())
	}
	if u.PromptTokens <= 0 {
		t.Errorf("%s: prompt_tokens = %d, want > 0", what, u.PromptTokens)
	}
	if u.CompletionTokens != completion {
		t.Errorf("%s: completion_tokens = %d, want %d", what, u.CompletionTokens, completion)
	}
	if u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("%s: total_tokens = %d, want prompt %d + completion %d", what, u.TotalTokens, u.PromptTokens, u.CompletionTokens)
	}
}

// APIError unwraps err to the SDK's *openai.Error with the given status
// and checks what vLLM puts in every error body: a message, and the status
// again as its code.
func APIError(t testing.TB, err error, status int) *openai.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want HTTP %d", status)
	}
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("error %T %v is not an *openai.Error", err, err)
	}
	if apiErr.StatusCode != status {
		t.Fatalf("status %d, want %d; body %s", apiErr.StatusCode, status, apiErr.RawJSON())
	}
	if apiErr.Message == "" {
		t.Errorf("empty message: %s", apiErr.RawJSON())
	}
	if got := apiErr.JSON.Code.Raw(); got != strconv.Itoa(status) {
		t.Errorf("code %s, want %d as vLLM sends it", got, status)
	}
	return apiErr
}
