package kvfeed

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/inferrail/inferrail/internal/events"
	"github.com/inferrail/inferrail/internal/zmtp"
)

// gatedSink is a sink whose Apply reports the budget it sees taken and
// then waits for the test to let it return.
type gatedSink struct {
	sink
	budget  *Budget
	entered chan int64 // the budget's Held at each Apply
	release chan struct{}
	once    sync.Once
}

func newGatedSink(b *Budget) *gatedSink {
	return &gatedSink{budget: b, entered: make(chan int64), release: make(chan struct{})}
}

// open lets every Apply, now and to come, return.
func (s *gatedSink) open() { s.once.Do(func() { close(s.release) }) }

func (s *gatedSink) Apply(seq uint64, b *events.Batch) {
	select {
	case s.entered <- s.budget.Held():
	case <-s.release:
	}
	<-s.release
	s.sink.Apply(seq, b)
}

// startShared runs a feed of e into s with budget b.
func startShared(t *testing.T, ctx context.Context, e *engine, b *Budget, s Sink) *Feed {
	t.Helper()
	f := New(Config{Endpoint: e.pub.Endpoint(), Topic: "kv", Budget: b}, s)
	done := make(chan struct{})
	go func() { defer close(done); _ = f.Run(ctx) }()
	t.Cleanup(func() { <-done })
	waitFor(t, "the feed to subscribe", func() bool { return e.pub.Stats().Subscribers == 1 })
	return f
}

// TestBudgetShared: feeds sharing a budget decode no more payload at once
// than it holds. With a budget the size of one batch, a second feed's
// batch waits, without being dropped, until the first feed has applied
// its own, and then is applied. (A review's finding: each feed decoded
// its largest batch whenever it came, 32 bytes a byte of payload, so a
// gateway following several hostile publishers could be killed for its
// memory.)
func TestBudgetShared(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	size := int64(len(batch(0)))
	budget := NewBudget(size)
	first, second := newEngine(t, ctx), newEngine(t, ctx)
	gated := newGatedSink(budget)
	defer gated.open() // a test that fails midway leaves no feed blocked
	plain := &sink{}
	startShared(t, ctx, first, budget, gated)
	startShared(t, ctx, second, budget, plain)

	first.send(0)
	if held := <-gated.entered; held != size {
		t.Errorf("applying a %d-byte batch with a budget of %d: %d bytes taken, want %d", size, size, held, size)
	}
	second.send(0)
	waitFor(t, "the second feed to wait for the budget, or to apply its batch", func() bool {
		a, _ := plain.snapshot()
		return budget.Waiting() == 1 || len(a) > 0
	})
	if a, _ := plain.snapshot(); len(a) > 0 {
		t.Fatalf("the second feed applied %v while the first held the whole budget", a)
	}
	gated.open()
	waitApplied(t, plain, 1)
	waitApplied(t, &gated.sink, 1)
	waitFor(t, "the budget to be given back", func() bool { return budget.Held() == 0 && budget.Waiting() == 0 })
}

// TestBudgetOutsizeBatch: a batch larger than the whole budget takes all
// of it and is applied, rather than waiting forever.
func TestBudgetOutsizeBatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	budget := NewBudget(1)
	e := newEngine(t, ctx)
	gated := newGatedSink(budget)
	defer gated.open() // a test that fails midway leaves no feed blocked
	startShared(t, ctx, e, budget, gated)
	e.send(0)
	if held := <-gated.entered; held != 1 {
		t.Errorf("applying a %d-byte batch with a budget of 1: %d bytes taken, want 1", len(batch(0)), held)
	}
	gated.open()
	waitApplied(t, &gated.sink, 1)
	waitFor(t, "the budget to be given back", func() bool { return budget.Held() == 0 })
}

func TestBudgetTake(t *testing.T) {
	for _, tc := range []struct {
		name     string
		size     int64
		n        int64
		wantSize int64
		wantTook int64
	}{
		{"within", 100, 40, 100, 40},
		{"whole", 100, 100, 100, 100},
		{"beyond", 100, 1 << 40, 100, 100},
		{"empty", 100, 0, 100, 0},
		{"default", 0, 1, DefaultBudget, 1},
		{"negative_size", -5, 1, DefaultBudget, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBudget(tc.size)
			if b.Size() != tc.wantSize {
				t.Errorf("NewBudget(%d).Size() = %d, want %d", tc.size, b.Size(), tc.wantSize)
			}
			took, err := b.take(context.Background(), tc.n)
			if err != nil || took != tc.wantTook || b.Held() != tc.wantTook {
				t.Fatalf("take(%d) = %d, %v with Held %d; want %d, nil", tc.n, took, err, b.Held(), tc.wantTook)
			}
			b.give(took)
			if b.Held() != 0 {
				t.Errorf("Held after give = %d, want 0", b.Held())
			}
		})
	}
}

// TestBudgetWaitEnds: a feed waiting for room stops waiting when its
// context ends, taking nothing.
func TestBudgetWaitEnds(t *testing.T) {
	b := NewBudget(10)
	held, _ := b.take(context.Background(), 10)
	ctx, cancel := context.WithCancel(context.Background())
	var took atomic.Int64
	errc := make(chan error, 1)
	go func() {
		n, err := b.take(ctx, 5)
		took.Store(n)
		errc <- err
	}()
	waitFor(t, "the take to wait", func() bool { return b.Waiting() == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) || took.Load() != 0 {
		t.Errorf("take after its context ended = %d, %v; want 0, context.Canceled", took.Load(), err)
	}
	b.give(held)
	if b.Held() != 0 || b.Waiting() != 0 {
		t.Errorf("Held %d, Waiting %d after all ended; want 0, 0", b.Held(), b.Waiting())
	}
}

// TestFeedMessageBound: a feed's sockets refuse messages past
// DefaultMaxBatchBytes unless told otherwise, where zmtp's own default is
// four times that. (A review's finding: every feed could hold three 64 MiB
// messages.)
func TestFeedMessageBound(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  int64
		want int64
	}{
		{"default", 0, DefaultMaxBatchBytes},
		{"set", 1 << 10, 1 << 10},
		{"set_above", 1 << 30, 1 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New(Config{Endpoint: "tcp://127.0.0.1:1", Socket: zmtp.Options{MaxMessageSize: tc.set}}, &sink{})
			if got := f.cfg.Socket.MaxMessageSize; got != tc.want {
				t.Errorf("MaxMessageSize %d: the feed's sockets take %d, want %d", tc.set, got, tc.want)
			}
		})
	}
}
