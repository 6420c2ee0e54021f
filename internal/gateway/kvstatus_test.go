package gateway

import (
	"math"
	"testing"
)

// TestSeqGauge: the gauge of a sequence is its low 53 bits, exact in a
// float64, so that consecutive sequence numbers are consecutive values
// wherever the engine's count starts, and it wraps to 0 at 2^53.
func TestSeqGauge(t *testing.T) {
	for _, tt := range []struct {
		seq  uint64
		want float64
	}{
		{0, 0},
		{1, 1},
		{1<<53 - 1, 1<<53 - 1},
		{1 << 53, 0},
		{1<<53 + 1, 1},
		{1<<63 + 5, 5},
		{1<<63 + 6, 6},
		{math.MaxUint64 - 1, 1<<53 - 2},
		{math.MaxUint64, 1<<53 - 1},
	} {
		if got := seqGauge(tt.seq); got != tt.want {
			t.Errorf("seqGauge(%d) = %v, want %v", tt.seq, got, tt.want)
		}
	}
}
