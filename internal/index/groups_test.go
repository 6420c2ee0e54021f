package index

import (
	"fmt"
	"testing"
	"unsafe"

	"pgregory.net/rapid"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/events"
)

// groupSpec is one KV-cache group of a hybrid engine in these tests: its
// kind of layer and, for a sliding window, the window in tokens.
type groupSpec struct {
	kind   string
	window int64
}

// The groups of the hybrid engine most tests here play: full attention, and
// a window of 8 tokens (two blocks of 4).
var (
	full    = groupSpec{kind: "full_attention"}
	sliding = groupSpec{kind: "sliding_window", window: 8}
)

// storedIn is stored for group g of spec s.
func storedIn(g int, s groupSpec, parent, first uint64, tokens []int) events.Event {
	ev := stored(parent, first, tokens)
	ev.GroupIdx, ev.HasGroupIdx = int64(g), true
	ev.SpecKind, ev.HasSpecKind = s.kind, true
	if s.window != 0 {
		ev.SlidingWindow, ev.HasSlidingWindow = s.window, true
	}
	return ev
}

func removedFrom(g int, h uint64) events.Event {
	ev := removed(h)
	ev.GroupIdx, ev.HasGroupIdx = int64(g), true
	return ev
}

func TestGroupHit(t *testing.T) {
	const x, o = 1, 0 // held, not held
	for _, c := range []struct {
		held []uint16
		tail int
		want int
	}{
		{[]uint16{x, x, x, x}, 0, 4},
		{[]uint16{x, x, o, x}, 0, 2},
		{[]uint16{o, x, x, x}, 0, 0},
		{nil, 0, 0},
		// vLLM's own example: block size 4, window 8 (two blocks), blocks
		// [-, -, 8, 3, -, 9] hit the first four.
		{[]uint16{o, o, x, x, o, x}, 2, 4},
		{[]uint16{o, o, x, x, x, x}, 2, 6},
		{[]uint16{x, o, x, o, x, o}, 2, 1},  // no run of two: the run from the start
		{[]uint16{o, x, o, x, o, x}, 2, 0},  // no run, and none from the start
		{[]uint16{x, x, x, o, o, o}, 3, 3},  // the run from the start is a whole window
		{[]uint16{x, x, o, o, x, o}, 1, 5},  // Mamba: the last block held
		{[]uint16{o, o, o, o, o, o}, 1, 0},  // Mamba: none held
		{[]uint16{x, o, o, o, o, o}, 4, 1},  // a window longer than the run from the start
		{[]uint16{x, x, x, x, x, x}, 10, 6}, // a window longer than the prompt
	} {
		if got := groupHit(len(c.held), c.tail, func(i int) bool { return c.held[i] != 0 }); got != c.want {
			t.Errorf("groupHit(%v, tail %d) = %d, want %d", c.held, c.tail, got, c.want)
		}
	}
}

// TestHybridEngineGroups: an engine with a full-attention group and a
// sliding-window group (a window of 8 tokens: two blocks of 4) stores a
// prompt in both; the sliding-window group then loses its first four
// blocks, as vLLM evicts the blocks a window left behind first. The whole
// prompt still hits (its last two blocks are held by both), a prompt of its
// first four blocks does not. Before the mirror told groups apart it
// predicted 4 for the latter.
func TestHybridEngineGroups(t *testing.T) {
	tokens := seq(1, 6*mirrorBS)
	chain := ours("", tokens...)
	x, at := revealIndex(0)
	x.ApplyEvents(at, batchOf(storedIn(0, full, 0, 1, tokens), storedIn(1, sliding, 0, 1, tokens)))
	if d := depth(x, "e", chain); d != 6 {
		t.Fatalf("stored in both groups: depth %d, want 6", d)
	}
	x.ApplyEvents(at, batchOf(removedFrom(1, 1), removedFrom(1, 2), removedFrom(1, 3), removedFrom(1, 4)))
	if d := depth(x, "e", chain); d != 6 {
		t.Errorf("the window's group lost blocks 0-3: the whole prompt's depth %d, want 6 (blocks 4 and 5 held by both)", d)
	}
	if d := depth(x, "e", chain[:4]); d != 0 {
		t.Errorf("the window's group lost blocks 0-3: a 4-block prompt's depth %d, want 0 (its window's blocks 2 and 3 are gone)", d)
	}
	if d := depth(x, "e", chain[:5]); d != 0 {
		t.Errorf("a 5-block prompt's depth %d, want 0 (block 3 of its window is gone)", d)
	}
	// The full-attention group loses block 5: the hit is at most 5 blocks,
	// whose window (blocks 3, 4) the sliding group no longer holds whole.
	x.ApplyEvents(at, batchOf(removedFrom(0, 6)))
	if d := depth(x, "e", chain); d != 0 {
		t.Errorf("block 5 gone from the full-attention group too: depth %d, want 0", d)
	}
	// A request stores blocks 2-5 again in both groups.
	x.ApplyEvents(at, batchOf(storedIn(0, full, 2, 3, tokens[2*mirrorBS:]), storedIn(1, sliding, 2, 3, tokens[2*mirrorBS:])))
	if d := depth(x, "e", chain[:4]); d != 4 {
		t.Errorf("blocks 2-5 stored again: a 4-block prompt's depth %d, want 4", d)
	}
	x.ApplyEvents(at, batchOf(events.Event{Kind: events.AllBlocksCleared}))
	if d := depth(x, "e", chain); d != 0 {
		t.Errorf("after a clear: depth %d", d)
	}
}

