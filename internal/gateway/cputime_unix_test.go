//go:build unix

package gateway

import (
	"syscall"
	"time"
)

// processCPU is the CPU time this process has used, user and system: what
// a benchmark costs, whoever else shares the machine.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
