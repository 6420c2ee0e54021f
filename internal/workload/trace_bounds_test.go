package workload

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Ids past a prompt's last block are checked but not kept: a line of
// millions of them must not cost memory for each.
func TestTraceKeepsIDsOfThePrompt(t *testing.T) {
	ids := strings.TrimSuffix(strings.Repeat("7,", 100000), ",")
	tests := []struct {
		name, line string
		want       int
	}{
		{"mooncake_block", `{"timestamp": 0, "input_length": 1100, "output_length": 1, "hash_ids": [` + ids + `]}`, 1100/TraceBlockTokens + 1},
		{"own_block", `{"timestamp": 0, "input_length": 40, "output_length": 1, "block_size": 16, "hash_ids": [` + ids + `]}`, 40/16 + 1},
		{"fewer_than_blocks", `{"timestamp": 0, "input_length": 4000, "output_length": 1, "hash_ids": [1, 2]}`, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := ParseTrace(strings.NewReader(tt.line))
			if err != nil {
				t.Fatal(err)
			}
			if got := len(recs[0].HashIDs); got != tt.want {
				t.Errorf("kept %d ids, want %d", got, tt.want)
			}
		})
	}
	// An id past the prompt is still checked.
	line := `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0, 1, 2, -5]}`
	if _, err := ParseTrace(strings.NewReader(line)); err == nil || err.Error() != "line 1: hash_ids[3]: must be >= 0" {
		t.Errorf("a bad id past the prompt: %v", err)
	}
}

// Unix epoch milliseconds replay from the first, and a scaled schedule
// past what a time.Duration holds is an error naming its line, unless
// the duration cuts it first.
func TestTraceEpochTimestamps(t *testing.T) {
	const epoch = 1764979200000
	line := `{"timestamp": %d, "input_length": 5, "output_length": 1, "hash_ids": [0]}` + "\n"
	path := writeTrace(t, fmt.Sprintf(line, epoch)+fmt.Sprintf(line, epoch+250))
	reqs := generate(t, Spec{Workload: Trace, Model: "m", TracePath: path})
	if len(reqs) != 2 || reqs[0].At != 0 || reqs[1].At != 250*time.Millisecond {
		t.Fatalf("epoch trace replayed at %v", reqs)
	}
	// 1e15 ms after the first: 31,700 years.
	far := writeTrace(t, fmt.Sprintf(line, 0)+"\n"+fmt.Sprintf(line, int64(maxTraceMillis)))
	tests := []struct {
		name string
		spec Spec
		want string // "" for no error
	}{
		{"unscaled", Spec{}, "trace " + far + ": line 3: timestamp 1000000000000000 is 1e+12 s after the first, scaled: past the longest schedule"},
		{"time_scale", Spec{TimeScale: 10}, "line 3: timestamp"},
		{"tiny_multiplier", Spec{RateMultiplier: 1e-300}, "line 3: timestamp"},
		{"cut_by_duration", Spec{Duration: time.Second}, ""},
		{"cut_by_requests", Spec{Requests: 1}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			spec.Workload, spec.Model, spec.TracePath = Trace, "m", far
			reqs, err := Generate(spec)
			if tt.want == "" {
				if err != nil || len(reqs) != 1 {
					t.Errorf("%d requests, %v; want the first alone", len(reqs), err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
	// A tiny multiplier on a short trace overflows as well.
	short := writeTrace(t, fmt.Sprintf(line, 0)+fmt.Sprintf(line, 1))
	if _, err := Generate(Spec{Workload: Trace, Model: "m", TracePath: short, RateMultiplier: 1e-300}); err == nil ||
		!strings.Contains(err.Error(), "line 2: timestamp 1 is") {
		t.Errorf("a tiny multiplier: %v", err)
	}
}

// A replay stops when its context is done, and GenerateTrace does not
// read the trace's file again.
func TestGenerateTraceStops(t *testing.T) {
	recs, err := ParseTrace(strings.NewReader(sampleTrace))
	if err != nil {
		t.Fatal(err)
	}
	spec := Spec{Workload: Trace, Model: "m", TracePath: "/nonexistent/trace.jsonl"}
	reqs, err := GenerateTrace(t.Context(), spec, recs)
	if err != nil || reqs.Len() != len(recs) {
		t.Fatalf("%d requests, %v; want %d from the records", reqs.Len(), err, len(recs))
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := GenerateTrace(ctx, spec, recs); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled replay: %v", err)
	}
}

// A trace or a ShareGPT file is read whole before its replay, so its
// records are bounded (MaxRequests): a pipe that never ended grew
// inferrail-bench by 150 MB a second, 3 GB in 20 s, where it now stops at
// the first record past the bound and names it.
func TestReadBoundsRecords(t *testing.T) {
	line := `{"timestamp": 0, "input_length": 10, "output_length": 1}` + "\n"
	conv := `{"id": "a", "conversations": [{"from": "human", "value": "hi"}]}`
	dropped := `{"id": "b", "conversations": [{"from": "gpt", "value": "hi"}]}`
	tests := []struct {
		name, kind, in string
		most, kept     int
		err            string
	}{
		{"trace_at_the_bound", "trace", strings.Repeat(line, 3), 3, 3, ""},
		{"trace_past_it", "trace", line + "\n" + strings.Repeat(line, 3), 3, 0, "line 5: more than the 3 requests a run may make"},
		{"trace_blank_lines_past_it", "trace", strings.Repeat(line, 3) + "\n\n", 3, 3, ""},
		{"sharegpt_at_the_bound", "sharegpt", "[" + conv + "," + dropped + "," + conv + "]", 2, 2, ""},
		{"sharegpt_past_it", "sharegpt", "[" + conv + "," + dropped + "," + conv + "," + conv + "]", 2, 0, "conversation 3: more than the 2 conversations"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n int
			var err error
			if tt.kind == "trace" {
				var recs []TraceRecord
				recs, err = parseTrace(strings.NewReader(tt.in), tt.most)
				n = len(recs)
			} else {
				var convs []Conversation
				convs, err = parseShareGPT(strings.NewReader(tt.in), tt.most)
				n = len(convs)
			}
			if tt.err == "" && (err != nil || n != tt.kept) {
				t.Fatalf("read %d, %v; want %d", n, err, tt.kept)
			}
			if tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("read %d, %v; want %q", n, err, tt.err)
			}
		})
	}
}
