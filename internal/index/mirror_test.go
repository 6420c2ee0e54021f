package index

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/events"
)

const mirrorBS = 4

func mirrorSeed(adapter, salt string) blockhash.Hash { return blockhash.Seed("m", adapter, salt) }

// ours is the gateway's chain for tokens, as routing computes it.
func ours(salt string, tokens ...int) []blockhash.Hash {
	return blockhash.Extend(nil, mirrorSeed("", salt), tokens, mirrorBS)
}

func seq(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

func u32(ids []int) []uint32 {
	out := make([]uint32, len(ids))
	for i, t := range ids {
		out[i] = uint32(t)
	}
	return out
}

// stored is a BlockStored of engine hashes first.. for tokens, after parent
// (0: none).
func stored(parent uint64, first uint64, tokens []int) events.Event {
	ev := events.Event{Kind: events.BlockStored, Tokens: u32(tokens), BlockSize: mirrorBS, Medium: "GPU", HasMedium: true}
	for i := range len(tokens) / mirrorBS {
		ev.Hashes = append(ev.Hashes, events.UintHash(first+uint64(i)))
	}
	if parent != 0 {
		ev.Parent, ev.HasParent = events.UintHash(parent), true
	}
	return ev
}

func removed(h uint64) events.Event {
	return events.Event{Kind: events.BlockRemoved, Hashes: []events.Hash{events.UintHash(h)}, Medium: "GPU", HasMedium: true}
}

func apply(m *Mirror, evs ...events.Event) {
	m.Apply(&events.Batch{Events: evs})
}

// mirrored is how many leading blocks of chain the mirror holds.
func mirrored(m *Mirror, chain []blockhash.Hash) int {
	held := m.GatewayHashes()
	for i, h := range chain {
		if !held[h] {
			return i
		}
	}
	return len(chain)
}

func TestMirrorRebuildsTheGatewaysChain(t *testing.T) {
	m := NewMirror(mirrorBS, mirrorSeed, 100, 0)
	tokens := seq(1, 12)
	// The engine stores the prompt's first two blocks in one step and the
	// third (say, filled by output) in a later one.
	apply(m, stored(0, 100, tokens[:8]))
	apply(m, stored(101, 102, tokens[8:12]))
	chain := ours("", tokens...)
	if got := mirrored(m, chain); got != 3 {
		t.Fatalf("mirror holds %d leading blocks of the chain, want 3", got)
	}
	// Another salt is another chain, though the tokens are the same.
	if got := mirrored(m, ours("s", tokens...)); got != 0 {
		t.Errorf("a salted prompt matches %d blocks, want 0", got)
	}
	apply(m, removed(102))
	if got := mirrored(m, chain); got != 2 {
		t.Errorf("after removing block 2: %d blocks, want 2", got)
	}
	apply(m, removed(999))
	if m.Stats.UnknownRemovals != 1 {
		t.Errorf("UnknownRemovals %d, want 1", m.Stats.UnknownRemovals)
	}
	apply(m, events.Event{Kind: events.AllBlocksCleared})
	if m.Len() != 0 || mirrored(m, chain) != 0 {
		t.Errorf("after AllBlocksCleared: %d blocks, %d held", m.Len(), mirrored(m, chain))
	}
}

func TestMirrorSaltFromExtraKeys(t *testing.T) {
	m := NewMirror(mirrorBS, mirrorSeed, 100, 0)
	tokens := seq(7, 8)
	ev := stored(0, 1, tokens)
	ev.ExtraKeys = []events.RawValue{{0x91, 0xa4, 's', 'a', 'l', 't'}, {0xc0}}
	apply(m, ev)
	if got := mirrored(m, ours("salt", tokens...)); got != 2 {
		t.Errorf("salted chain: %d blocks held, want 2", got)
	}
	if got := mirrored(m, ours("", tokens...)); got != 0 {
		t.Errorf("unsalted chain: %d blocks held, want 0", got)
	}
}

// TestMirrorSaltFromSGLangMetadata: SGLang (0.5.18 and later) names a
// salted request's cache_salt in its BlockStored metadata; the chain is
// that salt's, whatever salted prompt routing last sent with those tokens,
// and a store without one is left to the routed roots as before.
func TestMirrorSaltFromSGLangMetadata(t *testing.T) {
	tokens := seq(7, 8)
	for _, tc := range []struct {
		name         string
		salt         string
		hasSalt      bool
		routedSalted bool // a prompt salted "other" with these tokens was routed here
		want         string
	}{
		{"salted", "tenant", true, false, "tenant"},
		{"salted_other_routed", "tenant", true, true, "tenant"},
		{"empty_salt", "", true, true, ""},
		{"none_routed", "", false, true, "other"},
		{"none", "", false, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMirror(mirrorBS, mirrorSeed, 100, 0)
			if tc.routedSalted {
				m.noteSaltedRoot(TokenKey(u32(tokens[:mirrorBS])), ours("other", tokens...)[0], mirrorSeed("", ""))
			}
			ev := stored(0, 1, tokens)
			ev.CacheSalt, ev.HasCacheSalt = tc.salt, tc.hasSalt
			apply(m, ev)
			for _, salt := range []string{"tenant", "other", ""} {
				want := 0
				if salt == tc.want {
					want = 2
				}
				if got := mirrored(m, ours(salt, tokens...)); got != want {
					t.Errorf("chain salted %q: %d blocks held, want %d", salt, got, want)
				}
			}
		})
	}
}

