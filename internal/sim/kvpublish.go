package sim

import (
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/inferrail/inferrail/internal/enginehash"
	"github.com/inferrail/inferrail/internal/events"
	"github.com/inferrail/inferrail/internal/zmtp"
)

// kvPublisher is vLLM's ZmqEventPublisher: each batch the engine hands it
// gets the next sequence number and goes out on a PUB socket as
// [topic, seq, payload]; the last buffer_steps batches stay for replay,
// which a ROUTER socket serves to whoever asks with a start sequence.
//
// Publish runs on the engine goroutine and only encodes and queues; run
// owns the sockets' sending side, the sequence and the replay buffer.
type kvPublisher struct {
	enc    events.Encoding
	topic  []byte
	pub    *zmtp.Pub
	replay *zmtp.Router // nil without a replay endpoint
	queue  chan []byte  // encoded batches waiting for their sequence number
	done   chan struct{}
	log    *slog.Logger

	// Owned by run.
	ring []sentBatch // the last batches sent, a circular buffer
	head int         // ring index of the oldest batch once the ring is full
	next uint64      // the next batch's sequence number

	queued atomic.Uint64 // batches Publish queued so far
	sent   atomic.Uint64 // batches sent so far, for readers outside run
}

type sentBatch struct {
	seq     []byte // 8 bytes, big-endian
	payload []byte
}

// newKVPublisher binds the sockets cfg names, with ports offset by rank.
func newKVPublisher(cfg *Config, log *slog.Logger) (*kvPublisher, error) {
	kc := &cfg.KVEvents
	enc, err := events.ParseEncoding(cfg.KVEventsEncoding)
	if err != nil {
		return nil, err
	}
	opts := zmtp.Options{HWM: kc.HWM}
	addr, err := bindAddr(kc.Endpoint, "endpoint", cfg.DataParallelRank)
	if err != nil {
		return nil, err
	}
	p := &kvPublisher{
		enc:   enc,
		topic: []byte(kc.Topic),
		queue: make(chan []byte, kc.MaxQueueSize),
		done:  make(chan struct{}),
		ring:  make([]sentBatch, 0, min(kc.BufferSteps, 1024)),
		log:   log,
	}
	// The sockets live until Close: the server's context is not known yet.
	p.pub, err = zmtp.ListenPub(context.Background(), "tcp://"+addr, opts)
	if err != nil {
		return nil, err
	}
	if kc.ReplayEndpoint != "" {
		raddr, err := bindAddr(kc.ReplayEndpoint, "replay_endpoint", cfg.DataParallelRank)
		if err == nil {
			p.replay, err = zmtp.ListenRouter(context.Background(), "tcp://"+raddr, opts)
		}
		if err != nil {
			p.pub.Close()
			return nil, err
		}
	}
	return p, nil
}

// Addr is the PUB socket's bound address.
func (p *kvPublisher) Addr() net.Addr { return p.pub.Addr() }

// ReplayAddr is the replay socket's bound address, nil without one.
func (p *kvPublisher) ReplayAddr() net.Addr {
	if p.replay == nil {
		return nil
	}
	return p.replay.Addr()
}

// Publish encodes b and queues it for run. Like vLLM's bounded queue, it
// waits when run is max_queue_size batches behind, so no batch is lost
// before it has a sequence number; it gives up once the publisher stopped.
func (p *kvPublisher) Publish(b *events.Batch) {
	payload := events.AppendBatch(nil, b, p.enc)
	select {
	case p.queue <- payload:
		p.queued.Add(1)
	case <-p.done:
	}
}

// run sends queued batches and answers replay requests until ctx ends, then
// closes the sockets.
func (p *kvPublisher) run(ctx context.Context, bufferSteps int) {
	defer close(p.done)
	defer p.close()
	requests := make(chan [][]byte)
	if p.replay != nil {
		go p.readReplays(ctx, requests)
	}
	for {
		select {
		case payload := <-p.queue:
			p.send(payload, bufferSteps)
		case req := <-requests:
			p.serveReplay(req)
		case <-ctx.Done():
			p.drain(bufferSteps)
			return
		}
	}
}

// drain sends what the engine queued before it stopped.
func (p *kvPublisher) drain(bufferSteps int) {
	for {
		select {
		case payload := <-p.queue:
			p.send(payload, bufferSteps)
		default:
			return
		}
	}
}

func (p *kvPublisher) close() {
	p.pub.Close()
	if p.replay != nil {
		p.replay.Close()
	}
}

