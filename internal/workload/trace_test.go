package workload

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// sampleTrace is a small Mooncake-format trace: requests 0 and 2 share two
// blocks, request 3 shares request 0's first block, request 1 shares
// nothing, and request 4 has fewer hash ids than blocks.
const sampleTrace = `{"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [1, 2, 3]}
{"timestamp": 500, "input_length": 300, "output_length": 20, "hash_ids": [4]}

{"timestamp": 1500, "input_length": 1500, "output_length": 30, "hash_ids": [1, 2, 5], "extra": "ignored"}
{"timestamp": 2000.5, "input_length": 600, "output_length": 5, "hash_ids": [1, 6]}
{"timestamp": 4000, "input_length": 1024, "output_length": 1, "hash_ids": [7]}
`

func writeTrace(t testing.TB, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestParseTrace(t *testing.T) {
	recs, err := ParseTrace(strings.NewReader(sampleTrace))
	if err != nil {
		t.Fatal(err)
	}
	want := []TraceRecord{
		{0, 1100, 10, []int{1, 2, 3}, 0, "", 0},
		{500, 300, 20, []int{4}, 0, "", 0},
		{1500, 1500, 30, []int{1, 2, 5}, 0, "", 0},
		{2000.5, 600, 5, []int{1, 6}, 0, "", 0},
		{4000, 1024, 1, []int{7}, 0, "", 0},
	}
	if !slices.EqualFunc(recs, want, equalRecord) {
		t.Errorf("ParseTrace = %+v, want %+v", recs, want)
	}
}

// TestParseTraceAsPythonWritesIt: counts written as floats with no
// fraction, as json.dumps writes a Python float or pandas a column with
// gaps, and a byte order mark before the first line read as the same
// trace.
func TestParseTraceAsPythonWritesIt(t *testing.T) {
	text := "\uFEFF" + `{"timestamp": 0, "input_length": 1100.0, "output_length": 1e1, "hash_ids": [1.0, 2, 3]}
{"timestamp": 500, "input_length": 300, "output_length": 20, "hash_ids": [4], "block_size": 512.0}`
	recs, err := ParseTrace(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := []TraceRecord{{0, 1100, 10, []int{1, 2, 3}, 0, "", 0}, {500, 300, 20, []int{4}, 512, "", 0}}
	if !slices.EqualFunc(recs, want, equalRecord) {
		t.Errorf("ParseTrace = %+v, want %+v", recs, want)
	}
}

func equalRecord(a, b TraceRecord) bool {
	return a.Timestamp == b.Timestamp && a.InputLength == b.InputLength &&
		a.OutputLength == b.OutputLength && slices.Equal(a.HashIDs, b.HashIDs) && a.BlockTokens == b.BlockTokens && a.Model == b.Model
}

func TestParseTraceErrors(t *testing.T) {
	good := `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}`
	tests := []struct {
		name, line, want string
	}{
		{"not_json", `{"timestamp": 0,`, "line 3: unexpected end of JSON input"},
		{"not_object", `[1, 2]`, "line 3: want a JSON object, not [1, 2]"},
		{"utf16", "\xff\xfe{\x00\"\x00", `line 3: want a JSON object, not "\xff\xfe{\x00\"\x00"`},
		{"no_timestamp", `{"input_length": 10, "output_length": 1, "hash_ids": []}`, "line 3: timestamp: required"},
		{"negative_timestamp", `{"timestamp": -1, "input_length": 10, "output_length": 1, "hash_ids": []}`, "line 3: timestamp: must be >= 0"},
		{"huge_timestamp", `{"timestamp": 1e308, "input_length": 10, "output_length": 1, "hash_ids": []}`, "line 3: timestamp: must be at most 1e+15"},
		{"string_timestamp", `{"timestamp": "1", "input_length": 10, "output_length": 1}`, "line 3: timestamp: want a number, not \"1\""},
		{"zero_input", `{"timestamp": 1, "input_length": 0, "output_length": 1, "hash_ids": []}`, "line 3: input_length: must be >= 1"},
		{"no_output", `{"timestamp": 1, "input_length": 5, "hash_ids": []}`, "line 3: output_length: required"},
		{"fractional_input", `{"timestamp": 1, "input_length": 5.5, "output_length": 1}`, "line 3: input_length: must be a whole number, not 5.5"},
		{"fractional_id", `{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [0, 1.5]}`, "line 3: hash_ids[1]: must be a whole number, not 1.5"},
		{"id_past_int64", `{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [0, 18446744073709551616]}`, "line 3: hash_ids[1]: 18446744073709551616 is out of range (at most 2^63-1 either way)"},
		{"decimal_id_past_2^53", `{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [0, 1e19]}`, "line 3: hash_ids[1]: 1e19 is out of range written as a decimal (at most 2^53 so; 2^63-1 as an integer)"},
		{"input_past_int64", `{"timestamp": 1, "input_length": 99999999999999999999, "output_length": 1}`, "line 3: input_length: 99999999999999999999 is out of range (at most 2^63-1 either way)"},
		{"string_ids", `{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}`, "line 3: hash_ids[0]: want a number, not \"a\""},
		{"null_id", `{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [0, null]}`, "line 3: hash_ids[1]: want a number, not null"},
		{"nested_ids", `{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [[0]]}`, "line 3: hash_ids[0]: want a number, not an array or object"},
		{"ids_not_array", `{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": 7}`, "line 3: hash_ids: want an array of numbers, not 7"},
		{"quoted_length", `{"timestamp": 1, "input_length": "5", "output_length": 1}`, "line 3: input_length: want a number, not \"5\""},
		{"negative_id", `{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [0, -3]}`, "line 3: hash_ids[1]: must be >= 0"},
		{"huge_input", `{"timestamp": 1, "input_length": 99999999, "output_length": 1}`, "line 3: input_length: must be <= 1048576"},
		{"input_past_bound", `{"timestamp": 1, "input_length": 1048577, "output_length": 1}`, "line 3: input_length: must be <= 1048576"},
		{"output_past_bound", `{"timestamp": 1, "input_length": 1, "output_length": 16777216}`, "line 3: output_length: must be <= 1048576"},
		{"zero_block", `{"timestamp": 1, "input_length": 5, "output_length": 1, "block_size": 0}`, "line 3: block_size: must be between 1 and 65536"},
		{"huge_block", `{"timestamp": 1, "input_length": 5, "output_length": 1, "block_size": 65537}`, "line 3: block_size: must be between 1 and 65536"},
		{"model_number", `{"timestamp": 1, "input_length": 5, "output_length": 1, "model": 3}`, "line 3: model: want a string, not 3"},
		{"several", `{"timestamp": -1, "input_length": 0, "output_length": 0}`, "line 3: timestamp: must be >= 0\ninput_length: must be >= 1\noutput_length: must be >= 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseTrace(strings.NewReader(good + "\n\n" + tt.line + "\n" + good))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("ParseTrace error = %v, want prefix %q", err, tt.want)
			}
		})
	}
	// A line too long to read is named by its number, blank lines counted.
	long := good + "\n\n\n" + good + "\n\n" + `{"hash_ids": [` + strings.Repeat("0,", maxTraceLine/2) + "0]}\n"
	if _, err := ParseTrace(strings.NewReader(long)); err == nil || err.Error() != "line 6: longer than a trace line may be (64 MiB)" {
		t.Errorf("a line over the bound: %v, want line 6 and the bound named", err)
	}
	// A file of no records names itself.
	for _, text := range []string{"", "\n  \n\r\n"} {
		empty := writeTrace(t, text)
		if _, err := Generate(Spec{Workload: Trace, Model: "m", TracePath: empty}); err == nil ||
			err.Error() != "trace "+empty+": no requests (the file has no records)" {
			t.Errorf("an empty trace %q: %v", text, err)
		}
	}
	path := writeTrace(t, good+"\n"+tests[0].line)
	_, err := Generate(Spec{Workload: Trace, Model: "m", TracePath: path})
	if err == nil || !strings.Contains(err.Error(), path+": line 2:") {
		t.Errorf("Generate error = %v, want the path and line 2", err)
	}
}

