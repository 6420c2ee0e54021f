//go:build !unix

package portholdtest

// noReuseAddr leaves the socket as it is where the option is not at hand.
func noReuseAddr(uintptr) error { return nil }