// TestMirrorSaltedRootWithoutExtraKeys: events that cannot carry a salt
// (no extra keys at all: SGLang's) store a salted prompt's first block
// under its tokens alone; given the salted root routing sent there, the
// mirror keys the chain as the salted prompt's, not an unsalted one's.
// Events that carry extra keys say the salt themselves, and another first
// block is unsalted as before.
func TestMirrorSaltedRootWithoutExtraKeys(t *testing.T) {
	m := NewMirror(mirrorBS, mirrorSeed, 100, 0)
	salted, other := seq(7, 8), seq(40, 8)
	base := mirrorSeed("", "")
	m.noteSaltedRoot(TokenKey(u32(salted[:mirrorBS])), ours("tenant", salted...)[0], base)
	apply(m, stored(0, 1, salted), stored(0, 10, other))
	if got := mirrored(m, ours("tenant", salted...)); got != 2 {
		t.Errorf("salted chain: %d blocks held, want 2", got)
	}
	if got := mirrored(m, ours("", salted...)); got != 0 {
		t.Errorf("the same tokens unsalted: %d blocks held, want 0", got)
	}
	if got := mirrored(m, ours("", other...)); got != 2 {
		t.Errorf("another prompt, unsalted: %d blocks held, want 2", got)
	}
	// With extra keys, an unsalted store of the same tokens is unsalted.
	m = NewMirror(mirrorBS, mirrorSeed, 100, 0)
	m.noteSaltedRoot(TokenKey(u32(salted[:mirrorBS])), ours("tenant", salted...)[0], base)
	ev := stored(0, 1, salted)
	ev.ExtraKeys = []events.RawValue{{0xc0}, {0xc0}}
	apply(m, ev)
	if got := mirrored(m, ours("", salted...)); got != 2 {
		t.Errorf("unsalted by its extra keys: %d blocks held, want 2", got)
	}
	// An adapter's store of the same tokens is the adapter's, not the
	// salted base prompt's (found by a review); an adapter's own salted
	// prompt keys its store.
	adapterChain := func(salt string) []blockhash.Hash {
		return blockhash.Extend(nil, mirrorSeed("lora-a", salt), salted, mirrorBS)
	}
	for _, hinted := range []bool{false, true} {
		m = NewMirror(mirrorBS, mirrorSeed, 100, 0)
		m.noteSaltedRoot(TokenKey(u32(salted[:mirrorBS])), ours("tenant", salted...)[0], base)
		if hinted {
			m.noteSaltedRoot(TokenKey(u32(salted[:mirrorBS])), adapterChain("tenant")[0], mirrorSeed("lora-a", ""))
		}
		ev = stored(0, 1, salted)
		ev.LoRAName, ev.HasLoRAName = "lora-a", true
		apply(m, ev)
		want := adapterChain("")
		if hinted {
			want = adapterChain("tenant")
		}
		if got, base := mirrored(m, want), mirrored(m, ours("tenant", salted...)); got != 2 || base != 0 {
			t.Errorf("an adapter's store (its salted prompt routed %v): %d of its blocks held, %d of the salted base prompt's; want 2 and 0", hinted, got, base)
		}
	}
}

