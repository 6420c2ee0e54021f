package index

import (
	"cmp"
	"math"
	"slices"
	"time"
	"unsafe"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/events"
)

// A replica's part of the holder map follows one of two sources. The
// shadow LRU of the gateway's own routing (the approximate source) is
// always kept. Once the replica's engine events are attached and the
// source switched to them (SetSource), its holder bits follow the engine's
// mirrored cache instead, plus speculation: a prompt routed to the replica
// counts as held for SpeculativeTTL, so that back-to-back requests meet
// before the engine's events about the first arrive, unless the events
// confirm it sooner.

// Source names where a replica's predictions come from.
type Source string

const (
	SourceApproximate Source = "approximate"
	SourceEvents      Source = "events"
)

// DefaultSpeculativeTTL is how long a routed prompt counts as held on an
// events-sourced replica without the engine confirming it.
const DefaultSpeculativeTTL = 2 * time.Second

// eventSource is a replica's engine-fed state. Guarded by its replica's mu.
type eventSource struct {
	mirror *Mirror
	bounds EventsConfig // as attached: zero bounds follow the capacity
	active bool         // the replica's holder bits follow the mirror and speculation
	spec   map[blockhash.Hash]specEntry
	queue  []specItem // by expiry: the TTL is fixed, so in insertion order
	// confirmed and expired count speculations the engine's store ended
	// and those whose time ran out first: when nearly all run out, the
	// engine stores other blocks than the gateway routes (its tokens
	// differ).
	confirmed, expired uint64
	// recent are the records made while the source was not active and
	// within the speculative TTL, oldest first: their prompts may still
	// be on the way to the engine when it becomes active (setSource).
	recent []recordTime
}

// MaxMirrorBlocks caps a mirror's bound that follows its replica's
// capacity, whatever capacity it is given: the capacity most often comes
// from the engine's own word (its metrics page), and an engine that
// claimed 2^29 blocks would otherwise let its stream fill over 100 GB of
// the gateway's memory. 2^24 blocks take 1.0–1.9 GB at the 60–111 bytes a
// mirrored block was measured to cost. A bound set in EventsConfig is
// taken as set.
const MaxMirrorBlocks = 1 << 24

// mirrorBounds returns the mirror's bounds for a replica of capacity
// blocks: those configured, else four times the capacity (at least 1<<16,
// at most MaxMirrorBlocks) and a quarter of that for orphans.
func (ev *eventSource) mirrorBounds(capacity int) (maxOrphans, maxBlocks int) {
	maxBlocks = ev.bounds.MaxBlocks
	if maxBlocks <= 0 {
		maxBlocks = min(max(4*capacity, 1<<16), MaxMirrorBlocks)
	}
	maxOrphans = ev.bounds.MaxOrphans
	if maxOrphans <= 0 {
		maxOrphans = maxBlocks / 4
	}
	return maxOrphans, maxBlocks
}

// recordTime is when a record was made.
type recordTime struct {
	stamp uint64
	at    int64 // UnixNano
}

// noteRecord remembers that record stamp was made at now while ev is not
// active, forgetting the records older than ttl (moving the rest down only
// once half are gone, so that a record costs O(1) on average).
func (ev *eventSource) noteRecord(stamp uint64, now int64, ttl time.Duration) {
	i := firstLive(ev.recent, now, ttl)
	if i > 0 && 2*i >= len(ev.recent) {
		ev.recent = ev.recent[:copy(ev.recent, ev.recent[i:])]
	}
	ev.recent = append(ev.recent, recordTime{stamp, now})
}

// firstLive is the index of the first of recent (oldest first) made less
// than ttl before now.
func firstLive(recent []recordTime, now int64, ttl time.Duration) int {
	i, _ := slices.BinarySearchFunc(recent, now-int64(ttl), func(t recordTime, since int64) int {
		if t.at <= since {
			return -1
		}
		return 1
	})
	return i
}

type specEntry struct {
	expires int64  // UnixNano
	stamp   uint64 // the record that made it, for TakeBack
}

type specItem struct {
	h       blockhash.Hash
	expires int64
}