func TestTraceReplay(t *testing.T) {
	path := writeTrace(t, sampleTrace)
	reqs := generate(t, Spec{Workload: Trace, Model: "m", TracePath: path, Seed: 9})
	recs, _ := ParseTrace(strings.NewReader(sampleTrace))
	if len(reqs) != len(recs) {
		t.Fatalf("%d requests, want %d", len(reqs), len(recs))
	}
	contents := make([]string, len(reqs))
	for i, r := range reqs {
		if want := time.Duration(recs[i].Timestamp * float64(time.Millisecond)); r.At != want {
			t.Errorf("request %d at %v, want %v", i, r.At, want)
		}
		if r.MaxTokens != recs[i].OutputLength || r.Kind != Trace {
			t.Errorf("request %d: max_tokens %d, kind %s", i, r.MaxTokens, r.Kind)
		}
		b := decode(t, r)
		if len(b.Messages) != 1 || b.Messages[0].Role != "user" {
			t.Fatalf("request %d: %.200s", i, r.Body)
		}
		contents[i] = b.Messages[0].Content
		if got := tokens(contents[i]); got != recs[i].InputLength {
			t.Errorf("request %d: %d prompt tokens, want input_length %d", i, got, recs[i].InputLength)
		}
	}
	// Equal hash ids are equal text, block by block; others differ at once.
	block := func(i, k int) []int {
		ids := simTok.Encode(nil, contents[i])
		return ids[k*TraceBlockTokens : min((k+1)*TraceBlockTokens, len(ids))]
	}
	shared := []struct{ a, b, blocks int }{{0, 2, 2}, {0, 3, 1}}
	for _, s := range shared {
		for k := range s.blocks {
			if !slices.Equal(block(s.a, k), block(s.b, k)) {
				t.Errorf("requests %d and %d differ in block %d", s.a, s.b, k)
			}
		}
		if a, b := block(s.a, s.blocks), block(s.b, s.blocks); a[0] == b[0] && a[1] == b[1] {
			t.Errorf("requests %d and %d share the start of block %d", s.a, s.b, s.blocks)
		}
	}
	if contents[1][:20] == contents[0][:20] {
		t.Error("requests 0 and 1 share their start")
	}
	// The oracle sees the sharing: request 2 reuses 1,024 tokens and
	// request 3 reuses 512, less what the template's 3 leading tokens
	// leave of their last 16-token block.
	an, err := Analyze(reqs, 16)
	if err != nil {
		t.Fatal(err)
	}
	want := []int{0, 0, (3 + 1024) / 16 * 16, (3 + 512) / 16 * 16, 0}
	if !slices.Equal(an.CachedTokens, want) {
		t.Errorf("CachedTokens = %v, want %v", an.CachedTokens, want)
	}
}

