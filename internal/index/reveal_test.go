package index

import (
	"cmp"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/events"
)

// tokenKeys is what the gateway reveals a prompt of tokens with: each full
// block's TokenKey.
func tokenKeys(tokens []int) []uint64 {
	var keys []uint64
	for i := 0; i+mirrorBS <= len(tokens); i += mirrorBS {
		keys = append(keys, TokenKey(u32(tokens[i:i+mirrorBS])))
	}
	return keys
}

// revealIndex is an index whose replica "e" follows its events, with a
// mirror bounded to maxOrphans orphans (0: the default).
func revealIndex(maxOrphans int) (*Approx, Attachment) {
	x := NewApprox(1000)
	x.Join("e")
	at := x.AttachEvents("e", EventsConfig{BlockSize: mirrorBS, Seed: mirrorSeed, MaxOrphans: maxOrphans})
	x.SetSource("e", true)
	return x, at
}

// TestRevealAdoptsAnUnseenPrefix: a prefix the engine cached before the
// mirror's stream, then two tails stored after it (orphans). A prompt of
// the prefix and one tail reveals the prefix: its last block joins the
// chain under the engine key the orphans name, with both tails, and the
// blocks before it are held until that block goes.
func TestRevealAdoptsAnUnseenPrefix(t *testing.T) {
	x, at := revealIndex(0)
	prefix := seq(1, 8*mirrorBS)                         // engine keys 1 to 8, never stored on the stream
	a, b := seq(1000, 3*mirrorBS), seq(2000, 2*mirrorBS) // keys 100.., 200..
	pa, pb := append(slices.Clone(prefix), a...), append(slices.Clone(prefix), b...)
	x.ApplyEvents(at, batchOf(stored(8, 100, a), stored(8, 200, b)))
	if d := depth(x, "e", ours("", pa...)); d != 0 {
		t.Fatalf("before the reveal: %d blocks held, want none", d)
	}
	if n := x.Reveal("e", ours("", prefix...), tokenKeys(prefix)); n != 0 {
		t.Fatalf("the prefix alone, whose blocks no orphan has, adopted %d", n)
	}
	if n := x.Reveal("e", ours("", pa...), tokenKeys(pa)); n != 8 {
		t.Fatalf("the prefix and a tail adopted %d blocks, want the prefix's 8", n)
	}
	other := append(slices.Clone(prefix), seq(3000, 2*mirrorBS)...)
	if dA, dB, dOther := depth(x, "e", ours("", pa...)), depth(x, "e", ours("", pb...)), depth(x, "e", ours("", other...)); dA != 11 || dB != 10 || dOther != 8 {
		t.Errorf("after the reveal: %d, %d and %d blocks held of the two tails and a new one, want 11, 10, 8", dA, dB, dOther)
	}
	if ev := x.Events("e"); ev.Orphans != 0 || ev.Mirrored != 13 || ev.Mirror.Adopted != 8 {
		t.Errorf("after the reveal: %+v", ev)
	}
	if n := x.Reveal("e", ours("", pb...), tokenKeys(pb)); n != 0 {
		t.Errorf("revealed again: adopted %d", n)
	}
	// The engine evicts the tails, then the prefix from its last block.
	x.ApplyEvents(at, batchOf(removed(102), removed(101), removed(100), removed(201), removed(200)))
	if d := depth(x, "e", ours("", prefix...)); d != 8 {
		t.Errorf("the tails evicted: %d blocks of the prefix held, want 8", d)
	}
	x.ApplyEvents(at, batchOf(removed(8)))
	if d, ev := depth(x, "e", ours("", prefix...)), x.Events("e"); d != 0 || ev.Mirrored != 0 || ev.Digest != 0 {
		t.Errorf("the prefix's last block evicted: %d blocks held, %+v; want none", d, ev)
	}
}

