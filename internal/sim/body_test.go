package sim

import (
	"net/http"
	"slices"
	"strings"
	"testing"

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
