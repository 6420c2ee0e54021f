package sim

import (
	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/events"
	"github.com/inferrail/inferrail/internal/tokenize/simtok"
)

// reqState is where a request is in the engine.
type reqState uint8

const (
	stateNew reqState = iota
	stateWaiting
	stateRunning
	stateFinished
)

// request is one generation request inside the engine. Fields are owned by
// the engine goroutine once the request is submitted, except out.
type request struct {
	id     string
	tokens []int // all token ids: prompt, then generated
	prompt int   // prompt length
	hashes []blockhash.Hash
	seed   blockhash.Hash
	salt   string // cache_salt, which the engine's block 0 hash takes in
	// ext are the engine's own hashes of the full blocks, as its KV events
	// name them, and extLast the last one's whole digest, the next one's
	// parent; kept only while the engine publishes events.
	ext     []events.Hash
	extLast []byte

	maxTokens int // effective max_tokens
	maxParam  int // max_tokens as the client asked, for metrics
	minTokens int
	ignoreEOS bool
	eosAt     int // number of generated tokens, EOS included, at which the model stops on its own
	babble    simtok.Babbler

	state      reqState
	blocks     []int32 // blocks held, in token order
	numCached  int     // leading blocks of blocks already in the prefix cache
	computed   int     // tokens whose KV is computed or was found cached
	prefillEnd int     // tokens to compute before decoding resumes (prompt, or prompt + output after a preemption)
	prefillBeg int     // computed when the prefill started
	resumed    bool    // preempted at least once
	abort      bool    // the client left; leaves at the next step boundary
	reportFull bool    // vllm_xargs kv_cache_report_mode "full": its hits are reported as stored
	// window are the request's blocks of a hybrid model's sliding-window
	// group (window.go), in token order, 0 (the null block) where the
	// window has moved past them; windowCached its leading blocks already
	// in the prefix cache.
	window       []int32
	windowCached int

	cached         int // prompt tokens found cached at first admission
	created        int // prompt tokens this request wrote into the cache at first admission
	arrival        float64
	firstScheduled float64
	scheduledOnce  bool
	firstToken     float64
	lastToken      float64
	finish         string

	out *Stream

	prev, next *request // waiting queue links
}

func (r *request) output() int { return len(r.tokens) - r.prompt }

// queue is the waiting queue: arrival order, preempted requests in front.
type queue struct {
	head, tail *request
	n          int
}

func (q *queue) pushBack(r *request) {
	r.prev, r.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = r
	} else {
		q.head = r
	}
	q.tail = r
	q.n++
}

func (q *queue) pushFront(r *request) {
	r.prev, r.next = nil, q.head
	if q.head != nil {
		q.head.prev = r
	} else {
		q.tail = r
	}
	q.head = r
	q.n++
}

func (q *queue) remove(r *request) {
	if r.prev != nil {
		r.prev.next = r.next
	} else {
		q.head = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	} else {
		q.tail = r.prev
	}
	r.prev, r.next = nil, nil
	q.n--
}

// work is one request's share of a step.
type work struct {
	r       *request
	tokens  int  // tokens computed this step
	prefill bool // a prompt chunk rather than one decode token
	start   int  // first position computed
}

// scheduler is vLLM's V1 scheduler over one block pool, without a clock: the
// engine asks it to plan a step, prices the plan, and hands it back when the
// step's time is up. Owned by one goroutine.
type scheduler struct {
	cfg     *Config
	pool    *blockPool
	waiting queue
	running []*request
	plan    []work
	hits    []int32 // scratch for prefix lookups
	whits   []int32 // scratch for the window group's (window.go)
	tok     *simtok.Tokenizer
	stats   StepStats
}

func newScheduler(cfg *Config) *scheduler {
	return &scheduler{
		cfg:  cfg,
		pool: newBlockPool(cfg.NumGPUBlocks, cfg.EnablePrefixCaching),
		tok:  simtok.New(),
	}
}

func (s *scheduler) idle() bool { return s.waiting.n == 0 && len(s.running) == 0 }

// noneRunning reports whether no request is running.
func (s *scheduler) noneRunning() bool { return len(s.running) == 0 }

