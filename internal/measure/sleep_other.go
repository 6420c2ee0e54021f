//go:build !linux

package measure

import "time"

// nanosleep waits d on a Go timer, which rounds short waits up.
func nanosleep(d time.Duration) { time.Sleep(d) }
