package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestNonFiniteLiteralsReachTheEngine: a body holding Python's NaN,
// Infinity or -Infinity, which vLLM's json.loads reads as numbers, is
// forwarded as sent, and the engine judges it (found by a review: the
// gateway refused every such body as not JSON). Through the gateway each
// body gets what the simulator, which reads bodies as vLLM does, answers
// it directly: its own 400 naming the value it read (so the engine saw
// the literal, not the gateway's stand-in), or its 200. A literal in a
// sampling parameter keeps the prediction, exact; one where the prompt or
// the limits are read routes without one. What Python's json refuses
// (-NaN, nan, Infinityx) is the gateway's usual 400.
func TestNonFiniteLiteralsReachTheEngine(t *testing.T) {
	sims := fleetOf(t, 1, true)
	gw := startGateway(t, testConfig(t, sims))
	const chatPath, completionPath = "/v1/chat/completions", "/v1/completions"
	for _, tt := range []struct {
		name, path, body string
		status           int  // the engine's answer, which the gateway's must be
		predicted        bool // routed with a prediction
	}{
		{name: "temperature_NaN", path: chatPath, status: http.StatusBadRequest, predicted: true,
			body: `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi NaN"}],"max_tokens":1,"temperature":NaN}`},
		{name: "top_p_Infinity", path: completionPath, status: http.StatusBadRequest, predicted: true,
			body: `{"model":"` + testModel + `","prompt":"hi","max_tokens":1,"top_p":Infinity}`},
		{name: "logit_bias_Infinity", path: completionPath, status: http.StatusOK, predicted: true,
			body: `{"model":"` + testModel + `","prompt":"say NaN","max_tokens":1,"logit_bias":{"5":Infinity,"6":-Infinity}}`},
		{name: "presence_penalty_minus_Infinity_chat", path: chatPath, status: http.StatusBadRequest, predicted: true,
			body: `{"model":"` + testModel + `", "messages":[{"role":"user","content":"hi"}], "presence_penalty": -Infinity }`},
		{name: "max_tokens_Infinity", path: completionPath, status: http.StatusBadRequest,
			body: `{"model":"` + testModel + `","prompt":"hi","max_tokens":Infinity}`},
		// vLLM ignores a member it does not know; the gateway, not knowing
		// what reads it, predicts nothing.
		{name: "unknown_member_NaN", path: completionPath, status: http.StatusOK,
			body: `{"model":"` + testModel + `","prompt":"hi","max_tokens":1,"x_weight":NaN}`},
		{name: "tools_Infinity", path: chatPath, status: http.StatusBadRequest,
			body: `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"x":{"type":"number","maximum":Infinity}}}}}]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			direct, directBody := post(t, sims[0].URL()+tt.path, tt.body)
			if direct.StatusCode != tt.status {
				t.Fatalf("the simulator answered %d %s, want %d", direct.StatusCode, directBody, tt.status)
			}
			resp, body := post(t, gw.url+tt.path, tt.body)
			if resp.StatusCode != tt.status || resp.Header.Get("X-Inferrail-Replica") == "" {
				t.Fatalf("the gateway answered %d (replica %q) %s, want the engine's %d", resp.StatusCode,
					resp.Header.Get("X-Inferrail-Replica"), body, tt.status)
			}
			if tt.status != http.StatusOK && body != directBody {
				t.Errorf("through the gateway:\n%s\nwant the engine's own answer:\n%s", body, directBody)
			}
			predicted := resp.Header.Get("X-Inferrail-Prompt-Tokens")
			if (predicted != "") != tt.predicted {
				t.Fatalf("prediction %q, want one: %v", predicted, tt.predicted)
			}
			if tt.predicted && tt.status == http.StatusOK {
				var usage struct {
					Usage struct {
						PromptTokens json.Number `json:"prompt_tokens"`
					} `json:"usage"`
				}
				if err := json.Unmarshal([]byte(body), &usage); err != nil || string(usage.Usage.PromptTokens) != predicted {
					t.Errorf("predicted %s prompt tokens, the engine counted %s (%v)", predicted, usage.Usage.PromptTokens, err)
				}
			}
		})
	}
	for _, body := range []string{
		`{"model":"sim","prompt":"hi","temperature":-NaN}`,
		`{"model":"sim","prompt":"hi","temperature":nan}`,
		`{"model":"sim","prompt":"hi","temperature":Infinityx}`,
		`{"model":"sim","prompt":"hi","temperature":NaNa}`,
		`{"model":"sim","prompt":"hi","temperature":1NaN}`,
		`{"model":"sim","prompt":"hi","temperature":NaN,}`,
	} {
		resp, got := post(t, gw.url+completionPath, body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(got, "not valid JSON") {
			t.Errorf("%s: %d %s, want the gateway's 400 for a body that is not JSON", body, resp.StatusCode, got)
		}
	}
}

// TestNonFiniteBodyForwardedAsSent: the engine gets the client's bytes,
// literals and all, with only an alias replaced by the model's name; the
// zeros the gateway reads in their place never leave it.
func TestNonFiniteBodyForwardedAsSent(t *testing.T) {
	got := make(chan string, 1)
	url := chatEngine(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- string(b)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[]}`))
	})
	gw := startGateway(t, onlyEngine(t, url))
	const rest = `,"messages":[{"role":"user","content":"NaN"}], "temperature" : NaN,"logit_bias":{"5":Infinity,"6":-Infinity}}`
	resp, body := chat(t, gw.url, `{"model":"sim"`+rest)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if sent, want := <-got, `{"model":"`+testModel+`"`+rest; sent != want {
		t.Errorf("the engine got\n%s\nwant\n%s", sent, want)
	}
}

