package index

import "github.com/inferrail/inferrail/internal/blockhash"

// lru is one replica's shadow of its KV cache: the blocks it holds, most
// recently used first. Nodes live in a slab and link by index; a small
// open-addressing table (linear probing, backward-shift deletion) finds a
// block's node. Not safe for concurrent use; the replica's mutex guards it.
//
// The zero lru is empty and ready to use.
type lru struct {
	// nodes[0] is the sentinel of a circular list: its next is the most
	// recently used node, its prev the least. Free nodes chain through
	// next from free; 0 ends the chain.
	nodes []node
	free  int32
	held  int
	// most bounds the slab's growth, set by each record to the nodes it
	// can need (sentinel, capacity, the record's blocks before eviction).
	// Zero means no bound.
	most int

	// slots holds tag<<32 | node for each held block, 0 when empty. The tag
	// is the top 32 bits of the block's mix, so it also gives the home slot.
	slots []uint64
	bits  uint // log2(len(slots)); 0 while slots is nil
}

type node struct {
	hash       blockhash.Hash
	stamp      uint64 // stamp of the last record that touched the block, with addedMark if it added it
	prev, next int32
}

// nodeBytes is the size of a node in the slab.
const nodeBytes = 32

func (l *lru) home(tag uint64) uint64 { return tag >> (32 - l.bits) }

// find returns h's node, or 0 when the replica does not hold h.
func (l *lru) find(h blockhash.Hash, m uint64) int32 {
	if l.slots == nil {
		return 0
	}
	tag := m >> 32
	mask := uint64(len(l.slots) - 1)
	for s := l.home(tag); ; s = (s + 1) & mask {
		v := l.slots[s]
		if v == 0 {
			return 0
		}
		if v>>32 == tag {
			if n := int32(uint32(v)); l.nodes[n].hash == h {
				return n
			}
		}
	}
}

// pushFront adds h, which the replica must not hold yet, as most recently
// used, and returns its node.
func (l *lru) pushFront(h blockhash.Hash, m uint64, stamp uint64) int32 {
	if l.nodes == nil {
		l.nodes = make([]node, 1, min(16, max(l.most, 2)))
	}
	if (l.held+1)*4 > 3*len(l.slots) {
		l.grow()
	}
	n := l.free
	if n != 0 {
		l.free = l.nodes[n].next
	} else {
		if len(l.nodes) == cap(l.nodes) {
			// Double, but not past the bound: a full replica's slab is
			// then its capacity and one prompt, not up to twice that.
			grow := max(len(l.nodes), 16)
			if l.most > len(l.nodes) {
				grow = min(grow, l.most-len(l.nodes))
			}
			l.nodes = append(make([]node, 0, len(l.nodes)+grow), l.nodes...)
		}
		n = int32(len(l.nodes))
		l.nodes = append(l.nodes, node{})
	}
	l.nodes[n] = node{hash: h, stamp: stamp}
	l.link(n)
	tag := m >> 32
	mask := uint64(len(l.slots) - 1)
	s := l.home(tag)
	for l.slots[s] != 0 {
		s = (s + 1) & mask
	}
	l.slots[s] = tag<<32 | uint64(n)
	l.held++
	return n
}

// touch makes n the most recently used node.
func (l *lru) touch(n int32, stamp uint64) {
	l.nodes[n].stamp = stamp
	l.unlink(n)
	l.link(n)
}

// front returns the most recently used node, 0 when empty; follow next
// toward the least recently used, until 0.
func (l *lru) front() int32 {
	if l.held == 0 {
		return 0
	}
	return l.nodes[0].next
}

// back returns the least recently used node, 0 when empty; follow prev
// toward the most recently used, until 0.
func (l *lru) back() int32 {
	if l.held == 0 {
		return 0
	}
	return l.nodes[0].prev
}

// remove drops node n, whose block mixes to m.
func (l *lru) remove(n int32, m uint64) {
	l.unlink(n)
	l.nodes[n] = node{next: l.free}
	l.free = n
	l.held--

	mask := uint64(len(l.slots) - 1)
	hole := l.home(m >> 32)
	for uint32(l.slots[hole]) != uint32(n) {
		hole = (hole + 1) & mask
	}
	for j := (hole + 1) & mask; l.slots[j] != 0; j = (j + 1) & mask {
		if (j-l.home(l.slots[j]>>32))&mask < (j-hole)&mask {
			continue // its home lies after the hole
		}
		l.slots[hole] = l.slots[j]
		hole = j
	}
	l.slots[hole] = 0
}

// clear drops every node and all memory.
func (l *lru) clear() { *l = lru{most: l.most} }

// bytes is the memory the lru takes.
func (l *lru) bytes() int64 {
	return int64(cap(l.nodes))*nodeBytes + int64(len(l.slots))*8
}

func (l *lru) link(n int32) {
	first := l.nodes[0].next
	l.nodes[n].prev = 0
	l.nodes[n].next = first
	l.nodes[first].prev = n
	l.nodes[0].next = n
}

func (l *lru) unlink(n int32) {
	p, q := l.nodes[n].prev, l.nodes[n].next
	l.nodes[p].next = q
	l.nodes[q].prev = p
}

// grow doubles the table (16 slots at first) and rehashes into it.
func (l *lru) grow() {
	bits := max(l.bits+1, 4)
	old := l.slots
	l.slots = make([]uint64, 1<<bits)
	l.bits = bits
	mask := uint64(len(l.slots) - 1)
	for _, v := range old {
		if v == 0 {
			continue
		}
		s := l.home(v >> 32)
		for l.slots[s] != 0 {
			s = (s + 1) & mask
		}
		l.slots[s] = v
	}
}