// TestPlainEngineNotGrouped: an engine that stores in group 0 alone, with
// full attention, is matched by bisection alone, as before.
func TestPlainEngineNotGrouped(t *testing.T) {
	x, at := revealIndex(0)
	x.ApplyEvents(at, batchOf(storedIn(0, groupSpec{kind: "full_attention"}, 0, 1, seq(1, 4*mirrorBS))))
	if g := x.grouped.Load(); g != nil {
		t.Fatalf("a one-group engine is checked group by group: %v", *g)
	}
	x.ApplyEvents(at, batchOf(storedIn(1, groupSpec{kind: "mamba"}, 0, 1, seq(1, 4*mirrorBS))))
	if g := x.grouped.Load(); g == nil || len(*g) != 1 {
		t.Fatalf("a second group is not checked")
	}
	x.Forget("e")
	if g := x.grouped.Load(); g != nil {
		t.Fatalf("a forgotten replica is still checked: %v", *g)
	}
}

// hybridModel is the naive reference for a hybrid engine: each group's
// copies of each block, and the hit vLLM computes from them.
type hybridModel struct {
	specs  []groupSpec
	copies []map[uint64]int // by group, by engine key
}

func newHybridModel(specs []groupSpec) *hybridModel {
	m := &hybridModel{specs: specs}
	m.clear()
	return m
}

func (m *hybridModel) clear() {
	m.copies = make([]map[uint64]int, len(m.specs))
	for g := range m.copies {
		m.copies[g] = map[uint64]int{}
	}
}

// hit is how many of keys, a prompt's blocks, the engine would hit:
// every group's rule in turn until none lowers it.
func (m *hybridModel) hit(keys []uint64) int {
	n := len(keys)
	for {
		next := n
		for g, s := range m.specs {
			next = m.groupHit(g, s, keys[:next])
		}
		if next == n {
			return n
		}
		n = next
	}
}

func (m *hybridModel) groupHit(g int, s groupSpec, keys []uint64) int {
	has := func(i int) bool { return m.copies[g][keys[i]] > 0 }
	need := 0
	switch s.kind {
	case "mamba":
		need = 1
	case "sliding_window":
		need = int(max((s.window-1+mirrorBS-1)/mirrorBS, 1))
	}
	if need == 0 {
		for i := range keys {
			if !has(i) {
				return i
			}
		}
		return len(keys)
	}
	// The longest prefix length L whose last min(need, L) blocks are held.
	for l := len(keys); l > 0; l-- {
		ok := true
		for i := max(l-need, 0); i < l; i++ {
			ok = ok && has(i)
		}
		if ok {
			return l
		}
	}
	return 0
}

