package index

import (
	"maps"
	"math/bits"
	"slices"
	"sync"
	"unsafe"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/events"
)

// A hybrid model's vLLM (sliding-window or Mamba layers beside
// full-attention ones: Gemma 3, gpt-oss, Qwen3-Next) keeps one KV-cache
// group per kind of layer. It stores a block once per group, under the same
// hash, and evicts each group's copy on its own. A prompt hits as far as
// every group allows at once: a full-attention group needs every block
// before the hit, a sliding-window group only the blocks its window reaches
// back over, a Mamba group only the block just before (vLLM's hybrid
// coordinator and its single-type managers' find_longest_cache_hit). The
// mirror's table holds a block while any group does; kvGroups counts each
// group's copies, so that Match can lower a hybrid engine's depth to what
// the engine finds.

// maxGroups is the most KV-cache groups a mirror tells apart; blocks of
// groups numbered past it are held as before, by whichever group.
const maxGroups = 16

// groupCounts are one block's copies in each group, saturating at 255.
type groupCounts [maxGroups]uint8

// heldBy is the set of groups with a copy, bit i for group i.
func (c *groupCounts) heldBy() uint16 {
	var set uint16
	for i, n := range c {
		if n > 0 {
			set |= 1 << i
		}
	}
	return set
}

// keyedCounts are a keyed block's counts and the groups they say hold it,
// which Match reads.
type keyedCounts struct {
	c    groupCounts
	held uint16
}

// kvGroups is what a Mirror knows of its engine's KV-cache groups, from
// the first store that names a group other than 0 or a kind of layer other
// than full attention. The copies of blocks stored before that are group
// 0's (no store had named another), counted so when it comes (seed); a
// block without counts (one a routed prompt revealed, or one speculated)
// counts as held by every group.
//
// Match reads the counts without the replica's lock, which an engine's
// batch may hold for a while (applyBudget): mu guards them instead, held
// by the mirror for one count at a time.
type kvGroups struct {
	mu    sync.RWMutex
	known uint16 // groups seen storing
	// tail[g] is 0 for a group that needs every block before a hit, else
	// how many blocks just before a hit it needs.
	tail [maxGroups]int32
	// keyed are the counts of blocks with a gateway hash, orphans those of
	// blocks without one yet (moved to keyed when they join).
	keyed   map[blockhash.Hash]keyedCounts
	orphans map[engineKey]groupCounts
	// lacking[i] is how many keyed blocks have counts without a copy in
	// group i: while it is 0, group i holds every block some group does,
	// and Match need not look (depth).
	lacking [maxGroups]int
	// lackFilter counts, in a slot by each one's gateway hash, the keyed
	// blocks some full-attention group lacks (fullLacks): a block whose
	// slot is 0 is held by every full-attention group, which depth then
	// need not look up. A full-attention group's rule looks at every block
	// before the hit, and a busy engine evicts some block's full-attention
	// copy before its window copy (vLLM frees a finished request's groups
	// one after the other, in the order it numbered them): without it, a
	// 2,048-block prompt cost a match 110 µs a hybrid replica. Its length is a power of two, at
	// least 16 times fullLacks (a block lacking nothing finds a slot above
	// 0 about one time in 16 or less); a slot stays at 255 once there.
	lackFilter []uint8
	fullLacks  int
	// spec are the groups that will hold the blocks of prompts routed to
	// the engine and not run yet (speculate), until a group's store
	// confirms its part or the time is up; specQueue lists them by expiry.
	spec      map[blockhash.Hash]specGroups
	specQueue []specItem
}

// specGroups are the groups a routed prompt's block will be held by, and
// until when that is taken on trust.
type specGroups struct {
	groups  uint16
	expires int64  // UnixNano
	stamp   uint64 // the record that made or last renewed it, for takeBack
}

// fullAttention reports whether a group of kind needs every block before a
// hit. Kinds this does not know, and groups that name none (vLLM before
// kv_cache_spec_kind), are taken to: that may under-count a hit, never
// over-count it.
func fullAttention(kind string) bool {
	switch kind {
	case "sliding_window", "sliding_window_mla", "mamba":
		return false
	}
	return true
}

