package zmtp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
)

// ErrDisconnected is returned once by Sub.Recv after the messages of a
// connection that dropped: messages may have been lost before the SUB
// reconnected, so a consumer should check its sequence numbers or replay.
var ErrDisconnected = errors.New("zmtp: connection to the publisher dropped; messages may be missing")

// Sub is a SUB socket: it connects to one PUB, reconnects with backoff
// when the connection drops or the publisher is not up yet, subscribes
// again on every connection, and queues what it receives (at most HWM
// messages and MaxQueuedBytes: when the consumer falls behind, the SUB
// stops reading and the publisher's own HWM drops messages, as with
// libzmq).
type Sub struct {
	*base
	topics      [][]byte
	in          *inbox // a nil message marks a lost connection
	connects    atomic.Uint64
	disconnects atomic.Uint64
	rejected    atomic.Uint64
	// cause is why the last connection was lost (an oversized message,
	// a protocol error, the publisher's close), for Recv to say.
	cause atomic.Pointer[error]
}

// SubStats counts a Sub's connections.
type SubStats struct {
	Connects    uint64 // handshakes completed
	Disconnects uint64 // connections lost after their handshake
	Rejected    uint64 // connections whose handshake failed (Sub only)
}

// DialSub connects a SUB socket to endpoint ("tcp://host:port") and
// subscribes to each topic prefix ("" for every message; none, nothing). It returns at
// once; the connection is made in the background, and the socket lives
// until Close or until ctx is done.
func DialSub(ctx context.Context, endpoint string, o Options, topics ...string) (*Sub, error) {
	s := &Sub{base: newBase(ctx, "SUB", o)}
	for _, t := range topics {
		s.topics = append(s.topics, []byte(t))
	}
	s.in = newInbox(s.opts)
	if err := s.dial(endpoint, s.serve, func(error) { s.rejected.Add(1) }); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Recv returns the next message, ErrDisconnected once after each lost
// connection (wrapping why, as far as it is known: ErrTooLarge for a
// message past MaxMessageSize), ctx's error, or ErrClosed.
func (s *Sub) Recv(ctx context.Context) ([][]byte, error) {
	m, err := s.in.take(ctx, s.ctx.Done())
	if err == nil && m == nil {
		if cause := s.cause.Load(); cause != nil {
			return nil, fmt.Errorf("%w: %w", ErrDisconnected, *cause)
		}
		return nil, ErrDisconnected
	}
	return m, err
}

// Queued reports the bytes of frames the SUB holds for its consumer.
func (s *Sub) Queued() int64 { return s.in.bytes() }

// Stats returns the socket's counters.
func (s *Sub) Stats() SubStats {
	return SubStats{Connects: s.connects.Load(), Disconnects: s.disconnects.Load(), Rejected: s.rejected.Load()}
}

// serve subscribes on a new connection and reads from it until it ends.
func (s *Sub) serve(c *conn) {
	s.connects.Add(1)
	err := c.run(s.ctx, func(ctx context.Context) error {
		if err := s.subscribe(c); err != nil {
			return err
		}
		return s.read(ctx, c)
	}, nil)
	if s.ctx.Err() != nil {
		return
	}
	if err == nil {
		err = io.EOF
	}
	s.cause.Store(&err)
	s.disconnects.Add(1)
	_ = s.in.put(s.ctx, nil) // fails only once the socket is closed
}

// subscribe sends the subscriptions in the form the negotiated version
// uses: SUBSCRIBE commands for ZMTP 3.1, messages starting with 1 for 3.0.
func (s *Sub) subscribe(c *conn) error {
	for _, t := range s.topics {
		if c.peer.minor >= 1 {
			if err := c.sendCommand("SUBSCRIBE", t); err != nil {
				return err
			}
			continue
		}
		if err := c.send([][]byte{append([]byte{1}, t...)}); err != nil {
			return err
		}
	}
	return c.flush()
}

// read queues the messages that match a subscription (a PUB filters too,
// but an XPUB or a buggy one may not), waiting while the queue is full.
func (s *Sub) read(ctx context.Context, c *conn) error {
	return c.readMessages(func(msg [][]byte) error {
		if !s.matches(msg[0]) {
			return nil
		}
		return s.in.put(ctx, msg)
	})
}

func (s *Sub) matches(topic []byte) bool {
	for _, t := range s.topics {
		if bytes.HasPrefix(topic, t) {
			return true
		}
	}
	return false
}
