package workload

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// FuzzShareGPT parses arbitrary files as ShareGPT and replays what it
// accepts: a dataset is downloaded from anywhere, and whatever it holds is
// either refused with an error or replayed as valid chat requests. What
// ParseShareGPT keeps is what its doc comment promises (shareGPTReference),
// and every request a replay sends is a conversation of the file, in order,
// up to one of its user messages (checkReplay).
func FuzzShareGPT(f *testing.F) {
	f.Add([]byte(shareGPTSample))
	f.Add([]byte(`[{"id": null, "conversations": [{"from": "USER", "value": ""}, {"from": "Model", "value": "\u0000\ud800"}]}]`))
	f.Add([]byte(`[{"conversations": [{"from": "system", "value": "s"}, {"from": "system", "value": "t"}, {"from": "human", "value": "u"}]}] `))
	f.Add([]byte(`[{"id": {"x": [1]}, "conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": ""}, {"from": "gpt", "value": "b"}]}]`))
	f.Add([]byte(`[{"id": "a", "conversations": [{"from": "human", "value": "u1"}, {"from": "bard", "value": "r1"}, {"from": "user", "value": "u2"}, {"from": "chatgpt", "value": "r2"}, {"from": "human", "value": "u3"}]},` +
		`{"id": "b", "conversations": [{"from": "gpt", "value": "first"}, {"from": "human", "value": "dropped"}]},` +
		`{"id": "c", "conversations": [{"from": "system", "value": "sys"}, {"from": "human", "value": "q"}, {"from": "tool", "value": "x"}, {"from": "human", "value": "after"}]}]`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		convs, err := ParseShareGPT(bytes.NewReader(data))
		if err != nil || len(convs) == 0 {
			return
		}
		want, err := shareGPTReference(data)
		if err != nil {
			t.Fatalf("ParseShareGPT accepted a file encoding/json refuses: %v", err)
		}
		if diff := cmp.Diff(want, convs); diff != "" {
			t.Fatalf("ParseShareGPT kept other than its doc comment says (-want +got):\n%s", diff)
		}
		for _, c := range convs {
			if len(c.Turns) == 0 || !utf8.ValidString(c.System) {
				t.Fatalf("accepted conversation %+v", c)
			}
			for i, tu := range c.Turns {
				if !utf8.ValidString(tu.User) || !utf8.ValidString(tu.Reply) || (tu.Reply == "" && i < len(c.Turns)-1) {
					t.Fatalf("conversation %q: accepted turn %d %+v", c.ID, i, tu)
				}
			}
		}
		path := filepath.Join(dir, "sharegpt.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		spec := Spec{Workload: W2, Model: "m", Rate: 5, Requests: 12, Seed: 3, ShareGPTPath: path}
		reqs, err := Generate(spec)
		if err != nil {
			t.Fatalf("a file ParseShareGPT accepts does not replay: %v", err)
		}
		checkReplay(t, spec.WithDefaults(), convs, reqs)
	})
}

// shareGPTRoleNames are the "from" names ParseShareGPT's doc comment
// lists, by the role a request gives their messages.
var shareGPTRoleNames = map[string][]string{
	"user":      {"human", "user"},
	"assistant": {"gpt", "assistant", "chatgpt", "bard", "bing", "model"},
	"system":    {"system"},
}

func shareGPTRole(from string) string {
	for role, names := range shareGPTRoleNames {
		for _, n := range names {
			if strings.EqualFold(from, n) {
				return role
			}
		}
	}
	return ""
}

// shareGPTReference is what ParseShareGPT's doc comment says it keeps of
// the file, read in one piece by encoding/json (which makes invalid UTF-8
// U+FFFD): of each conversation, an optional first system message, then
// user messages each followed by a non-empty reply, up to the first
// message that breaks that alternation; a conversation left without a user
// message is dropped.
func shareGPTReference(data []byte) ([]Conversation, error) {
	var raw []struct {
		ID            json.RawMessage `json:"id"`
		Conversations []struct {
			From  string `json:"from"`
			Value string `json:"value"`
		} `json:"conversations"`
	}
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&raw); err != nil {
		return nil, err
	}
	var out []Conversation
	for _, r := range raw {
		c := Conversation{ID: strings.Trim(string(r.ID), `"`)}
		msgs := r.Conversations
		if len(msgs) > 0 && shareGPTRole(msgs[0].From) == "system" {
			c.System, msgs = msgs[0].Value, msgs[1:]
		}
		for k, m := range msgs {
			if k%2 == 0 && shareGPTRole(m.From) == "user" {
				c.Turns = append(c.Turns, Turn{User: m.Value})
				continue
			}
			if k%2 == 1 && shareGPTRole(m.From) == "assistant" && m.Value != "" {
				c.Turns[len(c.Turns)-1].Reply = m.Value
				continue
			}
			break
		}
		if len(c.Turns) > 0 {
			out = append(out, c)
		}
	}
	return out, nil
}