func (p *kvPublisher) send(payload []byte, bufferSteps int) {
	seq := binary.BigEndian.AppendUint64(nil, p.next)
	p.next++
	defer p.sent.Store(p.next)
	if err := p.pub.Send([][]byte{p.topic, seq, payload}); err != nil {
		p.log.Warn("kv events: publishing failed", "seq", p.next-1, "err", err)
	}
	b := sentBatch{seq: seq, payload: payload}
	if len(p.ring) < bufferSteps {
		p.ring = append(p.ring, b)
		return
	}
	p.ring[p.head] = b
	p.head = (p.head + 1) % len(p.ring)
}

// readReplays hands run every message the replay socket receives.
func (p *kvPublisher) readReplays(ctx context.Context, out chan<- [][]byte) {
	for {
		msg, err := p.replay.Recv(ctx)
		if err != nil {
			return
		}
		select {
		case out <- msg:
		case <-ctx.Done():
			return
		}
	}
}

// serveReplay answers [identity, "", start] with every buffered batch from
// start on, [identity, "", topic, seq, payload] each, then the end marker
// [identity, "", "", -1, ""]. Anything else is logged and ignored, as vLLM
// does.
func (p *kvPublisher) serveReplay(req [][]byte) {
	if len(req) != 3 || len(req[1]) != 0 || len(req[2]) != 8 {
		p.log.Warn("kv events: ignoring a malformed replay request", "frames", len(req))
		return
	}
	id, start := req[0], binary.BigEndian.Uint64(req[2])
	n := len(p.ring)
	for i := range n {
		b := p.ring[(p.head+i)%n]
		if binary.BigEndian.Uint64(b.seq) < start {
			continue
		}
		if err := p.replay.Send([][]byte{id, {}, p.topic, b.seq, b.payload}); err != nil {
			p.log.Warn("kv events: replay cut short", "err", err)
			return
		}
	}
	if err := p.replay.Send([][]byte{id, {}, {}, events.ReplayEnd, {}}); err != nil {
		p.log.Warn("kv events: replay end marker lost", "err", err)
	}
}

// startKVEvents binds the event sockets and makes the block pool log what
// the engine's steps do to the cache.
func (s *Server) startKVEvents() error {
	algo, err := enginehash.ParseAlgo(hashAlgoName(&s.cfg))
	if err != nil {
		return err
	}
	hasher := enginehash.New(algo, enginehash.SeedFromEnv(s.cfg.HashSeed, s.cfg.HashSeedSet))
	pub, err := newKVPublisher(&s.cfg, s.log)
	if err != nil {
		return err
	}
	s.kvpub = pub
	// SGLang's events hash blocks as integers whatever vLLM's variable
	// says: its BlockStored cannot carry a digest.
	ints := !s.cfg.BytesBlockHashes || s.cfg.KVEventsEncoding == "sglang"
	s.engine.sched.pool.log = newKVLog(hasher, ints, s.cfg.DataParallelRank, s.cfg.BlockSize, pub)
	s.engine.sched.pool.log.windowFirst = s.cfg.SlidingWindow > 0
	s.log.Info("publishing KV events", "endpoint", "tcp://"+pub.Addr().String(), "replay", pub.ReplayAddr(),
		"hash_algo", algo.String(), "encoding", s.cfg.KVEventsEncoding)
	return nil
}

// KVEventsAddr is where the engine publishes its KV events, nil when it
// does not.
func (s *Server) KVEventsAddr() net.Addr {
	if s.kvpub == nil {
		return nil
	}
	return s.kvpub.Addr()
}

// KVReplayAddr is where the engine answers replay requests, nil when it
// does not.
func (s *Server) KVReplayAddr() net.Addr {
	if s.kvpub == nil {
		return nil
	}
	return s.kvpub.ReplayAddr()
}

// KVBatchesSent is how many KV event batches the engine has published
// (the next batch's sequence number); 0 when it publishes none.
func (s *Server) KVBatchesSent() uint64 {
	if s.kvpub == nil {
		return 0
	}
	return s.kvpub.sent.Load()
}

// KVEventsFlushed waits until every KV event the engine has emitted so far
// is published, and returns how many batches that makes. Tests use it to
// know when a subscriber can have heard of a request that just finished:
// the engine publishes a step's events after it hands out the step's
// tokens, as vLLM does.
func (s *Server) KVEventsFlushed(ctx context.Context) (uint64, error) {
	if s.kvpub == nil {
		return 0, nil
	}
	// A round trip to the engine goroutine: the steps before it have
	// queued their batches.
	if err := s.engine.inspect(ctx, func(*scheduler) {}); err != nil {
		return 0, err
	}
	want := s.kvpub.queued.Load()
	for s.kvpub.sent.Load() < want {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-s.kvpub.done:
			return s.kvpub.sent.Load(), ErrStopped
		case <-time.After(time.Millisecond):
		}
	}
	return s.kvpub.sent.Load(), nil
}
