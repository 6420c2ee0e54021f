package sim

import (
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	o, err := ParseFlags([]string{"--port", "8001", "--served-model-name", "a", "b", "--block-size", "32",
		"--no-enable-prefix-caching", "--prefill-token-us", "50", "--decode-token-ms", "10", "--zero-latency"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Port != 8001 || !slices.Equal(o.ServedModelNames, []string{"a", "b"}) || o.BlockSize != 32 ||
		o.EnablePrefixCaching || !o.ZeroLatency || o.Latency.PrefillToken != 50*time.Microsecond || o.Latency.DecodeToken != 10*time.Millisecond {
		t.Errorf("parsed %+v", o)
	}
	if o.ModelName() != "a" || !o.Serves("b") || o.Serves("inferrail/sim-8b") {
		t.Error("served model names not honoured")
	}
}

// TestStartupRefusals: the simulator refuses what vLLM refuses, with a
// message naming the flags.
func TestStartupRefusals(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--num-gpu-blocks-override", "100", "--max-model-len", "4096"}, "--max-model-len 4096"},
		{[]string{"--max-num-batched-tokens", "64", "--max-num-seqs", "128"}, "--max-num-batched-tokens (64) must be greater than or equal to --max-num-seqs (128)"},
		{[]string{"--block-size", "0"}, "--block-size: must be positive"},
		{[]string{"--decode-token-ms", "-1"}, "--decode-token-ms: must be a non-negative number"},
		{[]string{"--port", "70000"}, "--port"},
		{[]string{"--speedup", "0.5"}, "--speedup: must be within 1-1000"},
		{[]string{"--speedup", "NaN"}, "--speedup: must be within 1-1000"},
		{[]string{"stray"}, `unexpected argument "stray"`},
		// Too large is not negative (a review's finding: it said so).
		{[]string{"--prefill-pair-ns", "1e308"}, "--prefill-pair-ns: must be at most 9223372036854775807 (what a duration of nanoseconds holds), got 1e+308"},
		{[]string{"--decode-token-ms", "1e13"}, "--decode-token-ms: must be at most 9223372036854 (what a duration of nanoseconds holds), got 1e+13"},
		{[]string{"--prefill-pair-ns", "-Inf"}, "--prefill-pair-ns: must be a non-negative number, got -Inf"},
		// 2^63 ns exactly, which a duration does not hold either.
		{[]string{"--prefill-fixed-ms", "9223372036854.7758"}, "--prefill-fixed-ms: must be at most 9223372036854 (what a duration of nanoseconds holds), got 9.223372036854775e+12"},
		{[]string{"--block-size", "100000000"}, "--block-size: must be at most 4096, got 100000000"},
		{[]string{"--otlp-traces-endpoint", "grpc://127.0.0.1:99999"}, "--otlp-traces-endpoint: port 99999: must be within 1-65535"},
		{[]string{"--otlp-traces-endpoint", "127.0.0.1:0"}, "--otlp-traces-endpoint: port 0"},
		// 2^63-1 used to overflow the check and pass it; 2^62 did not.
		{[]string{"--max-model-len", "9223372036854775807"}, "less than one request of --max-model-len 9223372036854775807 needs (576460752303423488 blocks)"},
		{[]string{"--max-model-len", "4611686018427387904"}, "--max-model-len 4611686018427387904 needs"},
		// Pools the machine cannot hold: 2^62 and 2^63-1 used to panic
		// in makeslice, 1e8 and 1e9 to run out of memory.
		{[]string{"--num-gpu-blocks-override", "100000000"}, "--num-gpu-blocks-override: must be at most 4194304, got 100000000"},
		{[]string{"--num-gpu-blocks-override", "1000000000"}, "--num-gpu-blocks-override: must be at most 4194304"},
		{[]string{"--num-gpu-blocks-override", "4611686018427387904"}, "--num-gpu-blocks-override: must be at most 4194304"},
		{[]string{"--num-gpu-blocks-override", "9223372036854775807"}, "--num-gpu-blocks-override: must be at most 4194304"},
		// vLLM's serve refuses to start so, before loading anything.
		{[]string{"--enable-auto-tool-choice"}, "--enable-auto-tool-choice requires --tool-call-parser"},
		{[]string{"--enable-auto-tool-choice", "--tool-call-parser", ""}, "--enable-auto-tool-choice requires --tool-call-parser"},
	}
	for _, tt := range tests {
		_, err := ParseFlags(tt.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseFlags(%v) = %v, want an error with %q", tt.args, err, tt.want)
		}
	}
}

// TestToolChoiceFlags: --enable-auto-tool-choice starts only with a
// --tool-call-parser, whose name is not checked; the parser alone starts
// too, as in vLLM, without turning "auto" on.
func TestToolChoiceFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantErr  string
		wantAuto bool
		parser   string
	}{
		{"neither", nil, "", false, ""},
		{"both", []string{"--enable-auto-tool-choice", "--tool-call-parser", "hermes"}, "", true, "hermes"},
		{"both, = form", []string{"--enable-auto-tool-choice=true", "--tool-call-parser=llama3_json"}, "", true, "llama3_json"},
		{"any parser name", []string{"--enable-auto-tool-choice", "--tool-call-parser", "my_plugin_parser"}, "", true, "my_plugin_parser"},
		{"parser alone", []string{"--tool-call-parser", "hermes"}, "", false, "hermes"},
		{"flag alone", []string{"--enable-auto-tool-choice"}, "--enable-auto-tool-choice requires --tool-call-parser", false, ""},
		{"empty parser", []string{"--enable-auto-tool-choice", "--tool-call-parser="}, "--enable-auto-tool-choice requires --tool-call-parser", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := ParseFlags(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseFlags(%v) = %v, want an error with %q", tt.args, err, tt.wantErr)
				}
				// The engine refuses the config too, not only the flags.
				if _, err := New(o.Config, nil); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("New = %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.EnableAutoToolChoice != tt.wantAuto || o.ToolCallParser != tt.parser {
				t.Errorf("auto %v parser %q, want %v %q", o.EnableAutoToolChoice, o.ToolCallParser, tt.wantAuto, tt.parser)
			}
		})
	}
}

