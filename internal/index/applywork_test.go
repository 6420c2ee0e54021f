package index

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/events"
)

// chainEvent is one BlockStored of n blocks of one token each (engine
// hashes first..first+n-1), as an engine with pages of one token sends a
// prompt.
func chainEvent(first uint64, n int) events.Event {
	ev := events.Event{Kind: events.BlockStored, BlockSize: 1, Hashes: make([]events.Hash, n), Tokens: make([]uint32, n)}
	for i := range n {
		ev.Hashes[i] = events.UintHash(first + uint64(i))
		ev.Tokens[i] = uint32(i)
	}
	return ev
}

func clears(n int) *events.Batch {
	b := &events.Batch{Events: make([]events.Event, n)}
	for i := range b.Events {
		b.Events[i].Kind = events.AllBlocksCleared
	}
	return b
}

// TestClearCostsWhatTheMirrorHolds: a clear walks only what the mirror
// holds, and leaves no table behind, so that clears of an empty mirror
// cost nothing whatever it held before. (Found by a review: the table was
// zeroed, never shrunk, and walked whole at every clear; one batch of
// 131,072 AllBlocksCleared after a store of 200,000 blocks stalled its
// replica for 115 s.)
func TestClearCostsWhatTheMirrorHolds(t *testing.T) {
	const held, storm = 200_000, 1 << 17
	m := NewMirror(1, mirrorSeed, 0, 0)
	dropped := 0
	m.dropped = func(blockhash.Hash) { dropped++ }
	empty := m.bytes()
	m.Apply(&events.Batch{Events: []events.Event{chainEvent(1, held)}})
	slots := m.blocks.bytes() / 28
	before := m.work
	m.Apply(clears(1))
	if got := m.work - before; got > uint64(slots)+1 || dropped != held {
		t.Fatalf("the first clear: %d units of work for %d blocks in %d slots, %d dropped", got, held, slots, dropped)
	}
	if m.bytes() != empty {
		t.Errorf("a cleared mirror takes %d bytes, an empty one %d", m.bytes(), empty)
	}
	before = m.work
	m.Apply(clears(storm))
	if got := m.work - before; got != storm {
		t.Errorf("%d clears of an empty mirror: %d units of work, want one each", storm, got)
	}
	// A mirror emptied by removals walks nothing either.
	m.Apply(&events.Batch{Events: []events.Event{chainEvent(1, 1000)}})
	for i := range 1000 {
		m.Apply(&events.Batch{Events: []events.Event{removedBlock(uint64(1 + i))}})
	}
	before = m.work
	m.Apply(clears(10))
	if got := m.work - before; got != 10 {
		t.Errorf("10 clears of a mirror emptied by removals: %d units of work, want 10", got)
	}
}

func removedBlock(h uint64) events.Event {
	return events.Event{Kind: events.BlockRemoved, Hashes: []events.Hash{events.UintHash(h)}}
}

// TestApplyEventsLetsTheLockGo: ApplyEvents holds the replica's lock for
// at most applyBudget units of work at a time: a clear of 200,000 blocks,
// the clear storm of TestClearCostsWhatTheMirrorHolds, 50,000 orphans
// joining at once and a store of 2^20 blocks are applied in parts, and
// the work they take in all is what the mirror holds and the batches list.
func TestApplyEventsLetsTheLockGo(t *testing.T) {
	const held, storm = 200_000, 1 << 17
	x := NewApprox(1000)
	x.Join("e")
	x.SetCapacity("e", held/4) // the mirror's bound, four times that, holds them all
	x.AttachEvents("e", EventsConfig{BlockSize: 1, Seed: mirrorSeed})
	x.SetSource("e", true)
	var holds []uint64
	x.testHookApplied = func(work uint64) { holds = append(holds, work) }
	at := attached(x, "e")
	x.ApplyEvents(at, &events.Batch{Events: []events.Event{chainEvent(1, held)}})
	if ev := x.Events("e"); ev.Mirrored != held {
		t.Fatalf("mirrored %d blocks, want %d", ev.Mirrored, held)
	}
	r := x.lockReplica("e")
	slots := r.ev.mirror.blocks.bytes() / 28
	r.mu.Unlock()
	x.ApplyEvents(at, clears(storm))
	// A chain of orphans (their first block's parent unseen), then that
	// parent: the whole chain joins.
	const orphans = held / 4
	chain := chainEvent(2, orphans)
	chain.Parent, chain.HasParent = events.UintHash(1), true
	x.ApplyEvents(at, &events.Batch{Events: []events.Event{chain}})
	x.ApplyEvents(at, &events.Batch{Events: []events.Event{chainEvent(1, 1)}})
	if ev := x.Events("e"); ev.Mirrored != orphans+1 || ev.Orphans != 0 {
		t.Fatalf("after the chain's parent: %d mirrored, %d orphans; want %d and none", ev.Mirrored, ev.Orphans, orphans+1)
	}
	x.ApplyEvents(at, &events.Batch{Events: []events.Event{chainEvent(1, events.MaxBatchHashes)}})
	var total, most uint64
	for _, w := range holds {
		total, most = total+w, max(most, w)
	}
	t.Logf("%d holds of the lock, the longest %d units of work, %d in all (a clear of the full mirror walks %d slots)", len(holds), most, total, slots)
	if most > applyBudget+1 {
		t.Errorf("one hold of the lock did %d units of work, the budget is %d", most, applyBudget)
	}
	if want := uint64(held + storm + 2*orphans + 1 + events.MaxBatchHashes + slots + 5); total > want {
		t.Errorf("the batches did %d units of work, want at most %d", total, want)
	}
	if ev := x.Events("e"); ev.Mirrored != 4*(held/4) {
		t.Errorf("mirrored %d blocks after the big store, want the bound %d", ev.Mirrored, held)
	}
}