// TestHybridEngineAgainstModel drives an events-sourced replica of a
// hybrid engine (full attention, a sliding window of 2-13 tokens, and
// maybe a Mamba group) as vLLM would: a request hits what every group
// allows and stores the rest of its blocks in every group, duplicates
// included; evictions take one group's copy of any block. Match's depth
// for every chain, whole and cut short, must be the engine's hit.
func TestHybridEngineAgainstModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		const chains, blocks = 3, 7
		specs := []groupSpec{{kind: "full_attention"}, {kind: "sliding_window", window: rapid.Int64Range(2, 13).Draw(rt, "window")}}
		if rapid.Bool().Draw(rt, "mamba") {
			specs = append(specs, groupSpec{kind: "mamba"})
		}
		key := func(c, d int) uint64 { return uint64(100*c + d + 1) }
		tokens := func(c, d int) []int { return seq(1000*c+10*d, mirrorBS) }
		var all [chains][]int
		var keys [chains][]uint64
		for c := range chains {
			for d := range blocks {
				all[c] = append(all[c], tokens(c, d)...)
				keys[c] = append(keys[c], key(c, d))
			}
		}
		x, at := revealIndex(0)
		model := newHybridModel(specs)
		for range rapid.IntRange(1, 40).Draw(rt, "steps") {
			c := rapid.IntRange(0, chains-1).Draw(rt, "chain")
			switch rapid.IntRange(0, 6).Draw(rt, "op") {
			case 0, 1, 2: // a request for the chain's first n blocks
				n := rapid.IntRange(1, blocks).Draw(rt, "blocks")
				h := model.hit(keys[c][:n])
				if h == n {
					continue
				}
				parent := uint64(0)
				if h > 0 {
					parent = key(c, h-1)
				}
				var batch []events.Event
				for g, s := range specs {
					batch = append(batch, storedIn(g, s, parent, key(c, h), all[c][h*mirrorBS:n*mirrorBS]))
					for d := h; d < n; d++ {
						model.copies[g][key(c, d)]++
					}
				}
				x.ApplyEvents(at, batchOf(batch...))
			case 3, 4, 5: // an eviction of one group's copy
				g := rapid.IntRange(0, len(specs)-1).Draw(rt, "group")
				d := rapid.IntRange(0, blocks-1).Draw(rt, "block")
				if model.copies[g][key(c, d)] == 0 {
					continue
				}
				model.copies[g][key(c, d)]--
				x.ApplyEvents(at, batchOf(removedFrom(g, key(c, d))))
			case 6:
				x.ApplyEvents(at, batchOf(events.Event{Kind: events.AllBlocksCleared}))
				model.clear()
			}
			if err := groupsOf(x, "e").checkFilter(); err != nil {
				rt.Fatal(err)
			}
			for c := range chains {
				chain := ours("", all[c]...)
				for n := 1; n <= blocks; n++ {
					if got, want := depth(x, "e", chain[:n]), model.hit(keys[c][:n]); got != want {
						rt.Fatalf("chain %d, %d blocks: Match says %d, the engine would hit %d", c, n, got, want)
					}
				}
			}
		}
	})
}

// BenchmarkGroupedMatch is Match's cost for a hybrid engine's replica
// against a plain one, on a 256- or 2,048-block prompt held whole: the plain one
// bisects; the hybrid one (a full-attention group, and a window of 128
// tokens: 32 blocks of 4) then checks the window's group, which lost the
// first half of the prompt, as vLLM evicts what a window left behind
// first; and with the full-attention group lacking as many blocks of other
// prompts, which makes it look the prompt's blocks up (those its filter
// cannot clear).
func BenchmarkGroupedMatch(b *testing.B) {
	for _, blocks := range []int{256, 2048} {
		for _, engine := range []string{"plain", "grouped", "grouped-full-lacking"} {
			b.Run(fmt.Sprintf("%s/%d", engine, blocks), func(b *testing.B) { benchGroupedMatch(b, engine, blocks) })
		}
	}
}

