package sim

import (
	"io"
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
		{[]string{"stray"}, `unexpected argument "stray"`},
	}
	for _, tt := range tests {
		_, err := ParseFlags(tt.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseFlags(%v) = %v, want an error with %q", tt.args, err, tt.want)
		}
	}
}
