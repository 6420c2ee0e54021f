package sim

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferrail/inferrail/internal/porthold"
)

// FaultKind is a way a simulator can misbehave on demand.
type FaultKind int

const (
	FaultNone  FaultKind = iota
	FaultClose           // close the connection without answering
	FaultHang            // never answer; the request waits until its client leaves
	FaultFail            // answer Fault.Status (503 by default) in vLLM's error shape
	FaultDelay           // wait Fault.Delay, then answer normally
)

// Fault describes how a Local simulator misbehaves. The zero value is a
// healthy simulator. Faults apply to every path but /metrics, so probes see
// them too, unless SparesHealth is set.
type Fault struct {
	Kind         FaultKind
	Status       int
	Delay        time.Duration
	SparesHealth bool // /health keeps answering normally
}

// Local is a simulator serving HTTP on a loopback address in this process,
// for tests and benchmarks that need to kill, restart or break replicas.
// Safe for concurrent use.
type Local struct {
	cfg   Config
	addr  string // fixed at start, kept across restarts
	fault atomic.Pointer[Fault]
	// The KV event endpoints, fixed at the first start like addr, which
	// StartLocal makes before it shares l.
	kvEndpoint, kvReplay string

	mu      sync.Mutex
	srv     *Server
	httpSrv *http.Server
	cancel  context.CancelFunc
	done    chan struct{}
	holds   []*porthold.Hold // the ports, while killed
}

// StartLocal starts a simulator for cfg listening on addr ("127.0.0.1:0"
// picks a free port).
func StartLocal(cfg Config, addr string) (*Local, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &Local{cfg: cfg, addr: ln.Addr().String()} // restarts reuse the port
	l.fault.Store(&Fault{})
	if err := l.start(ln); err != nil {
		ln.Close()
		return nil, err
	}
	return l, nil
}

func (l *Local) start(ln net.Listener) error {
	srv, err := New(l.cfg, nil)
	if err != nil {
		return err
	}
	l.pinKVPorts(srv)
	ctx, cancel := context.WithCancel(context.Background())
	// Requests live in ctx too, so that Kill ends handlers a fault holds:
	// closing a connection does not cancel a request whose body was never
	// read.
	hs := &http.Server{Handler: l.faulty(srv.Handler()), Protocols: cleartextProtocols(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan struct{})
	go func() {
		defer close(done)
		engineDone := make(chan struct{})
		go func() { _ = srv.Run(ctx); close(engineDone) }()
		_ = hs.Serve(ln)
		<-engineDone
	}()
	l.srv, l.httpSrv, l.cancel, l.done = srv, hs, cancel, done
	return nil
}

// pinKVPorts makes a restart bind the event sockets where the first start
// did, when the config let the kernel pick their ports.
func (l *Local) pinKVPorts(srv *Server) {
	pin := func(endpoint *string, a net.Addr) {
		if a == nil || !strings.HasSuffix(*endpoint, ":0") {
			return
		}
		port := a.(*net.TCPAddr).Port - l.cfg.DataParallelRank // bindAddr adds the rank again
		*endpoint = "tcp://*:" + strconv.Itoa(port)
	}
	pin(&l.cfg.KVEvents.Endpoint, srv.KVEventsAddr())
	pin(&l.cfg.KVEvents.ReplayEndpoint, srv.KVReplayAddr())
	if l.kvEndpoint == "" { // the first start: restarts bind the same ports
		l.kvEndpoint = loopbackEndpoint(srv.KVEventsAddr())
		l.kvReplay = loopbackEndpoint(srv.KVReplayAddr())
	}
}

// KVEventsEndpoint is where a subscriber on this machine reads the
// simulator's KV events ("" when it publishes none); it stays the same
// across restarts.
func (l *Local) KVEventsEndpoint() string { return l.kvEndpoint }

// KVReplayEndpoint is where a client on this machine asks for a replay
// ("" without one).
func (l *Local) KVReplayEndpoint() string { return l.kvReplay }

func loopbackEndpoint(a net.Addr) string {
	if a == nil {
		return ""
	}
	return "tcp://127.0.0.1:" + strconv.Itoa(a.(*net.TCPAddr).Port)
}

// URL is the simulator's base URL.
func (l *Local) URL() string { return "http://" + l.addr }

// Addr is the host:port the simulator listens on.
func (l *Local) Addr() string { return l.addr }

// Server returns the running simulator, nil while killed.
func (l *Local) Server() *Server {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.srv
}

// SetFault makes the simulator misbehave from now on; Fault{} heals it.
func (l *Local) SetFault(f Fault) { l.fault.Store(&f) }

// Kill stops the simulator the hard way: the port stops accepting and every
// open connection is dropped mid-response.
func (l *Local) Kill() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.httpSrv == nil {
		return
	}
	_ = l.httpSrv.Close()
	l.cancel()
	<-l.done
	l.srv, l.httpSrv = nil, nil
	for _, a := range []string{l.addr, l.kvEndpoint, l.kvReplay} {
		if port := portOf(a); port > 0 {
			l.holds = append(l.holds, porthold.Port(port))
		}
	}
}

// portOf is the port at the end of an address or endpoint, 0 without one.
func portOf(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return 0
	}
	port, _ := strconv.Atoi(addr[i+1:])
	return port
}

// release gives back the ports Kill held.
func (l *Local) release() {
	for _, h := range l.holds {
		h.Release()
	}
	l.holds = nil
}

// Restart brings a killed simulator back on the same address, with an empty
// cache.
func (l *Local) Restart() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.httpSrv != nil {
		return fmt.Errorf("sim: %s is running", l.addr)
	}
	// On Linux the listener binds beside the hold (both reuse the
	// address), so the port is never free in between; where the system
	// refuses that, it binds again once the hold is gone. The engine's
	// event sockets bind after the release, in start.
	ln, err := net.Listen("tcp", l.addr)
	l.release()
	if err != nil {
		if ln, err = net.Listen("tcp", l.addr); err != nil {
			return err
		}
	}
	if err := l.start(ln); err != nil {
		ln.Close()
		return err
	}
	return nil
}

// Close kills the simulator for good and frees its port.
func (l *Local) Close() {
	l.Kill()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.release()
}

// faulty wraps h with the fault in effect.
func (l *Local) faulty(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := l.fault.Load()
		if f.Kind == FaultNone || r.URL.Path == "/metrics" || (f.SparesHealth && r.URL.Path == "/health") {
			h.ServeHTTP(w, r)
			return
		}
		switch f.Kind {
		case FaultClose:
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					_ = conn.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		case FaultHang:
			<-r.Context().Done()
		case FaultFail:
			status := f.Status
			if status == 0 {
				status = http.StatusServiceUnavailable
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = fmt.Fprintf(w, `{"error":{"message":"injected failure","type":%q,"param":null,"code":%d}}`, http.StatusText(status), status)
		case FaultDelay:
			select {
			case <-time.After(f.Delay):
				h.ServeHTTP(w, r)
			case <-r.Context().Done():
			}
		}
	})
}
