package gateway

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/events"
	"github.com/inferrail/inferrail/internal/index"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/zmtp"
)

// The hostile-stream tests put a gateway in index mode exact in front of
// one real simulator (the HTTP side) whose kv_events endpoints are a
// scripted engine: a zmtp PUB behind a TCP front that can, per connection,
// speak garbage instead, and a zmtp ROUTER whose replay answers the test
// chooses. Heartbeats (empty batches) keep a healthy stream from looking
// silent while the load loop sends prompts.

const (
	hostileCapacity = 64                     // the replica's kv_capacity_blocks
	hostileSilence  = 400 * time.Millisecond // index.kv_events.silence
	hostileRing     = 256                    // batches the scripted engine keeps for replay
)

// Replay behaviours of a scriptedPublisher.
const (
	replayHonest   int32 = iota // every buffered batch from start on, then the end marker
	replaySilent                // never answers
	replayDisorder              // start+1, then start
	replayGarbage               // random frames
)

type sentBatch struct {
	seq     uint64
	payload []byte
}

// scriptedPublisher is a KV event publisher the test drives.
type scriptedPublisher struct {
	t      testing.TB
	enc    events.Encoding
	topic  []byte
	pub    *zmtp.Pub
	router *zmtp.Router
	front  net.Listener

	hostile   atomic.Pointer[func(net.Conn)] // nil: connections reach pub
	hostiles  atomic.Uint64                  // connections served by hostile
	replay    atomic.Int32
	replays   atomic.Uint64 // replay requests received
	heartbeat atomic.Bool

	mu    sync.Mutex
	next  uint64
	ring  []sentBatch
	conns map[net.Conn]struct{} // proxied to pub
}

