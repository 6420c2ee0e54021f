package index

import (
	"maps"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/inferrail/inferrail/internal/blockhash"
)

// Approx is the approximate index: it learns only from the gateway's own
// routing. Each replica gets a shadow LRU as large as its KV cache.
// Recording a prompt touches its blocks there deepest first, so the
// prompt's first block ends up most recently used and a replica forgets a
// prompt from its tail, as vLLM frees a request's blocks tail first. With
// chained hashes this keeps every replica's blocks closed under prefixes: a
// replica never holds a block without the block before it. Match relies on
// that to probe a few blocks of a prompt instead of all of them.
//
// A holder map, sharded 256 ways, gives for each block the set of replicas
// holding it, as a bitset of small per-replica handles (handles are reused
// after Forget, so the sets stay one word wide up to 64 replicas). Match
// reads it without a lock; writers serialize per shard. Each replica's LRU
// has its own mutex. Locks are taken in the order replica, then shard, or
// Approx.mu, then shard; never Approx.mu and a replica's together.
// holesMu is taken last, with nothing under it.
//
// Create an Approx with NewApprox; the zero value is not ready. It starts
// no goroutines and is safe for concurrent use. A Match racing a Record,
// TakeBack, Forget or Reset may see part of the change, which is as good as
// the index is approximate. Must not be copied.
type Approx struct {
	defaultCapacity int
	specTTL         time.Duration
	now             func() int64 // UnixNano; a test may stop the clock

	// replicas is an immutable snapshot, replaced under mu.
	replicas atomic.Pointer[registry]

	mu      sync.Mutex
	handles []bool // handles in use; guarded by mu
	words   int    // holders words per slot, 64 handles each; guarded by mu

	shards [numShards]holderShard

	// holes is the set of handles (bit h%64 of word h/64) whose holder
	// bits follow a mirror with holes (Mirror.Holes): Match checks their
	// depths block by block. Nil when there are none, as almost always;
	// replaced, never changed, under holesMu, which is taken last.
	holes   atomic.Pointer[[]uint64]
	holesMu sync.Mutex
	// grouped are the KV-cache groups of the mirrors of engines with
	// several, by the handle of the replica whose holder bits follow the
	// mirror: Match lowers their depths to what every group allows
	// (checkGroups). Nil when there are none; replaced like holes, under
	// holesMu.
	grouped atomic.Pointer[map[int32]*kvGroups]

	// testHookApplied, when set, hears the work of every part of a batch
	// ApplyEvents applies under one hold of the replica's lock.
	testHookApplied func(work uint64)
}

// replica is one replica's part of the index. Must not be copied.
type replica struct {
	id     string
	handle int // bit in the holder map's sets, unique among live replicas

	mu       sync.Mutex
	dead     bool   // forgotten: the replica left the snapshot; guarded by mu
	capacity int    // in blocks; guarded by mu
	stamps   uint64 // records so far, the last record's stamp; guarded by mu
	lru      lru    // guarded by mu
	// ev is the engine-fed source, nil until AttachEvents; guarded by mu.
	// While it is active, the holder map shows it instead of lru.
	ev *eventSource
}

// eventsActive reports whether r's holder bits follow its engine's events.
// Callers hold r.mu.
func (r *replica) eventsActive() bool { return r.ev != nil && r.ev.active }

var _ Index = (*Approx)(nil)

// maxCapacity keeps node numbers within an int32, even while a record
// holds up to twice the capacity before it evicts.
const maxCapacity = 1 << 29

// NewApprox returns an empty approximate index. A replica not given a
// capacity with SetCapacity holds up to defaultCapacity blocks; zero or less
// means such a replica holds nothing.
func NewApprox(defaultCapacity int) *Approx {
	x := &Approx{defaultCapacity: clampCapacity(defaultCapacity), words: 1, specTTL: DefaultSpeculativeTTL,
		now: func() int64 { return time.Now().UnixNano() }}
	x.replicas.Store(newRegistry(nil))
	for i := range x.shards {
		x.shards[i].tab.Store(newHolderTable(minTableBits, 1))
	}
	return x
}

