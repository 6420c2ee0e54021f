package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/workload"
)

// captureCase is a request sent through a capturing gateway.
type captureCase struct {
	body        string
	outSource   string // the capture's output_source
	wantUsage   bool   // the response carries usage to compare with
	sharePrefix int    // the leading hash ids it shares with request 0
}

// usageOf reads the usage of a response, whole or streamed (its last
// event with one).
func usageOf(body string) (prompt, completion int, ok bool) {
	for _, part := range strings.Split(body, "\n") {
		part = strings.TrimPrefix(strings.TrimSpace(part), "data: ")
		var v struct {
			Usage *struct {
				Prompt     int `json:"prompt_tokens"`
				Completion int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal([]byte(part), &v) == nil && v.Usage != nil {
			prompt, completion, ok = v.Usage.Prompt, v.Usage.Completion, true
		}
	}
	return prompt, completion, ok
}

// TestCapture sends requests sharing a long system prompt, whole and
// streamed, through a gateway capturing them, then reads the capture with
// the trace reader inferrail-bench replays: one line per request, in
// arrival order, with the engine's prompt and output lengths, the block
// size, and hash ids naming the request's block hashes one to one; the
// prompts' words appear nowhere; the metrics count the lines.
func TestCapture(t *testing.T) {
	system := strings.Repeat("zebra quasar marmalade answers every question in full. ", 12)
	body := func(q string, extra string) string {
		return fmt.Sprintf(`{"model":"sim","messages":[{"role":"system","content":%q},{"role":"user","content":%q}],"max_tokens":%d%s}`,
			system, q, 3+len(q)%5, extra)
	}
	stream := `,"stream":true,"stream_options":{"include_usage":true}`
	cases := []captureCase{
		{body: body("What is the xylophone made of?", ""), outSource: "usage", wantUsage: true},
		{body: body("What is the xylophone made of?", ""), outSource: "usage", wantUsage: true, sharePrefix: -1},
		{body: body("And the oboe?", stream), outSource: "usage", wantUsage: true, sharePrefix: 10},
		{body: body("Tell me about the tuba, at length, please.", `,"stream":true`), outSource: "stream_chunks", sharePrefix: 10},
		{body: `{"model":"sim","messages":[{"role":"user","content":"nothing shared here at all"}],"max_tokens":2}`, outSource: "usage", wantUsage: true},
	}
	sims := fleetOf(t, 2, true)
	cfg := testConfig(t, sims)
	path := filepath.Join(t.TempDir(), "capture.jsonl")
	cfg.Observability.Capture.Path = path
	gw := startObserved(t, cfg, nil)
	mt := gw.g.tokenizers[testModel]
	var hashes [][]blockhash.Hash
	var usage [][2]int
	for i, c := range cases {
		resp, text := chat(t, gw.url, c.body)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, text)
		}
		p, out, ok := usageOf(text)
		if ok != c.wantUsage {
			t.Fatalf("request %d: usage %v, want %v", i, ok, c.wantUsage)
		}
		usage = append(usage, [2]int{p, out})
		pred, result := tokenizeBody(mt, testModel, []byte(c.body), true, noContext, nil)
		if result != tokOK {
			t.Fatalf("request %d: tokenized %s", i, result)
		}
		hashes = append(hashes, pred.hashes)
	}
	waitFor(t, "the capture to write five lines", 5*time.Second, func() bool {
		return metricValue(scrape(t, gw.admin), "inferrail_capture_written_total") == 5
	})
	if page := scrape(t, gw.admin); metricValue(page, "inferrail_capture_dropped_total") != 0 || !strings.Contains(page, "inferrail_capture_block_ids_forgotten_total 0") {
		t.Error("the capture dropped lines or forgot ids, or does not say")
	}
	gw.stop()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, word := range []string{"zebra", "xylophone", "tuba", "nothing"} {
		if strings.Contains(string(data), word) {
			t.Errorf("the capture holds the prompt's %q:\n%s", word, data)
		}
	}
	recs, err := workload.ParseTrace(strings.NewReader(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(cases) {
		t.Fatalf("%d lines, want %d:\n%s", len(recs), len(cases), data)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	ids := map[int]blockhash.Hash{}
	for i, r := range recs {
		c := cases[i]
		if i > 0 && r.Timestamp < recs[i-1].Timestamp {
			t.Errorf("line %d arrived at %v ms, before line %d at %v", i, r.Timestamp, i-1, recs[i-1].Timestamp)
		}
		if r.Model != testModel || r.BlockTokens != mt.blockSize || len(r.HashIDs) != len(hashes[i]) {
			t.Errorf("line %d: model %q, block size %d, %d ids; want %q, %d, %d", i, r.Model, r.BlockTokens, len(r.HashIDs), testModel, mt.blockSize, len(hashes[i]))
			continue
		}
		if c.wantUsage && (r.InputLength != usage[i][0] || r.OutputLength != usage[i][1]) {
			t.Errorf("line %d: %d in, %d out; the engine's usage says %d and %d", i, r.InputLength, r.OutputLength, usage[i][0], usage[i][1])
		}
		if !strings.Contains(lines[i], `"input_source":"tokenizer"`) || !strings.Contains(lines[i], `"output_source":"`+c.outSource+`"`) {
			t.Errorf("line %d: %s; want input_source tokenizer, output_source %s", i, lines[i], c.outSource)
		}
		for k, id := range r.HashIDs {
			if h, ok := ids[id]; ok && h != hashes[i][k] {
				t.Errorf("line %d block %d: id %d names two blocks", i, k, id)
			}
			ids[id] = hashes[i][k]
		}
		shared := 0
		for shared < min(len(r.HashIDs), len(recs[0].HashIDs)) && r.HashIDs[shared] == recs[0].HashIDs[shared] {
			shared++
		}
		want := c.sharePrefix
		if want < 0 {
			want = len(recs[0].HashIDs)
		}
		if i > 0 && shared < want || c.sharePrefix == 0 && i > 0 && shared != 0 {
			t.Errorf("line %d shares %d ids with line 0, want %d", i, shared, want)
		}
	}
	if len(ids) == 0 {
		t.Fatal("no hash ids at all")
	}
}

// TestCaptureEstimate: a model without a tokenizer is captured with an
// estimated input length and no hash ids.
func TestCaptureEstimate(t *testing.T) {
	sims := fleetOf(t, 1, true)
	cfg := testConfig(t, sims)
	cfg.Models[0].Tokenizer = ""
	path := filepath.Join(t.TempDir(), "capture.jsonl")
	cfg.Observability.Capture.Path = path
	gw := startObserved(t, cfg, nil)
	body := chatBody("how long is this prompt, roughly?", "")
	if resp, text := chat(t, gw.url, body); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, text)
	}
	// An engine's refusal is not captured.
	if resp, _ := chat(t, gw.url, `{"model":"sim","messages":[{"role":"user","content":"x"}],"max_tokens":-1}`); resp.StatusCode == 200 {
		t.Fatal("max_tokens -1 accepted")
	}
	gw.stop()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, _ := io.ReadAll(f)
	want := fmt.Sprintf(`"input_length":%d,"output_length":4,"hash_ids":[],"model":%q,"input_source":"estimate","output_source":"usage"}`,
		len(strings.Replace(body, `"sim"`, fmt.Sprintf("%q", testModel), 1))/bytesPerToken, testModel) // the body as sent on, its alias resolved
	if lines := strings.Split(strings.TrimSpace(string(data)), "\n"); len(lines) != 1 || !strings.HasSuffix(lines[0], want) {
		t.Errorf("capture:\n%s\nwant one line ending %s", data, want)
	}
}

// TestLogPathsMustBeFiles: a capture or decision log path that names a
// directory is refused when the gateway starts, naming the key, and the
// directory stays where it is (rotation would have moved it aside).
func TestLogPathsMustBeFiles(t *testing.T) {
	for _, key := range []string{"decision_log", "capture"} {
		dir := filepath.Join(t.TempDir(), "logs")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "keep"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg := testConfig(t, fleetOf(t, 1, true))
		if key == "capture" {
			cfg.Observability.Capture.Path = dir
		} else {
			cfg.Observability.DecisionLog.Path, cfg.Observability.DecisionLog.SampleRate = dir, 1
		}
		g, err := New(cfg, Options{})
		if err == nil {
			g.Close()
			t.Fatalf("%s on a directory: the gateway started", key)
		}
		if !strings.Contains(err.Error(), "observability."+key+".path") || !strings.Contains(err.Error(), "directory") {
			t.Errorf("%s on a directory: %v, want the key and what the path is", key, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "keep")); err != nil {
			t.Errorf("%s: the directory was moved: %v", key, err)
		}
	}
}