// TestMirrorSaltedRootsBounded: the salted roots a mirror keeps are the
// newest maxSaltedRoots.
func TestMirrorSaltedRootsBounded(t *testing.T) {
	m := NewMirror(mirrorBS, mirrorSeed, 100, 0)
	for i := range maxSaltedRoots + 10 {
		m.noteSaltedRoot(uint64(i), blockhash.Hash{Lo: uint64(i)}, blockhash.Hash{})
		m.noteSaltedRoot(uint64(i), blockhash.Hash{Lo: uint64(i) + 1}, blockhash.Hash{}) // again: replaced, not added
	}
	if len(m.saltedRoots) != maxSaltedRoots || len(m.saltedOrder) != maxSaltedRoots {
		t.Fatalf("%d roots, %d in order; want %d", len(m.saltedRoots), len(m.saltedOrder), maxSaltedRoots)
	}
	if _, ok := m.saltedRoots[9]; ok {
		t.Error("an old root kept past the bound")
	}
	if r, ok := m.saltedRoots[maxSaltedRoots+9]; !ok || r.root.Lo != maxSaltedRoots+10 {
		t.Errorf("the newest root: %v, %v", r, ok)
	}
}

func TestMirrorCountsCopies(t *testing.T) {
	m := NewMirror(mirrorBS, mirrorSeed, 100, 0)
	tokens := seq(1, 4)
	// Two requests computed the same block at once: stored twice, each
	// copy removed on its own.
	apply(m, stored(0, 5, tokens), stored(0, 5, tokens))
	apply(m, removed(5))
	if !m.GatewayHashes()[ours("", tokens...)[0]] {
		t.Fatal("one copy removed of two: the block must still be held")
	}
	apply(m, removed(5))
	if m.GatewayHashes()[ours("", tokens...)[0]] || m.Len() != 0 {
		t.Fatal("both copies removed: the block must be gone")
	}
}

func TestMirrorOrphansJoinTheirParent(t *testing.T) {
	m := NewMirror(mirrorBS, mirrorSeed, 100, 0)
	tokens := seq(1, 16)
	chain := ours("", tokens...)
	// Blocks 2 and 3 arrive before the blocks they extend, as when a
	// subscriber starts mid-stream and replays later.
	apply(m, stored(11, 12, tokens[8:16]))
	if m.Orphans() != 2 || mirrored(m, chain) != 0 {
		t.Fatalf("orphans %d, held %d; want 2 orphans, nothing keyed", m.Orphans(), mirrored(m, chain))
	}
	apply(m, stored(0, 10, tokens[:8]))
	if m.Orphans() != 0 {
		t.Errorf("orphans %d after their parent arrived, want 0", m.Orphans())
	}
	if got := mirrored(m, chain); got != 4 {
		t.Errorf("held %d leading blocks, want 4", got)
	}
	// Removing an orphan's copy works by the engine's hash alone.
	apply(m, removed(13))
	if got := mirrored(m, chain); got != 3 {
		t.Errorf("held %d after removing block 3, want 3", got)
	}
}

func TestMirrorBoundsOrphans(t *testing.T) {
	m := NewMirror(mirrorBS, mirrorSeed, 3, 0)
	for i := range 10 {
		apply(m, stored(uint64(1000+i), uint64(i+1), seq(i*4, 4)))
	}
	if m.Orphans() > 3 {
		t.Errorf("%d orphans kept, bound 3", m.Orphans())
	}
	if m.Stats.OrphansDropped < 7 {
		t.Errorf("OrphansDropped %d, want at least 7", m.Stats.OrphansDropped)
	}
	none := NewMirror(mirrorBS, mirrorSeed, 0, 0)
	apply(none, stored(50, 1, seq(0, 4)))
	if none.Len() != 0 || none.Stats.OrphansDropped != 1 {
		t.Errorf("with no orphans allowed: %d blocks kept, %d dropped", none.Len(), none.Stats.OrphansDropped)
	}
}

func TestMirrorSkipsWhatItCannotKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		ev   events.Event
	}{
		{"other_block_size", func() events.Event { e := stored(0, 1, seq(0, 8)); e.BlockSize = 8; return e }()},
		{"short_tokens", func() events.Event { e := stored(0, 1, seq(0, 8)); e.Tokens = e.Tokens[:7]; return e }()},
		{"cpu_medium", func() events.Event { e := stored(0, 1, seq(0, 8)); e.Medium = "CPU"; return e }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMirror(mirrorBS, mirrorSeed, 10, 0)
			apply(m, tc.ev)
			if m.Len() != 0 || m.Stats.Skipped == 0 {
				t.Errorf("kept %d blocks, skipped %d", m.Len(), m.Stats.Skipped)
			}
		})
	}
}

func TestMirrorBoundsBlocksAndTellsTransitions(t *testing.T) {
	m := NewMirror(mirrorBS, mirrorSeed, 10, 3)
	var held, dropped []blockhash.Hash
	m.held = func(h blockhash.Hash) { held = append(held, h) }
	m.dropped = func(h blockhash.Hash) { dropped = append(dropped, h) }
	tokens := seq(1, 20)
	apply(m, stored(0, 1, tokens)) // five blocks, room for three
	if m.Len() != 3 || m.Stats.Overflow != 2 {
		t.Fatalf("kept %d blocks with %d refused; want 3 and 2", m.Len(), m.Stats.Overflow)
	}
	chain := ours("", tokens...)
	if len(held) != 3 || held[0] != chain[0] || held[2] != chain[2] {
		t.Fatalf("held %v, want the first three of the chain", held)
	}
	apply(m, stored(0, 1, tokens[:4])) // a second copy: no transition
	apply(m, removed(1))
	if len(dropped) != 0 {
		t.Fatalf("dropped %v while a copy remains", dropped)
	}
	apply(m, removed(1))
	if len(dropped) != 1 || dropped[0] != chain[0] {
		t.Fatalf("dropped %v, want block 0", dropped)
	}
	apply(m, events.Event{Kind: events.AllBlocksCleared})
	if len(dropped) != 3 {
		t.Errorf("after a clear %d drops, want 3", len(dropped))
	}
}

// naiveMirror is the mirror's reference model, written for clarity: every
// present block with its copies, and whether it is keyed (its gateway hash
// known: stored at the root, or after a keyed parent, or joined when its
// parent was keyed later).
type naiveMirror struct {
	copies map[uint64]int
	keyed  map[uint64]bool
	parent map[uint64]uint64 // of orphans waiting, by key
	// linked is the block each keyed block was keyed after (none for a
	// chain's first); holes is set once a keyed block went while one
	// keyed after it stayed, until a clear (Mirror.Holes).
	linked map[uint64]uint64
	holes  bool
}

func newNaiveMirror() *naiveMirror {
	return &naiveMirror{copies: map[uint64]int{}, keyed: map[uint64]bool{}, parent: map[uint64]uint64{}, linked: map[uint64]uint64{}}
}

func (n *naiveMirror) clear() {
	clear(n.copies)
	clear(n.keyed)
	clear(n.parent)
	clear(n.linked)
	n.holes = false
}

func (n *naiveMirror) store(keys []uint64, parent uint64, hasParent bool) {
	for j, k := range keys {
		pk, ok := parent, hasParent
		if j > 0 {
			pk, ok = keys[j-1], true
		}
		n.copies[k]++
		switch {
		case n.keyed[k]:
		case !ok || (n.copies[pk] > 0 && n.keyed[pk]):
			n.keyed[k] = true
			if ok {
				n.linked[k] = pk
			}
			delete(n.parent, k)
			n.joinUnder(k)
		default:
			if _, waiting := n.parent[k]; !waiting {
				n.parent[k] = pk
			}
		}
	}
}

