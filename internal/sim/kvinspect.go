package sim

import (
	"context"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/enginehash"
)

// CachedBlock is one block the engine's prefix cache holds, as a KV event
// mirror should know it.
type CachedBlock struct {
	// Key is the engine's own hash of the block as its KV events carry
	// it, reduced to 64 bits: the integer vLLM sends by default, or a
	// digest's low 64 bits (enginehash.EventInt). Zero when the engine
	// publishes no events.
	Key uint64
	// Hash is the gateway's chained hash of the same block.
	Hash blockhash.Hash
	// Group is the KV-cache group holding it, as the events number it: 0,
	// or for a hybrid model (Config.SlidingWindow) 0 its sliding-window
	// layers' and 1 its full-attention layers'.
	Group int
}

// CachedBlocks snapshots every block the prefix cache holds, one entry per
// copy (an engine may hold two copies of a block computed twice at once),
// on the engine goroutine between steps. It is test support, for tests and
// stress scenarios that compare a mirror built from the KV events with the
// engine: it walks the whole pool.
func (e *Engine) CachedBlocks(ctx context.Context) ([]CachedBlock, error) {
	var out []CachedBlock
	err := e.inspect(ctx, func(s *scheduler) {
		for i := range s.pool.blocks {
			b := &s.pool.blocks[i]
			if !b.hashed {
				continue
			}
			k, ok := b.ext.Uint()
			if !ok {
				k = enginehash.EventInt(b.ext.Bytes())
			}
			// The pool keys a block by its hash and group: groupKey sets
			// the hash apart and back alike.
			out = append(out, CachedBlock{Key: k, Hash: groupKey(b.hash, int(b.group)),
				Group: reportedGroup(int(b.group), s.hybrid())})
		}
	})
	return out, err
}

// KVEventsSubscribers is how many subscribers the KV event socket has now
// (0 when the engine publishes no events), so that a test can start its
// traffic once its subscriber is in.
func (s *Server) KVEventsSubscribers() int {
	if s.kvpub == nil {
		return 0
	}
	return s.kvpub.pub.Stats().Subscribers
}