// bytes approximates the memory of the mirror and the speculation.
func (ev *eventSource) bytes() int64 {
	const specBytes = 64 // a spec map entry with its share of empty slots, and a queue item
	return ev.mirror.bytes() + int64(len(ev.spec))*specBytes + int64(cap(ev.queue))*int64(unsafe.Sizeof(specItem{})) +
		int64(cap(ev.recent))*int64(unsafe.Sizeof(recordTime{}))
}

// EventsConfig describes a replica's engine for its mirror.
type EventsConfig struct {
	BlockSize int      // tokens per engine block, the gateway's block size
	Seed      SeedFunc // the chain seed the gateway uses for this replica's model
	// MaxBlocks bounds the mirror (0: four times the replica's capacity,
	// at least 1<<16 and at most MaxMirrorBlocks): a stream that stores
	// more is broken.
	MaxBlocks int
	// MaxOrphans bounds blocks kept without a known parent (0: MaxBlocks/4).
	MaxOrphans int
}

// Attachment names one mirror AttachEvents made, for the stream that feeds
// it to write through. A replica attached again (its settings reloaded) or
// forgotten has a new mirror or none: writes through an older attachment
// change nothing, so a stream still stopping cannot reach its successor's
// mirror. The zero Attachment names none. Attachments are values.
type Attachment struct {
	replica string
	ev      *eventSource
}

// Replica is the replica the attachment was made for.
func (a Attachment) Replica() string { return a.replica }

// AttachEvents gives replica id a mirror of its engine's cache, fed by
// ApplyEvents through the attachment returned. Predictions keep coming
// from the approximate source until SetSource switches them. Attaching
// again replaces the mirror (and falls back to the approximate source).
// A replica the index does not know (never joined, or forgotten) gets
// none: the zero Attachment.
func (x *Approx) AttachEvents(id string, cfg EventsConfig) Attachment {
	r := x.lockReplica(id)
	if r == nil {
		return Attachment{}
	}
	defer r.mu.Unlock()
	if r.ev != nil {
		x.setSource(r, false)
	}
	ev := &eventSource{bounds: cfg, spec: map[blockhash.Hash]specEntry{}}
	maxOrphans, maxBlocks := ev.mirrorBounds(r.capacity)
	ev.mirror = NewMirror(cfg.BlockSize, cfg.Seed, maxOrphans, maxBlocks)
	ev.mirror.held = func(h blockhash.Hash) {
		// The engine confirms a speculation: from now on its events
		// alone say whether it holds the block.
		if _, ok := ev.spec[h]; ok {
			ev.confirmed++
			delete(ev.spec, h)
		}
		if ev.active {
			x.addBit(r, h)
		}
	}
	ev.mirror.dropped = func(h blockhash.Hash) {
		if _, speculated := ev.spec[h]; ev.active && !speculated {
			x.removeBit(r, h)
		}
	}
	r.ev = ev
	return Attachment{replica: id, ev: ev}
}

// lockAttached returns at's replica locked, or nil when at's mirror is no
// longer the replica's (checked under the lock: attaching takes it too).
func (x *Approx) lockAttached(at Attachment) *replica {
	if at.ev == nil {
		return nil
	}
	r := x.lockReplica(at.replica)
	if r != nil && r.ev != at.ev {
		r.mu.Unlock()
		return nil
	}
	return r
}

// applyBudget bounds the work (Mirror.work's units) ApplyEvents does
// under its replica's lock before it lets the lock go: a request routed to
// the replica records its prompt under that lock, and one batch may hold
// 2^17 events and 2^20 blocks. A part of 1,024 units took 0.15 ms at the
// median and 0.7 ms at the 90th percentile on a busy two-core machine.
const applyBudget = 1024

