package bench

import (
	"testing"

	"github.com/inferrail/inferrail/internal/workload"
)

// TestFileNameNumbers: rates and trace multipliers are written in full,
// as committed results name them, unless that would outgrow a file name.
func TestFileNameNumbers(t *testing.T) {
	tests := []struct {
		w    workload.Spec
		want string
	}{
		{workload.Spec{Workload: "w1", Rate: 4}, "w1_rate4_rep0_cost_model.json"},
		{workload.Spec{Workload: "w1", Rate: 0.5}, "w1_rate0.5_rep0_cost_model.json"},
		{workload.Spec{Workload: "trace", RateMultiplier: 0.2}, "trace_x0.2_rep0_cost_model.json"},
		{workload.Spec{Workload: "trace", RateMultiplier: 1e300}, "trace_x1e300_rep0_cost_model.json"},
		{workload.Spec{Workload: "trace", RateMultiplier: 1e-300}, "trace_x1e-300_rep0_cost_model.json"},
	}
	for _, tt := range tests {
		s := RunSpec{Policy: "cost_model", Workload: tt.w}
		if got := s.FileName(); got != tt.want {
			t.Errorf("FileName of %+v = %q, want %q", tt.w, got, tt.want)
		}
	}
}
