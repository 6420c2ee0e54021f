package sim

import (
	"slices"
	"testing"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/events"

	"pgregory.net/rapid"
)

// refPool is a naive model of vLLM's block pool: the free queue is a plain
// slice (index 0 is handed out next) and the cache a map of slices.
type refPool struct {
	ref    []int
	hash   []blockhash.Hash
	hashed []bool
	free   []int32
	cached map[blockhash.Hash][]int32
}

func newRefPool(n int) *refPool {
	p := &refPool{ref: make([]int, n), hash: make([]blockhash.Hash, n), hashed: make([]bool, n), cached: map[blockhash.Hash][]int32{}}
	p.ref[0] = 1
	for id := 1; id < n; id++ {
		p.free = append(p.free, int32(id))
	}
	return p
}

func (p *refPool) allocate(n int) []int32 {
	var out []int32
	for range n {
		id := p.free[0]
		p.free = p.free[1:]
		if p.hashed[id] {
			ids := p.cached[p.hash[id]]
			i := slices.Index(ids, id)
			ids = slices.Delete(slices.Clone(ids), i, i+1)
			if len(ids) == 0 {
				delete(p.cached, p.hash[id])
			} else {
				p.cached[p.hash[id]] = ids
			}
			p.hashed[id] = false
			p.hash[id] = blockhash.Hash{}
		}
		p.ref[id] = 1
		out = append(out, id)
	}
	return out
}

func (p *refPool) touch(ids []int32) {
	for _, id := range ids {
		if p.ref[id] == 0 {
			i := slices.Index(p.free, id)
			p.free = slices.Delete(p.free, i, i+1)
		}
		p.ref[id]++
	}
}

func (p *refPool) freeBlocks(ids []int32) {
	var front []int32
	for i := len(ids) - 1; i >= 0; i-- {
		id := ids[i]
		p.ref[id]--
		if p.ref[id] > 0 {
			continue
		}
		if p.hashed[id] {
			p.free = append(p.free, id)
		} else {
			front = append(front, id)
		}
	}
	p.free = append(front, p.free...)
}

func (p *refPool) cache(id int32, h blockhash.Hash) {
	if p.hashed[id] {
		return
	}
	p.hashed[id], p.hash[id] = true, h
	p.cached[h] = append(p.cached[h], id)
}

func (p *refPool) lookup(hashes []blockhash.Hash) []int32 {
	var out []int32
	for _, h := range hashes {
		ids, ok := p.cached[h]
		if !ok {
			break
		}
		out = append(out, ids[0])
	}
	return out
}

// freeOrder lists the free queue of the real pool from head to tail.
func freeOrder(p *blockPool) []int32 {
	var out []int32
	for id := p.head; id != nilBlock; id = p.blocks[id].next {
		out = append(out, id)
	}
	return out
}

