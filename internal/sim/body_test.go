package sim

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/tokenize"
	"github.com/inferrail/inferrail/internal/tokenize/simtok"
)

// TestPromptIDsAsSimtok: promptIDs gives simtok's ids for every kind of
// prompt under its limit, and over it only their number.
func TestPromptIDsAsSimtok(t *testing.T) {
	tok := simtok.New()
	chat := `{"messages":[{"role":"user","content":"hello there, <|im_end|> friend"}]}`
	prompts := map[string]*tokenize.Prompt{}
	var err error
	if prompts["chat"], err = tokenize.ParseChatRequest([]byte(chat)); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"text":            `{"prompt":"hello there, friend"}`,
		"text no special": `{"prompt":"hello there","add_special_tokens":false}`,
		"ids":             `{"prompt":[5,6,7]}`,
	} {
		if prompts[name], err = tokenize.ParseCompletionRequest([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	for name, p := range prompts {
		want := tok.PromptIDs(p)
		if ids, n := promptIDs(tok, p, len(want)); !slices.Equal(ids, want) || n != len(want) {
			t.Errorf("%s: promptIDs = %v, %d, want %v", name, ids, n, want)
		}
		if p.HasIDs {
			continue
		}
		if ids, n := promptIDs(tok, p, len(want)-1); ids != nil || n != len(want) {
			t.Errorf("%s over its limit: promptIDs = %v, %d, want nil, %d", name, ids, n, len(want))
		}
	}
}

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

// TestBigBodiesOneAtATime: while a large body is parsed no other large one
// is, and small bodies pass by.
func TestBigBodiesOneAtATime(t *testing.T) {
	srv, url := startServer(t, zeroLatencyConfig())
	big := `{"model":"m","max_tokens":1,"prompt":"` + strings.Repeat("a", bigBody) + `"}`
	srv.bigBodies <- struct{}{} // as if another large body were being parsed
	done := make(chan int)
	go func() {
		r, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(big))
		if err != nil {
			done <- 0
			return
		}
		r.Body.Close()
		done <- r.StatusCode
	}()
	if code, _, body := post(t, url+"/v1/completions", `{"model":"m","max_tokens":1,"prompt":"hi"}`); code != http.StatusOK {
		t.Fatalf("a small body: %d %s", code, body)
	}
	select {
	case code := <-done:
		t.Fatalf("a large body was answered (%d) while another was being parsed", code)
	default:
	}
	<-srv.bigBodies
	if code := <-done; code != http.StatusBadRequest {
		t.Errorf("the large body: status %d, want 400", code)
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