// ApplyEvents applies one batch of a replica's engine events to the mirror
// at names; nothing more happens once that mirror was replaced or
// forgotten. It holds the replica's lock for at most about applyBudget of
// work at a time, so routing may see a batch applied in parts, as if it
// had come as several (a clear in parts shows the blocks it has not
// dropped yet).
func (x *Approx) ApplyEvents(at Attachment, b *events.Batch) {
	var cur applyCursor
	for first := true; ; first = false {
		r := x.lockAttached(at)
		if r == nil {
			return
		}
		if first {
			x.expire(r, x.now())
		}
		m := r.ev.mirror
		before := m.work
		done := m.applySome(b, &cur, applyBudget)
		x.noteChecks(r)
		if x.testHookApplied != nil {
			x.testHookApplied(m.work - before)
		}
		r.mu.Unlock()
		if done {
			return
		}
	}
}

// PurgeEvents empties the mirror at names, if still attached: its engine's
// stream can no longer be trusted to describe the cache (it restarted, or
// history was lost).
func (x *Approx) PurgeEvents(at Attachment) {
	r := x.lockAttached(at)
	if r == nil {
		return
	}
	defer r.mu.Unlock()
	r.ev.mirror.Clear()
	x.noteChecks(r)
}

// SetSource makes replica id's predictions follow its engine's events
// (events true; only once attached) or the gateway's own routing. It
// reports the source in effect afterwards.
func (x *Approx) SetSource(id string, events bool) Source {
	r := x.lockReplica(id)
	if r == nil {
		return SourceApproximate
	}
	defer r.mu.Unlock()
	x.setSource(r, events && r.ev != nil)
	return r.source()
}

func (r *replica) source() Source {
	if r.ev != nil && r.ev.active {
		return SourceEvents
	}
	return SourceApproximate
}

// setSource republishes r's holder bits from the source asked for. The
// switch is not atomic for a concurrent Match, which may see a replica
// without blocks for a moment. Callers hold r.mu.
func (x *Approx) setSource(r *replica, events bool) {
	if r.ev == nil || r.ev.active == events {
		return
	}
	defer x.noteChecks(r)
	// A batch applied in parts may have left a clear or joins unfinished:
	// the mirror's keyed blocks are what they leave.
	r.ev.mirror.settle(math.MaxUint64)
	if events {
		x.unpublishLRU(r)
		r.ev.active = true
		recent := r.ev.recent[firstLive(r.ev.recent, x.now(), x.specTTL):]
		r.ev.recent = r.ev.recent[:0]    // recent still reads the records: nothing appends before speculateRecent
		var held map[blockhash.Hash]bool // what the mirror holds, wanted only with records to speculate
		if len(recent) > 0 && x.specTTL > 0 {
			held = make(map[blockhash.Hash]bool, r.ev.mirror.Held())
		}
		r.ev.mirror.eachKeyed(func(h blockhash.Hash) {
			x.addBit(r, h)
			if held != nil {
				held[h] = true
			}
		})
		for h := range r.ev.spec {
			x.addBit(r, h)
		}
		if held != nil {
			x.speculateRecent(r, recent, held)
		}
		return
	}
	r.ev.mirror.eachKeyed(func(h blockhash.Hash) { x.removeBit(r, h) })
	for h := range r.ev.spec {
		x.removeBit(r, h)
	}
	r.ev.active = false
	clear(r.ev.spec)
	r.ev.queue = r.ev.queue[:0]
	r.ev.recent = r.ev.recent[:0]
	// Shallowest first, so that a concurrent Match finds whole prefixes:
	// the LRU's front is the most recent, and a record's first block ends
	// up in front of its later ones.
	for n := r.lru.front(); n != 0; n = r.lru.nodes[n].next {
		x.addBit(r, r.lru.nodes[n].hash)
	}
}

// unpublishLRU removes the shadow LRU's bits from the holder map, keeping
// the LRU. Callers hold r.mu.
func (x *Approx) unpublishLRU(r *replica) {
	for n := r.lru.back(); n != 0; n = r.lru.nodes[n].prev {
		x.removeBit(r, r.lru.nodes[n].hash)
	}
}

func (x *Approx) addBit(r *replica, h blockhash.Hash) {
	m := mix(h)
	x.shards[m>>(64-shardBits)].add(h, m, r.handle)
}

// hasBit reports whether the holder map shows r holding h.
func (x *Approx) hasBit(r *replica, h blockhash.Hash) bool { return x.holds(r.handle, h) }

