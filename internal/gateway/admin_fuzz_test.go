package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/policy"
)

// FuzzAdminRequests sends arbitrary bodies, queries and conversation
// headers to the admin port's endpoints that parse a client's request
// (tokenize and explain) on a gateway in front of real simulators with an
// exact tokenizer: every answer is a JSON document, an error in the
// clients' shape when refused, and never a gateway failure. The model
// routes with round_robin and shadows kv_aware and prefix_hash: an
// explanation names the policy ?policy= asks for (an arm or a shadow),
// or the arm when it asks for none, and a policy the model does not run is
// refused.
func FuzzAdminRequests(f *testing.F) {
	sims := fleetOf(f, 2, true)
	cfg := testConfig(f, sims)
	cfg.Routing.Shadow = config.PolicyList{policy.KVAware, policy.PrefixHash}
	runs := []string{cfg.Routing.DefaultPolicy, policy.KVAware, policy.PrefixHash}
	gw := startGateway(f, cfg)
	paths := []string{
		"/admin/tokenize/v1/chat/completions", "/admin/tokenize/v1/completions",
		"/admin/explain/v1/chat/completions", "/admin/explain/v1/completions",
	}
	f.Add(uint8(0), "", "", []byte(`{"model":"sim","messages":[{"role":"user","content":"hi"}]}`))
	f.Add(uint8(1), "", "s", []byte(`{"model":"sim","prompt":[1,2,3]}`))
	f.Add(uint8(2), "policy=p2c", "conv-1", []byte(`{"model":"sim","messages":[{"role":"system","content":"x"},{"role":"user","content":[{"type":"text","text":"y"}]}]}`))
	f.Add(uint8(3), "policy=nope&key=%zz", "", []byte(`{"model":"sim","prompt":"hello","max_tokens":1}`))
	f.Add(uint8(2), "key=nobody", "\x00", []byte(`{"model":"other","messages":null}`))
	f.Add(uint8(3), "", "", []byte(`{"model":"sim","prompt":[[1],[2]]}`))
	// Shadows and the arm asked for by name.
	f.Add(uint8(2), "policy=kv_aware", "conv-2", []byte(`{"model":"sim","messages":[{"role":"user","content":"hello there"}]}`))
	f.Add(uint8(3), "policy=prefix_hash&key=", "", []byte(`{"model":"sim","prompt":"a prompt long enough for a block or two of tokens"}`))
	f.Add(uint8(3), "policy=prefix_hash&policy=p2c", "", []byte(`{"model":"sim","prompt":[1,2,3,4]}`))
	f.Add(uint8(2), "policy=round_robin", "", []byte(`{"model":"sim","messages":[{"role":"user","content":"x"}]}`))
	f.Add(uint8(2), "policy=KV_AWARE", "", []byte(`{"model":"sim","messages":[{"role":"user","content":"x"}]}`))
	client := &http.Client{Timeout: 10 * time.Second}
	f.Fuzz(func(t *testing.T, which uint8, query, session string, body []byte) {
		u, err := url.Parse(gw.admin + paths[int(which)%len(paths)])
		if err != nil {
			t.Fatal(err)
		}
		if strings.ContainsFunc(query, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == '#' }) {
			return // not a request line: net/http answers it before any handler
		}
		u.RawQuery = query
		req, err := http.NewRequest(http.MethodPost, u.String(), bytes.NewReader(body))
		if err != nil {
			return // not a request a client can send
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(openai.HeaderSession, session)
		resp, err := client.Do(req)
		if err != nil {
			if ue, ok := err.(*url.Error); ok && ue.Timeout() {
				t.Fatalf("%s?%s: no answer within 10 s", u.Path, query)
			}
			return // refused by the client library before it left
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 500 {
			t.Fatalf("%s?%s %q: gateway failure %d %s", u.Path, query, body, resp.StatusCode, got)
		}
		if !json.Valid(got) {
			t.Fatalf("%s?%s %q: %d with a body that is not JSON: %s", u.Path, query, body, resp.StatusCode, got)
		}
		if resp.StatusCode == http.StatusOK && strings.HasPrefix(u.Path, "/admin/tokenize/") {
			checkAdminTokenize(t, sims[0].URL(), body, got)
		}
		if strings.HasPrefix(u.Path, "/admin/explain/") {
			checkExplainPolicy(t, u, runs, resp.StatusCode, got)
		}
		if resp.StatusCode != http.StatusOK {
			var e struct {
				Error struct {
					Code int `json:"code"`
				} `json:"error"`
			}
			if json.Unmarshal(got, &e) != nil || e.Error.Code != resp.StatusCode {
				t.Fatalf("%s?%s %q: %d not in the clients' error shape: %s", u.Path, query, body, resp.StatusCode, got)
			}
		}
	})
}

// checkExplainPolicy holds an explain answer to the policy u's ?policy=
// asks for, as the gateway reads the query: one the model runs (runs; the
// arm first) is never refused for its name and is the one the answer
// names, and the arm when none is asked for; another is never explained.
func checkExplainPolicy(t *testing.T, u *url.URL, runs []string, status int, got []byte) {
	t.Helper()
	asked := u.Query().Get("policy")
	if status != http.StatusOK {
		var e struct {
			Error struct {
				Param string `json:"param"`
			} `json:"error"`
		}
		if json.Unmarshal(got, &e) == nil && e.Error.Param == "policy" && (asked == "" || slices.Contains(runs, asked)) {
			t.Fatalf("%s?%s: refused the policy %q, which the model runs: %s", u.Path, u.RawQuery, asked, got)
		}
		return // the error's shape is checked by the caller
	}
	if asked != "" && !slices.Contains(runs, asked) {
		t.Fatalf("%s?%s: explained a policy the model does not run: %s", u.Path, u.RawQuery, got)
	}
	want := asked
	if want == "" {
		want = runs[0]
	}
	var ans struct {
		Policy string `json:"policy"`
	}
	if err := json.Unmarshal(got, &ans); err != nil || ans.Policy != want {
		t.Fatalf("%s?%s: the explanation names policy %q, want %q (%v): %s", u.Path, u.RawQuery, ans.Policy, want, err, got)
	}
}

// checkAdminTokenize holds an admin tokenize answer to what it says it
// is: vLLM's /tokenize answer (the engine's own, where the engine takes
// the body) plus the prompt's whole blocks.
func checkAdminTokenize(t *testing.T, engine string, body, got []byte) {
	t.Helper()
	var ours struct {
		Count     int      `json:"count"`
		Tokens    []int    `json:"tokens"`
		BlockSize int      `json:"block_size"`
		Blocks    []string `json:"blocks"`
	}
	if err := json.Unmarshal(got, &ours); err != nil || ours.Count != len(ours.Tokens) || ours.BlockSize < 1 || len(ours.Blocks) != ours.Count/ours.BlockSize {
		t.Fatalf("%q: tokenized as %s", body, got)
	}
	sent := withModel(body) // the engine knows no alias
	if sent == nil {
		return
	}
	resp, err := http.Post(engine+"/tokenize", "application/json", bytes.NewReader(sent))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	theirs, _ := io.ReadAll(resp.Body)
	var want struct {
		Count  int   `json:"count"`
		Tokens []int `json:"tokens"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(theirs, &want) != nil {
		return // the engine's /tokenize takes fewer fields than a generation request
	}
	if !slices.Equal(ours.Tokens, want.Tokens) {
		t.Fatalf("%q: tokenized as %v, the engine's /tokenize says %v", body, ours.Tokens, want.Tokens)
	}
}
