//go:build !unix

package sim

// portHold is a no-op where raw sockets are not at hand: a restart takes its
// chances with the port.
type portHold struct{}

func holdPort(int) *portHold { return nil }

func (h *portHold) release() {}