// TestLargestPoolStarts: the largest pool --num-gpu-blocks-override
// accepts is a pool the simulator builds.
func TestLargestPoolStarts(t *testing.T) {
	o, err := ParseFlags([]string{"--num-gpu-blocks-override", "4194304"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if p := newBlockPool(o.NumGPUBlocks, true); p.usable() != MaxNumGPUBlocks-1 {
		t.Errorf("usable blocks = %d, want %d", p.usable(), MaxNumGPUBlocks-1)
	}
}

// TestSpeedup: --speedup N prices every step at 1/N of what the latency
// flags say, the flags given or the defaults, so P(u, c) and a decode step
// shrink alike.
func TestSpeedup(t *testing.T) {
	base, err := ParseFlags([]string{"--prefill-token-us", "80", "--decode-token-ms", "12"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := ParseFlags([]string{"--prefill-token-us", "80", "--decode-token-ms", "12", "--speedup", "4"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	for _, uc := range [][2]int{{1, 0}, {512, 0}, {2048, 6000}, {7, 30000}} {
		if got, want := fast.Latency.Prefill(uc[0], uc[1]), base.Latency.Prefill(uc[0], uc[1])/4; !near(got, want) {
			t.Errorf("P(%d, %d) at speedup 4 = %v, want %v", uc[0], uc[1], got, want)
		}
	}
	for _, n := range []int{1, 2, 256} {
		if got, want := fast.Latency.Decode(n), base.Latency.Decode(n)/4; !near(got, want) {
			t.Errorf("decode of %d at speedup 4 = %v, want %v", n, got, want)
		}
	}
}
