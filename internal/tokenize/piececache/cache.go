// Package piececache keeps the token ids of prompt pieces a tokenizer has
// encoded, for the next request that repeats them.
//
// A piece is a stretch of prompt text that a tokenizer encodes the same
// wherever it appears: for both tokenizers of Inferrail (Hugging Face's
// and builtin:sim), the text between two special (added) tokens, which
// restart tokenization. Chat
// prompts repeat most of theirs from one request to the next (the system
// prompt, earlier turns), so a tokenizer with a cache copies their ids on
// the next sighting instead of encoding them again. The tokenizer decides
// what a piece is; the cache only maps texts to ids.
package piececache

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// bytesPerToken is what a piece's text is charged at (see cost): about
// what a token of English text spans.
const bytesPerToken = 4

// cost is what a piece counts against the budget: its tokens, or its
// text's bytes over bytesPerToken when that is more. Counted by tokens
// alone, pieces of long tokens (one Llama 3 or Qwen 3 token spans up to
// 128 spaces or dashes) held 30 times the memory their tokens said: 0.5 GB
// a model at the default budget, from one client sending such text (a
// review's finding).
func cost(text string, ids int) int {
	return max(ids, (len(text)+bytesPerToken-1)/bytesPerToken)
}

// MinBytes is the shortest piece worth caching: below it, hashing and
// comparing the text costs about as much as encoding it.
const MinBytes = 64

// shardMin is the smallest budget, in tokens, worth a shard of its own.
// The budget is split into up to shardsMax shards of at least this many
// tokens, so small budgets use one shard.
const (
	shardMin  = 1 << 16
	shardsMax = 16
)

// Cache maps pieces to their token ids, holding at most a fixed number of
// tokens in total, each piece counted at its cost. It is split into
// shards, each under its own lock and with its own share of the budget; a
// shard evicts with CLOCK (second chance), so a hit takes only a read
// lock. Safe for concurrent use.
//
// Besides its ids, every entry holds a copy of its text and some 100
// bytes of bookkeeping.
type Cache struct {
	seed   maphash.Seed
	shards []shard
}

type shard struct {
	budget int // tokens; immutable

	hits, misses atomic.Uint64

	mu     sync.RWMutex
	m      map[uint64]*entry // guarded by mu
	hand   *entry            // guarded by mu; next entry the clock looks at, nil when empty
	tokens int               // guarded by mu; the sum of cost over m
}

// entry is one cached piece. text, start and ids never change once the
// entry is in a shard; ids are shared with readers, who copy them.
type entry struct {
	key   uint64
	text  string
	start bool
	ids   []int32

	ref atomic.Bool // set by hits; the clock hand clears it

	prev, next *entry // guarded by the shard's mu; the clock ring
}

// New returns a cache of at most maxTokens tokens, or nil when
// maxTokens <= 0 (no cache).
func New(maxTokens int) *Cache {
	if maxTokens <= 0 {
		return nil
	}
	n := 1
	for n < shardsMax && maxTokens/(2*n) >= shardMin {
		n *= 2
	}
	c := &Cache{seed: maphash.MakeSeed(), shards: make([]shard, n)}
	for i := range c.shards {
		s := &c.shards[i]
		s.budget = maxTokens / n
		if i < maxTokens%n {
			s.budget++
		}
		s.m = make(map[uint64]*entry)
	}
	return c
}

// Key hashes a piece. start is true for a piece at the very beginning of
// the text, which some tokenizers encode differently (Metaspace's
// prepend_scheme "first").
func (c *Cache) Key(text string, start bool) uint64 {
	h := maphash.String(c.seed, text)
	if start {
		h = ^h
	}
	return h
}

func (c *Cache) shard(key uint64) *shard {
	return &c.shards[key%uint64(len(c.shards))]
}

// AppendCached appends the cached ids of a piece to dst. ok is false, and
// dst unchanged, when the piece is not cached.
func (c *Cache) AppendCached(dst []int, key uint64, text string, start bool) (_ []int, ok bool) {
	s := c.shard(key)
	s.mu.RLock()
	e := s.m[key]
	s.mu.RUnlock()
	if e == nil || e.start != start || e.text != text {
		s.misses.Add(1)
		return dst, false
	}
	s.hits.Add(1)
	if !e.ref.Load() {
		e.ref.Store(true)
	}
	// The entry may be evicted meanwhile; its ids stay valid.
	dst = slices.Grow(dst, len(e.ids))
	for _, id := range e.ids {
		dst = append(dst, int(id))
	}
	return dst, true
}

// Put caches the ids of a piece, evicting others as needed. A piece with no
// ids, or costing more than a quarter of its shard's budget, is not kept: a
// single huge prompt must not flush the pieces that recur.
func (c *Cache) Put(key uint64, text string, start bool, ids []int) {
	s := c.shard(key)
	n := cost(text, len(ids))
	if len(ids) == 0 || n > s.budget/4 {
		return
	}
	s.mu.RLock()
	e := s.m[key]
	s.mu.RUnlock()
	if e != nil && e.start == start && e.text == text {
		return // another encoder was first
	}
	e = &entry{key: key, text: strings.Clone(text), start: start, ids: make([]int32, len(ids))}
	for i, id := range ids {
		e.ids[i] = int32(id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.m[key]; old != nil {
		if old.start == start && old.text == text {
			return
		}
		s.remove(old) // a hash collision: the newer piece wins
	}
	for s.tokens+n > s.budget {
		s.evict()
	}
	s.m[key] = e
	s.tokens += n
	// The new entry goes just behind the hand, the last place it visits.
	if s.hand == nil {
		e.prev, e.next = e, e
		s.hand = e
		return
	}
	e.prev, e.next = s.hand.prev, s.hand
	e.prev.next = e
	s.hand.prev = e
}

// evict removes the first entry at or after the hand that has not been hit
// since the hand last passed it, clearing the marks it passes. s.mu must be
// held and the shard not empty.
func (s *shard) evict() {
	for {
		e := s.hand
		s.hand = e.next
		if e.ref.Load() {
			e.ref.Store(false)
			continue
		}
		s.remove(e)
		return
	}
}

// remove takes e out of the shard. s.mu must be held.
func (s *shard) remove(e *entry) {
	delete(s.m, e.key)
	s.tokens -= cost(e.text, len(e.ids))
	if e.next == e {
		s.hand = nil
	} else {
		if s.hand == e {
			s.hand = e.next
		}
		e.prev.next = e.next
		e.next.prev = e.prev
	}
	e.prev, e.next = nil, nil
}

// Stats sums the lookups of all shards: how many found their piece (hits)
// and how many did not (misses). A nil cache has neither.
func (c *Cache) Stats() (hits, misses uint64) {
	if c == nil {
		return 0, 0
	}
	for i := range c.shards {
		hits += c.shards[i].hits.Load()
		misses += c.shards[i].misses.Load()
	}
	return hits, misses
}

// Size returns the number of cached pieces and their cost in tokens.
func (c *Cache) Size() (pieces, tokens int) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		pieces += len(s.m)
		tokens += s.tokens
		s.mu.RUnlock()
	}
	return pieces, tokens
}
