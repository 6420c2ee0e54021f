package zmtp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Limits on one subscriber's subscriptions: libzmq has none, but without
// them a hostile peer could grow a PUB's memory one distinct topic at a time.
const (
	maxSubscriptions    = 1024
	maxSubscriptionSize = 1 << 20 // bytes of distinct topics
)

// errTooManySubscriptions closes a peer that passes the limits above.
var errTooManySubscriptions = errors.New("zmtp: peer exceeds the subscription limits")

// Pub is a PUB socket: it binds, accepts any number of SUB peers and sends
// each message to the peers whose subscriptions prefix its first frame.
// Every peer has its own queue of HWM messages and writer goroutine; when a
// peer's queue is full the message is dropped for that peer only, so a slow
// subscriber never slows the publisher or the other subscribers.
type Pub struct {
	listener
	mu       sync.Mutex
	peers    map[*pubPeer]struct{}
	dropped  atomic.Uint64
	rejected atomic.Uint64
}

// pubPeer is one subscriber: its queue and its subscriptions.
type pubPeer struct {
	q       chan [][]byte
	mu      sync.Mutex
	subs    map[string]int // topic prefix -> times subscribed, as libzmq counts
	size    int            // bytes of distinct topics in subs
	dropped atomic.Uint64
	// byCommand and byMessage record which subscription form the peer used
	// (tests check that libzmq uses the one its ZMTP version implies).
	byCommand, byMessage atomic.Bool
}

// PubStats counts what a Pub did.
type PubStats struct {
	Peers int // subscribers connected now
	// Subscribers are the connected peers with at least one subscription:
	// those a message can reach (a SUB subscribes right after its
	// handshake, so it counts as a peer a moment before it counts here).
	Subscribers int
	Dropped     uint64 // message copies dropped because a peer's queue was full
	Rejected    uint64 // connections closed for failing the handshake or the protocol
}

// ListenPub binds a PUB socket to endpoint ("tcp://*:5557", "tcp://127.0.0.1:0").
// It lives until Close or until ctx is done.
func ListenPub(ctx context.Context, endpoint string, o Options) (*Pub, error) {
	p := &Pub{listener: listener{newBase(ctx, "PUB", o)}, peers: map[*pubPeer]struct{}{}}
	if err := p.listen(endpoint, p.serve, func(error) { p.rejected.Add(1) }); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Send queues frames for every subscriber whose subscription prefixes
// frames[0]; it never blocks on the network. The frames are shared by the
// peers' queues, so the caller must not modify them after Send.
func (p *Pub) Send(frames [][]byte) error {
	if len(frames) == 0 {
		return errors.New("zmtp: empty message")
	}
	if p.ctx.Err() != nil {
		return ErrClosed
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for peer := range p.peers {
		if !peer.matches(frames[0]) {
			continue
		}
		select {
		case peer.q <- frames:
		default:
			peer.dropped.Add(1)
			p.dropped.Add(1)
		}
	}
	return nil
}

// Stats returns the socket's counters.
func (p *Pub) Stats() PubStats {
	p.mu.Lock()
	n, subscribed := len(p.peers), 0
	for peer := range p.peers {
		peer.mu.Lock()
		if len(peer.subs) > 0 {
			subscribed++
		}
		peer.mu.Unlock()
	}
	p.mu.Unlock()
	return PubStats{Peers: n, Subscribers: subscribed, Dropped: p.dropped.Load(), Rejected: p.rejected.Load()}
}

// serve runs one subscriber's connection until it ends.
func (p *Pub) serve(c *conn) {
	peer := &pubPeer{q: make(chan [][]byte, p.opts.HWM), subs: map[string]int{}}
	p.mu.Lock()
	p.peers[peer] = struct{}{}
	p.mu.Unlock()
	err := c.run(p.ctx, func(context.Context) error { return peer.read(c) },
		func(ctx context.Context) error { return c.writeLoop(ctx, peer.q) })
	p.mu.Lock()
	delete(p.peers, peer)
	p.mu.Unlock()
	if isProtocolError(err) {
		p.rejected.Add(1)
	}
}

// read applies the subscriber's subscriptions, in either form: ZMTP 3.1
// SUBSCRIBE/CANCEL commands, or 3.0 messages whose first byte is 1
// (subscribe) or 0 (cancel). Other messages from a subscriber are ignored.
func (peer *pubPeer) read(c *conn) error {
	for {
		msg, cmd, err := c.fr.next()
		if err != nil {
			return err
		}
		switch {
		case cmd != nil && cmd.name == "SUBSCRIBE":
			peer.byCommand.Store(true)
			err = peer.subscribe(cmd.data, true)
		case cmd != nil && cmd.name == "CANCEL":
			err = peer.subscribe(cmd.data, false)
		case cmd != nil && cmd.name == "PING":
			err = c.pong(cmd.data)
		case cmd == nil && len(msg[0]) > 0 && msg[0][0] <= 1:
			peer.byMessage.Store(true)
			err = peer.subscribe(msg[0][1:], msg[0][0] == 1)
		}
		if err != nil {
			return err
		}
	}
}

// subscribe adds (on) or cancels one subscription to topic.
func (peer *pubPeer) subscribe(topic []byte, on bool) error {
	peer.mu.Lock()
	defer peer.mu.Unlock()
	k := string(topic)
	n := peer.subs[k]
	switch {
	case on && n == 0:
		if len(peer.subs) >= maxSubscriptions || peer.size+len(k) > maxSubscriptionSize {
			return errTooManySubscriptions
		}
		peer.size += len(k)
		peer.subs[k] = 1
	case on:
		peer.subs[k] = n + 1
	case n == 1:
		peer.size -= len(k)
		delete(peer.subs, k)
	case n > 1:
		peer.subs[k] = n - 1
	}
	return nil
}

// matches reports whether one of the peer's subscriptions prefixes topic.
func (peer *pubPeer) matches(topic []byte) bool {
	peer.mu.Lock()
	defer peer.mu.Unlock()
	for s := range peer.subs {
		if bytes.HasPrefix(topic, []byte(s)) {
			return true
		}
	}
	return false
}

// isProtocolError tells a peer's protocol violation from an ordinary
// disconnect or shutdown.
func isProtocolError(err error) bool {
	for _, target := range []error{ErrTooLarge, ErrFlags, ErrMalformed, errTooManySubscriptions} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// String describes the socket, for logs.
func (p *Pub) String() string { return fmt.Sprintf("zmtp PUB %s", p.Endpoint()) }