func clampCapacity(blocks int) int { return min(max(blocks, 0), maxCapacity) }

// SetSpeculativeTTL sets how long a prompt routed to an events-sourced
// replica counts as held without its engine confirming it (default
// DefaultSpeculativeTTL; zero or less turns speculation off). Call it
// before the index is shared.
func (x *Approx) SetSpeculativeTTL(d time.Duration) { x.specTTL = max(d, 0) }

// Record implements [Index.Record]: RecordPrompt without a reserve.
func (x *Approx) Record(id string, hashes []blockhash.Hash) Token {
	return x.RecordPrompt(id, hashes, 0)
}

// RecordPrompt implements [Index.RecordPrompt]. It touches the prompt's
// first min(len(hashes), capacity) blocks, the deepest first, then evicts
// the least recently used blocks beyond the replica's capacity less the
// reserve (never the record's own). The returned Token holds a copy of the
// blocks the record added (none when every block was already held).
func (x *Approx) RecordPrompt(id string, hashes []blockhash.Hash, reserve int) Token {
	r := x.lockReplica(id)
	if r == nil {
		return Token{}
	}
	defer r.mu.Unlock()
	k := min(len(hashes), r.capacity)
	if k == 0 {
		return Token{}
	}
	r.stamps++
	stamp := r.stamps
	r.lru.most = r.capacity + k + 1 // the sentinel, and k more until we evict
	added := 0
	for i := k - 1; i >= 0; i-- {
		h := hashes[i]
		m := mix(h)
		if n := r.lru.find(h, m); n != 0 {
			s := stamp
			if r.lru.nodes[n].stamp == stamp|addedMark {
				s |= addedMark // added by this record: hashes not a chain
			}
			r.lru.touch(n, s)
			continue
		}
		r.lru.pushFront(h, m, stamp|addedMark)
		added++
	}
	limit := max(r.capacity-max(reserve, 0), k)
	var spec speculation
	switch {
	case r.eventsActive() && x.specTTL > 0:
		spec = x.speculate(r, hashes[:k], stamp)
	case r.ev != nil && x.specTTL > 0:
		r.ev.noteRecord(stamp, x.now(), x.specTTL)
	}
	if added == 0 {
		x.evictTo(r, limit)
		if !spec.none() {
			return Token{rep: r, stamp: stamp, spec: spec}
		}
		return Token{}
	}
	// The record's blocks lead the list, shallowest first. Publish the new
	// ones in that order, so that a concurrent Match finds whole prefixes.
	tok := Token{rep: r, stamp: stamp, added: make([]blockhash.Hash, added), spec: spec}
	publish := !r.eventsActive()
	for n := r.lru.front(); added > 0 && n != 0; n = r.lru.nodes[n].next {
		if r.lru.nodes[n].stamp == stamp|addedMark {
			h := r.lru.nodes[n].hash
			if publish {
				m := mix(h)
				x.shards[m>>(64-shardBits)].add(h, m, r.handle)
			}
			added--
			tok.added[added] = h
		}
	}
	// Evict only now: the record's own blocks are the k most recent, so
	// the blocks beyond the limit are all older ones.
	x.evictTo(r, limit)
	return tok
}

// addedMark flags, in a node's stamp, the record that added the block.
const addedMark = 1 << 63

// TakeBack implements [Index.TakeBack]. It removes the record's blocks
// deepest first, so that a concurrent Match finds whole prefixes.
func (x *Approx) TakeBack(t Token) {
	r := t.rep
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dead {
		return
	}
	for _, h := range t.added {
		m := mix(h)
		if n := r.lru.find(h, m); n != 0 && r.lru.nodes[n].stamp == t.stamp|addedMark {
			x.drop(r, n, m)
		}
	}
	if r.ev != nil && len(t.spec.blocks) > 0 {
		x.unspeculate(r, t)
	}
	if t.spec.groups != nil {
		t.spec.groups.takeBack(t.spec.groupBlocks, t.stamp)
	}
}

