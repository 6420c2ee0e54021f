package sim

import (
	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/events"
)

// A hybrid model (Config.SlidingWindow): beside its full-attention layers
// the model has sliding-window layers, which attend to the last
// SlidingWindow tokens only. As in vLLM, their KV cache is a group of its
// own in the same block pool (see windowGroup): a request holds a block of each
// group for every block of its tokens, gives the window group's back as
// the window moves past them (cached still, so that they are the first a
// request needing blocks evicts), and a prompt hits as far as both groups
// allow: the full-attention group every block before the hit, the window
// group the blocks the window reaches back over (vLLM's
// find_longest_cache_hit of its hybrid coordinator).

// windowGroup is the sliding-window layers' KV-cache group in the pool, 0
// the full-attention layers'. The events and CachedBlocks number them as
// vLLM does for a model whose first layer is a sliding-window one (Gemma 3,
// gpt-oss): by the first layer of each kind, the window group 0 (see
// reportedGroup). vLLM frees and caches a request's groups in that order:
// the window's first.
const windowGroup = 1

// reportedGroup is the number the events give the pool's group, with the
// window group first when windowFirst (a hybrid model).
func reportedGroup(group int, windowFirst bool) int {
	if windowFirst {
		return 1 - group
	}
	return group
}

// hybrid reports whether the engine plays a hybrid model.
func (s *scheduler) hybrid() bool { return s.cfg.SlidingWindow > 0 }

// windowBlocks is how many blocks just before a hit the window group must
// hold: vLLM's cdiv(sliding_window - 1, block_size), at least one.
func (s *scheduler) windowBlocks() int {
	return max((s.cfg.SlidingWindow-1+s.cfg.BlockSize-1)/s.cfg.BlockSize, 1)
}

// windowReserve is how many window-group blocks a request of tokens
// tokens may hold at once, which its admission reserves: its window and a
// step's chunk, as vLLM counts a sliding-window group's need, at most a
// block per block of tokens. 0 when the model is not hybrid.
func (c *Config) windowReserve(tokens int) int {
	if c.SlidingWindow <= 0 || tokens <= 0 {
		return 0
	}
	return min(blocksFor(tokens, c.BlockSize), blocksFor(c.SlidingWindow-1+c.MaxNumBatchedTokens, c.BlockSize)+1)
}

// windowHit lowers n, how many leading blocks of hashes the full-attention
// group holds, to how many a prompt hits with the window group's rule met
// too: the end of the last run of windowBlocks blocks the window group
// holds, or a shorter run from the first block. It appends to dst the
// window group's blocks the hit reuses, those of that run.
func (s *scheduler) windowHit(dst []int32, hashes []blockhash.Hash, n int) (int, []int32) {
	need, run, hit := s.windowBlocks(), 0, -1
	for i := n - 1; i >= 0; i-- {
		if _, ok := s.pool.cachedIn(hashes[i], windowGroup); !ok {
			run = 0
			continue
		}
		if run++; run >= need {
			hit = i + run
			break
		}
	}
	if hit < 0 {
		hit = run // the run from the first block, shorter than a window
	}
	for i := hit - min(run, hit); i < hit; i++ {
		id, _ := s.pool.cachedIn(hashes[i], windowGroup)
		dst = append(dst, id)
	}
	return hit, dst
}

// reuseWindow gives r the window group's blocks a hit of hit blocks reuses
// (the last len(whits) before it), null before them.
func (s *scheduler) reuseWindow(r *request, hit int, whits []int32) {
	s.pool.touch(whits)
	r.window = r.window[:0]
	for range hit - len(whits) {
		r.window = append(r.window, 0)
	}
	r.window = append(r.window, whits...)
	r.windowCached = hit
}

// leaveWindow gives back r's window-group blocks its window has moved past,
// as vLLM's remove_skipped_blocks does before a step's blocks are
// allocated: they stay cached, queued for eviction, the nearest to the
// window first.
func (s *scheduler) leaveWindow(r *request) {
	end := min((r.computed-s.cfg.SlidingWindow+1)/s.cfg.BlockSize, len(r.window))
	first := end
	for first > 0 && r.window[first-1] != 0 {
		first--
	}
	if first >= end {
		return
	}
	s.pool.free(r.window[first:end])
	clear(r.window[first:end])
}

// growWindow gives r window-group blocks up to n, the blocks it holds in
// the full-attention group. The caller has checked that they are free.
func (s *scheduler) growWindow(r *request, n int) {
	if need := n - len(r.window); need > 0 {
		r.window = s.pool.allocate(r.window, need)
	}
}

// cacheWindow puts r's window-group blocks full of scheduled tokens into the
// prefix cache, as cacheFull does the full-attention group's, and logs a
// BlockStored for each run of them (the window's null blocks, and blocks
// cached already, end a run).
func (s *scheduler) cacheWindow(r *request, full int) {
	log := s.pool.log
	run := r.windowCached
	flush := func(end int) {
		if log != nil {
			log.storedIn(r, run, end, windowGroup, s.cfg.SlidingWindow)
		}
		run = end + 1
	}
	for ; r.windowCached < full; r.windowCached++ {
		i := r.windowCached
		id := r.window[i]
		var ext events.Hash
		if log != nil {
			ext = r.ext[i]
		}
		if id == 0 || !s.pool.cache(id, r.hashes[i], ext, windowGroup) {
			flush(i)
		}
	}
	flush(full)
}

// releaseWindow gives back every window-group block r holds.
func (s *scheduler) releaseWindow(r *request) {
	held := r.window[:0]
	for _, id := range r.window {
		if id != 0 {
			held = append(held, id)
		}
	}
	s.pool.free(held)
	r.window = r.window[:0]
	r.windowCached = 0
}
