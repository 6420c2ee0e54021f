package tokenize

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// A piece is a stretch of prompt text that a tokenizer encodes the same
// wherever it appears: for both tokenizers here, the text between two
// special (added) tokens, which restart tokenization. Chat prompts repeat
// most of theirs from one request to the next (the system prompt, earlier
// turns), so a tokenizer built with WithCache keeps the ids of the pieces it
// has encoded and copies them on the next sighting instead of encoding again.

// WithCache returns a tokenizer that encodes as t does and keeps the ids of
// the pieces it encodes, up to maxTokens tokens in all, for the next request
// that repeats them. Its pieces are the texts between two added tokens
// matched before normalization (as <|im_start|> and <|im_end|>) that are at
// least 64 bytes long: a shared system prompt, an earlier turn of a chat.
// Everything after that first split (the normalizer, added tokens matched
// after it, the pre-tokenizers and the model) sees one such text at a time,
// and only Metaspace's prepend_scheme "first" looks at where it is, so a
// piece that begins the text is cached apart from the same text elsewhere.
// With maxTokens <= 0 the result has no cache.
//
// The cache is split into up to 16 shards of at least 65,536 tokens, each
// evicting what was not used for longest (roughly: CLOCK); a piece of more
// than a quarter of a shard (65,536 tokens at the default 4,194,304) is not
// kept. For English text it takes about 8 bytes per token kept: the ids and
// a copy of the text.
//
// The result shares t's vocabulary and the word cache of its BPE model, but
// not its piece cache: each call makes a new, empty one.
func (t *HF) WithCache(maxTokens int) *HF {
	c := *t
	c.pieces = newPieceCache(maxTokens)
	return &c
}

// CacheStats returns how many pieces Encode found in the piece cache (hits)
// and how many it had to encode (misses) since WithCache. Pieces too short
// to cache are not counted; without a cache both are 0.
func (t *HF) CacheStats() (hits, misses uint64) { return t.pieces.stats() }

// WithCache returns a builtin:sim tokenizer that keeps the ids of the pieces
// it encodes, up to maxTokens tokens in all. Its pieces are the texts
// between two special tokens at least 64 bytes long: a special token always
// ends a piece, and whether a piece ends at a byte depends only on the text
// to its left, so encoding starts afresh after every special token. With
// maxTokens <= 0 the result has no cache.
func (*Sim) WithCache(maxTokens int) *Sim {
	return &Sim{pieces: newPieceCache(maxTokens)}
}

// CacheStats returns the piece cache's hits and misses, as HF.CacheStats.
func (t *Sim) CacheStats() (hits, misses uint64) { return t.pieces.stats() }

// encodeText encodes text without special tokens, through the piece cache
// when there is one.
func (t *Sim) encodeText(dst []int, text string) []int {
	if t.pieces == nil || len(text) < pieceMinBytes {
		return encodePieces(dst, text)
	}
	key := t.pieces.key(text, false)
	dst, ok := t.pieces.appendCached(dst, key, text, false)
	if ok {
		return dst
	}
	n := len(dst)
	dst = encodePieces(dst, text)
	t.pieces.put(key, text, false, dst[n:])
	return dst
}

// pieceMinBytes is the shortest piece worth caching: below it, hashing and
// comparing the text costs about as much as encoding it.
const pieceMinBytes = 64

// pieceShardMin is the smallest budget, in tokens, worth a shard of its own.
// The budget is split into up to pieceShardsMax shards of at least this
// many tokens, so small budgets use one shard.
const (
	pieceShardMin  = 1 << 16
	pieceShardsMax = 16
)

// pieceCache maps pieces to their token ids, holding at most a fixed number
// of tokens in total. It is split into shards, each under its own lock and
// with its own share of the budget; a shard evicts with CLOCK (second
// chance), so a hit takes only a read lock. Safe for concurrent use.
//
// Besides the bounded ids, every entry holds a copy of its text (about four
// bytes per token for English) and some 100 bytes of bookkeeping.
type pieceCache struct {
	seed   maphash.Seed
	shards []pieceShard
}

type pieceShard struct {
	budget int // tokens; immutable

	hits, misses atomic.Uint64

	mu     sync.RWMutex
	m      map[uint64]*pieceEntry // guarded by mu
	hand   *pieceEntry            // guarded by mu; next entry the clock looks at, nil when empty
	tokens int                    // guarded by mu; sum of len(ids) over m
}

// pieceEntry is one cached piece. text, start and ids never change once the
// entry is in a shard; ids are shared with readers, who copy them.
type pieceEntry struct {
	key   uint64
	text  string
	start bool
	ids   []int32

	ref atomic.Bool // set by hits; the clock hand clears it

	prev, next *pieceEntry // guarded by the shard's mu; the clock ring
}

// newPieceCache returns a cache of at most maxTokens tokens, or nil when
// maxTokens <= 0 (no cache).
func newPieceCache(maxTokens int) *pieceCache {
	if maxTokens <= 0 {
		return nil
	}
	n := 1
	for n < pieceShardsMax && maxTokens/(2*n) >= pieceShardMin {
		n *= 2
	}
	c := &pieceCache{seed: maphash.MakeSeed(), shards: make([]pieceShard, n)}
	for i := range c.shards {
		s := &c.shards[i]
		s.budget = maxTokens / n
		if i < maxTokens%n {
			s.budget++
		}
		s.m = make(map[uint64]*pieceEntry)
	}
	return c
}

// key hashes a piece. start is true for a piece at the very beginning of
// the text, which some tokenizers encode differently (Metaspace's
// prepend_scheme "first").
func (c *pieceCache) key(text string, start bool) uint64 {
	h := maphash.String(c.seed, text)
	if start {
		h = ^h
	}
	return h
}

func (c *pieceCache) shard(key uint64) *pieceShard {
	return &c.shards[key%uint64(len(c.shards))]
}

// appendCached appends the cached ids of a piece to dst. ok is false, and
// dst unchanged, when the piece is not cached.
func (c *pieceCache) appendCached(dst []int, key uint64, text string, start bool) (_ []int, ok bool) {
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

// put caches the ids of a piece, evicting others as needed. A piece with no
// ids, or more than a quarter of its shard's budget, is not kept: a single
// huge prompt must not flush the pieces that recur.
func (c *pieceCache) put(key uint64, text string, start bool, ids []int) {
	s := c.shard(key)
	if len(ids) == 0 || len(ids) > s.budget/4 {
		return
	}
	s.mu.RLock()
	e := s.m[key]
	s.mu.RUnlock()
	if e != nil && e.start == start && e.text == text {
		return // another encoder was first
	}
	e = &pieceEntry{key: key, text: strings.Clone(text), start: start, ids: make([]int32, len(ids))}
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
	for s.tokens+len(e.ids) > s.budget {
		s.evict()
	}
	s.m[key] = e
	s.tokens += len(e.ids)
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
func (s *pieceShard) evict() {
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
func (s *pieceShard) remove(e *pieceEntry) {
	delete(s.m, e.key)
	s.tokens -= len(e.ids)
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

// stats sums the lookups of all shards.
func (c *pieceCache) stats() (hits, misses uint64) {
	if c == nil {
		return 0, 0
	}
	for i := range c.shards {
		hits += c.shards[i].hits.Load()
		misses += c.shards[i].misses.Load()
	}
	return hits, misses
}

// size returns the number of cached pieces and their tokens.
func (c *pieceCache) size() (pieces, tokens int) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		pieces += len(s.m)
		tokens += s.tokens
		s.mu.RUnlock()
	}
	return pieces, tokens
}
