package measure

import (
	"syscall"
	"time"
)

// nanosleep blocks the calling thread for d with the kernel's high
// resolution timer (tens of microseconds late at most on an idle machine,
// where a Go timer shorter than a millisecond takes about a millisecond).
func nanosleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
