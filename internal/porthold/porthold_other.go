//go:build !unix

package porthold

import "net"

// A Hold is nothing where raw sockets are not at hand: the port is only
// chosen, and callers take their chances with it.
type Hold struct{}

// Port holds nothing here.
func Port(int) *Hold { return nil }

// Free picks a free loopback port, held by nothing once it returns.
func Free() (*Hold, int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, 0
	}
	defer ln.Close()
	return nil, ln.Addr().(*net.TCPAddr).Port
}

// Release does nothing.
func (h *Hold) Release() {}
