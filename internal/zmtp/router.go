package zmtp

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Errors of Router.Send: in both cases the message was dropped, which is
// what libzmq's ROUTER does silently by default.
var (
	ErrUnknownPeer = errors.New("zmtp: no peer with this identity")
	ErrPeerFull    = errors.New("zmtp: peer's send queue is full")
)

// Router is a ROUTER socket: it binds, accepts any number of DEALER, REQ or
// ROUTER peers, and names each by an identity: the peer's Identity property
// if it announced one, else a generated 5-byte one (a zero byte and a
// counter, as libzmq does). Recv prefixes each message with its sender's
// identity; Send routes by the first frame.
type Router struct {
	listener
	in       *inbox
	mu       sync.Mutex
	peers    map[string]chan [][]byte
	nextID   uint32
	rejected atomic.Uint64
}

// ListenRouter binds a ROUTER socket to endpoint; it lives until Close or
// until ctx is done.
func ListenRouter(ctx context.Context, endpoint string, o Options) (*Router, error) {
	r := &Router{listener: listener{newBase(ctx, "ROUTER", o)}, peers: map[string]chan [][]byte{}, nextID: rand.Uint32()}
	r.in = newInbox(r.opts)
	if err := r.listen(endpoint, r.serve, func(error) { r.rejected.Add(1) }); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// Recv returns the next message from any peer as [identity, frames...].
// Peers share one queue of HWM messages; a peer that floods it waits its
// turn with the others, since each peer's reader holds one message at most.
func (r *Router) Recv(ctx context.Context) ([][]byte, error) { return r.in.take(ctx, r.ctx.Done()) }

// Send routes [identity, frames...] to the peer with that identity without
// blocking. It returns ErrUnknownPeer or ErrPeerFull when it dropped the
// message. The frames are queued as they are: do not modify them after.
func (r *Router) Send(frames [][]byte) error {
	if len(frames) < 2 {
		return errors.New("zmtp: a ROUTER message needs an identity and a frame")
	}
	if r.ctx.Err() != nil {
		return ErrClosed
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	q, ok := r.peers[string(frames[0])]
	if !ok {
		return ErrUnknownPeer
	}
	select {
	case q <- frames[1:]:
		return nil
	default:
		return ErrPeerFull
	}
}

// Peers returns the number of connected peers.
func (r *Router) Peers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.peers)
}

// Rejected counts connections closed for failing the handshake or the
// protocol, or for claiming an identity already connected.
func (r *Router) Rejected() uint64 { return r.rejected.Load() }

// register gives the peer its identity and queue, or refuses a duplicate
// identity (libzmq's default, without ZMQ_ROUTER_HANDOVER).
func (r *Router) register(c *conn) (string, chan [][]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := string(c.peer.identity)
	if id == "" || id[0] == 0 { // a leading zero byte is reserved for generated ones
		for {
			r.nextID++
			id = string(binary.BigEndian.AppendUint32([]byte{0}, r.nextID))
			if _, taken := r.peers[id]; !taken {
				break
			}
		}
	} else if _, taken := r.peers[id]; taken {
		return "", nil, false
	}
	q := make(chan [][]byte, r.opts.HWM)
	r.peers[id] = q
	return id, q, true
}

// serve runs one peer's connection until it ends.
func (r *Router) serve(c *conn) {
	id, q, ok := r.register(c)
	if !ok {
		r.rejected.Add(1)
		c.nc.Close()
		return
	}
	err := c.run(r.ctx, func(ctx context.Context) error { return r.read(ctx, c, []byte(id)) },
		func(ctx context.Context) error { return c.writeLoop(ctx, q) })
	r.mu.Lock()
	delete(r.peers, id)
	r.mu.Unlock()
	if isProtocolError(err) {
		r.rejected.Add(1)
	}
}

// read queues the peer's messages behind its identity.
func (r *Router) read(ctx context.Context, c *conn, id []byte) error {
	return c.readMessages(func(msg [][]byte) error { return r.in.put(ctx, append([][]byte{id}, msg...)) })
}