// groupOf is the group a stored or removed block belongs to, and whether
// the mirror can tell it apart.
func groupOf(ev *events.Event) (int, bool) {
	if !ev.HasGroupIdx {
		return 0, true
	}
	if ev.GroupIdx < 0 || ev.GroupIdx >= maxGroups {
		return 0, false
	}
	return int(ev.GroupIdx), true
}

// hybridStore reports whether ev shows its engine keeps more than one
// kind of KV cache: a group other than 0, or a kind of layer that is not
// full attention.
func hybridStore(ev *events.Event) bool {
	return (ev.HasGroupIdx && ev.GroupIdx != 0) || (ev.HasSpecKind && !fullAttention(ev.SpecKind))
}

// learn notes the group ev stores in and the rule its kind of layer hits
// by, for blocks of blockSize tokens.
func (g *kvGroups) learn(ev *events.Event, group, blockSize int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	known, tail := g.known, g.tail[group]
	defer func() {
		if g.known != known || g.tail[group] != tail && (g.tail[group] == 0 || tail == 0) {
			g.refilter() // which blocks some full-attention group lacks changed
		}
	}()
	g.known |= 1 << group
	switch {
	case !ev.HasSpecKind || fullAttention(ev.SpecKind):
		g.tail[group] = 0
	case ev.SpecKind == "mamba":
		g.tail[group] = 1
	case !ev.HasSlidingWindow || ev.SlidingWindow <= 0:
		// A window group that names no window: every block, the rule
		// that cannot over-count a hit.
		g.tail[group] = 0
	default:
		// The window's tokens before the next one: vLLM's
		// cdiv(sliding_window - 1, block_size), at least a block.
		w := max(ev.SlidingWindow-1, 1)
		g.tail[group] = int32(min((w+int64(blockSize)-1)/int64(blockSize), 1<<30))
	}
}

// counts returns block b's counts (key k), and false when no store or
// removal has touched it since the mirror told groups apart. Callers hold
// g.mu.
func (g *kvGroups) counts(k engineKey, b mirrorBlock) (groupCounts, bool) {
	if b.orphan {
		c, ok := g.orphans[k]
		return c, ok
	}
	kc, ok := g.keyed[b.ours]
	return kc.c, ok
}

func (g *kvGroups) set(k engineKey, b mirrorBlock, c groupCounts) {
	if b.orphan {
		g.orphans[k] = c
		return
	}
	if old, ok := g.keyed[b.ours]; ok {
		g.count(old.c, -1)
		g.filter(b.ours, old.held, -1)
	}
	kc := keyedCounts{c: c, held: c.heldBy()}
	g.keyed[b.ours] = kc
	g.count(c, 1)
	g.filter(b.ours, kc.held, 1)
}

// fullGroups is the set of known groups that need every block before a
// hit.
func (g *kvGroups) fullGroups() uint16 {
	var set uint16
	for known := g.known; known != 0; known &= known - 1 {
		if group := bits.TrailingZeros16(known); g.tail[group] == 0 {
			set |= 1 << group
		}
	}
	return set
}

// filter adds sign to lackFilter's slot of a keyed block of gateway hash h
// held by the groups held, if some full-attention group lacks it, growing
// the filter as fullLacks does. Callers hold g.mu.
func (g *kvGroups) filter(h blockhash.Hash, held uint16, sign int) {
	if g.fullGroups()&^held == 0 {
		return
	}
	g.fullLacks += sign
	if sign > 0 && 16*g.fullLacks > len(g.lackFilter) {
		g.refilter()
		return
	}
	if len(g.lackFilter) == 0 {
		return
	}
	at := &g.lackFilter[h.Lo&uint64(len(g.lackFilter)-1)]
	if *at < 255 {
		*at = uint8(int(*at) + sign)
	}
}

// refilter builds lackFilter again from the counts, at least 16 times as
// long as the blocks some full-attention group lacks. Callers hold
// g.mu.
func (g *kvGroups) refilter() {
	full := g.fullGroups()
	g.fullLacks = 0
	for _, kc := range g.keyed {
		if full&^kc.held != 0 {
			g.fullLacks++
		}
	}
	size := 64
	for size < 16*g.fullLacks {
		size *= 2
	}
	g.lackFilter = make([]uint8, size)
	for h, kc := range g.keyed {
		if full&^kc.held != 0 {
			if at := &g.lackFilter[h.Lo&uint64(size-1)]; *at < 255 {
				*at++
			}
		}
	}
}