// TestApplyInPartsAsWhole: a batch applied in parts of any budget leaves
// the mirror as applying it whole does: the same blocks and copies, gateway
// hashes, orphans and counts.
func TestApplyInPartsAsWhole(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		// Orphans are not bounded here: which go past the bound is left
		// to map order.
		whole := NewMirror(1, mirrorSeed, 1000, 12)
		parts := NewMirror(1, mirrorSeed, 1000, 12)
		var wholeHeld, partsHeld []blockhash.Hash
		whole.held = func(h blockhash.Hash) { wholeHeld = append(wholeHeld, h) }
		parts.held = func(h blockhash.Hash) { partsHeld = append(partsHeld, h) }
		for range rapid.IntRange(1, 6).Draw(rt, "batches") {
			b := &events.Batch{}
			for range rapid.IntRange(0, 6).Draw(rt, "events") {
				switch rapid.IntRange(0, 4).Draw(rt, "kind") {
				case 0, 1:
					ev := chainEvent(rapid.Uint64Range(1, 20).Draw(rt, "first"), rapid.IntRange(0, 8).Draw(rt, "blocks"))
					if rapid.Bool().Draw(rt, "has_parent") {
						ev.Parent, ev.HasParent = events.UintHash(rapid.Uint64Range(1, 30).Draw(rt, "parent")), true
					}
					b.Events = append(b.Events, ev)
				case 2, 3:
					ev := events.Event{Kind: events.BlockRemoved}
					for range rapid.IntRange(0, 6).Draw(rt, "removals") {
						ev.Hashes = append(ev.Hashes, events.UintHash(rapid.Uint64Range(1, 30).Draw(rt, "removed")))
					}
					b.Events = append(b.Events, ev)
				default:
					b.Events = append(b.Events, events.Event{Kind: events.AllBlocksCleared})
				}
			}
			whole.Apply(b)
			budget := rapid.Uint64Range(1, 10).Draw(rt, "budget")
			var cur applyCursor
			for !parts.applySome(b, &cur, budget) {
			}
		}
		wb, pb := whole.Blocks(), parts.Blocks()
		if len(wb) != len(pb) {
			rt.Fatalf("whole holds %d blocks, in parts %d", len(wb), len(pb))
		}
		for k, n := range wb {
			if pb[k] != n {
				rt.Fatalf("block %d: %d copies whole, %d in parts", k, n, pb[k])
			}
		}
		if whole.Digest() != parts.Digest() || whole.Held() != parts.Held() || whole.Orphans() != parts.Orphans() {
			rt.Fatalf("whole: digest %x, %d keyed, %d orphans; in parts: %x, %d, %d",
				whole.Digest(), whole.Held(), whole.Orphans(), parts.Digest(), parts.Held(), parts.Orphans())
		}
		if whole.Stats != parts.Stats || len(wholeHeld) != len(partsHeld) {
			rt.Fatalf("whole: %+v, %d held; in parts: %+v, %d held", whole.Stats, len(wholeHeld), parts.Stats, len(partsHeld))
		}
	})
}