func benchGroupedMatch(b *testing.B, engine string, blocks int) {
	tokens := seq(1, blocks*mirrorBS)
	chain := ours("", tokens...)
	x, at := revealIndex(0)
	evs := []events.Event{storedIn(0, full, 0, 1, tokens)}
	if engine != "plain" {
		evs = append(evs, storedIn(1, groupSpec{kind: "sliding_window", window: 128}, 0, 1, tokens))
		for k := range blocks / 2 {
			evs = append(evs, removedFrom(1, uint64(k+1)))
		}
	}
	if engine == "grouped-full-lacking" {
		// As many blocks of another prompt, which the window's group
		// alone holds.
		evs = append(evs, storedIn(1, groupSpec{kind: "sliding_window", window: 128}, 0, 1<<20, seq(1<<24, blocks*mirrorBS)))
	}
	x.ApplyEvents(at, batchOf(evs...))
	dst := make([]int, 1)
	ids := []string{"e"}
	b.ResetTimer()
	for range b.N {
		dst = x.Match(dst, ids, chain, len(chain)*mirrorBS+1, mirrorBS)
	}
	if dst[0] != blocks {
		b.Fatalf("depth %d", dst[0])
	}
}

// TestGroupedMatchRacesEvents: Match reads a hybrid engine's group counts
// while its batches change them (the race detector watches), and never
// says more than the prompt's length; once the batches end, it says what
// they left.
func TestGroupedMatchRacesEvents(t *testing.T) {
	tokens := seq(1, 8*mirrorBS)
	chain := ours("", tokens...)
	x, at := revealIndex(0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 300 {
			if i%50 == 49 {
				x.ApplyEvents(at, batchOf(events.Event{Kind: events.AllBlocksCleared}))
			}
			x.ApplyEvents(at, batchOf(storedIn(0, full, 0, 1, tokens), storedIn(1, sliding, 0, 1, tokens)))
			x.ApplyEvents(at, batchOf(removedFrom(1, uint64(1+i%8)), removedFrom(0, 8), removedFrom(1, 8)))
		}
	}()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		if d := depth(x, "e", chain); d < 0 || d > len(chain) {
			t.Fatalf("depth %d of a %d-block prompt", d, len(chain))
		}
	}
	// The last batches: a clear (i = 299), then both groups store all
	// eight blocks and lose block 7, and the window's group block 3.
	if d := depth(x, "e", chain); d != 7 {
		t.Errorf("after the batches: depth %d, want 7", d)
	}
	if d := depth(x, "e", chain[:4]); d != 3 {
		t.Errorf("after the batches, a 4-block prompt: depth %d, want 3 (block 3 gone from the window's group, blocks 1 and 2 held)", d)
	}
}

// windowEvicted is an index whose replica "e" follows a hybrid engine that
// stored tokens, an 8-block prompt of chain, in both its groups, and then
// evicted the window group's copies of all of them; with the index's clock
// and the replica's attachment.
func windowEvicted() (x *Approx, clock *int64, at Attachment, tokens []int, chain []blockhash.Hash) {
	tokens = seq(1, 8*mirrorBS)
	chain = ours("", tokens...)
	x, clock = eventsIndex()
	x.SetSource("e", true)
	at = attached(x, "e")
	x.ApplyEvents(at, batchOf(storedIn(0, full, 0, 1, tokens), storedIn(1, sliding, 0, 1, tokens)))
	var evicted []events.Event
	for k := range 8 {
		evicted = append(evicted, removedFrom(1, uint64(k+1)))
	}
	x.ApplyEvents(at, batchOf(evicted...))
	return x, clock, at, tokens, chain
}

