package measure

import (
	"context"
	"time"
)

// SleepUntil waits until at: most of a long wait on a timer, the rest (and
// short waits, which the Go timer rounds up to a millisecond when the
// process is idle) in a nanosleep system call. False when ctx ended first.
func SleepUntil(ctx context.Context, at time.Time) bool {
	d := time.Until(at)
	if d > 3*time.Millisecond {
		t := time.NewTimer(d - 2*time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		d = time.Until(at)
	}
	if d > 0 {
		nanosleep(d)
	}
	return ctx.Err() == nil
}