// Match implements [Index.Match].
//
// Because hashes are chained and every record touches a prompt's blocks
// deepest first, a replica never holds a block without its parent, and
// the replicas holding block i of a prompt include those holding block i+1.
// Match uses this to bisect: it probes the first and the last block, and
// probes between two probed blocks only when the sets of candidates
// holding them differ. A prompt whose candidates answer at d different
// depths costs about d*log2(len(hashes)) probes of the holder map, two
// when they all hold it whole, whatever the number of candidates. A
// replica fed by events is held to this by its engine, not by us: one
// whose engine removed a block in the middle of a chain (Mirror.Holes)
// has its depth checked block by block after (checkHoles).
func (x *Approx) Match(dst []int, candidates []string, hashes []blockhash.Hash, promptTokens, blockSize int) []int {
	dst = slices.Grow(dst[:0], len(candidates))[:len(candidates)]
	clear(dst)
	limit := hitLimit(len(hashes), promptTokens, blockSize)
	if limit == 0 || len(candidates) == 0 {
		return dst
	}
	// Resolve candidates to handles; -1 for replicas we do not know.
	reg := x.replicas.Load()
	if len(candidates) > 64 {
		ws := wideScratches.Get().(*wideScratch)
		defer wideScratches.Put(ws)
		var top int32
		var all uint64
		ws.handles, top, all = reg.resolve(ws.handles[:0], candidates)
		x.matchResolved(dst, ws.handles, top, all, hashes[:limit], ws)
		return dst
	}
	var handleBuf [64]int32
	handles, top, all := reg.resolve(handleBuf[:0], candidates)
	x.matchResolved(dst, handles, top, all, hashes[:limit], nil)
	return dst
}

// Handles are replicas resolved once to the index's own small numbers for
// them, for a caller that matches the same replicas request after request:
// Match looks up every candidate by ID, a twentieth of a gateway's routing
// decision at 64 replicas. They stay valid while no replica joins or
// leaves the index; MatchHandles checks that, and looks the IDs up again
// when it no longer holds.
type Handles struct {
	reg     *registry
	ids     []string
	handles []int32 // -1 for replicas the index did not know
}

// Resolve returns the handles of the replicas named by ids, in order.
func (x *Approx) Resolve(ids []string) *Handles {
	reg := x.replicas.Load()
	handles, _, _ := reg.resolve(make([]int32, 0, len(ids)), ids)
	return &Handles{reg: reg, ids: slices.Clone(ids), handles: handles}
}

// Current reports whether hd still names the index's replicas as they are:
// none joined or left since it was resolved.
func (x *Approx) Current(hd *Handles) bool { return hd.reg == x.replicas.Load() }

// MatchHandles is Match for the candidates hd.ids[i] for i in positions,
// in that order, which it reads by handle while hd is current.
func (x *Approx) MatchHandles(dst []int, hd *Handles, positions []int, hashes []blockhash.Hash, promptTokens, blockSize int) []int {
	dst = slices.Grow(dst[:0], len(positions))[:len(positions)]
	clear(dst)
	limit := hitLimit(len(hashes), promptTokens, blockSize)
	if limit == 0 || len(positions) == 0 {
		return dst
	}
	reg := x.replicas.Load()
	if len(positions) > 64 {
		ws := wideScratches.Get().(*wideScratch)
		defer wideScratches.Put(ws)
		var top int32
		var all uint64
		ws.handles, top, all = hd.at(ws.handles[:0], positions, reg)
		x.matchResolved(dst, ws.handles, top, all, hashes[:limit], ws)
		return dst
	}
	var handleBuf [64]int32
	handles, top, all := hd.at(handleBuf[:0], positions, reg)
	x.matchResolved(dst, handles, top, all, hashes[:limit], nil)
	return dst
}

