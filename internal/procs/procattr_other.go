//go:build !linux

package procs

import "syscall"

// peerProcAttr is nil: only Linux can tie a child's life to its parent's.
func peerProcAttr() *syscall.SysProcAttr { return nil }

// childProcAttr is nil, as peerProcAttr.
func childProcAttr() *syscall.SysProcAttr { return nil }
