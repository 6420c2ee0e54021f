package zmtp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const loopback = "tcp://127.0.0.1:0"

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 5 ms for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// subscribers counts the PUB's peers whose subscriptions match topic, so a
// test can wait for subscriptions to land instead of losing its first
// messages to ZeroMQ's slow-joiner effect.
func (p *Pub) subscribers(topic string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for peer := range p.peers {
		if peer.matches([]byte(topic)) {
			n++
		}
	}
	return n
}

func seqMsg(topic string, seq uint64, payload []byte) [][]byte {
	return [][]byte{[]byte(topic), binary.BigEndian.AppendUint64(nil, seq), payload}
}

func mustListenPub(t *testing.T, ctx context.Context, endpoint string, o Options) *Pub {
	t.Helper()
	p, err := ListenPub(ctx, endpoint, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func mustDialSub(t *testing.T, ctx context.Context, endpoint string, o Options, topics ...string) *Sub {
	t.Helper()
	s, err := DialSub(ctx, endpoint, o, topics...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func recvSeq(t *testing.T, ctx context.Context, s *Sub) (string, uint64) {
	t.Helper()
	m, err := s.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 3 || len(m[1]) != 8 {
		t.Fatalf("got %q, want [topic, seq, payload]", m)
	}
	return string(m[0]), binary.BigEndian.Uint64(m[1])
}

func TestPubSubTopicsAndSubscribers(t *testing.T) {
	ctx := testCtx(t)
	pub := mustListenPub(t, ctx, loopback, Options{})
	kv := mustDialSub(t, ctx, pub.Endpoint(), Options{}, "kv")
	all := mustDialSub(t, ctx, pub.Endpoint(), Options{}, "")
	two := mustDialSub(t, ctx, pub.Endpoint(), Options{}, "kv-events", "other")
	eventually(t, "subscriptions", func() bool { return pub.subscribers("kv-events") == 3 && pub.subscribers("other") == 2 })

	topics := []string{"kv-events", "other", "kv", "x", "kv-events"}
	for i, topic := range topics {
		if err := pub.Send(seqMsg(topic, uint64(i), []byte("payload"))); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		s    *Sub
		want []uint64
	}{{kv, []uint64{0, 2, 4}}, {all, []uint64{0, 1, 2, 3, 4}}, {two, []uint64{0, 1, 4}}} {
		for _, want := range tc.want {
			topic, seq := recvSeq(t, ctx, tc.s)
			if seq != want || topic != topics[want] {
				t.Fatalf("got %s/%d, want %s/%d", topic, seq, topics[want], want)
			}
		}
	}
	if st := pub.Stats(); st.Peers != 3 || st.Subscribers != 3 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSlowSubscriberDoesNotBlockOthers(t *testing.T) {
	ctx := testCtx(t)
	pub := mustListenPub(t, ctx, loopback, Options{HWM: 1000})
	fast := mustDialSub(t, ctx, pub.Endpoint(), Options{}, "kv")
	slow := mustDialSub(t, ctx, pub.Endpoint(), Options{HWM: 10}, "kv") // never read
	_ = slow
	eventually(t, "subscriptions", func() bool { return pub.subscribers("kv") == 2 })

	payload := bytes.Repeat([]byte{0xAB}, 4096)
	const batch = 500
	var seq uint64
	for batches := 0; pub.Stats().Dropped == 0 || batches < 4; batches++ {
		if batches > 100 { // 200 MB into a reader that never reads
			t.Fatal("the slow subscriber's queue never filled")
		}
		start := time.Now()
		for range batch {
			if err := pub.Send(seqMsg("kv", seq, payload)); err != nil {
				t.Fatal(err)
			}
			seq++
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("%d sends took %v: Send blocked", batch, d)
		}
		for want := seq - batch; want < seq; want++ {
			if _, got := recvSeq(t, ctx, fast); got != want {
				t.Fatalf("fast subscriber got seq %d, want %d", got, want)
			}
		}
	}
	t.Logf("sent %d messages of %d bytes; dropped %d for the slow subscriber", seq, len(payload), pub.Stats().Dropped)
}

func TestSubReconnectsWhenPubRestarts(t *testing.T) {
	ctx := testCtx(t)
	o := Options{ReconnectInterval: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond}
	pub := mustListenPub(t, ctx, loopback, Options{})
	endpoint := pub.Endpoint()
	sub := mustDialSub(t, ctx, endpoint, o, "kv")
	eventually(t, "subscription", func() bool { return pub.subscribers("kv") == 1 })
	pub.Send(seqMsg("kv", 1, nil))
	if _, seq := recvSeq(t, ctx, sub); seq != 1 {
		t.Fatalf("seq %d", seq)
	}

	pub.Close()
	if _, err := sub.Recv(ctx); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("after the publisher went away: %v, want ErrDisconnected", err)
	}
	time.Sleep(50 * time.Millisecond) // let the SUB fail to connect to nothing at least once
	var pub2 *Pub
	eventually(t, "rebinding the same port", func() bool {
		var err error
		pub2, err = ListenPub(ctx, endpoint, Options{})
		return err == nil
	})
	defer pub2.Close()
	eventually(t, "resubscription", func() bool { return pub2.subscribers("kv") == 1 })
	pub2.Send(seqMsg("kv", 2, nil))
	if _, seq := recvSeq(t, ctx, sub); seq != 2 {
		t.Fatalf("seq %d", seq)
	}
	if st := sub.Stats(); st.Connects != 2 || st.Disconnects != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSubWaitsForLatePub(t *testing.T) {
	ctx := testCtx(t)
	// Find a free port, then connect before anything listens on it.
	probe := mustListenPub(t, ctx, loopback, Options{})
	endpoint := probe.Endpoint()
	probe.Close()
	sub := mustDialSub(t, ctx, endpoint, Options{ReconnectInterval: 10 * time.Millisecond}, "")
	time.Sleep(100 * time.Millisecond)
	pub := mustListenPub(t, ctx, endpoint, Options{})
	eventually(t, "subscription", func() bool { return pub.subscribers("") == 1 })
	pub.Send(seqMsg("", 7, nil))
	if _, seq := recvSeq(t, ctx, sub); seq != 7 {
		t.Fatalf("seq %d", seq)
	}
}

// serveReplay answers vLLM-style replay requests [id, "", start_seq] on r
// with n batches from start_seq and the end marker, until ctx ends.
func serveReplay(ctx context.Context, r *Router, n uint64) error {
	for {
		m, err := r.Recv(ctx)
		if err != nil {
			return err
		}
		if len(m) != 3 || len(m[1]) != 0 || len(m[2]) != 8 {
			continue // vLLM logs and ignores anything else
		}
		id, start := m[0], binary.BigEndian.Uint64(m[2])
		for seq := start; seq < start+n; seq++ {
			if err := r.Send(append([][]byte{id, {}}, seqMsg("kv", seq, fmt.Appendf(nil, "batch %d", seq))...)); err != nil {
				return err
			}
		}
		if err := r.Send([][]byte{id, {}, {}, bytes.Repeat([]byte{0xFF}, 8), {}}); err != nil {
			return err
		}
	}
}

// replay asks d for a replay from start and returns the sequence numbers
// until the end marker.
func replay(ctx context.Context, d *Dealer, start uint64) ([]uint64, error) {
	if err := d.Send(ctx, [][]byte{{}, binary.BigEndian.AppendUint64(nil, start)}); err != nil {
		return nil, err
	}
	var seqs []uint64
	for {
		m, err := d.Recv(ctx)
		if err != nil {
			return nil, err
		}
		if len(m) != 4 || len(m[0]) != 0 || len(m[2]) != 8 {
			return nil, fmt.Errorf("bad reply %q", m)
		}
		if len(m[1]) == 0 && bytes.Equal(m[2], bytes.Repeat([]byte{0xFF}, 8)) {
			return seqs, nil
		}
		seqs = append(seqs, binary.BigEndian.Uint64(m[2]))
	}
}

func TestRouterDealerReplay(t *testing.T) {
	ctx := testCtx(t)
	r, err := ListenRouter(ctx, loopback, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- serveReplay(sctx, r, 5) }()
	defer func() { stop(); <-done }()

	idents := [][]byte{nil, []byte("gateway-a"), nil, []byte("gateway-b")}
	errs := make(chan error, len(idents))
	for i, id := range idents {
		d, err := DialDealer(ctx, r.Endpoint(), Options{Identity: id})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		go func() {
			for round := range 3 {
				start := uint64(100*i + round)
				seqs, err := replay(ctx, d, start)
				if err == nil && (len(seqs) != 5 || seqs[0] != start || seqs[4] != start+4) {
					err = fmt.Errorf("dealer %d: replay from %d got %v", i, start, seqs)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range idents {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := r.Peers(); n != len(idents) {
		t.Fatalf("%d peers, want %d", n, len(idents))
	}
	if err := r.Send([][]byte{[]byte("nobody"), {}}); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("send to an unknown identity: %v", err)
	}
}

func TestRouterRefusesDuplicateIdentity(t *testing.T) {
	ctx := testCtx(t)
	r, err := ListenRouter(ctx, loopback, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	d1, _ := DialDealer(ctx, r.Endpoint(), Options{Identity: []byte("same")})
	defer d1.Close()
	eventually(t, "first dealer", func() bool { return r.Peers() == 1 })
	d2, _ := DialDealer(ctx, r.Endpoint(), Options{Identity: []byte("same"), ReconnectInterval: time.Hour})
	defer d2.Close()
	eventually(t, "refusal", func() bool { return r.Rejected() == 1 })
	if r.Peers() != 1 {
		t.Fatalf("%d peers", r.Peers())
	}
	if err := r.Send([][]byte{[]byte("same"), []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	if m, err := d1.Recv(ctx); err != nil || string(m[0]) != "hi" {
		t.Fatalf("%q, %v", m, err)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pub := mustListenPub(t, ctx, loopback, Options{})
	sub := mustDialSub(t, ctx, pub.Endpoint(), Options{}, "")
	d, _ := DialDealer(ctx, "tcp://127.0.0.1:1", Options{}) // nothing listens there
	eventually(t, "subscription", func() bool { return pub.subscribers("") == 1 })
	cancel() // ending the context closes every socket made with it
	if _, err := sub.Recv(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Recv after the context ended: %v", err)
	}
	if err := pub.Send(seqMsg("", 1, nil)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after the context ended: %v", err)
	}
	pub.Close()
	sub.Close()
	d.Close()
	// goleak in TestMain checks that no goroutine outlived Close.
}

// TestSubBoundsQueuedBytes: a SUB whose consumer does not read holds at
// most MaxQueuedBytes of frames (a message larger than that alone), then
// stops reading; once the consumer reads, every message arrives in order
// and nothing stays counted as queued.
func TestSubBoundsQueuedBytes(t *testing.T) {
	ctx := testCtx(t)
	const limit, size, n = 1 << 20, 200 << 10, 40
	pub := mustListenPub(t, ctx, loopback, Options{})
	sub := mustDialSub(t, ctx, pub.Endpoint(), Options{MaxQueuedBytes: limit}, "kv")
	eventually(t, "the subscription", func() bool { return pub.subscribers("kv") == 1 })

	payload := bytes.Repeat([]byte{0xCD}, size)
	for i := range n {
		if err := pub.Send(seqMsg("kv", uint64(i), payload)); err != nil {
			t.Fatal(err)
		}
	}
	msgBytes := int64(len("kv") + 8 + size)
	// The SUB fills to its limit and no further.
	eventually(t, "the SUB's queue to fill", func() bool { return sub.Queued()+msgBytes > limit })
	for range 20 {
		if q := sub.Queued(); q > limit {
			t.Fatalf("%d bytes queued, over the %d allowed", q, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for want := range uint64(n) {
		if _, got := recvSeq(t, ctx, sub); got != want {
			t.Fatalf("got seq %d, want %d", got, want)
		}
		if q := sub.Queued(); q > limit {
			t.Fatalf("%d bytes queued while reading, over the %d allowed", q, limit)
		}
	}
	if q := sub.Queued(); q != 0 {
		t.Errorf("%d bytes still counted as queued after every message was read", q)
	}
	if st := pub.Stats(); st.Dropped != 0 {
		t.Errorf("the PUB dropped %d messages", st.Dropped)
	}

	// A message larger than the limit still passes, alone.
	big := bytes.Repeat([]byte{0xEF}, 2*limit)
	if err := pub.Send(seqMsg("kv", n, big)); err != nil {
		t.Fatal(err)
	}
	if _, got := recvSeq(t, ctx, sub); got != n {
		t.Fatalf("got seq %d after the large message, want %d", got, n)
	}
}

// TestSubSaysWhyItDisconnected: the ErrDisconnected that Recv returns
// wraps why the connection went, so a consumer can tell a message past
// MaxMessageSize (its events lost at every such message) from a
// publisher that closed. Both read as a bare ErrDisconnected before.
func TestSubSaysWhyItDisconnected(t *testing.T) {
	ctx := testCtx(t)
	pub := mustListenPub(t, ctx, loopback, Options{})
	o := Options{MaxMessageSize: 1000, ReconnectInterval: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond}
	sub := mustDialSub(t, ctx, pub.Endpoint(), o, "kv")
	eventually(t, "subscription", func() bool { return pub.subscribers("kv") == 1 })
	if err := pub.Send(seqMsg("kv", 1, make([]byte, 2000))); err != nil {
		t.Fatal(err)
	}
	_, err := sub.Recv(ctx)
	if !errors.Is(err, ErrDisconnected) || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("after a message past the bound: %v, want ErrDisconnected wrapping ErrTooLarge", err)
	}
	eventually(t, "the second connection", func() bool { return sub.Stats().Connects == 2 })
	pub.Close()
	_, err = sub.Recv(ctx)
	if !errors.Is(err, ErrDisconnected) || errors.Is(err, ErrTooLarge) {
		t.Fatalf("after the publisher closed: %v, want ErrDisconnected and not ErrTooLarge", err)
	}
}
