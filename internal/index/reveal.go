package index

import (
	"math"
	"unsafe"

	"github.com/inferrail/inferrail/internal/blockhash"
)

// An engine reuses the blocks it caches without announcing them again
// (vLLM's default event mode), so a prefix it cached before the mirror's
// stream reaches is never stored there: every block the engine stores
// after it is an orphan, whose parent is that prefix's last block. A
// routed prompt names such an orphan when one of its blocks has the
// orphan's tokens after the prompt's own previous block, as the chain's
// gateway hash checks: the orphan's parent is then the prompt's previous
// block, which the engine holds, and so, as vLLM frees a request's blocks
// tail first and hits a block only through all before it, are the blocks
// before that. The mirror adopts them: the parent, under the engine key
// the orphan names, joins the chain with its orphans, and the blocks
// before it are held, without an engine key, for as long as the parent
// (their anchor) is.
//
// The evidence is a block's tokens after an unknown parent, not the
// parent's hash, which the gateway cannot compute: two prefixes the
// mirror never saw, each followed by the same block of tokens, would look
// alike, and a reveal then finds two candidates and adopts nothing. A
// prompt whose block follows a prefix the engine does not hold, and
// matches the block an unseen prefix is followed by there, is taken for
// that prefix: the engine computes the prompt's own prefix then, and its
// store of it, keyed, makes the prediction right from the next request
// on.

// TokenKey is the key reveals look an orphan up by: a digest of one
// block's tokens alone.
func TokenKey(tokens []uint32) uint64 { return blockhash.Next(blockhash.Hash{}, tokens).Lo }

// revealBudget bounds the work (Mirror.work's units) a reveal does under
// its replica's lock, as applyBudget bounds a batch's part.
const revealBudget = applyBudget

// reveal looks for the first block of a routed prompt that is an orphan
// whose parent the mirror does not hold, given the prompt's gateway
// hashes and the TokenKey of each block's tokens, and adopts the blocks
// before it (see above). It reports how many blocks it adopted; none when
// two unseen parents are followed by that block, when the work would pass
// budget, or when the bounds leave no room. The joins it sets off are
// left to settle. The mirror must be settled.
func (m *Mirror) reveal(hashes []blockhash.Hash, keys []uint64, budget uint64) int {
	if len(m.orphans) == 0 {
		return 0
	}
	stopAt := m.work + min(budget, math.MaxUint64-m.work)
	for j := 1; j < min(len(hashes), len(keys)); j++ {
		if m.work++; m.work > stopAt {
			return 0
		}
		same := m.byTokens[keys[j]]
		if len(same) == 0 {
			continue
		}
		m.work += uint64(len(same))
		if m.work > stopAt {
			return 0
		}
		var parent engineKey
		found := false
		for _, k := range same {
			o := m.orphans[k]
			if _, held := m.blocks.get(o.parent); held || blockhash.Next(hashes[j-1], o.tokens) != hashes[j] {
				continue // its parent is an orphan too, or its tokens are others
			}
			if found && o.parent != parent {
				return 0 // two unseen prefixes end where the prompt's does
			}
			parent, found = o.parent, true
		}
		if found {
			return m.adoptChain(parent, hashes[:j])
		}
	}
	return 0
}

// revealed is what routed prompts revealed to a mirror. An anchor is an
// orphan's parent that a reveal keyed (it is in the mirror's table under
// its engine key); its ancestors, the blocks before it, are adopted: held
// under their gateway hash alone, for as long as an anchor names them. An
// adopted block may also be an anchor (revealed first as one, then as the
// other): it is held once, until both are gone.
type revealed struct {
	adopted  map[blockhash.Hash]int32       // by gateway hash: the anchors naming it an ancestor
	anchors  map[engineKey][]blockhash.Hash // by engine key: the anchor's ancestors, anchors' hashes left out
	anchorOf map[blockhash.Hash]engineKey   // the anchors by gateway hash
	anchored int                            // the ancestor lists' lengths, summed
	both     int                            // adopted blocks that are anchors too
}

func newRevealed() revealed {
	return revealed{adopted: map[blockhash.Hash]int32{}, anchors: map[engineKey][]blockhash.Hash{},
		anchorOf: map[blockhash.Hash]engineKey{}}
}

// bytes approximates the memory of what reveals hold.
func (rv *revealed) bytes() int64 {
	const (
		adoptedEntry = 40 // an adopted entry with its share of empty slots
		anchorEntry  = 96 // an anchors and an anchorOf entry, a slice header
	)
	return int64(len(rv.adopted))*adoptedEntry + int64(len(rv.anchors))*anchorEntry +
		int64(rv.anchored)*int64(unsafe.Sizeof(blockhash.Hash{}))
}

