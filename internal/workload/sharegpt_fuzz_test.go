package workload

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

// FuzzShareGPT parses arbitrary files as ShareGPT and replays what it
// accepts: a dataset is downloaded from anywhere, and whatever it holds is
// either refused with an error or replayed as valid chat requests.
func FuzzShareGPT(f *testing.F) {
	f.Add([]byte(shareGPTSample))
	f.Add([]byte(`[{"id": null, "conversations": [{"from": "USER", "value": ""}, {"from": "Model", "value": "\u0000\ud800"}]}]`))
	f.Add([]byte(`[{"conversations": [{"from": "system", "value": "s"}, {"from": "system", "value": "t"}, {"from": "human", "value": "u"}]}] `))
	f.Add([]byte(`[{"id": {"x": [1]}, "conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": ""}, {"from": "gpt", "value": "b"}]}]`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		convs, err := ParseShareGPT(bytes.NewReader(data))
		if err != nil || len(convs) == 0 {
			return
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
		reqs, err := Generate(Spec{Workload: W2, Model: "m", Rate: 5, Requests: 12, Seed: 3, ShareGPTPath: path})
		if err != nil {
			t.Fatalf("a file ParseShareGPT accepts does not replay: %v", err)
		}
		for i, r := range reqs {
			var body struct {
				Messages []struct{ Role, Content string }
			}
			if err := json.Unmarshal(r.Body, &body); err != nil || len(body.Messages) == 0 || body.Messages[len(body.Messages)-1].Role != "user" {
				t.Fatalf("request %d: %v, body %s", i, err, r.Body)
			}
		}
	})
}
