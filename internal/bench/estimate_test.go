package bench

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/openai"
)

func TestEstimateError(t *testing.T) {
	ms := time.Millisecond
	// outcome is a success sent lag after its schedule whose first token
	// came ttft after the schedule, with the gateway's estimate est.
	outcome := func(lag, ttft, est time.Duration) Outcome {
		return Outcome{Sched: time.Second, Sent: time.Second + lag, TTFT: ttft, Estimated: est}
	}
	for _, tt := range []struct {
		name      string
		outs      []Outcome
		want      *EstimateError
		tolerance float64
	}{
		{"no estimates", []Outcome{outcome(0, 100*ms, 0)}, nil, 0},
		{"exact", []Outcome{outcome(0, 100*ms, 100*ms), outcome(0, 50*ms, 50*ms)}, &EstimateError{Requests: 2}, 0},
		// Measured from the send: 100 ms after a 20 ms lag is 80 ms.
		{"counted from the send", []Outcome{outcome(20*ms, 100*ms, 80*ms)}, &EstimateError{Requests: 1}, 0},
		{"signs and the p90", []Outcome{
			outcome(0, 100*ms, 50*ms),  // -0.5
			outcome(0, 100*ms, 150*ms), // +0.5
			outcome(0, 100*ms, 300*ms), // +2
			outcome(0, 100*ms, 100*ms), // 0
		}, &EstimateError{Requests: 4, MeanAbs: 0.75, P90Abs: 2, Mean: 0.5}, 1e-9},
		{"never sent, or no first token: left out", []Outcome{
			{Sched: time.Second, TTFT: 100 * ms, Estimated: 10 * ms},
			{Sched: time.Second, Sent: time.Second, Estimated: 10 * ms},
		}, nil, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var tally estimateTally
			for i := range tt.outs {
				tally.add(&tt.outs[i])
			}
			got := tally.result()
			switch {
			case tt.want == nil || got == nil:
				if (tt.want == nil) != (got == nil) {
					t.Fatalf("got %+v, want %+v", got, tt.want)
				}
			case got.Requests != tt.want.Requests || math.Abs(got.MeanAbs-tt.want.MeanAbs) > tt.tolerance ||
				math.Abs(got.P90Abs-tt.want.P90Abs) > tt.tolerance || math.Abs(got.Mean-tt.want.Mean) > tt.tolerance:
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestEstimateHeader(t *testing.T) {
	for _, tt := range []struct {
		value string
		want  time.Duration
	}{
		{"0.25", 250 * time.Millisecond},
		{"1e-3", time.Millisecond},
		{"", 0}, {"-1", 0}, {"NaN", 0}, {"Inf", 0}, {"1e300", 0}, {"soon", 0},
	} {
		h := http.Header{}
		if tt.value != "" {
			h.Set(openai.HeaderEstimatedTTFT, tt.value)
		}
		var o Outcome
		readHeaders(h, &o)
		if o.Estimated != tt.want {
			t.Errorf("%q: Estimated %v, want %v", tt.value, o.Estimated, tt.want)
		}
	}
}