// at appends to handles those at positions, read from reg if hd is not
// current, and returns them with the largest and the set of those below
// 64.
func (hd *Handles) at(handles []int32, positions []int, reg *registry) ([]int32, int32, uint64) {
	top, all := int32(-1), uint64(0)
	if reg == hd.reg {
		for _, i := range positions {
			h := hd.handles[i]
			handles = append(handles, h)
			top, all = max(top, h), all|lowBit(h)
		}
		return handles, top, all
	}
	for _, i := range positions {
		h := reg.handleOf(hd.ids[i])
		handles = append(handles, h)
		top, all = max(top, h), all|lowBit(h)
	}
	return handles, top, all
}

// wideScratch is the memory of a match beyond one holder word, pooled so
// that matching allocates nothing once warm.
type wideScratch struct {
	handles []int32
	sets    []uint64 // the sets a wide match works with, words apiece
	depth   []int32  // by handle
}

var wideScratches = sync.Pool{New: func() any { return new(wideScratch) }}

// matchResolved writes to dst[i] how many of hashes candidate handles[i]
// holds, given the largest handle, top (-1 when none is known), and the
// set of handles below 64, all. Beyond one holder word it works in ws,
// whose handles must be handles, or in a pooled scratch it copies handles
// to if ws is nil.
func (x *Approx) matchResolved(dst []int, handles []int32, top int32, all uint64, hashes []blockhash.Hash, ws *wideScratch) {
	if top < 0 {
		return
	}
	if top < 64 {
		// Candidate sets are sets of handles: one holder word as it is.
		mt := matcher{x: x, hashes: hashes}
		mt.run(all)
		for i, h := range handles {
			if h >= 0 {
				dst[i] = int(mt.depth[h])
			}
		}
	} else {
		if ws == nil {
			// A copy: handles may be the caller's stack, which the matcher
			// must not keep.
			ws = wideScratches.Get().(*wideScratch)
			defer wideScratches.Put(ws)
			ws.handles = append(ws.handles[:0], handles...)
		}
		x.matchWide(dst, ws, int(top)/64+1, hashes)
	}
	if holes := x.holes.Load(); holes != nil {
		x.checkHoles(dst, handles, hashes, *holes)
	}
	if grouped := x.grouped.Load(); grouped != nil {
		x.checkGroups(dst, handles, hashes, *grouped)
	}
}

// checkHoles lowers the depth bisection gave each candidate in holes to
// the number of blocks it holds before the first it lacks, probing them in
// turn: bisection takes a replica holding a block to hold every block
// before it, which a mirror whose engine removed a block in the middle of
// a chain does not (Mirror.Holes). The depth bisection gave is never
// short: the block there was probed and not held.
func (x *Approx) checkHoles(dst []int, handles []int32, hashes []blockhash.Hash, holes []uint64) {
	for i, h := range handles {
		if h < 0 || dst[i] == 0 || int(h/64) >= len(holes) || holes[h/64]&(1<<(h%64)) == 0 {
			continue
		}
		for j := range dst[i] {
			if !x.holds(int(h), hashes[j]) {
				dst[i] = j
				break
			}
		}
	}
}

// noteChecks publishes whether Match must check r's depths after
// bisecting: its holder bits follow a mirror with holes, or one of an
// engine with several KV-cache groups (see checkGroups). Callers hold r.mu.
func (x *Approx) noteChecks(r *replica) {
	live := !r.dead && r.eventsActive()
	x.noteHoles(r, live && r.ev.mirror.Holes())
	var groups *kvGroups
	if live {
		groups = r.ev.mirror.groups
	}
	x.noteGroups(r, groups)
}

