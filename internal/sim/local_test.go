package sim

import (
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/porthold/portholdtest"
)

// TestKilledLocalHoldsItsPorts: between Kill and Restart the HTTP port
// refuses connections yet stays taken, as do the KV event ports, so Restart
// gets them back however busy the machine; Close gives them up.
func TestKilledLocalHoldsItsPorts(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the bind rules checked here are Linux's")
	}
	withEvents := zeroLatencyConfig()
	withEvents.KVEvents = DefaultKVEventsConfig()
	withEvents.KVEvents.Enable, withEvents.KVEvents.Publisher = true, "zmq"
	withEvents.KVEvents.Endpoint, withEvents.KVEvents.ReplayEndpoint = "tcp://*:0", "tcp://*:0"
	for name, cfg := range map[string]Config{"plain": zeroLatencyConfig(), "kv events": withEvents} {
		t.Run(name, func(t *testing.T) { checkPortsHeld(t, cfg) })
	}
}

func checkPortsHeld(t *testing.T, cfg Config) {
	l, err := StartLocal(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// The client hangs up first, so that TIME_WAIT lands on its side and
	// cannot be what keeps the simulator's port taken.
	client := &http.Client{Transport: &http.Transport{}}
	get := func() error {
		resp, err := client.Get(l.URL() + "/health")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		client.CloseIdleConnections()
		return err
	}
	if err := get(); err != nil {
		t.Fatalf("a running simulator: %v", err)
	}
	ports := []string{l.Addr()}
	for _, e := range []string{l.KVEventsEndpoint(), l.KVReplayEndpoint()} {
		if e != "" {
			ports = append(ports, strings.TrimPrefix(e, "tcp://"))
		}
	}
	l.Kill()
	if err := get(); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a killed simulator's port answered %v, want connection refused", err)
	}
	for _, addr := range ports {
		if ln, err := portholdtest.BindNoReuse(addr); err == nil {
			ln.Close()
			t.Errorf("another program could bind %s, a killed simulator's port", addr)
		}
	}
	if err := l.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := get(); err != nil {
		t.Errorf("after the restart: %v", err)
	}
	l.Close()
	time.Sleep(50 * time.Millisecond) // the server's end of the connection closing
	ln, err := portholdtest.BindNoReuse(l.Addr())
	if err != nil {
		t.Fatalf("a closed simulator kept its port: %v", err)
	}
	ln.Close()
}
