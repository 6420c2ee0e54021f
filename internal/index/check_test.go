package index

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/inferrail/inferrail/internal/blockhash"
)

// checker is implemented by indexes that can verify their own invariants.
// Call it only while no other goroutine uses the index.
type checker interface {
	check() error
}

// check verifies that every structure of x agrees with every other: each
// replica's list, table and counts agree; each holds at most its capacity;
// handles are unique; and the holder map is exactly the union of the
// replicas' LRUs, every entry reachable by a probe from its home slot.
func (x *Approx) check() error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	want := map[blockhash.Hash][]uint64{} // union of the LRUs, as holder sets
	g := x.replicas.Load()
	snap := g.byID
	for _, id := range slices.Sorted(maps.Keys(snap)) {
		if got := g.lookup(strings.Clone(id)); got != snap[id] {
			fail("registry: lookup(%q) of a copy = %p, want %p", id, got, snap[id])
		}
		if got := g.lookup(snap[id].id); got != snap[id] {
			fail("registry: lookup(%q) of its own ID = %p, want %p", id, got, snap[id])
		}
	}
	x.mu.Lock()
	inUse := 0
	for _, u := range x.handles {
		if u {
			inUse++
		}
	}
	words := x.words
	x.mu.Unlock()
	if inUse != len(snap) {
		fail("%d handles in use for %d replicas", inUse, len(snap))
	}
	seen := map[int]string{}
	for _, id := range slices.Sorted(maps.Keys(snap)) {
		r := snap[id]
		if r.id != id {
			fail("replica %q filed under %q", r.id, id)
		}
		if other, ok := seen[r.handle]; ok {
			fail("replicas %q and %q share handle %d", id, other, r.handle)
		}
		seen[r.handle] = id
		if r.handle/64 >= words {
			fail("replica %q: handle %d beyond %d holder words", id, r.handle, words)
		}
		r.mu.Lock()
		if r.dead {
			fail("replica %q is dead but in the snapshot", id)
		}
		if r.lru.held > r.capacity {
			fail("replica %q holds %d blocks, capacity %d", id, r.lru.held, r.capacity)
		}
		if err := r.lru.check(); err != nil {
			fail("replica %q: %w", id, err)
		}
		for n := r.lru.front(); n != 0; n = r.lru.nodes[n].next {
			h := r.lru.nodes[n].hash
			set := want[h]
			if set == nil {
				set = make([]uint64, words)
				want[h] = set
			}
			set[r.handle/64] |= 1 << (r.handle % 64)
		}
		r.mu.Unlock()
	}

	got := 0
	for si := range x.shards {
		s := &x.shards[si]
		s.mu.Lock()
		t := s.tab.Load()
		if t.words < words {
			fail("shard %d: %d holder words, want %d", si, t.words, words)
		}
		entries := 0
		for o := 0; o < len(t.slots); o += t.stride {
			if t.empty(o) {
				continue
			}
			entries++
			h := blockhash.Hash{Hi: t.slots[o].Load(), Lo: t.slots[o+1].Load()}
			m := mix(h)
			if int(m>>(64-shardBits)) != si {
				fail("block %v in shard %d, belongs in %d", h, si, m>>(64-shardBits))
			}
			if i, ok := t.find(h, m); !ok || i != o {
				fail("shard %d: block %v at slot %d not found by a probe (found %d, %v)", si, h, o/t.stride, i, ok)
			}
			set, ok := want[h]
			if !ok {
				fail("holder map has block %v that no replica holds", h)
				continue
			}
			for w := range t.words {
				var wantWord uint64
				if w < len(set) {
					wantWord = set[w]
				}
				if g := t.slots[o+2+w].Load(); g != wantWord {
					fail("block %v: holders word %d = %#x, replicas say %#x", h, w, g, wantWord)
				}
			}
			got++
		}
		if entries != s.count {
			fail("shard %d counts %d entries, has %d", si, s.count, entries)
		}
		if s.count*4 > 3*(len(t.slots)/t.stride) {
			fail("shard %d over its load: %d entries in %d slots", si, s.count, len(t.slots)/t.stride)
		}
		s.mu.Unlock()
	}
	if got != len(want) {
		fail("holder map has %d blocks, replicas hold %d distinct", got, len(want))
	}
	return errors.Join(errs...)
}

// check verifies the lru's list and table against each other.
func (l *lru) check() error {
	if l.held == 0 {
		if len(l.nodes) > 1 && (l.nodes[0].next != 0 || l.nodes[0].prev != 0) {
			return errors.New("empty list with linked sentinel")
		}
		return nil
	}
	count := 0
	prev := int32(0)
	var lastStamp uint64
	seen := map[blockhash.Hash]bool{}
	for n := l.front(); n != 0; n = l.nodes[n].next {
		if count > l.held {
			return fmt.Errorf("list longer than %d held", l.held)
		}
		nd := l.nodes[n]
		if nd.prev != prev {
			return fmt.Errorf("node %d: prev %d, want %d", n, nd.prev, prev)
		}
		stamp := nd.stamp &^ addedMark
		if count > 0 && stamp > lastStamp {
			return fmt.Errorf("node %d: stamp %d after a less recent %d", n, stamp, lastStamp)
		}
		if seen[nd.hash] {
			return fmt.Errorf("block %v twice", nd.hash)
		}
		seen[nd.hash] = true
		if f := l.find(nd.hash, mix(nd.hash)); f != n {
			return fmt.Errorf("block %v: find = %d, want %d", nd.hash, f, n)
		}
		lastStamp = stamp
		prev = n
		count++
	}
	if count != l.held {
		return fmt.Errorf("list has %d nodes, held %d", count, l.held)
	}
	if l.nodes[0].prev != prev {
		return fmt.Errorf("sentinel prev %d, want %d", l.nodes[0].prev, prev)
	}
	slots := 0
	for _, v := range l.slots {
		if v != 0 {
			slots++
		}
	}
	if slots != l.held {
		return fmt.Errorf("table has %d entries, held %d", slots, l.held)
	}
	free := 0
	for n := l.free; n != 0; n = l.nodes[n].next {
		free++
		if free > len(l.nodes) {
			return errors.New("free list loops")
		}
	}
	if free+l.held+1 != len(l.nodes) {
		return fmt.Errorf("%d free + %d held + sentinel != %d nodes", free, l.held, len(l.nodes))
	}
	return nil
}