// noteHoles publishes whether r's holder bits may have holes.
func (x *Approx) noteHoles(r *replica, on bool) {
	w, bit := r.handle/64, uint64(1)<<(r.handle%64)
	isOn := func(holes *[]uint64) bool { return holes != nil && w < len(*holes) && (*holes)[w]&bit != 0 }
	if isOn(x.holes.Load()) == on {
		return // nearly always: no change, no lock
	}
	x.holesMu.Lock()
	defer x.holesMu.Unlock()
	cur := x.holes.Load()
	if isOn(cur) == on {
		return
	}
	var next []uint64
	if cur != nil {
		next = slices.Clone(*cur)
	}
	if w >= len(next) {
		next = append(next, make([]uint64, w+1-len(next))...)
	}
	next[w] ^= bit
	if !slices.ContainsFunc(next, func(word uint64) bool { return word != 0 }) {
		x.holes.Store(nil)
		return
	}
	x.holes.Store(&next)
}

// matchWide is Match for handles beyond one holder word: the same
// bisection as matcher's, over sets of words words, bit h of word h/64 for
// handle h.
func (x *Approx) matchWide(dst []int, ws *wideScratch, words int, hashes []blockhash.Hash) {
	// A set for all, for each end of the first range, and two for each
	// level of splitting: at most one level per halving of the hashes.
	levels := bits.Len(uint(len(hashes))) + 1
	ws.sets = slices.Grow(ws.sets[:0], (3+2*levels)*words)[:(3+2*levels)*words]
	clear(ws.sets)
	ws.depth = slices.Grow(ws.depth[:0], 64*words)[:64*words]
	clear(ws.depth)
	mt := wideMatcher{x: x, hashes: hashes, words: words, sets: ws.sets, depth: ws.depth}
	all := mt.slot(0)
	for _, h := range ws.handles {
		if h >= 0 {
			all[h/64] |= 1 << (h % 64)
		}
	}
	mt.run(all)
	for i, h := range ws.handles {
		if h >= 0 {
			dst[i] = int(ws.depth[h])
		}
	}
}

// matcher finds how many leading hashes each of up to 64 candidates holds,
// each candidate a bit of a uint64 set: bit h for handle h.
type matcher struct {
	x      *Approx
	hashes []blockhash.Hash
	depth  [64]int32 // result by bit
}

// probe returns the set of candidates holding hashes[i].
func (mt *matcher) probe(i int) uint64 {
	h := mt.hashes[i]
	m := mix(h)
	return mt.x.shards[m>>(64-shardBits)].holders1(h, m)
}

func (mt *matcher) set(bitset uint64, depth int) {
	for ; bitset != 0; bitset &= bitset - 1 {
		mt.depth[bits.TrailingZeros64(bitset)] = int32(depth)
	}
}

// run sets the depth of every candidate in all, whose depths are 0.
func (mt *matcher) run(all uint64) {
	n := len(mt.hashes)
	first := mt.probe(0) & all // the others stay at depth 0
	if first == 0 {
		return
	}
	last := first
	if n > 1 {
		last = mt.probe(n-1) & first
	}
	mt.set(last, n)
	mt.split(0, n-1, first, last)
}

// split sets the depth of the candidates that hold block lo (set slo) but
// not block hi (slo minus shi), for lo < hi. A racing writer may break the
// nesting for a moment; split then assumes it, so that a candidate holding
// a block holds every block before it.
func (mt *matcher) split(lo, hi int, slo, shi uint64) {
	for slo != shi {
		if hi-lo == 1 {
			mt.set(slo&^shi, hi)
			return
		}
		mid := lo + (hi-lo)/2
		smid := mt.probe(mid)&slo | shi
		mt.split(lo, mid, slo, smid)
		lo, slo = mid, smid
	}
}

