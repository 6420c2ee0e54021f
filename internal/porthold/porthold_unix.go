//go:build unix

package porthold

import "syscall"

// A Hold keeps one port bound until Release.
type Hold struct{ fd int }

// Port binds port on every IPv4 address without listening. It is best
// effort: nil when the bind fails, and the caller then takes its chances
// with the port as before.
func Port(port int) *Hold {
	// SO_REUSEADDR lets the hold bind beside a killed server's TIME_WAIT
	// connections, and on Linux a restarted server's listener (Go sets it
	// too) bind beside the hold, so there is no moment the port is free.
	return bind(&syscall.SockaddrInet4{Port: port}, true)
}

// Free binds a port the kernel picks, without listening, and returns it
// with its hold; nil and 0 when it cannot.
func Free() (*Hold, int) {
	h := bind(&syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}, false)
	if h == nil {
		return nil, 0
	}
	sa, err := syscall.Getsockname(h.fd)
	if in4, ok := sa.(*syscall.SockaddrInet4); err == nil && ok {
		return h, in4.Port
	}
	h.Release()
	return nil, 0
}

// bind is a TCP socket bound to sa and not listening, nil when it fails.
func bind(sa *syscall.SockaddrInet4, reuse bool) *Hold {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil
	}
	syscall.CloseOnExec(fd)
	if reuse && syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1) != nil || syscall.Bind(fd, sa) != nil {
		_ = syscall.Close(fd)
		return nil
	}
	return &Hold{fd: fd}
}

// Release gives the port back; safe on nil and more than once.
func (h *Hold) Release() {
	if h != nil && h.fd >= 0 {
		_ = syscall.Close(h.fd)
		h.fd = -1
	}
}
