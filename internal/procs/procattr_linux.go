package procs

import "syscall"

// peerProcAttr has the kernel send a peer router SIGTERM if the harness
// dies without stopping it (SIGKILL, a crash), so no router outlives a run.
// The signal follows the thread that started the child; the Go runtime only
// ends threads that a goroutine locked and left, which the harness never
// does.
func peerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}

// childProcAttr has the kernel kill any other child (a simulator, a
// gateway) with the harness, so none keeps holding its ports after a
// SIGKILLed sweep; as for peerProcAttr, the thread caveat holds.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