// replayMessage is a message of a request's body.
type replayMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// checkReplay: the requests of each session are turns of one of convs, in
// order and one after another (a session that began before the run, or
// that the run's end cuts, shows some of them): each holds the system
// prompt (when not empty) and the turns up to its own user message, with
// the recorded replies between. Each asks for the recorded reply's tokens
// (at most maxReplayOutput) or, where there is no reply, for a drawn length,
// and fits spec.MaxPromptTokens.
func checkReplay(t *testing.T, spec Spec, convs []Conversation, reqs []Request) {
	t.Helper()
	sessions := map[string][]Request{}
	var order []string
	for _, r := range reqs {
		if r.Session == "" {
			t.Fatalf("request without a session: %s", r.Body)
		}
		if sessions[r.Session] == nil {
			order = append(order, r.Session)
		}
		sessions[r.Session] = append(sessions[r.Session], r)
	}
	for _, s := range order {
		rs := sessions[s]
		bodies := make([][]replayMessage, len(rs))
		for i, r := range rs {
			var body struct {
				Messages  []replayMessage `json:"messages"`
				MaxTokens int             `json:"max_tokens"`
			}
			if err := json.Unmarshal(r.Body, &body); err != nil || body.MaxTokens != r.MaxTokens {
				t.Fatalf("session %s request %d: %v, max_tokens %d, MaxTokens %d, body %s", s, i, err, body.MaxTokens, r.MaxTokens, r.Body)
			}
			bodies[i] = body.Messages
			if r.PromptTokens > spec.MaxPromptTokens || i > 0 && r.PromptTokens+r.MaxTokens > spec.MaxPromptTokens {
				t.Fatalf("session %s request %d: %d prompt tokens and %d to come, past %d", s, i, r.PromptTokens, r.MaxTokens, spec.MaxPromptTokens)
			}
		}
		if !slices.ContainsFunc(convs, func(c Conversation) bool { return replays(c, bodies, rs) }) {
			t.Fatalf("session %s sends messages no conversation of the file holds in that order: %+v", s, bodies)
		}
	}
}

// replays reports whether the requests rs, with messages bodies, are turns
// of c from some turn on, each asking for the output the replay gives it.
func replays(c Conversation, bodies [][]replayMessage, rs []Request) bool {
	for first := range c.Turns {
		if first+len(rs) <= len(c.Turns) && replaysFrom(c, first, bodies, rs) {
			return true
		}
	}
	return false
}

// replaysFrom is replays with the first request at c's turn first.
func replaysFrom(c Conversation, first int, bodies [][]replayMessage, rs []Request) bool {
	var prefix []replayMessage
	if c.System != "" {
		prefix = append(prefix, replayMessage{"system", c.System})
	}
	for k, tu := range c.Turns[:first+len(rs)] {
		prefix = append(prefix, replayMessage{"user", tu.User})
		if k < first {
			prefix = append(prefix, replayMessage{"assistant", tu.Reply})
			continue
		}
		i := k - first
		if !cmp.Equal(bodies[i], prefix) {
			return false
		}
		switch out := rs[i].MaxTokens; {
		case tu.Reply == "" && (out < chatReply.lo || out > chatReply.hi):
			return false
		case tu.Reply != "" && out != min(max(simTok.Count(tu.Reply), 1), maxReplayOutput):
			return false
		}
		prefix = append(prefix, replayMessage{"assistant", tu.Reply})
	}
	return true
}
