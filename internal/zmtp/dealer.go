package zmtp

import (
	"context"
	"errors"
	"sync/atomic"
)

// Dealer is a DEALER socket: it connects to one ROUTER (or DEALER, or REP),
// reconnects with backoff, and sends and receives multipart messages
// through bounded queues. Messages sent while it is disconnected wait in the
// send queue; a message being written when the connection drops is lost.
type Dealer struct {
	*base
	out         chan [][]byte
	in          *inbox
	connects    atomic.Uint64
	disconnects atomic.Uint64
}

// DialDealer connects a DEALER socket to endpoint in the background; it
// lives until Close or until ctx is done.
func DialDealer(ctx context.Context, endpoint string, o Options) (*Dealer, error) {
	if len(o.Identity) > 255 || (len(o.Identity) > 0 && o.Identity[0] == 0) {
		return nil, errors.New("zmtp: an identity has at most 255 bytes and no leading zero byte")
	}
	d := &Dealer{base: newBase(ctx, "DEALER", o)}
	d.out = make(chan [][]byte, d.opts.HWM)
	d.in = newInbox(d.opts)
	if err := d.dial(endpoint, d.serve, nil); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Send queues a message, waiting while the send queue is full (as a libzmq
// DEALER blocks at its HWM) until ctx is done. Do not modify the frames after.
func (d *Dealer) Send(ctx context.Context, frames [][]byte) error {
	if len(frames) == 0 {
		return errors.New("zmtp: empty message")
	}
	if d.ctx.Err() != nil {
		return ErrClosed
	}
	select {
	case d.out <- frames:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-d.ctx.Done():
		return ErrClosed
	}
}

// Recv returns the next message, ctx's error, or ErrClosed.
func (d *Dealer) Recv(ctx context.Context) ([][]byte, error) { return d.in.take(ctx, d.ctx.Done()) }

// Stats returns the socket's connection counters.
func (d *Dealer) Stats() SubStats {
	return SubStats{Connects: d.connects.Load(), Disconnects: d.disconnects.Load()}
}

// serve runs one connection until it ends.
func (d *Dealer) serve(c *conn) {
	d.connects.Add(1)
	c.run(d.ctx, func(ctx context.Context) error { return d.read(ctx, c) },
		func(ctx context.Context) error { return c.writeLoop(ctx, d.out) })
	if d.ctx.Err() == nil {
		d.disconnects.Add(1)
	}
}

func (d *Dealer) read(ctx context.Context, c *conn) error {
	return c.readMessages(func(msg [][]byte) error { return d.in.put(ctx, msg) })
}
