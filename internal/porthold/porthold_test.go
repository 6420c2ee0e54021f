package porthold

import (
	"errors"
	"net"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"github.com/inferrail/inferrail/internal/porthold/portholdtest"
)

// TestHeldPortRefusesAndStaysTaken: a held port, whether picked by the
// kernel (Free) or named (Port), refuses connections, cannot be bound by
// another, and is free again after Release (twice is harmless).
func TestHeldPortRefusesAndStaysTaken(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the bind rules checked here are Linux's")
	}
	free, freePort := Free()
	if free == nil || freePort == 0 {
		t.Fatal("Free held nothing")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	named := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	for name, c := range map[string]struct {
		h    *Hold
		port int
	}{"free": {free, freePort}, "named": {Port(named), named}} {
		if c.h == nil {
			t.Fatalf("%s: no hold on %d", name, c.port)
		}
		addr := "127.0.0.1:" + strconv.Itoa(c.port)
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			t.Errorf("%s: a held port accepted a connection", name)
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s: dialing a held port: %v, want connection refused", name, err)
		}
		if ln, err := portholdtest.BindNoReuse(addr); err == nil {
			ln.Close()
			t.Errorf("%s: another socket bound a held port", name)
		}
		c.h.Release()
		c.h.Release()
		ln, err := portholdtest.BindNoReuse(addr)
		if err != nil {
			t.Fatalf("%s: a released port stays taken: %v", name, err)
		}
		ln.Close()
	}
	var none *Hold
	none.Release() // a failed hold is nil, and releasing it is harmless
}
