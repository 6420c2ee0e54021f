//go:build !race

package sim

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/inferrail/inferrail/internal/openai"
)

// The tests here count the bytes a request allocates, which other tests'
// goroutines and the race detector would add to: make norace runs them
// alone.

// TestLongPromptRefusedUntokenized: the ids of a prompt too long to serve
// are never built. They would take four times its body, "a " being one
// token of eight bytes per two bytes, and twice that as the slice grows;
// the decoded JSON and the prompt's text take about eight times the body.
func TestLongPromptRefusedUntokenized(t *testing.T) {
	srv, err := New(zeroLatencyConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"m","prompt":"` + strings.Repeat("a ", 1<<20) + `"}`
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r := httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	_, e := srv.prepare(httptest.NewRecorder(), r, false)
	runtime.ReadMemStats(&after)
	if e == nil || e.Param != "input_tokens" {
		t.Fatalf("prepare = %v, want the context length error", e)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 12*uint64(len(body)) {
		t.Errorf("refusing a %d-byte body allocated %d bytes", len(body), alloc)
	}
}

// TestAnnouncedSizeNotTakenOnTrust: a body that announces 64 MiB and
// sends a few bytes costs no 64 MiB buffer; one that sends what it
// announced is read whole.
func TestAnnouncedSizeNotTakenOnTrust(t *testing.T) {
	read := func(body io.Reader, announced int64) (uint64, []byte, *openai.Error) {
		r := httptest.NewRequest(http.MethodPost, "/v1/completions", body)
		r.Header.Set("Content-Type", "application/json")
		r.ContentLength = announced
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got, e := readJSONBody(httptest.NewRecorder(), r)
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc, got, e
	}
	cut := io.MultiReader(strings.NewReader(`{"prompt":`), iotest.ErrReader(io.ErrUnexpectedEOF))
	allocated, _, e := read(cut, maxBody)
	if e == nil || allocated > 8<<20 {
		t.Errorf("a body cut after 10 of 64 MiB announced: allocated %d bytes, error %v; want under 8 MiB and an error", allocated, e)
	}
	whole := `{"prompt":"` + strings.Repeat("a", 3<<20) + `"}`
	_, got, e := read(strings.NewReader(whole), int64(len(whole)))
	if e != nil || string(got) != whole {
		t.Errorf("a 3 MiB body read as %d bytes, %v", len(got), e)
	}
}