// holds reports whether the holder map shows handle holding h.
func (x *Approx) holds(handle int, h blockhash.Hash) bool {
	m := mix(h)
	s := &x.shards[m>>(64-shardBits)]
	if handle < 64 {
		return s.holders1(h, m)&(1<<handle) != 0
	}
	words := make([]uint64, handle/64+1)
	s.holdersN(h, m, words)
	return words[handle/64]&(1<<(handle%64)) != 0
}

func (x *Approx) removeBit(r *replica, h blockhash.Hash) {
	m := mix(h)
	x.shards[m>>(64-shardBits)].remove(h, m, r.handle)
}

// speculation is what a record made count as held on an events-sourced
// replica, for TakeBack: the blocks the mirror lacked, and the blocks of
// groups that lacked them (kvGroups.speculate).
type speculation struct {
	blocks      []blockhash.Hash
	groups      *kvGroups // nil: none
	groupBlocks []blockhash.Hash
}

func (s speculation) none() bool { return len(s.blocks) == 0 && len(s.groupBlocks) == 0 }

// speculate counts a routed prompt's blocks the mirror lacks as held until
// the TTL ends (and, on a hybrid engine, by the groups that lack them), and
// returns them, for TakeBack: an entry a record renews is that record's to
// take back. Callers hold r.mu; r's source is the events.
func (x *Approx) speculate(r *replica, hashes []blockhash.Hash, stamp uint64) speculation {
	now := x.now()
	x.expire(r, now)
	expires := now + int64(x.specTTL)
	var sp speculation
	if g := r.ev.mirror.groups; g != nil {
		sp.groups, sp.groupBlocks = g, x.speculateGroups(r, g, hashes, now, expires, stamp)
	}
	var set []blockhash.Hash
	for _, h := range hashes {
		if _, speculated := r.ev.spec[h]; !speculated && x.hasBit(r, h) {
			continue // the engine holds it: its bit is the mirror's
		}
		if _, ok := r.ev.spec[h]; !ok {
			x.addBit(r, h)
		}
		r.ev.spec[h] = specEntry{expires: expires, stamp: stamp}
		r.ev.queue = append(r.ev.queue, specItem{h: h, expires: expires})
		set = append(set, h)
	}
	r.ev.queue = compactExpiries(r.ev.queue, len(r.ev.spec), func(it specItem) bool {
		e, ok := r.ev.spec[it.h]
		return ok && e.expires == it.expires
	})
	sp.blocks = set
	return sp
}

// compactExpiries drops from q, a queue of speculations' expiries in
// expiry order, the items live says were renewed, confirmed or taken back
// since, once q is more than twice its entries (and 64): a prompt routed
// again and again within the TTL queues its blocks every time, which grew
// a queue by the request rate, not by what it speculates. Order is kept.
func compactExpiries(q []specItem, entries int, live func(specItem) bool) []specItem {
	if len(q) <= 2*entries+64 {
		return q
	}
	kept := q[:0]
	for _, it := range q {
		if live(it) {
			kept = append(kept, it)
		}
	}
	clear(q[len(kept):])
	if cap(kept) > 4*len(kept)+256 {
		kept = slices.Clone(kept) // let a burst's memory go
	}
	return kept
}

// unspeculate takes back the speculation of a failed attempt: the entries
// that record made and no later record renewed. An entry exists only while
// the mirror lacks its block (the mirror's store ends it), so its bit goes
// with it.
func (x *Approx) unspeculate(r *replica, t Token) {
	for _, h := range t.spec.blocks {
		if e, ok := r.ev.spec[h]; ok && e.stamp == t.stamp {
			delete(r.ev.spec, h)
			if r.ev.active {
				x.removeBit(r, h)
			}
		}
	}
}