// lastArrival is the latest arrival among the waiting requests, 0 when
// none waits.
func (s *scheduler) lastArrival() float64 {
	var last float64
	for r := s.waiting.head; r != nil; r = r.next {
		last = max(last, r.arrival)
	}
	return last
}

// add queues a new request behind every waiting one.
func (s *scheduler) add(r *request) {
	r.state = stateWaiting
	s.waiting.pushBack(r)
}

// cancel withdraws a request whose client left: at once when it waits,
// at the next step boundary when it runs.
func (s *scheduler) cancel(r *request, now float64) {
	switch r.state {
	case stateWaiting:
		s.waiting.remove(r)
		s.finish(r, "abort", now)
	case stateRunning:
		r.abort = true
	}
}

func (s *scheduler) blocksFor(tokens int) int {
	if tokens <= 0 {
		return 0
	}
	return blocksFor(tokens, s.cfg.BlockSize)
}

// schedule plans one step at virtual time now: running requests first, in
// the order they started, then waiting ones in queue order while budget and
// sequences last. It returns the plan, valid until the next call.
func (s *scheduler) schedule(now float64) []work {
	s.plan = s.plan[:0]
	budget := s.cfg.MaxNumBatchedTokens
	preempted := false
	s.dropAborted(now)

	for i := 0; i < len(s.running) && budget > 0; {
		r := s.running[i]
		n := min(len(r.tokens)-r.computed, budget)
		if n <= 0 {
			i++
			continue
		}
		scheduledSelf := true
		for !s.grow(r, r.computed+n) {
			victim := s.running[len(s.running)-1]
			s.running = s.running[:len(s.running)-1]
			budget += s.unplan(victim)
			s.preempt(victim)
			preempted = true
			if victim == r {
				scheduledSelf = false
				break
			}
		}
		if !scheduledSelf {
			break
		}
		s.plan = append(s.plan, work{r: r, tokens: n, prefill: r.computed < r.prefillEnd, start: r.computed})
		r.computed += n
		s.cacheFull(r)
		budget -= n
		i++
	}

	if !preempted {
		for s.waiting.n > 0 && budget > 0 && len(s.running) < s.cfg.MaxNumSeqs {
			r := s.waiting.head
			if !s.admit(r, budget, now) {
				break // head-of-line blocking: nothing behind it is admitted either
			}
			n := s.plan[len(s.plan)-1].tokens
			budget -= n
		}
	}
	return s.plan
}

// dropAborted releases running requests whose clients left between steps.
func (s *scheduler) dropAborted(now float64) {
	kept := s.running[:0]
	for _, r := range s.running {
		if r.abort {
			s.release(r)
			s.finish(r, "abort", now)
			continue
		}
		kept = append(kept, r)
	}
	clear(s.running[len(kept):])
	s.running = kept
}

// unplan takes a preempted request out of this step's plan and returns the
// budget it held.
func (s *scheduler) unplan(r *request) int {
	for i, w := range s.plan {
		if w.r == r {
			s.plan = append(s.plan[:i], s.plan[i+1:]...)
			return w.tokens
		}
	}
	return 0
}

// grow makes r hold enough blocks for its first upto tokens. It fails, taking
// nothing, when the pool has too few free blocks.
func (s *scheduler) grow(r *request, upto int) bool {
	if s.hybrid() {
		s.leaveWindow(r)
	}
	need := s.blocksFor(upto) - len(r.blocks)
	if need <= 0 {
		return true
	}
	if need*s.cfg.kvGroups() > s.pool.numFree {
		return false
	}
	r.blocks = s.pool.allocate(r.blocks, need)
	if s.hybrid() {
		s.growWindow(r, len(r.blocks))
	}
	return true
}

