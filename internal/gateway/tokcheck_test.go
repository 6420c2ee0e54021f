package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/tokenize"
)

// TestTokenCheckPassesOverABrokenChatTemplate: a model whose chat
// template fails (it does not compile) or that has none is judged by the
// completion probe alone at startup: its chat requests go without
// predictions on their own, and its completions keep theirs. The check
// took the failing chat probe for a disagreement, which took every
// prediction of the model away (found by a review).
func TestTokenCheckPassesOverABrokenChatTemplate(t *testing.T) {
	if raceEnabled {
		t.Skip("loads Qwen3's tokenizer twice, long under the race detector; make norace runs it")
	}
	for _, template := range []string{"{{ f(*a, *b) }}", "{% if %}"} {
		m := &config.Model{Name: "m", Tokenizer: qwen3Dir, ChatTemplate: template}
		mt, err := loadTokenizer(m, 0)
		if err != nil {
			t.Fatalf("%v: run make tokenizers (make test does) to fetch the pinned tokenizer files", err)
		}
		// An engine whose /tokenize is the same tokenizer's.
		engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var body json.RawMessage
			_ = json.NewDecoder(r.Body).Decode(&body)
			p, err := tokenize.ParseCompletionRequest(body)
			if err != nil {
				http.Error(w, "chat: the engine's template fails too", http.StatusBadRequest)
				return
			}
			ids, _ := mt.tok.PromptIDs(p, nil)
			_ = json.NewEncoder(w).Encode(map[string]any{"tokens": ids})
		}))
		detail, answered := compareTokens(context.Background(), engine.Client(), engine.URL, "m", mt)
		engine.Close()
		if !answered || detail != "" {
			t.Errorf("template %q: %q (answered %v), want agreement on the completion probe", template, detail, answered)
		}
	}
}

// TestTokenCheckComparesChatsTheTemplateRefuses: a template that compiles
// but refuses a probe the engine renders is a different template from the
// engine's, so the model disagrees; skipping such probes judged it agreeing
// without comparing a chat (found by a review).
func TestTokenCheckComparesChatsTheTemplateRefuses(t *testing.T) {
	if raceEnabled {
		t.Skip("loads Qwen3's tokenizer, long under the race detector; make norace runs it")
	}
	tmpl := "{% if messages|length > 1 %}{{ raise_exception('one message only') }}{% endif %}" +
		"{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
	mt, err := loadTokenizer(&config.Model{Name: "m", Tokenizer: qwen3Dir, ChatTemplate: tmpl}, 0)
	if err != nil {
		t.Fatal(err)
	}
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body json.RawMessage
		_ = json.NewDecoder(r.Body).Decode(&body)
		if p, err := tokenize.ParseCompletionRequest(body); err == nil {
			ids, _ := mt.tok.PromptIDs(p, nil)
			_ = json.NewEncoder(w).Encode(map[string]any{"tokens": ids})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"tokens": []int{1, 2, 3}}) // the engine's own template renders every chat
	}))
	defer engine.Close()
	detail, answered := compareTokens(context.Background(), engine.Client(), engine.URL, "m", mt)
	if !answered || !strings.Contains(detail, "the gateway's chat template refuses it") {
		t.Errorf("%q (answered %v), want a disagreement", detail, answered)
	}
}
