package index

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"unsafe"

	"github.com/inferrail/inferrail/internal/blockhash"
)

// blockTable is a Mirror's map from engine key to block. A Go map of the
// same took 84 bytes a block at a million (32-byte slots, tables split
// half empty, each table's allocation rounded up to whole pages); this one
// takes 36 bytes a slot and keeps between 54% and 81% of its slots in use.
//
// It is split into 64 shards by the key's mix, each an open-addressing
// table (linear probing, backward-shift deletion, so no tombstones) whose
// slot count need not be a power of two: a key's home slot is its mix's
// high bits scaled to the count, so a shard grows by half instead of
// doubling. A growing shard rehashes only its own 1/64 of the blocks, so
// one store never stalls on the whole mirror. Each table has its own
// random seed, so a stream cannot choose engine hashes that pile up.
//
// The zero blockTable is not ready: use newBlockTable. Not safe for
// concurrent use.
type blockTable struct {
	seed   uint64
	n      int // blocks held
	shards [tableShards]blockShard
}

const (
	tableShardBits = 6
	tableShards    = 1 << tableShardBits
	minShardSlots  = 8
	// A shard grows by half once a store would fill more than
	// maxLoadNum/maxLoadDen of its slots.
	maxLoadNum, maxLoadDen = 13, 16
)

// blockShard is one shard: slots, of which n are in use. An empty slot has
// meta 0; there is always one, so every probe ends.
type blockShard struct {
	slots []blockSlot
	n     int
}

// blockSlot is one block in 36 bytes: nine 32-bit words, so that nothing
// pads it to a multiple of 8.
type blockSlot struct {
	key  [2]uint32 // the engine key, low half first
	ours [4]uint32 // the gateway hash: Hi low and high, then Lo low and high
	// parent is the engine key of the block this one was keyed after
	// (mirrorBlock.parent), low half first; the block's own key when none.
	parent [2]uint32
	// meta is kids<<17 | copies<<1, plus 1 for an orphan; 0 marks an
	// empty slot, since a held block has at least one copy.
	meta uint32
}

// maxCopies is the most copies of one block a slot counts; a stream that
// stores a block more often without removing it is broken, and its count
// stays there.
const maxCopies = 1<<16 - 1

// maxKids is the most children a slot counts (mirrorBlock.kids); a block
// that reaches it stays there, taken as having children until it goes.
const maxKids = 1<<15 - 1

func packSlot(k engineKey, b mirrorBlock) blockSlot {
	meta := uint32(b.kids)<<17 | uint32(b.count)<<1
	if b.orphan {
		meta |= 1
	}
	parent := k
	if b.hasParent {
		parent = b.parent
	}
	return blockSlot{
		key:    [2]uint32{uint32(k), uint32(k >> 32)},
		ours:   [4]uint32{uint32(b.ours.Hi), uint32(b.ours.Hi >> 32), uint32(b.ours.Lo), uint32(b.ours.Lo >> 32)},
		parent: [2]uint32{uint32(parent), uint32(parent >> 32)},
		meta:   meta,
	}
}

func (s *blockSlot) engineKey() engineKey {
	return engineKey(s.key[0]) | engineKey(s.key[1])<<32
}

func (s *blockSlot) block() mirrorBlock {
	parent, hasParent := engineKey(s.parent[0])|engineKey(s.parent[1])<<32, true
	if parent == s.engineKey() {
		parent, hasParent = 0, false
	}
	return mirrorBlock{
		ours: blockhash.Hash{
			Hi: uint64(s.ours[0]) | uint64(s.ours[1])<<32,
			Lo: uint64(s.ours[2]) | uint64(s.ours[3])<<32,
		},
		count:     int32(s.meta >> 1 & maxCopies),
		orphan:    s.meta&1 != 0,
		parent:    parent,
		hasParent: hasParent,
		kids:      int32(s.meta >> 17),
	}
}

func newBlockTable() blockTable { return blockTable{seed: rand.Uint64()} }

// locate returns k's shard and the mix bits that place it within.
func (t *blockTable) locate(k engineKey) (*blockShard, uint64) {
	m := splitMix(uint64(k) ^ t.seed)
	return &t.shards[m>>(64-tableShardBits)], m << tableShardBits
}

// home is the slot where a key whose placing bits are m starts its probe.
func (s *blockShard) home(m uint64) int {
	hi, _ := bits.Mul64(m, uint64(len(s.slots)))
	return int(hi)
}