// TestHybridSpeculation: a prompt routed to a hybrid engine whose window
// group lost blocks the full-attention group still holds is predicted, for
// the speculative TTL, as the engine will hold it once it ran: the
// window's blocks before its hit and all after stored again, in every
// group (a prompt sent right behind it hits them). Those before the
// window stay as the events say. A window group's store ends its part of
// the speculation; what the events say then holds even within the TTL.
func TestHybridSpeculation(t *testing.T) {
	x, clock, at, tokens, chain := windowEvicted()
	if d := depth(x, "e", chain); d != 0 {
		t.Fatalf("the window group evicted: depth %d, want 0", d)
	}
	x.Record("e", chain[:6]) // routed: it hits nothing, and stores blocks 0-5 in both groups
	for _, c := range []struct{ n, want int }{{6, 6}, {4, 4}, {8, 6}} {
		if d := depth(x, "e", chain[:c.n]); d != c.want {
			t.Errorf("routed 6 blocks: a %d-block prompt's depth %d, want %d", c.n, d, c.want)
		}
	}
	// The engine stores blocks 0-5 in the window group, then evicts 0-3
	// there: the events say it, within the TTL.
	x.ApplyEvents(at, batchOf(storedIn(1, sliding, 0, 1, tokens[:6*mirrorBS])))
	x.ApplyEvents(at, batchOf(removedFrom(1, 1), removedFrom(1, 2), removedFrom(1, 3), removedFrom(1, 4)))
	if d := depth(x, "e", chain[:4]); d != 0 {
		t.Errorf("the window group stored and evicted blocks 0-3: a 4-block prompt's depth %d, want 0", d)
	}
	if d := depth(x, "e", chain[:6]); d != 6 {
		t.Errorf("blocks 4 and 5 held by both groups: a 6-block prompt's depth %d, want 6", d)
	}

	// A prompt routed after a hit: the window group will hold the two
	// blocks before the hit and those after, not the ones before that.
	x.ApplyEvents(at, batchOf(events.Event{Kind: events.AllBlocksCleared}))
	x.ApplyEvents(at, batchOf(storedIn(0, full, 0, 1, tokens), storedIn(1, sliding, 0, 1, tokens)))
	x.ApplyEvents(at, batchOf(removedFrom(1, 1), removedFrom(1, 2), removedFrom(1, 3), removedFrom(1, 8)))
	// The window group holds blocks 3-6: an 8-block prompt hits 7.
	x.Record("e", chain)
	if d := depth(x, "e", chain); d != 8 {
		t.Errorf("routed whole: depth %d, want 8 (block 7 stored again in both groups)", d)
	}
	if d := depth(x, "e", chain[:3]); d != 0 {
		t.Errorf("routed whole: a 3-block prompt's depth %d, want 0 (the window group's blocks 1 and 2 neither reused nor stored)", d)
	}
	*clock += int64(DefaultSpeculativeTTL)
	if d := depth(x, "e", chain); d != 7 {
		t.Errorf("after the TTL: depth %d, want 7", d)
	}
}

