package index

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/inferrail/inferrail/internal/blockhash"
)

// The holder map answers "which replicas hold block h" for Match without a
// lock: it is split into shards, each an open-addressing table (linear
// probing, backward-shift deletion, so no tombstones) whose slots are
// atomics. Writers take the shard's mutex and make its sequence number odd
// while they change the table; readers read the slots, then retry if the
// sequence number moved (a seqlock). Every slot is
//
//	[hash.Hi, hash.Lo, holders word 0, ..., holders word w-1]
//
// where the holders are a bitset of replica handles. A slot is empty when
// every holders word is zero: a block no replica holds has no entry.

const (
	shardBits    = 8
	numShards    = 1 << shardBits
	minTableBits = 4
)

// mix spreads a block hash over 64 bits. Chained XXH3 hashes are uniform
// already; mixing keeps tests and odd callers with structured hashes from
// piling into a few slots. The top shardBits pick the shard, the bits below
// them the home slot.
func mix(h blockhash.Hash) uint64 {
	x := (h.Hi ^ bits.RotateLeft64(h.Lo, 31)) * 0x9e3779b97f4a7c15
	return x ^ x>>32
}

// holderShard is one shard of the holder map, alone on its cache lines so
// that writers to one shard do not slow readers of its neighbours. Must not
// be copied.
type holderShard struct {
	shardState
	_ [64 - unsafe.Sizeof(shardState{})%64]byte
}

type shardState struct {
	mu    sync.Mutex                  // serializes writers
	seq   atomic.Uint64               // odd while a writer changes tab in place
	tab   atomic.Pointer[holderTable] // never nil after init
	count int                         // entries in tab; guarded by mu
}

// holderTable is one generation of a shard's table. Its shape is fixed;
// its slots change under the shard's seqlock.
type holderTable struct {
	bits   uint // log2 of the number of slots
	words  int  // holders words per slot
	stride int  // 2 + words
	slots  []atomic.Uint64
}

func newHolderTable(bits uint, words int) *holderTable {
	return &holderTable{bits: bits, words: words, stride: 2 + words, slots: make([]atomic.Uint64, (2+words)<<bits)}
}

func (t *holderTable) home(m uint64) uint64 { return (m << shardBits) >> (64 - t.bits) }

func (t *holderTable) empty(i int) bool {
	for w := range t.words {
		if t.slots[i+2+w].Load() != 0 {
			return false
		}
	}
	return true
}

// find returns the offset of h's slot, or of the empty slot where it would
// go, and whether h is there. A reader racing a writer may see a table
// without an empty slot; the probe count bounds the loop, and the reader's
// seqlock check throws the answer away.
func (t *holderTable) find(h blockhash.Hash, m uint64) (int, bool) {
	mask := uint64(1)<<t.bits - 1
	s := t.home(m)
	for range mask + 1 {
		i := int(s) * t.stride
		if t.empty(i) {
			return i, false
		}
		if t.slots[i].Load() == h.Hi && t.slots[i+1].Load() == h.Lo {
			return i, true
		}
		s = (s + 1) & mask
	}
	return -1, false
}

// holdersN copies h's holder words into dst, zero past the table's width
// and when no replica holds h.
func (t *holderTable) holdersN(h blockhash.Hash, m uint64, dst []uint64) {
	i, ok := t.find(h, m)
	for w := range dst {
		dst[w] = 0
		if ok && w < t.words {
			dst[w] = t.slots[i+2+w].Load()
		}
	}
}

// readBegin waits for no writer and returns the sequence number to check.
func (s *holderShard) readBegin() uint64 {
	for spins := 0; ; spins++ {
		if seq := s.seq.Load(); seq&1 == 0 {
			return seq
		}
		if spins > 64 {
			runtime.Gosched()
		}
	}
}

// holders1 returns word 0 of h's holders (handles 0-63), 0 when no
// replica holds h. It is Match's inner loop: one function, the probe of a
// one-word table written out.
func (s *holderShard) holders1(h blockhash.Hash, m uint64) uint64 {
	for {
		seq := s.seq.Load()
		if seq&1 != 0 {
			seq = s.readBegin()
		}
		t := s.tab.Load()
		var held uint64
		if t.words == 1 {
			mask := uint64(1)<<t.bits - 1
			slots := t.slots
			for i, n := t.home(m), uint64(0); n <= mask; i, n = (i+1)&mask, n+1 {
				o := int(i) * 3
				held = slots[o+2].Load()
				if held == 0 || slots[o].Load() == h.Hi && slots[o+1].Load() == h.Lo {
					break
				}
				held = 0
			}
		} else if o, ok := t.find(h, m); ok {
			held = t.slots[o+2].Load()
		}
		if s.seq.Load() == seq {
			return held
		}
	}
}

