// Package portholdtest has what tests of held ports share.
package portholdtest

import (
	"context"
	"errors"
	"net"
	"syscall"
)

// BindNoReuse listens on addr without SO_REUSEADDR, as most programs (but
// Go's own listeners) do, so it fails while anything else has the port.
func BindNoReuse(addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = noReuseAddr(fd)
		})
		return errors.Join(err, serr)
	}}
	return lc.Listen(context.Background(), "tcp", addr)
}