func (n *naiveMirror) joinUnder(k uint64) {
	for c, p := range n.parent {
		if p == k && n.copies[c] > 0 {
			n.keyed[c] = true
			n.linked[c] = k
			delete(n.parent, c)
			n.joinUnder(c)
		}
	}
}

func (n *naiveMirror) remove(k uint64) {
	n.removeBatch(k)
}

// removeBatch removes keys in order in one batch: a hole is a keyed block
// gone while a block keyed after it is held when the batch ends.
func (n *naiveMirror) removeBatch(keys ...uint64) {
	gone := map[uint64]bool{}
	for _, k := range keys {
		if n.copies[k] == 0 {
			continue
		}
		n.copies[k]--
		if n.copies[k] == 0 {
			gone[k] = n.keyed[k]
			delete(n.linked, k)
			delete(n.copies, k)
			delete(n.keyed, k)
			delete(n.parent, k)
		}
	}
	for c, p := range n.linked {
		if gone[p] && n.keyed[c] {
			n.holes = true
		}
	}
}

// TestMirrorAgainstModel applies random stores (with parents known, not
// yet seen or gone), copies, removals and clears, over chains of blocks
// whose gateway hashes the test knows, and compares every block's copies
// and every keyed block's gateway hash with the model.
func TestMirrorAgainstModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		const chains, depth = 4, 4
		// Block (c, d): engine key 100*c+d+1, tokens 4 of its own.
		key := func(c, d int) uint64 { return uint64(100*c + d + 1) }
		tokens := func(c, d int) []int { return seq(1000*c+10*d, mirrorBS) }
		gw := map[uint64]blockhash.Hash{}
		for c := range chains {
			var all []int
			for d := range depth {
				all = append(all, tokens(c, d)...)
			}
			for d, h := range ours("", all...) {
				gw[key(c, d)] = h
			}
		}
		m := NewMirror(mirrorBS, mirrorSeed, 1000, 0)
		model := newNaiveMirror()
		for range rapid.IntRange(1, 40).Draw(rt, "steps") {
			c := rapid.IntRange(0, chains-1).Draw(rt, "chain")
			switch rapid.IntRange(0, 6).Draw(rt, "op") {
			case 0, 1, 2: // store blocks from..to-1 of chain c in one event
				from := rapid.IntRange(0, depth-1).Draw(rt, "from")
				to := rapid.IntRange(from+1, depth).Draw(rt, "to")
				var toks []int
				var keys []uint64
				for d := from; d < to; d++ {
					toks = append(toks, tokens(c, d)...)
					keys = append(keys, key(c, d))
				}
				ev := stored(0, key(c, from), toks)
				if from > 0 {
					ev.Parent, ev.HasParent = events.UintHash(key(c, from-1)), true
				}
				apply(m, ev)
				model.store(keys, key(c, from-1), from > 0)
			case 3, 4:
				d := rapid.IntRange(0, depth-1).Draw(rt, "depth")
				apply(m, removed(key(c, d)))
				model.remove(key(c, d))
			case 5:
				apply(m, events.Event{Kind: events.AllBlocksCleared})
				model.clear()
			case 6: // blocks from..to-1 removed in one batch, first to last, as SGLang evicts a node
				from := rapid.IntRange(0, depth-1).Draw(rt, "from")
				to := rapid.IntRange(from+1, depth).Draw(rt, "to")
				var evs []events.Event
				var keys []uint64
				for d := from; d < to; d++ {
					evs = append(evs, removed(key(c, d)))
					keys = append(keys, key(c, d))
				}
				apply(m, evs...)
				model.removeBatch(keys...)
			}
			if m.Holes() != model.holes {
				rt.Fatalf("holes %v, model %v", m.Holes(), model.holes)
			}
			got := m.Blocks()
			for k, n := range model.copies {
				if got[k] != n {
					rt.Fatalf("block %d: %d copies, model %d", k, got[k], n)
				}
			}
			if len(got) != len(model.copies) {
				rt.Fatalf("mirror holds %d blocks, model %d", len(got), len(model.copies))
			}
			held := m.GatewayHashes()
			for k, h := range gw {
				if held[h] != model.keyed[k] {
					rt.Fatalf("block %d: held under the gateway's hash %v, model %v", k, held[h], model.keyed[k])
				}
			}
			var digest uint64
			for k, keyed := range model.keyed {
				if keyed {
					digest += digestMix(gw[k])
				}
			}
			if m.Digest() != digest {
				rt.Fatalf("digest %x, model %x", m.Digest(), digest)
			}
			if m.Orphans() != len(model.copies)-len(model.keyed) {
				rt.Fatalf("%d orphans, model %d", m.Orphans(), len(model.copies)-len(model.keyed))
			}
		}
	})
}

