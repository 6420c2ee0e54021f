package zmtp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// rawConn connects to a socket's endpoint as a plain TCP client.
func rawConn(t *testing.T, endpoint string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", strings.TrimPrefix(endpoint, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// handshakeAs makes a correct ZMTP 3.1 handshake as socket type self.
func handshakeAs(t *testing.T, nc net.Conn, self string) {
	t.Helper()
	if _, err := nc.Write(cat(appendGreeting(nil, 1), appendReady(nil, property{"Socket-Type", []byte(self)}))); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := readGreeting(nc); err != nil {
		t.Fatal(err)
	}
	fr := &frameReader{r: nc, max: 1 << 16}
	if _, cmd, err := fr.next(); err != nil || cmd == nil || cmd.name != "READY" {
		t.Fatalf("no READY from the socket: %v", err)
	}
}

// closedByPeer reports whether the other side closed nc within 5 s
// (reading whatever it still sends).
func closedByPeer(nc net.Conn) bool {
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, nc)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

func TestHostilePeers(t *testing.T) {
	ctx := testCtx(t)
	o := Options{MaxMessageSize: 1 << 20, HandshakeTimeout: 300 * time.Millisecond}
	pub := mustListenPub(t, ctx, loopback, o)
	good := mustDialSub(t, ctx, pub.Endpoint(), Options{}, "kv")
	eventually(t, "subscription", func() bool { return pub.subscribers("kv") == 1 })

	afterHandshake := func(b ...[]byte) func(net.Conn) {
		return func(nc net.Conn) {
			handshakeAs(t, nc, "SUB")
			nc.Write(cat(b...))
		}
	}
	for i, tc := range []struct {
		name string
		send func(net.Conn)
	}{
		{"HTTP request", func(nc net.Conn) { nc.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")) }},
		{"random bytes", func(nc net.Conn) { nc.Write(bytes.Repeat([]byte{0x5A, 0xC3, 0x00, 0xFF}, 1000)) }},
		{"wrong signature", func(nc net.Conn) { nc.Write(greetingWith(func(g []byte) { g[9] = 0 })) }},
		{"CURVE mechanism", func(nc net.Conn) { nc.Write(greetingWith(func(g []byte) { copy(g[12:], "CURVE") })) }},
		{"silence after connecting", func(net.Conn) {}},
		{"half a greeting", func(nc net.Conn) { nc.Write(greetingWith(nil)[:20]) }},
		{"PUB talking to PUB", func(nc net.Conn) {
			nc.Write(cat(appendGreeting(nil, 1), appendReady(nil, property{"Socket-Type", []byte("PUB")})))
		}},
		{"frame claiming 2^62 bytes", afterHandshake(longHeader(flagMore, 1<<62))},
		{"frame over the maximum", afterHandshake(longHeader(0, 1<<20+1))},
		{"many frames over the maximum", afterHandshake(appendMessage(nil, slices.Repeat([][]byte{make([]byte, 60000)}, 20)))},
		{"reserved flags", afterHandshake([]byte{0xF0, 1, 0})},
		{"truncated frame, then silence", afterHandshake(longHeader(0, 5000), make([]byte, 100))},
		{"subscription flood", afterHandshake(func() []byte {
			var b []byte
			for i := range 2000 {
				b = appendCommand(b, "SUBSCRIBE", []byte(strings.Repeat("t", 10)+string(rune('a'+i%26))+strings.Repeat("x", i)))
			}
			return b
		}())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			rejectedBefore := pub.Stats().Rejected
			nc := rawConn(t, pub.Endpoint())
			tc.send(nc)
			if tc.name == "truncated frame, then silence" {
				// A stalled frame holds only what arrived; the peer may keep
				// its connection, as any slow peer may. Hang up ourselves.
				time.Sleep(50 * time.Millisecond)
				nc.Close()
			} else if !closedByPeer(nc) {
				t.Fatal("the socket kept the hostile connection open")
			}
			if tc.name != "truncated frame, then silence" {
				eventually(t, "the rejection counted", func() bool { return pub.Stats().Rejected > rejectedBefore })
			}
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
				t.Fatalf("one hostile connection made the process allocate %d bytes", grew)
			}
			// The socket still serves its good subscriber.
			pub.Send(seqMsg("kv", uint64(i), nil))
			if _, seq := recvSeq(t, ctx, good); seq != uint64(i) {
				t.Fatalf("good subscriber got seq %d, want %d", seq, i)
			}
		})
	}
}

// TestRouterServesOthersDuringFlood: a peer that floods a ROUTER with
// messages neither stops it nor starves a well-behaved DEALER.
func TestRouterServesOthersDuringFlood(t *testing.T) {
	ctx := testCtx(t)
	r, err := ListenRouter(ctx, loopback, Options{HWM: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- serveReplay(sctx, r, 3) }()
	defer func() { stop(); <-served }()

	flooder := rawConn(t, r.Endpoint())
	handshakeAs(t, flooder, "DEALER")
	flooded := make(chan int64, 1)
	go func() {
		junk := bytes.Repeat(appendMessage(nil, [][]byte{{}, []byte("junk that is not a replay request")}), 1000)
		var n int64
		for sctx.Err() == nil {
			k, err := flooder.Write(junk)
			n += int64(k)
			if err != nil {
				break
			}
		}
		flooded <- n
	}()

	d, err := DialDealer(ctx, r.Endpoint(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for round := range 20 {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		seqs, err := replay(rctx, d, uint64(round))
		cancel()
		if err != nil || len(seqs) != 3 {
			t.Fatalf("round %d during the flood: %v, %v", round, seqs, err)
		}
	}
	flooder.Close()
	t.Logf("flooder wrote %d bytes while the dealer did 20 replays", <-flooded)
}