// captureTrace is what inferrail-gateway's traffic capture writes: blocks
// of 16 tokens, ids numbered per model. Requests 0 and 1 share two
// blocks; request 2 has request 0's ids, of another model.
const captureTrace = `{"timestamp":0.000,"input_length":70,"output_length":4,"hash_ids":[0,1,2,3],"model":"a","block_size":16,"input_source":"tokenizer","output_source":"usage"}
{"timestamp":12.500,"input_length":40,"output_length":2,"hash_ids":[0,1],"model":"a","block_size":16,"input_source":"tokenizer","output_source":"usage"}
{"timestamp":30.125,"input_length":70,"output_length":1,"hash_ids":[0,1,2,3],"model":"b","block_size":16,"input_source":"tokenizer","output_source":"stream_chunks"}
`

// TestTraceBlockSize replays a capture: a hash id is block_size tokens,
// and ids of two models are two texts.
func TestTraceBlockSize(t *testing.T) {
	recs, err := ParseTrace(strings.NewReader(captureTrace))
	if err != nil {
		t.Fatal(err)
	}
	if r := recs[2]; r.BlockTokens != 16 || r.Model != "b" || r.Timestamp != 30.125 {
		t.Fatalf("record 2 = %+v", r)
	}
	path := writeTrace(t, captureTrace)
	if model, bs := TraceShape(recs); model != "" || bs != 16 {
		t.Errorf("TraceShape = %q, %d; want no one model, 16", model, bs)
	}
	sample, _ := ParseTrace(strings.NewReader(sampleTrace))
	if model, bs := TraceShape(sample); model != "" || bs != 0 {
		t.Errorf("TraceShape of a Mooncake trace = %q, %d; want nothing stated", model, bs)
	}
	if model, _ := TraceShape(recs[:1]); model != "a" {
		t.Errorf("TraceShape of one model's trace = %q", model)
	}
	reqs := generate(t, Spec{Workload: Trace, Model: "m", TracePath: path, Seed: 3})
	ids := make([][]int, len(reqs))
	for i, r := range reqs {
		content := decode(t, r).Messages[0].Content
		ids[i] = simTok.Encode(nil, content)
		if len(ids[i]) != recs[i].InputLength {
			t.Errorf("request %d: %d tokens, want %d", i, len(ids[i]), recs[i].InputLength)
		}
	}
	if !slices.Equal(ids[0][:32], ids[1][:32]) || slices.Equal(ids[0][32:34], ids[1][32:34]) {
		t.Errorf("requests 0 and 1 do not share exactly their first 32 tokens:\n%v\n%v", ids[0], ids[1])
	}
	if slices.Equal(ids[0][:2], ids[2][:2]) {
		t.Error("the same ids of two models are the same text")
	}
}