// fullHolds reports whether the filter shows every full-attention group
// holding the keyed block of gateway hash h, or a block without counts.
// false means: look it up. Callers hold g.mu.
func (g *kvGroups) fullHolds(h blockhash.Hash) bool {
	return len(g.lackFilter) == 0 || g.lackFilter[h.Lo&uint64(len(g.lackFilter)-1)] == 0
}

// count adds to lacking the groups keyed counts c lack, times sign.
func (g *kvGroups) count(c groupCounts, sign int) {
	for i, n := range c {
		if n == 0 {
			g.lacking[i] += sign
		}
	}
}

// forget drops block b's counts: it is gone.
func (g *kvGroups) forget(k engineKey, b mirrorBlock) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if b.orphan {
		delete(g.orphans, k)
	} else if kc, ok := g.keyed[b.ours]; ok {
		g.count(kc.c, -1)
		g.filter(b.ours, kc.held, -1)
		delete(g.keyed, b.ours)
	}
}

// joined moves orphan k's counts to its gateway hash.
func (g *kvGroups) joined(k engineKey, ours blockhash.Hash) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.orphans[k]; ok {
		delete(g.orphans, k)
		g.set(k, mirrorBlock{ours: ours}, c)
	}
}

// stored counts a copy of block b (key k, its count taken) in group.
func (g *kvGroups) stored(k engineKey, b mirrorBlock, group int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e, ok := g.spec[b.ours]; ok && !b.orphan {
		// The group's store confirms its part of a speculation: from now
		// on its events alone say whether it holds the block.
		if e.groups &^= 1 << group; e.groups == 0 {
			delete(g.spec, b.ours)
		} else {
			g.spec[b.ours] = e
		}
	}
	c, ok := g.counts(k, b)
	if !ok {
		c[0] = saturate(b.count - 1) // its copies from before
	}
	c[group] = saturate(int32(c[group]) + 1)
	g.set(k, b, c)
}

// removed takes a copy of block b (key k, its count taken) out of group.
func (g *kvGroups) removed(k engineKey, b mirrorBlock, group int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.counts(k, b)
	if !ok {
		c[0] = saturate(b.count + 1) // its copies from before
	}
	if c[group] > 0 && c[group] < 255 {
		c[group]--
	}
	g.set(k, b, c)
}

// saturate is n copies as groupCounts keep them: past 255 a group's count
// stays at 255, never lowered again.
func saturate(n int32) uint8 { return uint8(min(max(n, 0), 255)) }

// seed counts the copies of every block blocks holds, before the store
// that showed the engine keeps several groups, as group 0's: no store had
// named another. Left without counts, they would count
// as held by every group, and a prompt over blocks a Mamba or window group
// never stored would be predicted as hit. It returns how many blocks it
// walked.
func (g *kvGroups) seed(blocks *blockTable) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return blocks.each(func(key engineKey, b mirrorBlock) {
		if b.count > 0 {
			var c groupCounts
			c[0] = saturate(b.count)
			g.set(key, b, c)
		}
	})
}

// reset forgets every block's counts; what the groups are stays known.
func (g *kvGroups) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.keyed = make(map[blockhash.Hash]keyedCounts)
	g.orphans = make(map[engineKey]groupCounts)
	g.lacking = [maxGroups]int{}
	g.lackFilter, g.fullLacks = nil, 0
	g.spec = make(map[blockhash.Hash]specGroups)
	g.specQueue = g.specQueue[:0]
}

