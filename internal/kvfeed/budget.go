package kvfeed

import (
	"context"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// Memory bounds of the gateway's feeds.
const (
	// DefaultMaxBatchBytes is a feed's default bound on one message from
	// its engine (Config.Socket.MaxMessageSize when that is zero), and the
	// default receive queue of each of its sockets. An engine step that
	// caches a million tokens in blocks of 16 encodes, with msgspec, in
	// 4.7 MiB (integer hashes) to 6.3 MiB (sha256 hashes), 11.5 MiB with an
	// adapter name and a multimodal hash as every block's extra keys;
	// SGLang, which sends an event a page (of one token by default), in
	// about 43 bytes a token: 16 MiB is some 390,000 tokens in one step
	// (its chunked prefill takes some thousands by default). zmtp's own
	// default, 64 MiB, let each feed hold three such messages (queued,
	// being read, being decoded), the one being decoded into as much as
	// 2 GiB.
	DefaultMaxBatchBytes = 16 << 20
	// DefaultBudget is the payload bytes a gateway's feeds decode and
	// apply at once, together (see Budget): with at most 32 bytes decoded
	// a byte of payload, 512 MiB of decoded events at most, whatever the
	// number of feeds, while no batch is larger (one that is takes the
	// whole budget: 32 times its size, alone).
	DefaultBudget = 16 << 20
)

// Budget bounds the payload bytes that the feeds sharing it decode and
// apply at once: a batch decodes into at most 32 bytes a byte of its
// payload (package events), so without one every feed could hold that
// much of its largest batch at the same time, and a gateway following
// many hostile or misconfigured publishers could run out of memory. A
// feed waits for room rather than dropping its batch. A batch larger than
// the whole budget takes all of it: it waits for every other to finish
// and is decoded alone, never forever.
//
// Safe for concurrent use.
type Budget struct {
	sem  *semaphore.Weighted
	size int64

	held    atomic.Int64 // bytes taken now
	waiting atomic.Int64 // feeds waiting for room now
}

// NewBudget returns a budget of size bytes; zero or less means
// DefaultBudget.
func NewBudget(size int64) *Budget {
	if size <= 0 {
		size = DefaultBudget
	}
	return &Budget{sem: semaphore.NewWeighted(size), size: size}
}

// Size is the budget's size in bytes.
func (b *Budget) Size() int64 { return b.size }

// Held reports the bytes taken now.
func (b *Budget) Held() int64 { return b.held.Load() }

// Waiting reports how many feeds wait for room now.
func (b *Budget) Waiting() int64 { return b.waiting.Load() }

// take waits until n bytes (the whole budget when n is more) are free and
// takes them, or fails when ctx ends. It returns what it took, for give.
func (b *Budget) take(ctx context.Context, n int64) (int64, error) {
	n = min(max(n, 0), b.size)
	if !b.sem.TryAcquire(n) {
		b.waiting.Add(1)
		err := b.sem.Acquire(ctx, n)
		b.waiting.Add(-1)
		if err != nil {
			return 0, err
		}
	}
	b.held.Add(n)
	return n, nil
}

// give returns n bytes that take took.
func (b *Budget) give(n int64) {
	b.held.Add(-n)
	b.sem.Release(n)
}