// TestAdminTokenizeNonFinite: the admin port tokenizes a body with NaN in
// a sampling parameter as routing does, the tokens the simulator's own
// /tokenize gives, and refuses one whose NaN lies where the prompt is
// read, which routing predicts nothing for.
func TestAdminTokenizeNonFinite(t *testing.T) {
	sims := fleetOf(t, 1, true)
	gw := startGateway(t, testConfig(t, sims))
	const path = "/admin/tokenize/v1/completions"
	resp, got := post(t, gw.admin+path, `{"model":"sim","prompt":"count these tokens","temperature":NaN}`)
	_, want := post(t, sims[0].URL()+"/tokenize", `{"model":"`+testModel+`","prompt":"count these tokens"}`)
	var g, w struct {
		Tokens []int `json:"tokens"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(got), &g) != nil || json.Unmarshal([]byte(want), &w) != nil ||
		len(g.Tokens) == 0 || !slices.Equal(g.Tokens, w.Tokens) {
		t.Errorf("NaN in temperature: %d %s, want the tokens of %s", resp.StatusCode, got, want)
	}
	resp, got = post(t, gw.admin+path, `{"model":"sim","prompt":"count these tokens","truncate_prompt_tokens":NaN}`)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(got, "NaN") {
		t.Errorf("NaN in truncate_prompt_tokens: %d %s, want a 400 naming NaN", resp.StatusCode, got)
	}
}

// TestReadableBodyCostsOneCopy: reading a body of many NaN literals costs
// about one copy of it, however many it holds (a review's finding: a
// record per literal made a 28 MB body cost 850 MB), and a body nested
// deeper than the simulator's parser goes but within Python's and
// encoding/json's reach is read, not refused.
func TestReadableBodyCostsOneCopy(t *testing.T) {
	body := []byte(`{"model":"m","prompt":"hi","temperature":[` + strings.Repeat("NaN,", 200_000) + `NaN]}`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	readable, zeroed, unreadable, ok := readableBody(body)
	runtime.ReadMemStats(&after)
	if !ok || !zeroed || unreadable || !json.Valid(readable) {
		t.Fatalf("readableBody: zeroed %v, unreadable %v, ok %v", zeroed, unreadable, ok)
	}
	if spent := after.TotalAlloc - before.TotalAlloc; spent > 3*uint64(len(body)) {
		t.Errorf("readableBody allocated %d bytes for a body of %d", spent, len(body))
	}

	// Nesting costs no stack either: the copy is made in one pass without
	// recursion (a review's finding: 10,000 levels cost 4-7 MB of stack a
	// request, kept while the request waited), and a body nested past
	// what Python reads is refused before encoding/json's Valid, which
	// recurses (2 MB of stack at 10,000 levels), reads it.
	for _, tc := range []struct {
		levels int
		ok     bool
	}{{300, true}, {maxBodyDepth - 1, true}, {maxBodyDepth, false}, {9_990, false}} {
		for _, inner := range []string{"NaN", "0"} {
			// Brackets in a string are no nesting.
			deep := `{"model":"m","prompt":"[[{{","metadata":` + strings.Repeat("[", tc.levels) + inner + strings.Repeat("]", tc.levels) + "}"
			if _, _, _, ok := readableBody([]byte(deep)); ok != tc.ok {
				t.Errorf("%s %d levels deep (%d with the body's object): read %v, want %v", inner, tc.levels, tc.levels+1, ok, tc.ok)
			}
		}
	}
}

// TestNestsDeeper: brackets count outside strings only, whatever escapes
// a string holds.
func TestNestsDeeper(t *testing.T) {
	for _, tt := range []struct {
		body  string
		limit int
		want  bool
	}{
		{`{"a":[[1]]}`, 3, false},
		{`{"a":[[1]]}`, 2, true},
		{`{"a":"[[[[{{"}`, 1, false},
		{`{"a":"\"[[[[","b":1}`, 1, false},    // an escaped quote does not end the string
		{`{"a":"x\\","b":[[1]]}`, 2, true},    // an escaped backslash does not escape the quote
		{`{"a":"x\\\"[[","b":[1]}`, 2, false}, // three: the quote is escaped
		{`[[[["unterminated [[[[`, 4, false},  // not JSON; encoding/json judges it
		{strings.Repeat("[", 1001) + strings.Repeat("]", 1001), maxBodyDepth, true},
	} {
		if got := nestsDeeper([]byte(tt.body), tt.limit); got != tt.want {
			t.Errorf("nestsDeeper(%s, %d) = %v, want %v", tt.body, tt.limit, got, tt.want)
		}
	}
}