// TestMirrorDigest: two mirrors that end up holding the same blocks have
// the same digest whatever order the blocks came in (a child before its
// parent, as an orphan), and a block more or less changes it.
func TestMirrorDigest(t *testing.T) {
	tokens := seq(1, 16)
	a := NewMirror(mirrorBS, mirrorSeed, 100, 0)
	b := NewMirror(mirrorBS, mirrorSeed, 100, 0)
	if a.Digest() != 0 {
		t.Fatalf("empty mirror's digest %x, want 0", a.Digest())
	}
	apply(a, stored(0, 1, tokens[:8]), stored(2, 3, tokens[8:]))
	apply(b, stored(2, 3, tokens[8:])) // an orphan: not in the digest yet
	if b.Digest() != 0 || b.Orphans() != 2 {
		t.Fatalf("orphans only: digest %x, %d orphans; want 0, 2", b.Digest(), b.Orphans())
	}
	apply(b, stored(0, 1, tokens[:8]))
	if a.Digest() != b.Digest() || a.Digest() == 0 {
		t.Fatalf("same blocks in another order: digests %x and %x", a.Digest(), b.Digest())
	}
	apply(b, stored(0, 1, tokens[:4])) // a second copy: the same blocks
	if a.Digest() != b.Digest() {
		t.Fatalf("a second copy changed the digest: %x, %x", a.Digest(), b.Digest())
	}
	apply(a, removed(4))
	if a.Digest() == b.Digest() {
		t.Fatal("a block less, the same digest")
	}
	apply(a, stored(3, 4, tokens[12:]))
	if a.Digest() != b.Digest() {
		t.Fatalf("the block back, digests %x and %x", a.Digest(), b.Digest())
	}
	apply(a, events.Event{Kind: events.AllBlocksCleared})
	if a.Digest() != 0 {
		t.Fatalf("cleared mirror's digest %x, want 0", a.Digest())
	}
}

// TestAdapterKnownByNumberOnly: an older engine names an adapter's blocks
// only by lora_id. They are the adapter's, not the base model's: the base
// prompt of the same tokens is not predicted from them, and evicting them
// leaves the base model's own copy held.
func TestAdapterKnownByNumberOnly(t *testing.T) {
	m := NewMirror(mirrorBS, mirrorSeed, 0, 0)
	base := ours("", seq(1, 8)...)
	adapter := stored(0, 100, seq(1, 8))
	adapter.LoRAID, adapter.HasLoRAID = 3, true
	apply(m, adapter)
	if got := mirrored(m, base); got != 0 {
		t.Fatalf("the base prompt predicted %d blocks from an adapter's", got)
	}
	apply(m, stored(0, 1, seq(1, 8)))
	apply(m, removed(100), removed(101))
	if got := mirrored(m, base); got != 2 {
		t.Errorf("the base prompt's blocks after the adapter's were evicted: %d held, want 2", got)
	}
	named := stored(0, 200, seq(1, 8))
	named.LoRAID, named.HasLoRAID, named.LoRAName, named.HasLoRAName = 3, true, "sql-lora", true
	apply(m, named)
	if got := mirrored(m, blockhash.Extend(nil, mirrorSeed("sql-lora", ""), seq(1, 8), mirrorBS)); got != 2 {
		t.Errorf("a named adapter's prompt: %d held, want 2", got)
	}
}