// cacheFull puts every block of r that is full of scheduled tokens into the
// prefix cache, as vLLM does when it schedules them.
func (s *scheduler) cacheFull(r *request) {
	if !s.pool.caching {
		return
	}
	full := min(r.computed, len(r.tokens)) / s.cfg.BlockSize
	if s.hybrid() {
		s.cacheWindow(r, full) // vLLM caches a hybrid model's groups in order: the window's first
	}
	log := s.pool.log
	run := r.numCached // the first block of the run newly cached, for its BlockStored
	for ; r.numCached < full; r.numCached++ {
		var ext events.Hash
		if log != nil {
			ext = r.ext[r.numCached]
		}
		if !s.pool.cache(r.blocks[r.numCached], r.hashes[r.numCached], ext, 0) && log != nil {
			log.stored(r, run, r.numCached)
			run = r.numCached + 1
		}
	}
	if log != nil {
		log.stored(r, run, full)
	}
}

// admit tries to start the waiting request at the head of the queue with at
// most budget tokens this step. It checks that blocks for the whole request
// fit, as vLLM's scheduler_reserve_full_isl does.
func (s *scheduler) admit(r *request, budget int, now float64) bool {
	total := len(r.tokens)
	bs := s.cfg.BlockSize
	// The last token is always computed, so at most (total-1)/bs blocks hit.
	s.hits = s.pool.lookup(s.hits[:0], r.hashes[:min(len(r.hashes), (total-1)/bs)])
	s.whits = s.whits[:0]
	if s.hybrid() {
		var n int
		n, s.whits = s.windowHit(s.whits, r.hashes, len(s.hits))
		s.hits = s.hits[:n]
	}
	hit := len(s.hits) * bs
	whole := s.blocksFor(min(total, s.cfg.MaxModelLen)) + s.cfg.windowReserve(min(total, s.cfg.MaxModelLen)) -
		len(s.hits) - len(s.whits) + s.pool.countFree(s.hits) + s.pool.countFree(s.whits)
	if whole > s.pool.numFree {
		return false
	}
	s.waiting.remove(r)
	s.pool.touch(s.hits)
	r.blocks = append(r.blocks[:0], s.hits...)
	r.numCached = len(s.hits)
	if s.hybrid() {
		s.reuseWindow(r, len(s.hits), s.whits)
	}
	if r.reportFull && s.pool.log != nil {
		// kv_cache_report_mode "full": the hits it reuses are reported
		// as stored, from block 0 with no parent, as vLLM's
		// emit_cached_block_events does (a hybrid model's window group:
		// those of its window).
		if s.hybrid() {
			s.pool.log.storedIn(r, r.numCached-len(s.whits), r.numCached, windowGroup, s.cfg.SlidingWindow)
		}
		s.pool.log.stored(r, 0, r.numCached)
	}
	r.computed = hit
	r.prefillBeg, r.prefillEnd = hit, total
	n := min(total-hit, budget)
	if !s.grow(r, hit+n) {
		panic("sim: whole-request check passed but a step's blocks do not fit") // unreachable: the check above covers them
	}
	r.state = stateRunning
	s.running = append(s.running, r)
	if !r.scheduledOnce {
		r.scheduledOnce = true
		r.firstScheduled = max(now, r.arrival)
	}
	if !r.resumed {
		r.cached = hit
		if s.pool.caching {
			r.created = max(0, r.prompt/bs*bs-hit)
		}
		// vLLM looks nothing up, and so counts no query, with caching off.
		if s.pool.caching {
			s.stats.PrefixQueries += total
			s.stats.PrefixHits += hit
		}
	}
	s.plan = append(s.plan, work{r: r, tokens: n, prefill: true, start: hit})
	r.computed += n
	s.cacheFull(r)
	return true
}

// preempt gives back every block of a running request and queues it in front
// of the waiting ones, to be recomputed (mostly from the cache) later.
func (s *scheduler) preempt(r *request) {
	s.releaseWindow(r) // vLLM frees a hybrid model's groups in order: the window's first
	s.pool.free(r.blocks)
	r.blocks = r.blocks[:0]
	r.numCached = 0
	r.computed = 0
	r.resumed = true
	r.state = stateWaiting
	s.waiting.pushFront(r)
	s.stats.Preemptions++
}

// cost prices a plan in seconds.
func (s *scheduler) cost(plan []work) float64 {
	lat := s.cfg.Latency
	var c float64
	decodes := 0
	for _, w := range plan {
		if w.prefill {
			c += lat.chunk(w.tokens, w.start, w.start == w.r.prefillBeg)
		} else {
			decodes++
		}
	}
	return c + lat.Decode(decodes)
}

