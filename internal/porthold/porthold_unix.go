//go:build unix

package porthold

import "syscall"

// A Hold keeps one port bound until Release.
type Hold struct{ fd int }

// Port binds port on every IPv4 address without listening. It is best
// effort: nil when the bind fails, and the caller then takes its chances
// with the port as before.
func Port(port int) *Hold {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil
	}
	syscall.CloseOnExec(fd)
	// SO_REUSEADDR lets the hold bind beside a killed server's TIME_WAIT
	// connections, and on Linux a restarted server's listener (Go sets it
	// too) bind beside the hold, so there is no moment the port is free.
	sa := syscall.SockaddrInet4{Port: port}
	if syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1) != nil || syscall.Bind(fd, &sa) != nil {
		_ = syscall.Close(fd)
		return nil
	}
	return &Hold{fd: fd}
}

// Free binds a port the kernel picks, without listening, and returns it
// with its hold; nil and 0 when it cannot.
func Free() (*Hold, int) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, 0
	}
	syscall.CloseOnExec(fd)
	if syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}) != nil {
		_ = syscall.Close(fd)
		return nil, 0
	}
	sa, err := syscall.Getsockname(fd)
	in4, ok := sa.(*syscall.SockaddrInet4)
	if err != nil || !ok {
		_ = syscall.Close(fd)
		return nil, 0
	}
	return &Hold{fd: fd}, in4.Port
}

// Release gives the port back; safe on nil and more than once.
func (h *Hold) Release() {
	if h != nil && h.fd >= 0 {
		_ = syscall.Close(h.fd)
		h.fd = -1
	}
}
