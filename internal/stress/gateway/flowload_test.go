package gateway

import (
	"strings"
	"testing"
	"time"
)

// gw-flow's durations are refused as durations, not nanoseconds.
func TestFlowLoadDurationErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  func(*FlowLoad)
		want string
	}{
		{"leg", func(l *FlowLoad) { l.Leg = -1500 * time.Millisecond }, "leg: must be positive, got -1.5s"},
		{"capacity", func(l *FlowLoad) { l.Capacity = 0 }, "capacity: must be positive, got 0s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := DefaultConfig().Flow
			tt.set(&l)
			if err := l.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
}
