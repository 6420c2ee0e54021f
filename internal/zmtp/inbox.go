package zmtp

import (
	"context"
	"sync"
)

// inbox is a socket's receive queue, bounded in messages (HWM) and in
// bytes (MaxQueuedBytes, counted as frameBytes does). A connection's reader waits while it
// is full, so the peer's sends back up onto the peer, as at a libzmq HWM;
// a message always queues when nothing else is, whatever its size.
type inbox struct {
	q   chan [][]byte // a nil message is a marker (a SUB's lost connection)
	max int64

	mu      sync.Mutex
	queued  int64         // bytes of the frames in q and on their way in; guarded by mu
	waiters int           // readers waiting for room; guarded by mu
	room    chan struct{} // closed when a message is taken while readers wait; guarded by mu
}

func newInbox(o Options) *inbox {
	return &inbox{q: make(chan [][]byte, o.HWM), max: o.MaxQueuedBytes, room: make(chan struct{})}
}

// put queues msg (nil: a marker, which counts no bytes), waiting for room
// until ctx is done.
func (b *inbox) put(ctx context.Context, msg [][]byte) error {
	n := frameBytes(msg)
	b.mu.Lock()
	for b.queued > 0 && b.queued+n > b.max {
		b.waiters++
		room := b.room
		b.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			b.mu.Lock()
			b.waiters--
			b.mu.Unlock()
			return ctx.Err()
		}
		b.mu.Lock()
		b.waiters--
	}
	b.queued += n
	b.mu.Unlock()
	select {
	case b.q <- msg:
		return nil
	case <-ctx.Done():
		b.release(n)
		return ctx.Err()
	}
}

// release gives back n bytes of room and wakes every reader waiting for
// it, each to check whether its message fits now.
func (b *inbox) release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queued -= n
	if b.waiters > 0 {
		close(b.room)
		b.room = make(chan struct{})
	}
}

// take returns the next message, or fails when ctx or the socket (closed)
// ends. Once either has ended it hands out nothing, however much is queued:
// select picks at random among ready cases, and a consumer that was told
// to stop must not go on with messages (a replaced KV feed would apply
// them).
func (b *inbox) take(ctx context.Context, closed <-chan struct{}) ([][]byte, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-closed:
		return nil, ErrClosed
	default:
	}
	select {
	case m := <-b.q:
		if m != nil {
			b.release(frameBytes(m))
		}
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-closed:
		return nil, ErrClosed
	}
}

// bytes reports the bytes of frames queued.
func (b *inbox) bytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.queued
}

// frameBytes is what a message counts against MaxQueuedBytes: its frames'
// sizes plus frameCost a frame, as MaxMessageSize counts them. Counted at
// their sizes alone, empty frames (a slice header each once parsed) were
// free: a peer sending messages of a million empty frames queued HWM of
// them, hundreds of MB, without the bound ever holding it back.
func frameBytes(msg [][]byte) int64 {
	var n int64
	for _, f := range msg {
		n += int64(len(f)) + frameCost
	}
	return n
}