// TestRevealRefuses: a reveal adopts nothing when two unseen parents are
// followed by the prompt's block (no telling which is the prompt's), when
// the ancestors would pass the orphans' bound, or for a replica without a
// mirror; a clear drops what a reveal adopted.
func TestRevealRefuses(t *testing.T) {
	prefix := seq(1, 8*mirrorBS)
	tail := seq(1000, mirrorBS)
	p := append(slices.Clone(prefix), tail...)
	t.Run("two_unseen_parents", func(t *testing.T) {
		x, at := revealIndex(0)
		x.ApplyEvents(at, batchOf(stored(8, 100, tail), stored(9, 101, tail)))
		if n := x.Reveal("e", ours("", p...), tokenKeys(p)); n != 0 || x.Events("e").Orphans != 2 {
			t.Errorf("adopted %d, %+v", n, x.Events("e"))
		}
	})
	t.Run("orphan_bound", func(t *testing.T) {
		x, at := revealIndex(4)
		x.ApplyEvents(at, batchOf(stored(8, 100, tail)))
		if n := x.Reveal("e", ours("", p...), tokenKeys(p)); n != 0 {
			t.Errorf("7 ancestors past a bound of 4: adopted %d", n)
		}
	})
	t.Run("no_mirror", func(t *testing.T) {
		x := NewApprox(1000)
		x.Join("e")
		if n := x.Reveal("e", ours("", p...), tokenKeys(p)); n != 0 {
			t.Errorf("adopted %d", n)
		}
		if n := x.Reveal("unknown", ours("", p...), tokenKeys(p)); n != 0 {
			t.Errorf("adopted %d", n)
		}
	})
	t.Run("cleared", func(t *testing.T) {
		x, at := revealIndex(0)
		x.ApplyEvents(at, batchOf(stored(8, 100, tail)))
		if n := x.Reveal("e", ours("", p...), tokenKeys(p)); n != 8 {
			t.Fatalf("adopted %d, want 8", n)
		}
		x.ApplyEvents(at, batchOf(events.Event{Kind: events.AllBlocksCleared}))
		if d, ev := depth(x, "e", ours("", p...)), x.Events("e"); d != 0 || ev.Mirrored != 0 || ev.Digest != 0 {
			t.Errorf("after a clear: %d blocks held, %+v", d, ev)
		}
	})
}

// engineModel is an engine's prefix cache as the reveal property test
// drives it: blocks named by their gateway hash, each with its engine key,
// its parent and its tokens, held closed under prefixes (a block is
// evicted only once nothing after it is held, as vLLM frees a request's
// blocks tail first).
type engineModel struct {
	held   map[blockhash.Hash]bool
	parent map[blockhash.Hash]blockhash.Hash // zero for a first block
	key    map[blockhash.Hash]uint64
}

// heldDepth is how many leading blocks of chain the engine holds.
func (e *engineModel) heldDepth(chain []blockhash.Hash) int {
	d := 0
	for d < len(chain) && e.held[chain[d]] {
		d++
	}
	return d
}