// speculate notes that the engine will hold hashes, a prompt routed to it
// that hits its first hit blocks, until expires: its full-attention groups
// every block, a window group those from its window before the hit on (the
// blocks before that the engine neither reuses nor stores again). Only
// what a group lacks now is taken on trust, what its store will confirm:
// what it holds, its events go on telling.
func (g *kvGroups) speculate(hashes []blockhash.Hash, hit int, now, expires int64, stamp uint64) []blockhash.Hash {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expireSpec(now)
	var made []blockhash.Hash
	longest := 0 // the most blocks a window group needs before a hit
	for known := g.known; known != 0; known &= known - 1 {
		longest = max(longest, int(g.tail[bits.TrailingZeros16(known)]))
	}
	for i, h := range hashes {
		if i < hit-longest && g.fullHolds(h) {
			continue // only full-attention groups want it, and they hold it
		}
		kc, ok := g.keyed[h]
		if !ok {
			continue // no counts: held by every group already
		}
		var set uint16
		for known := g.known &^ kc.held; known != 0; known &= known - 1 {
			group := bits.TrailingZeros16(known)
			if i >= hit-int(g.tail[group]) || g.tail[group] == 0 {
				set |= 1 << group
			}
		}
		if set == 0 {
			continue
		}
		e := g.spec[h]
		e.groups |= set
		e.expires, e.stamp = expires, stamp
		g.spec[h] = e
		g.specQueue = append(g.specQueue, specItem{h: h, expires: expires})
		made = append(made, h)
	}
	g.compactSpec()
	return made
}

// compactSpec keeps specQueue near its entries (compactExpiries; 2,000
// records of a 1,000-block prompt queued 2,000,000 items, 48 MB, before;
// a review's finding). Callers hold g.mu.
func (g *kvGroups) compactSpec() {
	g.specQueue = compactExpiries(g.specQueue, len(g.spec), func(it specItem) bool {
		e, ok := g.spec[it.h]
		return ok && e.expires == it.expires
	})
}

// takeBack ends the speculation a failed attempt's record (stamp) made of
// hashes, those entries no later record renewed.
func (g *kvGroups) takeBack(hashes []blockhash.Hash, stamp uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, h := range hashes {
		if e, ok := g.spec[h]; ok && e.stamp == stamp {
			delete(g.spec, h)
		}
	}
}

// expireSpec ends the speculations whose time is up. Callers hold g.mu.
func (g *kvGroups) expireSpec(now int64) {
	i := 0
	for ; i < len(g.specQueue) && g.specQueue[i].expires <= now; i++ {
		it := g.specQueue[i]
		if e, ok := g.spec[it.h]; ok && e.expires == it.expires {
			delete(g.spec, it.h) // not renewed since
		}
	}
	if i > 0 {
		g.specQueue = append(g.specQueue[:0], g.specQueue[i:]...)
	}
}

// bytes approximates the counts' memory.
func (g *kvGroups) bytes() int64 {
	g.mu.RLock()
	defer g.mu.RUnlock()
	const entry = 64     // a key, the counts and the map's share of slots
	const specEntry = 48 // a spec entry and its share of slots
	return int64(len(g.keyed)+len(g.orphans))*entry + int64(len(g.spec))*specEntry +
		int64(cap(g.specQueue))*int64(unsafe.Sizeof(specItem{})) + int64(len(g.lackFilter))
}

// depth lowers depth, how many leading blocks of hashes the mirror holds
// in some group, to how many the engine would hit with every group's rule
// met at once: each group's rule only ever lowers it, and vLLM applies
// them in turn until none does. A block without counts is held by every
// group: one from before the mirror told groups apart, one a routed prompt
// revealed (reveal), or one speculated (routed here, not stored yet).
// Blocks are looked up as a rule needs them, at most once: a window's rule
// most often needs only the blocks of one window. A block of a prompt
// routed here is held by the groups speculate said, until now passes its
// time.
func (g *kvGroups) depth(hashes []blockhash.Hash, depth int, now int64) int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var looked *[]uint32 // by block: lookedUp, and bit i when group i holds it
	defer func() {
		if looked != nil {
			lookedScratch.Put(looked)
		}
	}()
	holds := func(i int, bit uint32) bool {
		if looked == nil {
			looked = lookedScratch.Get().(*[]uint32)
			*looked = slices.Grow((*looked)[:0], depth)[:depth]
			clear(*looked)
		}
		at := &(*looked)[i]
		if *at == 0 {
			*at = lookedUp | g.heldBy(hashes[i], now)
		}
		return *at&bit != 0
	}
	for {
		next := depth
		for known := g.known; known != 0; known &= known - 1 {
			group := bits.TrailingZeros16(known)
			if g.lacking[group] == 0 {
				continue
			}
			full := g.tail[group] == 0
			next = groupHit(next, int(g.tail[group]), func(i int) bool {
				return full && g.fullHolds(hashes[i]) || holds(i, 1<<group)
			})
		}
		if next == depth {
			return depth
		}
		depth = next
	}
}

