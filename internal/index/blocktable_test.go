package index

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"pgregory.net/rapid"

	"github.com/inferrail/inferrail/internal/blockhash"
)

func TestBlockSlotSize(t *testing.T) {
	if got := unsafe.Sizeof(blockSlot{}); got != 36 {
		t.Errorf("a block slot takes %d bytes, want 36", got)
	}
}

// TestBlockSlotRoundTrip: every key and block comes back out of a slot as
// it went in, the extremes included.
func TestBlockSlotRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		k engineKey
		b mirrorBlock
	}{
		{0, mirrorBlock{count: 1}},
		{math.MaxUint64, mirrorBlock{ours: blockhash.Hash{Hi: math.MaxUint64, Lo: math.MaxUint64}, count: maxCopies}},
		{1 << 63, mirrorBlock{ours: blockhash.Hash{Hi: 1 << 63, Lo: 1}, count: maxCopies, orphan: true}},
		{0x0123456789abcdef, mirrorBlock{ours: blockhash.Hash{Hi: 0xfedcba9876543210, Lo: 0x0f1e2d3c4b5a6978}, count: 2, orphan: true}},
		{7, mirrorBlock{count: maxCopies, parent: math.MaxUint64, hasParent: true, kids: maxKids}},
		{math.MaxUint64, mirrorBlock{count: 1, parent: 0, hasParent: true, kids: 1}},
	} {
		s := packSlot(tc.k, tc.b)
		if s.meta == 0 {
			t.Errorf("key %#x: a held block packs into an empty slot", tc.k)
		}
		if k, b := s.engineKey(), s.block(); k != tc.k || b != tc.b {
			t.Errorf("packed %#x %+v, unpacked %#x %+v", tc.k, tc.b, k, b)
		}
		tab := newBlockTable()
		tab.set(tc.k, tc.b)
		if b, ok := tab.get(tc.k); !ok || b != tc.b {
			t.Errorf("key %#x: get = %+v, %v; want %+v", tc.k, b, ok, tc.b)
		}
	}
}

// oneShardKeys returns n distinct keys that all land in t's shard 0, drawn
// from rng.
func oneShardKeys(t *blockTable, n int, rng *rand.Rand) []engineKey {
	seen := map[engineKey]bool{}
	var keys []engineKey
	for len(keys) < n {
		k := engineKey(rng.Uint64())
		if s, _ := t.locate(k); s == &t.shards[0] && !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// checkTable compares t with want and checks its invariants: every shard
// counts its blocks, stays within its load, keeps an empty slot, and
// every block is in the shard its key picks and found from its home.
func checkTable(t *blockTable, want map[engineKey]mirrorBlock) error {
	if t.len() != len(want) {
		return fmt.Errorf("len %d, want %d", t.len(), len(want))
	}
	for si := range t.shards {
		s := &t.shards[si]
		used := 0
		for i := range s.slots {
			sl := &s.slots[i]
			if sl.meta == 0 {
				continue
			}
			used++
			k := sl.engineKey()
			if home, _ := t.locate(k); home != s {
				return fmt.Errorf("key %#x in shard %d, not its own", k, si)
			}
			if j, ok := s.find(k, func() uint64 { _, m := t.locate(k); return m }()); !ok || j != i {
				return fmt.Errorf("key %#x at slot %d of shard %d: find = %d, %v", k, i, si, j, ok)
			}
			if w, ok := want[k]; !ok || w != sl.block() {
				return fmt.Errorf("key %#x holds %+v, want %+v (present %v)", k, sl.block(), w, ok)
			}
		}
		if used != s.n {
			return fmt.Errorf("shard %d: %d slots used, counted %d", si, used, s.n)
		}
		if s.slots != nil && (used == len(s.slots) || used*maxLoadDen > len(s.slots)*maxLoadNum) {
			return fmt.Errorf("shard %d: %d of %d slots used, past the load bound", si, used, len(s.slots))
		}
	}
	seen := 0
	var bad error
	t.each(func(k engineKey, b mirrorBlock) {
		seen++
		if w, ok := want[k]; (!ok || w != b) && bad == nil {
			bad = fmt.Errorf("each: key %#x with %+v, want %+v (present %v)", k, b, w, ok)
		}
	})
	if bad != nil {
		return bad
	}
	if seen != len(want) {
		return fmt.Errorf("each visits %d blocks, want %d", seen, len(want))
	}
	for k, w := range want {
		if b, ok := t.get(k); !ok || b != w {
			return fmt.Errorf("get(%#x) = %+v, %v; want %+v", k, b, ok, w)
		}
	}
	return nil
}

// TestBlockTable drives a table through sets, deletes and clears against a
// map, all keys in one shard, so that the shard grows through slot counts
// that are not powers of two, probe runs wrap around its end and backward
// shifts cross it.
func TestBlockTable(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tab := newBlockTable()
		tab.seed = rapid.Uint64().Draw(rt, "seed")
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "keys_seed"), 1))
		pool := oneShardKeys(&tab, rapid.IntRange(1, 150).Draw(rt, "keys"), rng)
		want := map[engineKey]mirrorBlock{}
		for range rapid.IntRange(1, 400).Draw(rt, "steps") {
			k := rapid.SampledFrom(pool).Draw(rt, "key")
			switch op := rapid.IntRange(0, 40).Draw(rt, "op"); {
			case op < 24:
				b := mirrorBlock{
					ours:   blockhash.Hash{Hi: rapid.Uint64().Draw(rt, "hi"), Lo: rapid.Uint64().Draw(rt, "lo")},
					count:  rapid.Int32Range(1, maxCopies).Draw(rt, "count"),
					orphan: rapid.Bool().Draw(rt, "orphan"),
					kids:   rapid.Int32Range(0, maxKids).Draw(rt, "kids"),
				}
				if rapid.Bool().Draw(rt, "linked") {
					if b.parent = engineKey(rapid.Uint64().Draw(rt, "parent")); b.parent != k {
						b.hasParent = true
					} else {
						b.parent = 0
					}
				}
				tab.set(k, b)
				want[k] = b
			case op < 40:
				_, held := want[k]
				if got := tab.del(k); got != held {
					rt.Fatalf("del(%#x) = %v, want %v", k, got, held)
				}
				delete(want, k)
			default:
				tab.reset()
				clear(want)
			}
			if err := checkTable(&tab, want); err != nil {
				rt.Fatal(err)
			}
		}
	})
}

