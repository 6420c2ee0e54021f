package calibrate

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDesignWithin(t *testing.T) {
	d := DefaultDesign()
	tests := []struct {
		name   string
		maxLen int
		want   Design
	}{
		{"unknown_limit", 0, d},
		{"fits", 32768, d},
		{"shrinks", 4096, Design{Uncached: []int{14, 112, 448}, Cached: []int{0, 896, 3584}, Reps: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := d.within(tt.maxLen)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("within(%d) mismatch (-want +got):\n%s", tt.maxLen, diff)
			}
			if longest := got.Uncached[len(got.Uncached)-1] + got.Cached[len(got.Cached)-1]; tt.maxLen > 0 && longest > tt.maxLen-64 {
				t.Errorf("within(%d): longest prompt %d does not leave room", tt.maxLen, longest)
			}
		})
	}
}
