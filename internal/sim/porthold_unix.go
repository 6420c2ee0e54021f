//go:build unix

package sim

import "syscall"

// portHold keeps a killed simulator's port bound but not listening until
// Restart. Connections to it are refused just as to a closed port, but the
// kernel gives it neither to an outgoing connection as its local port nor
// to another ":0" listener; on a busy machine one of those took the port
// between Kill and Restart and the restart failed with "address already in
// use".
type portHold struct{ fd int }

// holdPort binds port on every IPv4 address without listening. It is best
// effort: nil when the bind fails, and the restart then takes its chances
// as before.
func holdPort(port int) *portHold {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil
	}
	syscall.CloseOnExec(fd)
	// SO_REUSEADDR lets the hold bind beside the killed server's TIME_WAIT
	// connections, and the restart's listener (Go sets it too) bind beside
	// the hold, so there is no moment the port is free.
	sa := syscall.SockaddrInet4{Port: port}
	if syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1) != nil || syscall.Bind(fd, &sa) != nil {
		_ = syscall.Close(fd)
		return nil
	}
	return &portHold{fd: fd}
}

// release gives the port back; safe on nil.
func (h *portHold) release() {
	if h != nil {
		_ = syscall.Close(h.fd)
	}
}