// TestBlockTableChurn fills one shard to a few thousand blocks and drains
// it, several times, checking the touched key at every step and the whole
// table now and then: the shard grows through a dozen sizes, and long
// probe runs collide, wrap and shift back.
func TestBlockTableChurn(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	tab := newBlockTable()
	pool := oneShardKeys(&tab, 3000, rng)
	want := map[engineKey]mirrorBlock{}
	sizes := map[int]bool{}
	for step := range 60_000 {
		k := pool[rng.IntN(len(pool))]
		fill := (step/10_000)%2 == 0
		if fill && rng.IntN(8) != 0 || !fill && rng.IntN(8) == 0 {
			b := mirrorBlock{ours: blockhash.Hash{Hi: rng.Uint64(), Lo: uint64(step)}, count: int32(1 + rng.IntN(3))}
			tab.set(k, b)
			want[k] = b
		} else {
			_, held := want[k]
			if got := tab.del(k); got != held {
				t.Fatalf("step %d: del(%#x) = %v, want %v", step, k, got, held)
			}
			delete(want, k)
		}
		sizes[len(tab.shards[0].slots)] = true
		if b, ok := tab.get(k); ok != (want[k].count > 0) || b != want[k] {
			t.Fatalf("step %d: get(%#x) = %+v, %v; want %+v", step, k, b, ok, want[k])
		}
		if step%997 == 0 {
			if err := checkTable(&tab, want); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
	}
	if err := checkTable(&tab, want); err != nil {
		t.Fatal(err)
	}
	if len(sizes) < 10 {
		t.Errorf("the shard took %d sizes, want at least 10", len(sizes))
	}
}

// TestMirrorCountsCopiesUpToTheBound: a block stored more often than a
// slot counts stays at the bound and held, instead of wrapping to a count
// that would read as an empty slot.
func TestMirrorCountsCopiesUpToTheBound(t *testing.T) {
	m := NewMirror(mirrorBS, mirrorSeed, 100, 0)
	tokens := seq(1, 4)
	apply(m, stored(0, 5, tokens))
	b, _ := m.blocks.get(5)
	b.count = maxCopies
	m.blocks.set(5, b)
	apply(m, stored(0, 5, tokens))
	if got := m.Blocks()[5]; got != maxCopies {
		t.Fatalf("copies %d after a store at the bound, want %d", got, maxCopies)
	}
	apply(m, removed(5))
	if got := m.Blocks()[5]; got != maxCopies-1 || !m.GatewayHashes()[ours("", tokens...)[0]] {
		t.Fatalf("copies %d after a removal, held %v; want %d, held", got, m.GatewayHashes()[ours("", tokens...)[0]], maxCopies-1)
	}
	if m.Stats.Stored != 2 || m.Stats.Removed != 1 {
		t.Errorf("stats %+v, want 2 stored and 1 removed", m.Stats)
	}
}