// TestRevealAgainstEngine drives an engine model with prompts computed
// (stores after what it holds), leaves evicted and a stream that the
// mirror starts to follow part way, and reveals of random prompts. The
// mirror's bookkeeping stays whole; every block it holds, the engine
// holds; and a reveal of a prompt whose chain has an orphan after a block
// the mirror lacks makes it hold the prompt up to that orphan at least.
func TestRevealAgainstEngine(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		x, at := revealIndex(1 << 20)
		e := &engineModel{held: map[blockhash.Hash]bool{}, parent: map[blockhash.Hash]blockhash.Hash{}, key: map[blockhash.Hash]uint64{}}
		type prompt struct {
			tokens []int
			chain  []blockhash.Hash
		}
		prompts := []prompt{{}}
		fresh := 1
		visible := false
		for step := range rapid.IntRange(1, 60).Draw(rt, "steps") {
			var op string
			switch rapid.IntRange(0, 5).Draw(rt, "op") {
			case 0, 1: // compute a prompt, maybe a new one over an old one's prefix
				p := rapid.SampledFrom(prompts).Draw(rt, "prompt")
				p.tokens = p.tokens[:mirrorBS*rapid.IntRange(0, len(p.chain)).Draw(rt, "cut")]
				p.tokens = append(slices.Clone(p.tokens), seq(fresh, mirrorBS*rapid.IntRange(1, 4).Draw(rt, "new"))...)
				fresh += len(p.tokens)
				p.chain = ours("", p.tokens...)
				prompts = append(prompts, p)
				c := e.heldDepth(p.chain)
				op = fmt.Sprintf("compute %d blocks, %d held", len(p.chain), c)
				if c == len(p.chain) {
					break
				}
				var parent uint64
				for i, h := range p.chain {
					e.key[h] = 1000 + h.Lo>>20
					if i > 0 {
						e.parent[h] = p.chain[i-1]
					}
				}
				if c > 0 {
					parent = e.key[p.chain[c-1]]
				}
				ev := stored(parent, 0, p.tokens[c*mirrorBS:len(p.chain)*mirrorBS])
				ev.Hashes = ev.Hashes[:0]
				for _, h := range p.chain[c:] {
					ev.Hashes = append(ev.Hashes, events.UintHash(e.key[h]))
					e.held[h] = true
				}
				if visible {
					x.ApplyEvents(at, batchOf(ev))
				}
			case 2: // evict a leaf
				var leaves []blockhash.Hash
				for h := range e.held {
					leaf := true
					for c, p := range e.parent {
						if p == h && e.held[c] {
							leaf = false
							break
						}
					}
					if leaf {
						leaves = append(leaves, h)
					}
				}
				if len(leaves) == 0 {
					continue
				}
				slices.SortFunc(leaves, func(a, b blockhash.Hash) int { return cmp.Compare(a.Lo, b.Lo) })
				h := rapid.SampledFrom(leaves).Draw(rt, "leaf")
				op = "evict"
				delete(e.held, h)
				if visible {
					x.ApplyEvents(at, batchOf(removed(e.key[h])))
				}
			case 3:
				op = "follow the stream"
				visible = true
			case 4, 5:
				p := rapid.SampledFrom(prompts).Draw(rt, "revealed")
				op = fmt.Sprintf("reveal %d blocks", len(p.chain))
				want := 0 // the first orphan on the chain after a block the mirror lacks
				r := x.lockReplica("e")
				m := r.ev.mirror
				for j := 1; j < len(p.chain) && want == 0; j++ {
					b, ok := m.blocks.get(engineKey(e.key[p.chain[j]]))
					_, parentHeld := m.blocks.get(engineKey(e.key[p.chain[j-1]]))
					if ok && b.orphan && !parentHeld && e.held[p.chain[j]] {
						want = j + 1
					}
				}
				r.mu.Unlock()
				x.Reveal("e", p.chain, tokenKeys(p.tokens))
				if got := depth(x, "e", p.chain); got < want {
					rt.Fatalf("step %d, %s: %d blocks held after the reveal, want %d at least", step, op, got, want)
				}
			}
			r := x.lockReplica("e")
			m := r.ev.mirror
			m.settle(^uint64(0))
			err := m.checkOrphans()
			held := m.GatewayHashes()
			r.mu.Unlock()
			if err != nil {
				rt.Fatalf("step %d, after %s: %v", step, op, err)
			}
			for h := range held {
				if !e.held[h] {
					rt.Fatalf("step %d, after %s: the mirror holds a block the engine does not", step, op)
				}
			}
			for _, p := range prompts { // the holder map shows what the mirror holds
				want := 0
				for want < len(p.chain) && held[p.chain[want]] {
					want++
				}
				if got := depth(x, "e", p.chain); got != want {
					rt.Fatalf("step %d, after %s: Match says %d blocks of a prompt, the mirror holds %d", step, op, got, want)
				}
			}
		}
	})
}