// wideMatcher is matcher for sets of several words. Its sets live in
// sets, words apiece: slot 0 is all, 1 and 2 the first range's ends, and
// from 3 on two per level of splitting.
type wideMatcher struct {
	x      *Approx
	hashes []blockhash.Hash
	words  int
	sets   []uint64
	depth  []int32 // by handle
}

func (mt *wideMatcher) slot(i int) []uint64 { return mt.sets[i*mt.words : (i+1)*mt.words] }

// probe sets dst to the handles holding hashes[i], within mask.
func (mt *wideMatcher) probe(i int, dst, mask []uint64) {
	h := mt.hashes[i]
	m := mix(h)
	mt.x.shards[m>>(64-shardBits)].holdersN(h, m, dst)
	for w := range dst {
		dst[w] &= mask[w]
	}
}

// set gives depth to the handles in a but not in b (nil: in a).
func (mt *wideMatcher) set(a, b []uint64, depth int) {
	for w := range a {
		word := a[w]
		if b != nil {
			word &^= b[w]
		}
		for ; word != 0; word &= word - 1 {
			mt.depth[w*64+bits.TrailingZeros64(word)] = int32(depth)
		}
	}
}

func (mt *wideMatcher) run(all []uint64) {
	n := len(mt.hashes)
	first, last := mt.slot(1), mt.slot(2)
	mt.probe(0, first, all)
	if !slices.ContainsFunc(first, func(w uint64) bool { return w != 0 }) {
		return
	}
	copy(last, first)
	if n > 1 {
		mt.probe(n-1, last, first)
	}
	mt.set(last, nil, n)
	mt.split(0, n-1, first, last, 0)
}

// split is matcher.split over wide sets. The two slots of its level are
// its own; the levels below are its callees'. slo and shi are its
// callers': it never writes them.
func (mt *wideMatcher) split(lo, hi int, slo, shi []uint64, level int) {
	mine := [2][]uint64{mt.slot(3 + 2*level), mt.slot(4 + 2*level)}
	for turn := 0; !slices.Equal(slo, shi); turn ^= 1 {
		if hi-lo == 1 {
			mt.set(slo, shi, hi)
			return
		}
		mid := lo + (hi-lo)/2
		smid := mine[turn] // not slo, which may be mine[turn^1]
		mt.probe(mid, smid, slo)
		for w := range smid {
			smid[w] |= shi[w]
		}
		mt.split(lo, mid, slo, smid, level+1)
		lo, slo = mid, smid
	}
}

// SetCapacity implements [Index.SetCapacity]. Capacities above 2^29 blocks
// are taken as 2^29. Shrinking frees no memory until a Reset or Forget.
func (x *Approx) SetCapacity(id string, blocks int) {
	r := x.lockReplica(id)
	if r == nil {
		return
	}
	defer r.mu.Unlock()
	r.capacity = clampCapacity(blocks)
	x.evict(r)
	if r.ev != nil {
		// Learned after the mirror was attached: its bound follows, or a
		// cache larger than the first guess would overflow it.
		r.ev.mirror.setBounds(r.ev.mirrorBounds(r.capacity))
	}
}

// Join implements [Index.Join].
func (x *Approx) Join(id string) { x.join(id) }

// Forget implements [Index.Forget].
func (x *Approx) Forget(id string) {
	x.mu.Lock()
	old := x.replicas.Load().byID
	r := old[id]
	if r == nil {
		x.mu.Unlock()
		return
	}
	next := maps.Clone(old)
	delete(next, id)
	x.replicas.Store(newRegistry(next))
	x.mu.Unlock()

	r.mu.Lock()
	r.dead = true
	x.clear(r)
	r.mu.Unlock()

	// Only now, with its bits gone from the holder map, may the handle
	// go to another replica.
	x.mu.Lock()
	x.handles[r.handle] = false
	x.mu.Unlock()
}

// Reset implements [Index.Reset].
func (x *Approx) Reset(id string) {
	r := x.lockReplica(id)
	if r == nil {
		return
	}
	x.clear(r)
	r.mu.Unlock()
}

