package zmtp

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestInboxBoundsBytesWithSeveralPutters: readers of several connections
// (a ROUTER's) putting at once never hold more than the byte bound between
// them, every message arrives once, each reader's in its order, and a
// reader whose context ends while it waits for room leaves without
// stalling the others.
func TestInboxBoundsBytesWithSeveralPutters(t *testing.T) {
	const putters, each, size, limit = 4, 50, 30, 100
	b := newInbox(Options{HWM: 1000, MaxQueuedBytes: limit})
	ctx := testCtx(t)

	// A reader that gives up while it waits for room.
	if err := b.put(ctx, [][]byte{make([]byte, 90)}); err != nil {
		t.Fatal(err)
	}
	quit, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- b.put(quit, [][]byte{make([]byte, size)}) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("a waiting put whose context ended returned %v", err)
	}
	if m, err := b.take(ctx, nil); err != nil || len(m[0]) != 90 {
		t.Fatalf("took %v, %v", m, err)
	}

	var wg sync.WaitGroup
	for p := range putters {
		wg.Go(func() {
			for i := range each {
				msg := make([]byte, size)
				binary.BigEndian.PutUint32(msg, uint32(p))
				binary.BigEndian.PutUint32(msg[4:], uint32(i))
				if err := b.put(ctx, [][]byte{msg}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	next := make([]int, putters)
	for range putters * each {
		if q := b.bytes(); q > limit {
			t.Fatalf("%d bytes queued, over the %d allowed", q, limit)
		}
		m, err := b.take(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		p, i := binary.BigEndian.Uint32(m[0]), int(binary.BigEndian.Uint32(m[0][4:]))
		if i != next[p] {
			t.Fatalf("putter %d's message %d arrived when %d was due", p, i, next[p])
		}
		next[p]++
		time.Sleep(50 * time.Microsecond) // a consumer slower than the putters
	}
	wg.Wait()
	if q := b.bytes(); q != 0 {
		t.Errorf("%d bytes counted after every message was taken", q)
	}
}

// TestInboxTakeAfterTheEnd: once the consumer's context or the socket has
// ended, take hands out none of what is queued (a select among ready cases
// would, half the time).
func TestInboxTakeAfterTheEnd(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	closed := make(chan struct{})
	close(closed)
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		closed chan struct{}
		want   error
	}{
		{"context_done", ended, nil, context.Canceled},
		{"socket_closed", context.Background(), closed, ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const queued = 64 // each take a coin toss on the old code: all 64 lost by chance 2^-64
			b := newInbox(Options{HWM: queued, MaxQueuedBytes: 1 << 20})
			for range queued {
				if err := b.put(context.Background(), [][]byte{[]byte("m")}); err != nil {
					t.Fatal(err)
				}
			}
			for range queued {
				if m, err := b.take(tc.ctx, tc.closed); !errors.Is(err, tc.want) {
					t.Fatalf("take = %q, %v; want %v", m, err, tc.want)
				}
			}
		})
	}
}

// TestInboxChargesEmptyFrames: a frame counts its size and frameCost, as
// against MaxMessageSize, so messages of empty frames fill the byte bound
// too. Counted at their sizes alone they were free, and a peer queued HWM
// messages of a million empty frames each, hundreds of MB (found by a
// review).
func TestInboxChargesEmptyFrames(t *testing.T) {
	b := newInbox(Options{HWM: 1000, MaxQueuedBytes: 10 * frameCost})
	ctx := testCtx(t)
	if err := b.put(ctx, make([][]byte, 100)); err != nil { // queues alone, over the bound
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := b.put(short, [][]byte{{}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second message behind 100 empty frames: %v, want it to wait for room", err)
	}
	if got := b.bytes(); got != 100*frameCost {
		t.Errorf("%d bytes counted, want %d", got, 100*frameCost)
	}
	if _, err := b.take(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := b.bytes(); got != 0 {
		t.Errorf("%d bytes counted after the take, want 0", got)
	}
}