// TestHybridGroupsLearnedFromStores: the mirror learns an engine's groups
// from its stores, so what it predicts must not depend on which of them it
// saw first, nor on groups an engine before a restart had. Blocks group 0
// stored before the first store that named another group are group 0's
// alone (they predicted 6 blocks of 4 where vLLM, whose Mamba or window
// group lacks them, hits none); an engine started again with one group is
// predicted by that group alone (the old window group's rule, kept across
// the purge, made every prompt 0), while one that cleared its own cache
// keeps its groups.
func TestHybridGroupsLearnedFromStores(t *testing.T) {
	full := groupSpec{kind: "full_attention"}
	tokens := seq(1, 8*mirrorBS)
	for _, c := range []struct {
		name   string
		before []events.Event // a batch, then a purge (an engine restart) when purge
		purge  bool
		batch  []events.Event
		blocks int // the prompt's blocks
		want   int
	}{
		{name: "Mamba stores the last block alone",
			batch:  []events.Event{storedIn(0, full, 0, 1, tokens), storedIn(1, groupSpec{kind: "mamba"}, 7, 8, tokens[7*mirrorBS:])},
			blocks: 6, want: 0},
		{name: "Mamba's last block",
			batch:  []events.Event{storedIn(0, full, 0, 1, tokens), storedIn(1, groupSpec{kind: "mamba"}, 7, 8, tokens[7*mirrorBS:])},
			blocks: 8, want: 8},
		{name: "a window group stores the last two blocks",
			batch:  []events.Event{storedIn(0, full, 0, 1, tokens), storedIn(1, groupSpec{kind: "sliding_window", window: 8}, 5, 6, tokens[5*mirrorBS:])},
			blocks: 5, want: 0},
		{name: "a second full-attention group stores from block 3",
			batch:  []events.Event{storedIn(0, full, 0, 1, tokens), storedIn(2, full, 3, 4, tokens[3*mirrorBS:])},
			blocks: 8, want: 0},
		{name: "a window group naming no window needs every block",
			batch:  []events.Event{storedIn(0, full, 0, 1, tokens), storedIn(1, groupSpec{kind: "sliding_window"}, 5, 6, tokens[5*mirrorBS:])},
			blocks: 8, want: 0},
		{name: "a window group naming a window below 1 needs every block",
			batch:  []events.Event{storedIn(0, full, 0, 1, tokens), storedIn(1, groupSpec{kind: "sliding_window", window: -5}, 5, 6, tokens[5*mirrorBS:])},
			blocks: 8, want: 0},
		{name: "both groups store every block",
			batch:  []events.Event{storedIn(0, full, 0, 1, tokens), storedIn(1, groupSpec{kind: "mamba"}, 0, 1, tokens)},
			blocks: 6, want: 6},
		{name: "restarted with one group",
			before: []events.Event{storedIn(0, full, 0, 1, tokens), storedIn(1, groupSpec{kind: "sliding_window", window: 8}, 0, 1, tokens)},
			purge:  true,
			batch:  []events.Event{storedIn(0, full, 0, 1, tokens)},
			blocks: 8, want: 8},
		{name: "restarted with one group, servers naming no kind",
			before: []events.Event{storedIn(0, full, 0, 1, tokens), storedIn(1, groupSpec{kind: "mamba"}, 0, 1, tokens)},
			purge:  true,
			batch:  []events.Event{stored(0, 1, tokens)},
			blocks: 8, want: 8},
		{name: "cleared by the engine, a group that has not stored since holds nothing",
			before: []events.Event{storedIn(0, full, 0, 1, tokens), storedIn(1, groupSpec{kind: "mamba"}, 0, 1, tokens), {Kind: events.AllBlocksCleared}},
			batch:  []events.Event{storedIn(0, full, 0, 1, tokens)},
			blocks: 8, want: 0},
		{name: "restarted with the same groups",
			before: []events.Event{storedIn(0, full, 0, 1, tokens), storedIn(1, groupSpec{kind: "mamba"}, 0, 1, tokens)},
			purge:  true,
			batch:  []events.Event{storedIn(0, full, 0, 1, tokens), storedIn(1, groupSpec{kind: "mamba"}, 7, 8, tokens[7*mirrorBS:])},
			blocks: 5, want: 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			x, at := revealIndex(0)
			if c.before != nil {
				x.ApplyEvents(at, batchOf(c.before...))
			}
			if c.purge {
				x.PurgeEvents(at)
			}
			x.ApplyEvents(at, batchOf(c.batch...))
			if d := depth(x, "e", ours("", tokens...)[:c.blocks]); d != c.want {
				t.Errorf("a %d-block prompt: depth %d, want %d", c.blocks, d, c.want)
			}
		})
	}
}

// groupsOf is the KV-cache groups of replica id's mirror (nil when it tells
// none apart).
func groupsOf(x *Approx, id string) *kvGroups {
	r := x.lockReplica(id)
	defer r.mu.Unlock()
	return r.ev.mirror.groups
}

