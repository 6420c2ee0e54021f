package index

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/events"
)

// checkOrphans verifies the orphan bookkeeping: every waiting list holds
// exactly the orphans waiting on its parent, each at the place its record
// says, and every orphan of the table is in one.
func (m *Mirror) checkOrphans() error {
	entries := 0
	for p, kids := range m.waiting {
		if len(kids) == 0 {
			return fmt.Errorf("parent %d: an empty waiting list kept", p)
		}
		for i, k := range kids {
			o, ok := m.orphans[k]
			if !ok || o.parent != p || o.at != i {
				return fmt.Errorf("parent %d: waiting[%d] is %d, whose record is %+v (present %v)", p, i, k, o, ok)
			}
			if b, ok := m.blocks.get(k); !ok || !b.orphan {
				return fmt.Errorf("orphan %d: the table has %+v (present %v)", k, b, ok)
			}
		}
		entries += len(kids)
	}
	if entries != len(m.orphans) {
		return fmt.Errorf("%d waiting entries for %d orphans", entries, len(m.orphans))
	}
	table := 0
	m.blocks.each(func(_ engineKey, b mirrorBlock) {
		if b.orphan {
			table++
		}
	})
	if table != len(m.orphans) {
		return fmt.Errorf("the table holds %d orphans, the records %d", table, len(m.orphans))
	}
	entries = 0
	for tk, same := range m.byTokens {
		if len(same) == 0 {
			return fmt.Errorf("token key %x: an empty list kept", tk)
		}
		for i, k := range same {
			o, ok := m.orphans[k]
			if !ok || o.tokenAt != i || TokenKey(o.tokens) != tk {
				return fmt.Errorf("token key %x: byTokens[%d] is %d, whose record is %+v (present %v)", tk, i, k, o, ok)
			}
		}
		entries += len(same)
	}
	if entries != len(m.orphans) {
		return fmt.Errorf("%d byTokens entries for %d orphans", entries, len(m.orphans))
	}
	return m.checkRevealed()
}

// checkRevealed verifies what reveals hold against the table: every anchor
// is a keyed block of the table under its gateway hash, every adopted
// block is named by as many anchors as it counts, the counts add up, and
// the digest and Held count every held gateway hash once.
func (m *Mirror) checkRevealed() error {
	rv := &m.rev
	refs := map[blockhash.Hash]int32{}
	anchored := 0
	for k, ancestors := range rv.anchors {
		b, ok := m.blocks.get(k)
		if !ok || b.orphan || rv.anchorOf[b.ours] != k {
			return fmt.Errorf("anchor %d: the table has %+v (present %v), anchorOf %d", k, b, ok, rv.anchorOf[b.ours])
		}
		for _, h := range ancestors {
			refs[h]++
		}
		anchored += len(ancestors)
	}
	if len(rv.anchorOf) != len(rv.anchors) || anchored != rv.anchored {
		return fmt.Errorf("%d anchors, %d by hash, %d ancestors counted %d", len(rv.anchors), len(rv.anchorOf), anchored, rv.anchored)
	}
	both := 0
	for h, n := range rv.adopted {
		if refs[h] != n || n <= 0 {
			return fmt.Errorf("adopted %v counts %d anchors, %d name it", h, n, refs[h])
		}
		if _, anchor := rv.anchorOf[h]; anchor {
			both++
		}
	}
	if len(refs) != len(rv.adopted) || both != rv.both {
		return fmt.Errorf("%d adopted, %d named; %d both, counted %d", len(rv.adopted), len(refs), both, rv.both)
	}
	held := m.GatewayHashes()
	var digest uint64
	for h := range held {
		digest += digestMix(h)
	}
	if len(held) != m.Held() || digest != m.digest {
		return fmt.Errorf("%d gateway hashes held, Held says %d; digest %x, kept %x", len(held), m.Held(), digest, m.digest)
	}
	return nil
}

// TestOrphanKeyedLaterLeavesNoEntry: an orphan keyed later (stored again
// as the first block of a sequence) and then removed leaves nothing behind
// in the waiting lists, however often. (Found by a review: each such
// orphan stayed in its unseen parent's list, unaccounted in bytes; a
// million cycles left a million entries and 87 MiB.)
func TestOrphanKeyedLaterLeavesNoEntry(t *testing.T) {
	m := NewMirror(mirrorBS, mirrorSeed, 100, 0)
	empty := m.bytes()
	const cycles = 100_000
	for i := range cycles {
		parent := uint64(1_000_000 + i) // never seen
		apply(m, stored(parent, 7, seq(0, 4)), stored(0, 7, seq(0, 4)), removed(7), removed(7))
	}
	if orphanBytes := m.bytes() - m.blocks.bytes(); m.Len() != 0 || m.Orphans() != 0 || len(m.waiting) != 0 || orphanBytes != empty {
		t.Errorf("after %d cycles: %d blocks, %d orphans, %d waiting lists, %d bytes besides the table (empty: %d)",
			cycles, m.Len(), m.Orphans(), len(m.waiting), orphanBytes, empty)
	}
	if err := m.checkOrphans(); err != nil {
		t.Error(err)
	}
}

// TestOrphanBookkeepingAgainstModel drives a mirror with stores under
// parents seen or not, stores of the same blocks as the first of a
// sequence, removals and clears, with orphans bounded, and checks the
// bookkeeping after every step, and the orphans against a naive count:
// the stored blocks neither keyed nor dropped.
func TestOrphanBookkeepingAgainstModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := NewMirror(mirrorBS, mirrorSeed, rapid.IntRange(1, 6).Draw(rt, "max_orphans"), 0)
		for range rapid.IntRange(1, 80).Draw(rt, "steps") {
			k := rapid.Uint64Range(1, 12).Draw(rt, "block")
			tokens := seq(int(k)*mirrorBS, mirrorBS)
			switch rapid.IntRange(0, 6).Draw(rt, "op") {
			case 0, 1, 2: // under a parent, seen or not
				apply(m, stored(rapid.Uint64Range(1, 16).Draw(rt, "parent"), k, tokens))
			case 3: // the first block of a sequence
				apply(m, stored(0, k, tokens))
			case 4, 5:
				apply(m, removed(k))
			case 6:
				apply(m, events.Event{Kind: events.AllBlocksCleared})
			}
			if err := m.checkOrphans(); err != nil {
				rt.Fatal(err)
			}
			if m.Orphans()+m.Held() != m.Len() {
				rt.Fatalf("%d orphans and %d keyed blocks, %d in all", m.Orphans(), m.Held(), m.Len())
			}
		}
	})
}