// lookedUp marks a block depth looked up.
const lookedUp = 1 << 31

// lookedScratch pools depth's memory of the blocks it looked up.
var lookedScratch = sync.Pool{New: func() any { return new([]uint32) }}

// heldBy is the set of groups holding the block of gateway hash h, bit i
// for group i. Callers hold g.mu.
func (g *kvGroups) heldBy(h blockhash.Hash, now int64) uint32 {
	kc, ok := g.keyed[h]
	if !ok {
		return uint32(g.known)
	}
	held := kc.held
	if e, ok := g.spec[h]; ok && e.expires > now {
		held |= e.groups
	}
	return uint32(held)
}

// groupHit is how many of the first n blocks one group lets a prompt hit,
// holds saying whether it holds block i: with tail 0, up to the first
// block it lacks; else the end of the last run of tail blocks it holds, or
// a shorter run from the first block (nothing before the window to need).
func groupHit(n, tail int, holds func(int) bool) int {
	if tail == 0 {
		for i := range n {
			if !holds(i) {
				return i
			}
		}
		return n
	}
	run := 0
	for i := n - 1; i >= 0; i-- {
		if !holds(i) {
			run = 0
			continue
		}
		if run++; run >= tail {
			return i + run
		}
	}
	return run
}

// storeGroup readies the mirror's groups for ev, a store whose blocks it is
// about to apply: it starts telling groups apart when ev shows the engine
// keeps more than one (what it holds then is group 0's), and learns the
// rule of ev's group. It returns the group ev's blocks are counted in, and
// false when the mirror counts them in none.
func (m *Mirror) storeGroup(ev *events.Event) (int, bool) {
	if m.groups == nil {
		if !hybridStore(ev) {
			return 0, false
		}
		m.groups = &kvGroups{known: 1} // group 0 stored what came before
		m.groups.reset()
		m.work += uint64(m.groups.seed(&m.blocks))
	}
	group, ok := groupOf(ev)
	if ok {
		m.groups.learn(ev, group, m.blockSize)
	}
	return group, ok
}

// checkGroups lowers the depth of each candidate in grouped to what every
// KV-cache group of its engine allows (kvGroups.depth).
func (x *Approx) checkGroups(dst []int, handles []int32, hashes []blockhash.Hash, grouped map[int32]*kvGroups) {
	for i, h := range handles {
		if g := grouped[h]; g != nil && dst[i] > 0 {
			dst[i] = g.depth(hashes, dst[i], x.now())
		}
	}
}

// speculateGroups notes what the groups of r's engine will hold once it
// ran hashes, a prompt routed to it by the record stamp
// (kvGroups.speculate), from the hit Match would predict for it now, and
// returns the blocks it took on trust. Callers hold r.mu.
func (x *Approx) speculateGroups(r *replica, g *kvGroups, hashes []blockhash.Hash, now, expires int64, stamp uint64) []blockhash.Hash {
	held := 0
	for held < len(hashes) && x.hasBit(r, hashes[held]) {
		held++
	}
	return g.speculate(hashes, g.depth(hashes, held, now), now, expires, stamp)
}

// noteGroups publishes g, the groups of r's mirror, for Match to check r's
// depths by, or that it has none to (nil).
func (x *Approx) noteGroups(r *replica, g *kvGroups) {
	h := int32(r.handle)
	if cur := x.grouped.Load(); cur == nil && g == nil || cur != nil && (*cur)[h] == g {
		return // nearly always: no change, no lock
	}
	x.holesMu.Lock()
	defer x.holesMu.Unlock()
	cur := x.grouped.Load()
	if cur == nil && g == nil || cur != nil && (*cur)[h] == g {
		return
	}
	next := make(map[int32]*kvGroups)
	if cur != nil {
		maps.Copy(next, *cur)
	}
	if g != nil {
		next[h] = g
	} else {
		delete(next, h)
	}
	if len(next) == 0 {
		x.grouped.Store(nil)
		return
	}
	x.grouped.Store(&next)
}
