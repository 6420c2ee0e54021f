package index

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/inferrail/inferrail/internal/blockhash"

	"pgregory.net/rapid"
)

// TestHolderShard drives one shard (every block goes to it, whatever its
// mix says) through adds, removes and widening, against a map. Tables start
// at 16 slots, so probe runs wrap and backward shifts cross the end.
func TestHolderShard(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s holderShard
		s.tab.Store(newHolderTable(minTableBits, 1))
		want := map[blockhash.Hash]map[int]bool{}
		pool := rapid.SliceOfNDistinct(rapid.Custom(func(t *rapid.T) blockhash.Hash {
			return blockhash.Hash{Hi: rapid.Uint64().Draw(t, "hi"), Lo: rapid.Uint64().Draw(t, "lo")}
		}), 1, 40, func(h blockhash.Hash) blockhash.Hash { return h }).Draw(t, "blocks")
		words := 1
		for range rapid.IntRange(1, 300).Draw(t, "steps") {
			h := rapid.SampledFrom(pool).Draw(t, "block")
			handle := rapid.IntRange(0, 64*words-1).Draw(t, "handle")
			switch rapid.IntRange(0, 10).Draw(t, "op") {
			case 0:
				words++
				s.widen(words)
			case 1, 2, 3, 4, 5:
				s.add(h, mix(h), handle)
				if want[h] == nil {
					want[h] = map[int]bool{}
				}
				want[h][handle] = true
			default:
				s.remove(h, mix(h), handle)
				delete(want[h], handle)
				if len(want[h]) == 0 {
					delete(want, h)
				}
			}
			if s.count != len(want) {
				t.Fatalf("count %d, want %d", s.count, len(want))
			}
			for _, h := range pool {
				dst := make([]uint64, words)
				s.holdersN(h, mix(h), dst)
				wantWords := make([]uint64, words)
				for handle := range want[h] {
					wantWords[handle/64] |= 1 << (handle % 64)
				}
				if !slices.Equal(dst, wantWords) {
					t.Fatalf("block %v: holders %#x, want %#x", h, dst, wantWords)
				}
				if got, want := s.holders1(h, mix(h)), dst[0]; got != want {
					t.Fatalf("holders1(%v) = %#x, holdersN word 0 = %#x", h, got, want)
				}
			}
		}
	})
}

// TestHolderShardChurn grows one shard to a few hundred blocks and back,
// many times, checking every block after every change: probe runs collide,
// wrap and shift back all the time.
func TestHolderShardChurn(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var s holderShard
	s.tab.Store(newHolderTable(minTableBits, 1))
	pool := make([]blockhash.Hash, 300)
	for i := range pool {
		pool[i] = blockhash.Hash{Hi: rng.Uint64(), Lo: rng.Uint64()}
	}
	want := map[blockhash.Hash]uint64{}
	var grew, shrank bool
	for step := range 40_000 {
		before := s.tab.Load().bits
		h := pool[rng.IntN(len(pool))]
		// Fill for a while, then drain, so the table grows and shrinks.
		fill := (step/4000)%2 == 0
		if handle := rng.IntN(4); fill && rng.IntN(4) != 0 || !fill && rng.IntN(32) == 0 {
			s.add(h, mix(h), handle)
			want[h] |= 1 << handle
		} else {
			s.remove(h, mix(h), handle)
			if want[h] &^= 1 << handle; want[h] == 0 {
				delete(want, h)
			}
		}
		after := s.tab.Load().bits
		grew = grew || after > before
		shrank = shrank || after < before
		if s.count != len(want) {
			t.Fatalf("step %d: count %d, want %d", step, s.count, len(want))
		}
		check := pool
		if step%16 != 0 {
			check = []blockhash.Hash{h}
		}
		for _, h := range check {
			if got := s.holders1(h, mix(h)); got != want[h] {
				t.Fatalf("step %d: block %v holders %#x, want %#x", step, h, got, want[h])
			}
		}
	}
	if !grew || !shrank {
		t.Errorf("table grew %v, shrank %v: want both", grew, shrank)
	}
}

// TestLowBit: a handle's bit in a one-word set, none for handles outside
// the word.
func TestLowBit(t *testing.T) {
	for _, tc := range []struct {
		h    int32
		want uint64
	}{
		{-1, 0}, {math.MinInt32, 0}, {0, 1}, {1, 2}, {63, 1 << 63}, {64, 0}, {65, 0}, {math.MaxInt32, 0},
	} {
		if got := lowBit(tc.h); got != tc.want {
			t.Errorf("lowBit(%d) = %#x, want %#x", tc.h, got, tc.want)
		}
	}
}