// complete applies the outputs of a step that ended at virtual time end:
// requests whose known tokens are all computed sample one more, and finished
// or abandoned ones leave.
func (s *scheduler) complete(plan []work, end float64) {
	for _, w := range plan {
		r := w.r
		if r.abort || r.computed < len(r.tokens) {
			continue
		}
		s.sample(r, end)
	}
	kept := s.running[:0]
	for _, r := range s.running {
		switch {
		case r.abort:
			s.release(r)
			s.finish(r, "abort", end)
		case r.finish != "":
			s.release(r)
			s.finish(r, r.finish, end)
		default:
			kept = append(kept, r)
		}
	}
	clear(s.running[len(kept):])
	s.running = kept
	s.stats.Running = len(s.running)
	s.stats.Waiting = s.waiting.n
	s.stats.KVUsage = s.pool.usage()
}

// sample appends the next token of r, the model's own EOS when it is due.
func (s *scheduler) sample(r *request, now float64) {
	n := r.output() + 1
	tok := r.babble.Next()
	eos := !r.ignoreEOS && n >= r.eosAt && n > r.minTokens
	if eos {
		tok = s.tok.EOS()
	}
	r.tokens = append(r.tokens, tok)
	if s.pool.caching && len(r.tokens)%s.cfg.BlockSize == 0 {
		r.hashes = blockhash.Extend(r.hashes, r.seed, r.tokens, s.cfg.BlockSize)
		if s.pool.log != nil {
			s.pool.log.extend(r)
		}
	}
	s.stats.GenerationTokens++
	s.stats.IterationTokens++
	if n == 1 {
		r.firstToken = now
		s.stats.TTFT = append(s.stats.TTFT, now-r.arrival)
		s.stats.PromptTokens += r.prompt
		s.stats.PromptCached += r.cached
		s.stats.PromptComputed += r.prompt - r.cached
		// vLLM counts a prompt in the step's tokens once, in the step of
		// its first output: not chunk by chunk, nor again when a
		// preempted request computes it anew.
		s.stats.IterationTokens += r.prompt - r.cached
	} else {
		s.stats.ITL = append(s.stats.ITL, now-r.lastToken)
	}
	r.lastToken = now
	switch {
	case eos:
		r.finish = "stop"
	case n >= r.maxTokens:
		r.finish = "length"
	}
	r.out.push(tok, r.finish)
}

func (s *scheduler) release(r *request) {
	s.releaseWindow(r) // vLLM frees a hybrid model's groups in order: the window's first
	s.pool.free(r.blocks)
	r.blocks = r.blocks[:0]
}

// finish records a request that left the engine.
func (s *scheduler) finish(r *request, reason string, now float64) {
	r.state = stateFinished
	r.finish = reason
	if reason == "abort" {
		r.out.push(-1, reason)
	}
	f := FinishedRequest{
		Reason:            reason,
		PromptTokens:      r.prompt,
		GenerationTokens:  r.output(),
		MaxTokensParam:    r.maxParam,
		N:                 1,
		E2E:               now - r.arrival,
		PrefillKVComputed: r.prompt - r.cached,
	}
	if r.scheduledOnce {
		f.Queue = max(0, r.firstScheduled-r.arrival)
		if r.output() > 0 {
			f.Inference = r.lastToken - r.firstScheduled
			f.Prefill = r.firstToken - r.firstScheduled
			f.Decode = r.lastToken - r.firstToken
			if r.output() > 1 {
				f.TPOT = f.Decode / float64(r.output()-1)
			}
		}
	}
	s.stats.Finished = append(s.stats.Finished, f)
}

// takeStats returns the stats gathered since the last call and starts anew.
func (s *scheduler) takeStats() *StepStats {
	return &s.stats
}

// resetStats clears the per-step stats, keeping their buffers.
func (s *scheduler) resetStats() {
	s.stats = StepStats{TTFT: s.stats.TTFT[:0], ITL: s.stats.ITL[:0], Finished: s.stats.Finished[:0]}
}