// checkFilter holds lackFilter to the counts: every keyed block some
// full-attention group lacks is counted in its slot, none is missed, and
// fullLacks is their number.
func (g *kvGroups) checkFilter() error {
	if g == nil {
		return nil
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	full, n := g.fullGroups(), 0
	want := make([]int, len(g.lackFilter))
	for h, kc := range g.keyed {
		if full&^kc.held == 0 {
			continue
		}
		n++
		if len(g.lackFilter) == 0 || g.fullHolds(h) {
			return fmt.Errorf("block %v lacks full-attention groups %b, and the filter says it is held", h, full&^kc.held)
		}
		want[h.Lo&uint64(len(g.lackFilter)-1)]++
	}
	if n != g.fullLacks {
		return fmt.Errorf("fullLacks %d, counted %d", g.fullLacks, n)
	}
	for i, w := range want {
		if got := int(g.lackFilter[i]); got != w && got != 255 {
			return fmt.Errorf("filter slot %d holds %d, counted %d", i, got, w)
		}
	}
	return nil
}

// TestHybridSpeculationTakenBack: a failed attempt's record takes back
// what it made its replica's groups count as held; a later record of the
// same blocks keeps its own.
func TestHybridSpeculationTakenBack(t *testing.T) {
	x, _, _, _, chain := windowEvicted()
	tok := x.Record("e", chain)
	if d := depth(x, "e", chain); d != 8 {
		t.Fatalf("routed: depth %d, want 8", d)
	}
	x.TakeBack(tok)
	if d := depth(x, "e", chain); d != 0 {
		t.Errorf("the attempt failed: depth %d, want 0 again", d)
	}
	first := x.Record("e", chain)
	x.Record("e", chain) // a second attempt renews the speculation
	x.TakeBack(first)
	if d := depth(x, "e", chain); d != 8 {
		t.Errorf("the first of two attempts failed: depth %d, want the second's 8", d)
	}
}

// TestHybridSpeculationQueueBounded: a prompt routed to a hybrid replica
// again and again within the speculative TTL renews the same entries; the
// queue of their expiries must stay near the entries (it grew by the
// prompt's lacking blocks at every record: 2,000 records of 1,000 blocks
// queued 2,000,000 items, 48 MB, that the index's bytes did not count),
// and what Match says must not change.
func TestHybridSpeculationQueueBounded(t *testing.T) {
	const blocks = 256
	tokens := seq(1, blocks*mirrorBS)
	chain := ours("", tokens...)
	for _, c := range []struct {
		name string
		evs  []events.Event
	}{
		{"the window group alone holds the prompt", []events.Event{
			storedIn(0, full, 0, 1<<20, seq(1<<24, 4)), storedIn(1, sliding, 0, 1, tokens)}},
		{"the full-attention group alone holds the prompt", []events.Event{
			storedIn(0, full, 0, 1, tokens), storedIn(1, sliding, 0, 1<<20, seq(1<<24, 4))}},
	} {
		t.Run(c.name, func(t *testing.T) {
			x, clock := eventsIndex()
			x.SetSource("e", true)
			x.ApplyEvents(attached(x, "e"), batchOf(c.evs...))
			for range 500 {
				*clock += 1e6 // a record a millisecond, all within the TTL
				x.Record("e", chain)
			}
			if d := depth(x, "e", chain); d != blocks {
				t.Errorf("routed: depth %d, want %d", d, blocks)
			}
			r := x.lockReplica("e")
			g := r.ev.mirror.groups
			queued, entries := len(g.specQueue), len(g.spec)
			queueBytes := int64(cap(g.specQueue)) * int64(unsafe.Sizeof(specItem{}))
			r.mu.Unlock()
			if queued > 2*entries+64 {
				t.Errorf("500 records of one prompt: %d items queued for %d entries", queued, entries)
			}
			if b := x.Stats().Bytes; b < queueBytes {
				t.Errorf("Stats().Bytes %d, below the groups' queue alone (%d)", b, queueBytes)
			}
			*clock += int64(DefaultSpeculativeTTL)
			if d := depth(x, "e", chain); d != 0 {
				t.Errorf("after the TTL: depth %d, want 0", d)
			}
		})
	}
}

// BenchmarkGroupedRecord: recording a routed prompt on a hybrid replica
// speculates on its groups (kvGroups.speculate), a record a millisecond,
// all within the speculative TTL: plain, a window group holding the last
// 40 blocks, and the window group alone holding the prompt (1,000
// blocks: eventsIndex's capacity).
func BenchmarkGroupedRecord(b *testing.B) {
	for _, blocks := range []int{256, 1000} {
		for _, engine := range []string{"plain", "grouped", "grouped-full-lacking"} {
			b.Run(fmt.Sprintf("%s/%d", engine, blocks), func(b *testing.B) {
				tokens := seq(1, blocks*mirrorBS)
				chain := ours("", tokens...)
				x, clock := eventsIndex()
				x.SetSource("e", true)
				window := groupSpec{kind: "sliding_window", window: 128}
				var evs []events.Event
				switch engine {
				case "plain":
					evs = append(evs, stored(0, 1, tokens))
				case "grouped":
					evs = append(evs, storedIn(0, full, 0, 1, tokens), storedIn(1, window, 0, 1, tokens))
					for k := range blocks - 40 {
						evs = append(evs, removedFrom(1, uint64(k+1)))
					}
				default:
					evs = append(evs, storedIn(0, full, 0, 1<<20, seq(1<<24, 4)), storedIn(1, window, 0, 1, tokens))
				}
				x.ApplyEvents(attached(x, "e"), batchOf(evs...))
				b.ResetTimer()
				for range b.N {
					*clock += 1e6
					x.Record("e", chain)
				}
			})
		}
	}
}