// TestBlockPoolMatchesReference runs random operations on the pool and on
// the naive model and compares them after every step.
func TestBlockPoolMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(2, 40).Draw(t, "blocks")
		pool := newBlockPool(n, true)
		ref := newRefPool(n)
		hashes := []blockhash.Hash{{Lo: 1}, {Lo: 2}, {Lo: 3}, {Lo: 4}, {Lo: 5}}
		var held [][]int32 // each entry: one holder's blocks, in order
		steps := rapid.IntRange(1, 80).Draw(t, "steps")
		for range steps {
			switch rapid.IntRange(0, 4).Draw(t, "op") {
			case 0: // a holder takes fresh blocks
				k := rapid.IntRange(1, 4).Draw(t, "k")
				if k > pool.numFree {
					continue
				}
				got := pool.allocate(nil, k)
				want := ref.allocate(k)
				if !slices.Equal(got, want) {
					t.Fatalf("allocate(%d) = %v, want %v", k, got, want)
				}
				held = append(held, got)
			case 1: // a holder gives its blocks back
				if len(held) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(held)-1).Draw(t, "holder")
				pool.free(held[i])
				ref.freeBlocks(held[i])
				held = slices.Delete(held, i, i+1)
			case 2: // a held block becomes full and cached
				if len(held) == 0 {
					continue
				}
				blocks := held[rapid.IntRange(0, len(held)-1).Draw(t, "holder")]
				id := blocks[rapid.IntRange(0, len(blocks)-1).Draw(t, "block")]
				h := hashes[rapid.IntRange(0, len(hashes)-1).Draw(t, "hash")]
				pool.cache(id, h, events.Hash{}, 0)
				ref.cache(id, h)
			case 3: // a new holder hits cached blocks
				var chain []blockhash.Hash
				for range rapid.IntRange(1, 3).Draw(t, "chain") {
					chain = append(chain, hashes[rapid.IntRange(0, len(hashes)-1).Draw(t, "hash")])
				}
				got := pool.lookup(nil, chain)
				want := ref.lookup(chain)
				if !slices.Equal(got, want) {
					t.Fatalf("lookup(%v) = %v, want %v", chain, got, want)
				}
				if len(got) > 0 {
					pool.touch(got)
					ref.touch(want)
					held = append(held, got)
				}
			case 4:
				wantOK := len(ref.free) == n-1
				if ok := pool.reset(); ok != wantOK {
					t.Fatalf("reset() = %v, want %v", ok, wantOK)
				}
				if wantOK {
					for id := range ref.hashed {
						ref.hashed[id] = false
						ref.hash[id] = blockhash.Hash{}
					}
					clear(ref.cached)
				}
			}
			if got := freeOrder(pool); !slices.Equal(got, ref.free) {
				t.Fatalf("free queue %v, want %v", got, ref.free)
			}
			if pool.numFree != len(ref.free) {
				t.Fatalf("numFree %d, want %d", pool.numFree, len(ref.free))
			}
			for id := range n {
				if int(pool.blocks[id].ref) != ref.ref[id] || pool.blocks[id].hashed != ref.hashed[id] {
					t.Fatalf("block %d: ref %d hashed %v, want %d %v", id, pool.blocks[id].ref, pool.blocks[id].hashed, ref.ref[id], ref.hashed[id])
				}
			}
			if len(pool.cached) != len(ref.cached) {
				t.Fatalf("%d cached hashes, want %d", len(pool.cached), len(ref.cached))
			}
			for h, ids := range ref.cached {
				if got := pool.holders(h); !slices.Equal(got, ids) {
					t.Fatalf("holders of %v = %v, want %v", h, got, ids)
				}
			}
		}
	})
}

func TestBlockPoolEvictionOrder(t *testing.T) {
	p := newBlockPool(7, true) // usable blocks 1..6
	a := p.allocate(nil, 3)    // 1 2 3
	b := p.allocate(nil, 2)    // 4 5
	for i, id := range a {
		p.cache(id, blockhash.Hash{Lo: uint64(10 + i)}, events.Hash{}, 0)
	}
	p.cache(b[0], blockhash.Hash{Lo: 20}, events.Hash{}, 0) // block 5 stays unhashed
	p.free(a)                                               // hashed, freed tail first: 3 2 1 at the tail
	p.free(b)                                               // 5 unhashed to the head, 4 hashed to the tail
	want := []int32{5, 6, 3, 2, 1, 4}
	if got := freeOrder(p); !slices.Equal(got, want) {
		t.Fatalf("free queue %v, want %v", got, want)
	}
	if u := p.usage(); u != 0 {
		t.Errorf("usage %v with every block free, want 0", u)
	}
	// Handing out blocks evicts cached ones from the head only when reached.
	got := p.allocate(nil, 3)
	if !slices.Equal(got, []int32{5, 6, 3}) {
		t.Fatalf("allocate(3) = %v", got)
	}
	if _, ok := p.cached[blockhash.Hash{Lo: 12}]; ok {
		t.Error("block 3's hash survived its reuse")
	}
	if hits := p.lookup(nil, []blockhash.Hash{{Lo: 10}, {Lo: 11}}); !slices.Equal(hits, []int32{1, 2}) {
		t.Errorf("lookup after partial reuse = %v, want [1 2]", hits)
	}
	if want := 0.5; p.usage() != want {
		t.Errorf("usage %v, want %v", p.usage(), want)
	}
	if p.reset() {
		t.Error("reset succeeded while blocks are held")
	}
}

// holders lists the blocks holding h, oldest first.
func (p *blockPool) holders(h blockhash.Hash) []int32 {
	first, ok := p.cached[h]
	if !ok {
		return nil
	}
	return append([]int32{first}, p.dups[h]...)
}