// holdersN copies h's holder words into dst.
func (s *holderShard) holdersN(h blockhash.Hash, m uint64, dst []uint64) {
	for {
		seq := s.readBegin()
		s.tab.Load().holdersN(h, m, dst)
		if s.seq.Load() == seq {
			return
		}
	}
}

// add marks handle as a holder of h.
func (s *holderShard) add(h blockhash.Hash, m uint64, handle int) {
	s.mu.Lock()
	t := s.tab.Load()
	if i, ok := t.find(h, m); ok {
		w := &t.slots[i+2+handle/64]
		s.seq.Add(1)
		w.Store(w.Load() | 1<<(handle%64))
		s.seq.Add(1)
		s.mu.Unlock()
		return
	}
	if (s.count+1)*4 > 3<<t.bits { // keep the load at most 3/4
		t = s.rebuild(t.bits+1, t.words)
	}
	i, _ := t.find(h, m)
	s.seq.Add(1)
	t.slots[i].Store(h.Hi)
	t.slots[i+1].Store(h.Lo)
	t.slots[i+2+handle/64].Store(1 << (handle % 64))
	s.seq.Add(1)
	s.count++
	s.mu.Unlock()
}

// remove clears handle from h's holders, dropping the entry when no holder
// is left.
func (s *holderShard) remove(h blockhash.Hash, m uint64, handle int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tab.Load()
	i, ok := t.find(h, m)
	if !ok {
		return
	}
	w := &t.slots[i+2+handle/64]
	s.seq.Add(1)
	defer s.seq.Add(1)
	w.Store(w.Load() &^ (1 << (handle % 64)))
	if !t.empty(i) {
		return
	}
	// Backward-shift deletion: move later entries of the probe run into
	// the hole when their home does not lie after it.
	s.count--
	mask := uint64(1)<<t.bits - 1
	hole := uint64(i / t.stride)
	for j := (hole + 1) & mask; ; j = (j + 1) & mask {
		jo := int(j) * t.stride
		if t.empty(jo) {
			break
		}
		home := t.home(mix(blockhash.Hash{Hi: t.slots[jo].Load(), Lo: t.slots[jo+1].Load()}))
		// The entry at j may move to the hole unless its home lies
		// cyclically in (hole, j].
		if (j-home)&mask < (j-hole)&mask {
			continue
		}
		ho := int(hole) * t.stride
		for k := range t.stride {
			t.slots[ho+k].Store(t.slots[jo+k].Load())
		}
		hole = j
	}
	ho := int(hole) * t.stride
	for k := range t.stride {
		t.slots[ho+k].Store(0)
	}
	if t.bits > minTableBits && s.count*8 < 1<<t.bits { // below 1/8: halve
		s.rebuild(t.bits-1, t.words)
	}
}

// rebuild copies the shard into a new table of 1<<bits slots and words
// holders words each, publishes it and returns it. The old table is left as
// it was, so readers still on it see a consistent (old) state. Callers hold
// mu.
func (s *holderShard) rebuild(bits uint, words int) *holderTable {
	old := s.tab.Load()
	t := newHolderTable(bits, words)
	for o := 0; o < len(old.slots); o += old.stride {
		if old.empty(o) {
			continue
		}
		h := blockhash.Hash{Hi: old.slots[o].Load(), Lo: old.slots[o+1].Load()}
		i, _ := t.find(h, mix(h))
		t.slots[i].Store(h.Hi)
		t.slots[i+1].Store(h.Lo)
		for w := range min(words, old.words) {
			t.slots[i+2+w].Store(old.slots[o+2+w].Load())
		}
	}
	s.tab.Store(t)
	return t
}

// widen makes room for handles below 64*words.
func (s *holderShard) widen(words int) {
	s.mu.Lock()
	if t := s.tab.Load(); t.words < words {
		s.rebuild(t.bits, words)
	}
	s.mu.Unlock()
}

// bytes is the shard table's size. Any goroutine may call it.
func (s *holderShard) bytes() int64 {
	return int64(len(s.tab.Load().slots)) * 8
}