func newScriptedPublisher(t testing.TB, enc events.Encoding, pubHWM int) *scriptedPublisher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pub, err := zmtp.ListenPub(ctx, "tcp://127.0.0.1:0", zmtp.Options{HWM: pubHWM})
	if err != nil {
		t.Fatal(err)
	}
	router, err := zmtp.ListenRouter(ctx, "tcp://127.0.0.1:0", zmtp.Options{HWM: 2 * hostileRing})
	if err != nil {
		t.Fatal(err)
	}
	front, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &scriptedPublisher{t: t, enc: enc, topic: []byte("kv"), pub: pub, router: router, front: front, conns: map[net.Conn]struct{}{}}
	e.heartbeat.Store(true)
	var wg sync.WaitGroup
	wg.Go(func() { e.accept(ctx) })
	wg.Go(func() { e.serveReplays(ctx) })
	wg.Go(func() {
		for sleepCtx(ctx, 50*time.Millisecond) {
			if e.heartbeat.Load() {
				e.publish(&events.Batch{TS: 1})
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		front.Close()
		e.setHostile(nil)
		pub.Close()
		router.Close()
		wg.Wait()
	})
	return e
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// endpoint is where the gateway subscribes: the front.
func (e *scriptedPublisher) endpoint() string { return "tcp://" + e.front.Addr().String() }

// accept serves the front: each connection goes to hostile, or is piped
// to the PUB.
func (e *scriptedPublisher) accept(ctx context.Context) {
	for {
		nc, err := e.front.Accept()
		if err != nil {
			return
		}
		if h := e.hostile.Load(); h != nil {
			e.hostiles.Add(1)
			go func() {
				drained := make(chan struct{})
				go func() { io.Copy(io.Discard, nc); close(drained) }() // whatever the SUB says
				(*h)(nc)
				// Half-close and let the SUB hang up: closing with its bytes
				// unread would reset the connection, and a reset can discard
				// what h sent before the SUB reads it.
				nc.(*net.TCPConn).CloseWrite()
				select {
				case <-drained:
				case <-time.After(2 * time.Second):
				}
				nc.Close()
			}()
			continue
		}
		up, err := (&net.Dialer{}).DialContext(ctx, "tcp", e.pub.Addr().String())
		if err != nil {
			nc.Close()
			continue
		}
		e.mu.Lock()
		e.conns[nc] = struct{}{}
		e.mu.Unlock()
		go func() {
			go func() { io.Copy(up, nc); up.Close() }()
			io.Copy(nc, up)
			nc.Close()
			e.mu.Lock()
			delete(e.conns, nc)
			e.mu.Unlock()
		}()
	}
}

// setHostile makes the front serve new connections with h (nil: the PUB)
// and drops the connections piped to the PUB, so that the gateway's SUB
// reconnects and meets h.
func (e *scriptedPublisher) setHostile(h func(net.Conn)) {
	if h == nil {
		e.hostile.Store(nil)
	} else {
		e.hostile.Store(&h)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for nc := range e.conns {
		nc.Close()
	}
}

// publish sends b as the next batch.
func (e *scriptedPublisher) publish(b *events.Batch) uint64 {
	return e.sendAt(^uint64(0), events.AppendBatch(nil, b, e.enc))
}

// sendAt sends payload with sequence number seq (^0: the next one) and
// keeps it for replay; the sequence goes on after seq.
func (e *scriptedPublisher) sendAt(seq uint64, payload []byte) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if seq == ^uint64(0) {
		seq = e.next
	}
	e.next = seq + 1
	e.ring = append(e.ring, sentBatch{seq, payload})
	if len(e.ring) > hostileRing {
		e.ring = append(e.ring[:0], e.ring[len(e.ring)-hostileRing:]...)
	}
	// A send racing the rig's shutdown finds the socket closed: nothing
	// is lost that the test still reads.
	if err := e.pub.Send([][]byte{e.topic, binary.BigEndian.AppendUint64(nil, seq), payload}); err != nil && !errors.Is(err, zmtp.ErrClosed) {
		e.t.Error(err)
	}
	return seq
}

// skip burns n sequence numbers without sending them (lost batches).
func (e *scriptedPublisher) skip(n uint64) {
	e.mu.Lock()
	e.next += n
	e.mu.Unlock()
}

// restart starts the sequence over with an empty buffer, as a restarted
// engine does, and publishes a first batch.
func (e *scriptedPublisher) restart() {
	e.mu.Lock()
	e.next, e.ring = 0, nil
	e.mu.Unlock()
	e.publish(&events.Batch{TS: 2, Events: []events.Event{{Kind: events.AllBlocksCleared}}})
}

// serveReplays answers the ROUTER's requests as e.replay says.
func (e *scriptedPublisher) serveReplays(ctx context.Context) {
	rng := rand.New(rand.NewPCG(7, 7))
	for {
		req, err := e.router.Recv(ctx)
		if err != nil {
			return
		}
		e.replays.Add(1)
		if len(req) != 3 || len(req[2]) != 8 {
			continue
		}
		id, start := req[0], binary.BigEndian.Uint64(req[2])
		e.mu.Lock()
		var answer []sentBatch
		for _, b := range e.ring {
			if b.seq >= start {
				answer = append(answer, b)
			}
		}
		e.mu.Unlock()
		end := [][]byte{id, {}, {}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, {}}
		switch e.replay.Load() {
		case replaySilent:
			continue
		case replayDisorder:
			empty := events.AppendBatch(nil, &events.Batch{TS: 1}, e.enc)
			for _, seq := range []uint64{start + 1, start} {
				e.router.Send([][]byte{id, {}, e.topic, binary.BigEndian.AppendUint64(nil, seq), empty})
			}
		case replayGarbage:
			for range 5 {
				msg := [][]byte{id}
				for range 1 + rng.IntN(5) {
					msg = append(msg, randBytes(rng, rng.IntN(40)))
				}
				e.router.Send(msg)
			}
		default:
			for _, b := range answer {
				e.router.Send([][]byte{id, {}, e.topic, binary.BigEndian.AppendUint64(nil, b.seq), b.payload})
			}
		}
		e.router.Send(end)
	}
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// ZMTP written by hand, for peers that break it after a correct start.

// zmtpGreeting is a ZMTP 3.1 NULL greeting followed by READY as a PUB.
func zmtpGreeting() []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10], g[11] = 0xff, 0x7f, 3, 1
	copy(g[12:], "NULL")
	body := append([]byte{5}, "READY"...)
	body = append(body, 11)
	body = append(body, "Socket-Type"...)
	body = binary.BigEndian.AppendUint32(body, 3)
	body = append(body, "PUB"...)
	return append(append(g, 0x04, byte(len(body))), body...)
}

// zmtpFrame is one message frame; more marks all but a message's last.
func zmtpFrame(body []byte, more bool) []byte {
	var flags byte
	if more {
		flags |= 0x01
	}
	if len(body) < 256 {
		return append([]byte{flags, byte(len(body))}, body...)
	}
	return append(binary.BigEndian.AppendUint64([]byte{flags | 0x02}, uint64(len(body))), body...)
}

// hostileRig is a gateway, its one replica (a simulator) and that
// replica's scripted event stream, with prompts flowing through.
type hostileRig struct {
	t     *testing.T
	gw    *running
	eng   *scriptedPublisher
	load  *loadLoop
	block int // the gateway's block size
}

const hostileID = "sim-1"

func newHostileRig(t *testing.T, enc events.Encoding, pubHWM int) *hostileRig {
	t.Helper()
	eng := newScriptedPublisher(t, enc, pubHWM)
	sims := fleetOf(t, 1, true)
	cfg := testConfig(t, sims)
	cfg.Routing.DefaultPolicy = "kv_aware"
	cfg.Index.Mode = config.IndexExact
	cfg.Index.KVEvents.Silence = config.Duration(hostileSilence)
	cfg.Replicas[0].KVCapacityBlocks = hostileCapacity
	// The floods starve a 2-core machine: health checks as tight as the
	// other tests' would eject the only replica for being slow.
	cfg.Health.Interval = config.Duration(time.Second)
	cfg.Health.Timeout = config.Duration(time.Second)
	cfg.Replicas[0].KVEvents = config.ReplicaKVEvents{Endpoint: eng.endpoint(), ReplayEndpoint: eng.router.Endpoint()}
	gw := startGateway(t, cfg)
	r := &hostileRig{t: t, gw: gw, eng: eng, block: gw.g.tokenizers[testModel].blockSize}
	r.waitSource(index.SourceEvents, "", 5*time.Second)
	r.load = startLoad(t, gw.url)
	return r
}

// stream is the replica's row of /admin/index's kv_events (the zero
// kvStatus before its feed started).
func (r *hostileRig) stream() kvStatus {
	r.t.Helper()
	st := adminIndex(r.t, r.gw.admin).KVEvents
	if len(st) > 1 {
		r.t.Fatalf("kv_events lists %d streams", len(st))
	}
	if len(st) == 0 {
		return kvStatus{}
	}
	return st[0]
}

// waitSource waits until the replica's source is want, for reason (any
// when "" and want is approximate).
func (r *hostileRig) waitSource(want index.Source, reason string, within time.Duration) kvStatus {
	r.t.Helper()
	var st kvStatus
	deadline := time.Now().Add(within)
	for {
		st = r.stream()
		if st.Source == want && (reason == "" || st.Reason == reason) {
			return st
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("after %v the stream is %s (%s), want %s (%s): %+v", within, st.Source, st.Reason, want, reason, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitStream polls /admin/index until cond holds on the stream.
func (r *hostileRig) waitStream(what string, within time.Duration, cond func(kvStatus) bool) kvStatus {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for {
		st := r.stream()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("after %v still waiting for %s: %+v", within, what, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// heal restarts the engine's sequence and waits for the replica to follow
// its events again.
func (r *hostileRig) heal() kvStatus {
	r.t.Helper()
	r.eng.setHostile(nil)
	r.eng.replay.Store(replayHonest)
	r.eng.heartbeat.Store(true)
	r.eng.restart()
	return r.waitSource(index.SourceEvents, "", 10*time.Second)
}

// finish stops the load, once it has sent a few requests, and checks that
// every request went through.
func (r *hostileRig) finish() {
	r.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); r.load.ok.Load()+r.load.failed.Load() < 3 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	ok, failed, first := r.load.stop()
	if failed > 0 || ok == 0 {
		r.t.Errorf("through the gateway: %d requests served, %d failed (first: %s)", ok, failed, first)
	}
	r.t.Logf("%d requests served through the gateway while the stream misbehaved", ok)
}

// metric returns the value of one line of the metrics page, -1 if absent.
func (r *hostileRig) metric(name string) float64 {
	r.t.Helper()
	for line := range strings.SplitSeq(scrape(r.t, r.gw.admin), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				r.t.Fatal(err)
			}
			return f
		}
	}
	return -1
}

// wantMetrics checks metric lines, named with their labels, against values.
func (r *hostileRig) wantMetrics(want map[string]float64) {
	r.t.Helper()
	for name, v := range want {
		if got := r.metric(name); got != v {
			r.t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
}

// tokens tokenizes a chat body as the gateway does.
func (r *hostileRig) tokens(body string) []int {
	r.t.Helper()
	resp, err := http.Post(r.gw.admin+"/admin/tokenize/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	var tk struct {
		Tokens []int `json:"tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tk); err != nil {
		r.t.Fatal(err)
	}
	return tk.Tokens
}

// predicted routes body and returns the cached tokens the gateway
// predicted on the replica.
func (r *hostileRig) predicted(body string) int {
	r.t.Helper()
	resp, out := chat(r.t, r.gw.url, body)
	if resp.StatusCode != http.StatusOK {
		r.t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	n, err := strconv.Atoi(resp.Header.Get(openai.HeaderCachedTokens))
	if err != nil {
		r.t.Fatalf("no prediction header: %v", err)
	}
	return n
}

// storeChain is a BlockStored of the first n blocks of tokens, the
// engine's hashes base+1...
func (r *hostileRig) storeChain(tokens []int, n int, base int64) events.Event {
	ev := events.Event{Kind: events.BlockStored, BlockSize: r.block}
	for i := range n {
		ev.Hashes = append(ev.Hashes, events.IntHash(base+int64(i)+1))
	}
	for _, tok := range tokens[:n*r.block] {
		ev.Tokens = append(ev.Tokens, uint32(tok))
	}
	return ev
}

// heapInuse is the heap in use after a full collection.
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// checkHeap fails when the heap grew by more than bound since before.
func checkHeap(t *testing.T, before uint64, bound uint64) {
	t.Helper()
	after := heapInuse()
	grew := int64(after) - int64(before)
	t.Logf("heap in use %.1f MiB before, %.1f MiB after (%+.1f MiB, bound %d MiB)",
		float64(before)/(1<<20), float64(after)/(1<<20), float64(grew)/(1<<20), bound>>20)
	if grew > int64(bound) {
		t.Errorf("the heap grew by %d bytes, more than %d", grew, bound)
	}
}

// loadLoop sends prompts through the gateway until stopped.
type loadLoop struct {
	stopc  chan struct{}
	done   chan struct{}
	ok     atomic.Uint64
	failed atomic.Uint64
	first  atomic.Pointer[string]
}

func startLoad(t *testing.T, url string) *loadLoop {
	l := &loadLoop{stopc: make(chan struct{}), done: make(chan struct{})}
	client := &http.Client{Timeout: 5 * time.Second}
	go func() {
		defer close(l.done)
		for i := 0; ; i++ {
			select {
			case <-l.stopc:
				return
			case <-time.After(10 * time.Millisecond):
			}
			body := chatBody(fmt.Sprintf("load prompt %d: %s", i, strings.Repeat("words ", 10+i%20)), "")
			resp, err := client.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			if err != nil {
				if l.failed.Add(1) == 1 {
					s := err.Error()
					l.first.Store(&s)
				}
				continue
			}
			l.ok.Add(1)
		}
	}()
	t.Cleanup(func() { l.stop() })
	return l
}

func (l *loadLoop) stop() (ok, failed uint64, first string) {
	select {
	case <-l.stopc:
	default:
		close(l.stopc)
	}
	<-l.done
	if p := l.first.Load(); p != nil {
		first = *p
	}
	return l.ok.Load(), l.failed.Load(), first
}