func TestTraceScaleAndCut(t *testing.T) {
	path := writeTrace(t, sampleTrace)
	tests := []struct {
		name string
		spec Spec
		want []time.Duration
	}{
		{"time_scale", Spec{TimeScale: 2}, []time.Duration{0, time.Second, 3 * time.Second, 4001 * time.Millisecond, 8 * time.Second}},
		{"rate_multiplier", Spec{RateMultiplier: 4}, []time.Duration{0, 125 * time.Millisecond, 375 * time.Millisecond, 500125 * time.Microsecond, time.Second}},
		{"requests", Spec{Requests: 2}, []time.Duration{0, 500 * time.Millisecond}},
		{"duration", Spec{Duration: 2 * time.Second}, []time.Duration{0, 500 * time.Millisecond, 1500 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			spec.Workload, spec.Model, spec.TracePath = Trace, "m", path
			var got []time.Duration
			for _, r := range generate(t, spec) {
				got = append(got, r.At)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("arrivals %v, want %v", got, tt.want)
			}
		})
	}
	// Unsorted timestamps are replayed in order, from the earliest.
	reqs := generate(t, Spec{Workload: Trace, Model: "m", TracePath: writeTrace(t,
		`{"timestamp": 900, "input_length": 5, "output_length": 2, "hash_ids": [0]}
{"timestamp": 100, "input_length": 7, "output_length": 3, "hash_ids": [1]}`)})
	if reqs[0].At != 0 || reqs[1].At != 800*time.Millisecond || reqs[0].MaxTokens != 3 {
		t.Errorf("unsorted trace: %v %v %d", reqs[0].At, reqs[1].At, reqs[0].MaxTokens)
	}
	// MaxPromptTokens cuts long inputs.
	reqs = generate(t, Spec{Workload: Trace, Model: "m", TracePath: path, MaxPromptTokens: 700})
	for i, r := range reqs {
		if c := tokens(decode(t, r).Messages[0].Content); c > 700 {
			t.Errorf("request %d: %d tokens, want at most 700", i, c)
		}
	}
}

// FuzzTrace checks that ParseTrace never panics, that what it accepts is
// valid, and that the records it returns read back the same.
func FuzzTrace(f *testing.F) {
	f.Add([]byte(sampleTrace))
	f.Add([]byte(`{"timestamp": 1e308, "input_length": 1, "output_length": 1, "hash_ids": []}`))
	f.Add([]byte("{\"timestamp\": 0}\n\n\r\n[]"))
	f.Add([]byte(captureTrace))
	f.Add([]byte(`{"timestamp": 0, "input_length": 9223372036854775807, "output_length": 1, "hash_ids": [0, 99999999999]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		recs, err := ParseTrace(bytes.NewReader(data))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "line ") {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		var out bytes.Buffer
		for _, r := range recs {
			if r.Timestamp < 0 || r.InputLength < 1 || r.OutputLength < 1 || r.InputLength > maxTraceTokens || slices.ContainsFunc(r.HashIDs, func(id int) bool { return id < 0 }) {
				t.Fatalf("accepted an invalid record %+v", r)
			}
			if r.BlockTokens < 0 || r.BlockTokens > maxTraceBlock || r.Block() < 1 {
				t.Fatalf("accepted an invalid block size %+v", r)
			}
			v := map[string]any{
				"timestamp": r.Timestamp, "input_length": r.InputLength, "output_length": r.OutputLength, "hash_ids": r.HashIDs, "model": r.Model,
			}
			if r.BlockTokens > 0 {
				v["block_size"] = r.BlockTokens
			}
			line, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&out, "%s\n", line)
		}
		back, err := ParseTrace(&out)
		if err != nil || !slices.EqualFunc(back, recs, equalRecord) {
			t.Fatalf("records %+v read back as %+v, %v", recs, back, err)
		}
	})
}

// ReadTraceDigest gives the SHA-256 of the trace's bytes, so two traces at
// one path tell apart; a spec recording one digest is not generated from a
// trace that has another (edited in place since it was planned), and a
// digest is refused where it means nothing.
func TestTraceDigest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	if err := os.WriteFile(path, []byte(sampleTrace), 0o644); err != nil {
		t.Fatal(err)
	}
	_, digest, err := ReadTraceDigest(t.Context(), path)
	if want := fmt.Sprintf("%x", sha256.Sum256([]byte(sampleTrace))); err != nil || digest != want {
		t.Fatalf("ReadTraceDigest = %q, %v; want %q", digest, err, want)
	}
	spec := Spec{Workload: Trace, Model: "m", TracePath: path, TraceDigest: digest}
	if _, err := GenerateRequests(t.Context(), spec); err != nil {
		t.Errorf("the trace as planned: %v", err)
	}
	edited := strings.Replace(sampleTrace, `"output_length": 10`, `"output_length": 11`, 1)
	if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := GenerateRequests(t.Context(), spec); err == nil || !strings.Contains(err.Error(), "not those planned") {
		t.Errorf("a trace edited since it was planned: %v, want it refused", err)
	}
	for _, tt := range []struct {
		name string
		spec Spec
		want string
	}{
		{"not_hex", Spec{Workload: Trace, Model: "m", TracePath: path, TraceDigest: "abc"}, "trace_digest: must be a SHA-256"},
		{"not_a_trace", Spec{Workload: W1, Model: "m", Rate: 1, Requests: 1, TraceDigest: digest}, "trace_digest: only for the trace workload"},
	} {
		if err := tt.spec.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Validate() = %v, want %q", tt.name, err, tt.want)
		}
	}
}