// eachAdopted calls f with every adopted block's gateway hash but the
// anchors', which are in the table.
func (m *Mirror) eachAdopted(f func(blockhash.Hash)) {
	for h := range m.rev.adopted {
		if _, anchor := m.rev.anchorOf[h]; !anchor {
			f(h)
		}
	}
	m.work += uint64(len(m.rev.adopted))
}

// adoptChain holds the blocks of chain, the last as an anchor under the
// engine key parent, and reports how many it adopted. See reveal.
func (m *Mirror) adoptChain(parent engineKey, chain []blockhash.Hash) int {
	last := len(chain) - 1
	if _, dup := m.rev.anchorOf[chain[last]]; dup || m.maxBlocks > 0 && m.blocks.len() >= m.maxBlocks || m.rev.anchored+last > m.maxOrphans {
		return 0 // another engine block under that gateway hash, or no room
	}
	m.work += uint64(len(chain))
	rv := &m.rev
	ancestors := make([]blockhash.Hash, 0, last)
	adopted := 0
	for _, h := range chain[:last] {
		if _, anchor := rv.anchorOf[h]; anchor {
			continue // in the table, under its engine key
		}
		ancestors = append(ancestors, h)
		refs := rv.adopted[h]
		rv.adopted[h] = refs + 1
		if refs == 0 {
			adopted++
			m.hold(h)
		}
	}
	rv.anchors[parent] = ancestors
	rv.anchored += len(ancestors)
	ours := chain[last]
	rv.anchorOf[ours] = parent
	m.blocks.set(parent, mirrorBlock{ours: ours, count: 1})
	m.keyed++
	if rv.adopted[ours] > 0 {
		rv.both++ // held already, as an ancestor
	} else {
		adopted++
		m.hold(ours)
	}
	m.joining = append(m.joining, parent)
	m.Stats.Keyed += uint64(adopted)
	m.Stats.Adopted += uint64(adopted)
	return adopted
}

// hold counts gateway hash h, newly held, and tells the hook.
func (m *Mirror) hold(h blockhash.Hash) {
	m.digest += digestMix(h)
	if m.held != nil {
		m.held(h)
	}
}

// unhold counts gateway hash h, no longer held, and tells the hook.
func (m *Mirror) unhold(h blockhash.Hash) {
	m.digest -= digestMix(h)
	if m.dropped != nil {
		m.dropped(h)
	}
}

// unanchor, for block k, gone from the table, lets its ancestors go if it
// was an anchor (those no other anchor names), and reports whether its
// gateway hash ours stays held as another anchor's ancestor.
func (m *Mirror) unanchor(k engineKey, ours blockhash.Hash) bool {
	rv := &m.rev
	ancestors, ok := rv.anchors[k]
	if !ok {
		return false
	}
	delete(rv.anchors, k)
	delete(rv.anchorOf, ours)
	rv.anchored -= len(ancestors)
	m.work += uint64(len(ancestors))
	for _, h := range ancestors {
		refs := rv.adopted[h] - 1
		if refs > 0 {
			rv.adopted[h] = refs
			continue
		}
		delete(rv.adopted, h)
		if _, anchor := rv.anchorOf[h]; anchor {
			rv.both-- // held on, as an anchor
			continue
		}
		m.unhold(h)
	}
	if rv.adopted[ours] > 0 {
		rv.both--
		return true
	}
	return false
}

// Reveal implements [Index.Reveal].
func (x *Approx) Reveal(id string, hashes []blockhash.Hash, keys []uint64) int {
	r := x.lockReplica(id)
	if r == nil {
		return 0
	}
	defer r.mu.Unlock()
	if r.ev == nil || r.ev.mirror.Orphans() == 0 {
		return 0
	}
	m := r.ev.mirror
	if !m.settle(m.work + revealBudget) {
		return 0 // a batch's clear or joins first
	}
	n := m.reveal(hashes, keys, revealBudget)
	m.joinSome(m.work + revealBudget) // the rest at the next batch
	return n
}

// SaltedRoot implements [Index.SaltedRoot].
func (x *Approx) SaltedRoot(id string, key uint64, root, unsalted blockhash.Hash) {
	r := x.lockReplica(id)
	if r == nil {
		return
	}
	defer r.mu.Unlock()
	if r.ev != nil {
		r.ev.mirror.noteSaltedRoot(key, root, unsalted)
	}
}