// expire ends the speculation whose time is up. Callers hold r.mu.
func (x *Approx) expire(r *replica, now int64) {
	ev := r.ev
	if ev == nil {
		return
	}
	i := 0
	for ; i < len(ev.queue) && ev.queue[i].expires <= now; i++ {
		it := ev.queue[i]
		e, ok := ev.spec[it.h]
		if !ok || e.expires != it.expires {
			continue // taken back, or renewed by a later record
		}
		delete(ev.spec, it.h)
		ev.expired++
		if ev.active {
			x.removeBit(r, it.h) // the mirror lacks it, or the entry would be gone
		}
	}
	if i > 0 {
		ev.queue = append(ev.queue[:0], ev.queue[i:]...)
	}
}

// ExpireSpeculation ends the speculation whose time is up on every
// replica. Records and events do it for their replica as they come; a
// gateway calls this now and then so that an idle replica's guesses end
// too.
func (x *Approx) ExpireSpeculation() {
	now := x.now()
	for _, r := range x.replicas.Load().byID {
		r.mu.Lock()
		if !r.dead {
			x.expire(r, now)
		}
		r.mu.Unlock()
	}
}

// EventStats describes a replica's engine-fed state.
type EventStats struct {
	Source      Source
	Attached    bool
	Mirrored    int // distinct blocks the engine holds, as the gateway names them
	Speculative int // blocks routed there that the engine has not confirmed yet
	Orphans     int // blocks held under the engine's hash only, parent unknown
	// Digest is the mirror's Digest: equal for two gateways' mirrors of
	// the same engine when they hold the same blocks.
	Digest uint64
	// Confirmed and Expired count speculations the engine confirmed and
	// those that ran out first.
	Confirmed, Expired uint64
	Mirror             MirrorStats
	// Bound is the most blocks the mirror holds (mirrorBounds).
	Bound int
}

// Events returns replica id's engine-fed state.
func (x *Approx) Events(id string) EventStats {
	r := x.lockReplica(id)
	if r == nil {
		return EventStats{Source: SourceApproximate}
	}
	defer r.mu.Unlock()
	st := EventStats{Source: r.source()}
	if r.ev != nil {
		st.Attached = true
		st.Mirrored = r.ev.mirror.Held()
		st.Speculative = len(r.ev.spec)
		st.Orphans = r.ev.mirror.Orphans()
		st.Digest = r.ev.mirror.Digest()
		st.Confirmed, st.Expired = r.ev.confirmed, r.ev.expired
		st.Mirror = r.ev.mirror.Stats
		st.Bound = r.ev.mirror.maxBlocks
	}
	return st
}

// speculateRecent, as r's source turns to the events, counts the blocks of
// the recent records (made within the speculative TTL, oldest first) that
// the mirror lacks (not in held) as speculation until their TTL ends, as if
// they had been made on the events: a prompt routed a moment before the
// switch is still on its way to the engine, and dropping it would predict
// its next request a miss. Older records' blocks are left to the mirror.
// An attempt recorded before the switch that fails after it cannot take
// this speculation back (its token holds none); it ends with its TTL.
// Callers hold r.mu.
func (x *Approx) speculateRecent(r *replica, recent []recordTime, held map[blockhash.Hash]bool) {
	ev := r.ev
	// The LRU's front is the most recent; its stamps fall going back.
	// Each block is speculated until its latest record's TTL ends.
	for n := r.lru.front(); n != 0; n = r.lru.nodes[n].next {
		stamp := r.lru.nodes[n].stamp &^ addedMark
		if stamp < recent[0].stamp {
			break
		}
		h := r.lru.nodes[n].hash
		if held[h] {
			continue
		}
		if _, ok := ev.spec[h]; ok {
			continue
		}
		j, found := slices.BinarySearchFunc(recent, stamp, func(t recordTime, s uint64) int { return cmp.Compare(t.stamp, s) })
		if !found {
			continue // a record forgotten meanwhile
		}
		expires := recent[j].at + int64(x.specTTL)
		ev.spec[h] = specEntry{expires: expires, stamp: stamp}
		x.addBit(r, h)
		ev.queue = append(ev.queue, specItem{h: h, expires: expires})
	}
	// The queue must stay in expiry order.
	slices.SortStableFunc(ev.queue, func(a, b specItem) int { return cmp.Compare(a.expires, b.expires) })
}