// Stats implements [Index.Stats].
func (x *Approx) Stats() Stats {
	snap := x.replicas.Load().byID
	st := Stats{Replicas: make([]ReplicaStats, 0, len(snap))}
	st.Bytes = int64(unsafe.Sizeof(*x)) + x.replicas.Load().bytes()
	for _, r := range snap {
		r.mu.Lock()
		rs := ReplicaStats{ID: r.id, Held: r.lru.held, Capacity: r.capacity, Source: r.source()}
		if r.eventsActive() {
			rs.Held = r.ev.mirror.Held() + len(r.ev.spec)
		}
		st.Bytes += r.lru.bytes() + int64(unsafe.Sizeof(*r))
		if r.ev != nil {
			st.Bytes += r.ev.bytes()
		}
		r.mu.Unlock()
		st.Entries += rs.Held
		st.Replicas = append(st.Replicas, rs)
	}
	for i := range x.shards {
		st.Bytes += x.shards[i].bytes()
	}
	slices.SortFunc(st.Replicas, func(a, b ReplicaStats) int { return strings.Compare(a.ID, b.ID) })
	return st
}

// lockReplica returns the live replica id with its mutex held, or nil
// when there is none.
func (x *Approx) lockReplica(id string) *replica {
	for {
		r := x.replicas.Load().lookup(id)
		if r == nil {
			return nil
		}
		r.mu.Lock()
		if !r.dead {
			return r
		}
		// Forgotten between the lookup and the lock: look again.
		r.mu.Unlock()
	}
}

// join adds replica id, unless another goroutine just did, and returns it.
func (x *Approx) join(id string) *replica {
	x.mu.Lock()
	defer x.mu.Unlock()
	old := x.replicas.Load().byID
	if r := old[id]; r != nil {
		return r
	}
	handle := slices.Index(x.handles, false)
	if handle < 0 {
		handle = len(x.handles)
		x.handles = append(x.handles, false)
	}
	x.handles[handle] = true
	if need := handle/64 + 1; need > x.words {
		// Widen every shard before any block can carry the new handle.
		x.words = need
		for i := range x.shards {
			x.shards[i].widen(need)
		}
	}
	r := &replica{id: id, handle: handle, capacity: x.defaultCapacity}
	next := maps.Clone(old)
	if next == nil {
		next = map[string]*replica{}
	}
	next[id] = r
	x.replicas.Store(newRegistry(next))
	return r
}

// evict drops r's least recently used blocks beyond its capacity. Callers
// hold r.mu.
func (x *Approx) evict(r *replica) { x.evictTo(r, r.capacity) }

// evictTo drops least recently used blocks until r holds at most limit.
// Callers hold r.mu.
func (x *Approx) evictTo(r *replica, limit int) {
	for r.lru.held > limit {
		n := r.lru.back()
		x.drop(r, n, mix(r.lru.nodes[n].hash))
	}
}

// drop removes node n, whose block mixes to m, from r and the holder map.
// Callers hold r.mu.
func (x *Approx) drop(r *replica, n int32, m uint64) {
	h := r.lru.nodes[n].hash
	if !r.eventsActive() {
		x.shards[m>>(64-shardBits)].remove(h, m, r.handle)
	}
	r.lru.remove(n, m)
}

// clear drops everything r holds, by either source. Callers hold r.mu.
func (x *Approx) clear(r *replica) {
	defer x.noteChecks(r)
	if ev := r.ev; ev != nil {
		ev.mirror.Clear() // its hook removes the bits of what it held
		if ev.active {
			for h := range ev.spec {
				x.removeBit(r, h)
			}
		}
		clear(ev.spec)
		ev.queue = ev.queue[:0]
	}
	if !r.eventsActive() {
		// Deepest first, so that a concurrent Match finds whole prefixes.
		x.unpublishLRU(r)
	}
	r.lru.clear()
}