// find returns the slot holding k, or the empty slot where k would go, and
// whether k is there. The shard must have slots.
func (s *blockShard) find(k engineKey, m uint64) (int, bool) {
	k0, k1 := uint32(k), uint32(k>>32)
	n := len(s.slots)
	for i := s.home(m); ; {
		sl := &s.slots[i]
		if sl.meta == 0 {
			return i, false
		}
		if sl.key[0] == k0 && sl.key[1] == k1 {
			return i, true
		}
		if i++; i == n {
			i = 0
		}
	}
}

// get returns k's block, and whether the table holds k (the zero block
// when not).
func (t *blockTable) get(k engineKey) (mirrorBlock, bool) {
	s, m := t.locate(k)
	if s.slots == nil {
		return mirrorBlock{}, false
	}
	if i, ok := s.find(k, m); ok {
		return s.slots[i].block(), true
	}
	return mirrorBlock{}, false
}

// set makes k's block b, adding k if the table lacks it. b.count must be
// at least 1.
func (t *blockTable) set(k engineKey, b mirrorBlock) {
	s, m := t.locate(k)
	if s.slots != nil {
		i, ok := s.find(k, m)
		if ok || (s.n+1)*maxLoadDen <= len(s.slots)*maxLoadNum {
			s.slots[i] = packSlot(k, b)
			if !ok {
				s.n++
				t.n++
			}
			return
		}
	}
	t.grow(s)
	i, _ := s.find(k, m)
	s.slots[i] = packSlot(k, b)
	s.n++
	t.n++
}

// grow moves shard s to half as many slots again (minShardSlots at first).
func (t *blockTable) grow(s *blockShard) {
	old := s.slots
	s.slots = make([]blockSlot, max(minShardSlots, len(old)+len(old)/2))
	for i := range old {
		sl := &old[i]
		if sl.meta == 0 {
			continue
		}
		_, m := t.locate(sl.engineKey())
		j, _ := s.find(sl.engineKey(), m)
		s.slots[j] = *sl
	}
}

// del removes k, reporting whether the table held it.
func (t *blockTable) del(k engineKey) bool {
	s, m := t.locate(k)
	if s.slots == nil {
		return false
	}
	i, ok := s.find(k, m)
	if !ok {
		return false
	}
	// Backward-shift deletion: move later entries of the probe run into
	// the hole unless their home lies cyclically in (hole, j].
	n := len(s.slots)
	dist := func(from, to int) int {
		if d := to - from; d >= 0 {
			return d
		}
		return to - from + n
	}
	hole := i
	for j := next(i, n); s.slots[j].meta != 0; j = next(j, n) {
		_, mj := t.locate(s.slots[j].engineKey())
		if dist(s.home(mj), j) < dist(hole, j) {
			continue
		}
		s.slots[hole] = s.slots[j]
		hole = j
	}
	s.slots[hole] = blockSlot{}
	s.n--
	t.n--
	return true
}

func next(i, n int) int {
	if i++; i == n {
		return 0
	}
	return i
}

// len is how many blocks the table holds.
func (t *blockTable) len() int { return t.n }

// reset drops every block and the slots that held them, keeping the
// seed: slots never shrink, so a table kept after the most it held
// would cost that much at every walk.
func (t *blockTable) reset() { *t = blockTable{seed: t.seed} }

// each calls f with every block, in no set order, and returns how many
// slots it visited: those of the shards that hold blocks. f must not
// change the table.
func (t *blockTable) each(f func(engineKey, mirrorBlock)) int {
	visited, _ := t.walk(&tablePos{}, math.MaxUint64, f)
	return visited
}

// tablePos is where a walk of a table goes on: a shard, and a slot in it.
type tablePos struct{ shard, slot int }

// walk calls f with every block from pos on, in slot order, visiting at
// most limit slots (skipping the shards that hold none), and moves pos
// past them. It returns how many it visited and whether it reached the
// end. f must not change the table, nor may anything between the walks
// that go on from one pos.
func (t *blockTable) walk(pos *tablePos, limit uint64, f func(engineKey, mirrorBlock)) (int, bool) {
	visited := 0
	for ; pos.shard < len(t.shards); pos.shard, pos.slot = pos.shard+1, 0 {
		s := &t.shards[pos.shard]
		if s.n == 0 {
			continue
		}
		for ; pos.slot < len(s.slots); pos.slot++ {
			if uint64(visited) >= limit {
				return visited, false
			}
			visited++
			if sl := &s.slots[pos.slot]; sl.meta != 0 {
				f(sl.engineKey(), sl.block())
			}
		}
	}
	return visited, true
}

// bytes is the memory the table's slots take.
func (t *blockTable) bytes() int64 {
	var n int64
	for i := range t.shards {
		n += int64(len(t.shards[i].slots)) * int64(unsafe.Sizeof(blockSlot{}))
	}
	return n
}
