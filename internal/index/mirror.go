package index

import (
	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/events"
)

// Mirror is one engine's prefix cache as its KV events describe it: every
// block the engine holds, under the engine's own hash and under the
// gateway's, which it rebuilds from the token ids each BlockStored carries
// (the engine's hash values are its own and never assumed to equal ours).
//
// A stored block whose parent the mirror never saw (the stream started
// after the engine had blocks, or a batch was lost) is kept as an orphan
// under the engine's hash with its tokens, and joins the chain, gaining its
// gateway hash, as soon as its parent does. Orphans are bounded: past
// maxOrphans the oldest are dropped and counted.
//
// Not safe for concurrent use: one goroutine applies an engine's batches.
type Mirror struct {
	blockSize int
	seed      SeedFunc

	blocks map[engineKey]*mirrorBlock
	// ours counts, per gateway hash, the engine blocks that carry it: an
	// engine may hold two copies of one block (two requests computed it at
	// once), each stored and removed on its own.
	ours map[blockhash.Hash]int32
	// waiting lists the orphans under each unseen parent.
	waiting    map[engineKey][]engineKey
	orphans    int
	maxOrphans int
	maxBlocks  int

	// held and dropped, when set, hear of every gateway hash the engine
	// comes to hold (its first copy) and stops holding (its last).
	held, dropped func(blockhash.Hash)

	Stats MirrorStats
}

// SeedFunc gives the chain seed of a sequence's first block, from the
// adapter and cache_salt the engine folded into it, exactly as the gateway
// seeds the prompts it routes (blockhash.Seed with the replica's model).
type SeedFunc func(adapter, cacheSalt string) blockhash.Hash

// MirrorStats counts what a Mirror applied and what it could not.
type MirrorStats struct {
	Stored, Removed, Cleared uint64 // blocks stored and removed, caches cleared
	// UnknownRemovals are removals of hashes the mirror does not hold.
	UnknownRemovals uint64
	// Skipped are stored blocks the mirror cannot key: a block size other
	// than the gateway's, token ids that do not fill the blocks, or another
	// medium than GPU.
	Skipped uint64
	// OrphansDropped are orphans evicted past the bound before joining.
	OrphansDropped uint64
	// Overflow are stored blocks refused because the mirror was full: an
	// engine never stores more blocks than its cache holds, so a stream
	// that does is broken or hostile.
	Overflow uint64
}

// engineKey is an engine hash reduced to 64 bits: the integer an engine
// sends, or a digest's last eight bytes, the same reduction vLLM applies
// when it sends integers.
type engineKey uint64

func keyOf(h events.Hash) engineKey {
	if n, ok := h.Uint(); ok {
		return engineKey(n)
	}
	b := h.Bytes()
	var k uint64
	for _, c := range b[max(0, len(b)-8):] {
		k = k<<8 | uint64(c)
	}
	return engineKey(k)
}

type mirrorBlock struct {
	ours   blockhash.Hash // valid unless orphan
	count  int32          // copies the engine holds
	orphan bool
	// An orphan keeps what it needs to join the chain later.
	parent engineKey
	tokens []uint32
}

// NewMirror returns an empty mirror of an engine whose blocks hold
// blockSize tokens. maxOrphans bounds the blocks kept without a known
// parent (0 keeps none); maxBlocks bounds all blocks (0: no bound).
func NewMirror(blockSize int, seed SeedFunc, maxOrphans, maxBlocks int) *Mirror {
	return &Mirror{
		blockSize:  blockSize,
		seed:       seed,
		blocks:     make(map[engineKey]*mirrorBlock),
		ours:       make(map[blockhash.Hash]int32),
		waiting:    make(map[engineKey][]engineKey),
		maxOrphans: max(0, maxOrphans),
		maxBlocks:  max(0, maxBlocks),
	}
}

// hold counts n more engine copies of the block the gateway names h.
func (m *Mirror) hold(h blockhash.Hash, n int32) {
	before := m.ours[h]
	m.ours[h] = before + n
	if before == 0 && m.held != nil {
		m.held(h)
	}
}

// release counts one engine copy fewer of h.
func (m *Mirror) release(h blockhash.Hash) {
	if n := m.ours[h] - 1; n > 0 {
		m.ours[h] = n
		return
	}
	delete(m.ours, h)
	if m.dropped != nil {
		m.dropped(h)
	}
}

// Apply applies one batch's events in order.
func (m *Mirror) Apply(b *events.Batch) {
	for i := range b.Events {
		m.ApplyEvent(&b.Events[i])
	}
}

// ApplyEvent applies one event.
func (m *Mirror) ApplyEvent(ev *events.Event) {
	switch ev.Kind {
	case events.BlockStored:
		m.store(ev)
	case events.BlockRemoved:
		if ev.HasMedium && ev.Medium != "GPU" {
			return
		}
		for _, h := range ev.Hashes {
			m.remove(keyOf(h))
		}
	case events.AllBlocksCleared:
		m.Clear()
		m.Stats.Cleared++
	}
}

// Clear forgets everything, as after the engine reset its cache or
// restarted.
func (m *Mirror) Clear() {
	if m.dropped != nil {
		for h := range m.ours {
			m.dropped(h)
		}
	}
	clear(m.blocks)
	clear(m.ours)
	clear(m.waiting)
	m.orphans = 0
}

func (m *Mirror) store(ev *events.Event) {
	bs := m.blockSize
	if ev.BlockSize != bs || len(ev.Tokens) != len(ev.Hashes)*bs || (ev.HasMedium && ev.Medium != "GPU") {
		m.Stats.Skipped += uint64(len(ev.Hashes))
		return
	}
	lora := ""
	if ev.HasLoRAName {
		lora = ev.LoRAName
	}
	salt := ""
	if !ev.HasParent && len(ev.ExtraKeys) > 0 {
		salt = events.CacheSalt(ev.ExtraKeys[0], lora)
	}
	var parent *mirrorBlock
	parentKey := engineKey(0)
	if ev.HasParent {
		parentKey = keyOf(ev.Parent)
		parent = m.blocks[parentKey]
	}
	for j, h := range ev.Hashes {
		k := keyOf(h)
		b := m.blocks[k]
		fresh := b == nil
		if fresh {
			if m.maxBlocks > 0 && len(m.blocks) >= m.maxBlocks {
				m.Stats.Overflow++
				parent, parentKey = nil, k // its children cannot be keyed either
				continue
			}
			b = &mirrorBlock{}
			m.blocks[k] = b
		}
		b.count++
		m.Stats.Stored++
		if !fresh && !b.orphan {
			m.hold(b.ours, 1)
			parent, parentKey = b, k
			continue
		}
		// A new block, or an orphan stored again: key it if its parent
		// is now known.
		tokens := ev.Tokens[j*bs : (j+1)*bs]
		var base blockhash.Hash
		switch {
		case j == 0 && !ev.HasParent:
			base = m.seed(lora, salt)
		case parent != nil && !parent.orphan:
			base = parent.ours
		default:
			if fresh {
				m.adopt(k, b, parentKey, tokens)
			}
			parent, parentKey = b, k
			continue
		}
		if b.orphan {
			b.orphan, b.tokens = false, nil
			m.orphans--
		}
		b.ours = m.chain(base, tokens)
		m.hold(b.ours, b.count)
		m.join(k)
		parent, parentKey = b, k
	}
}

// chain is the gateway's hash of a block of tokens after parent.
func (m *Mirror) chain(parent blockhash.Hash, tokens []uint32) blockhash.Hash {
	ids := make([]int, len(tokens))
	for i, t := range tokens {
		ids[i] = int(t)
	}
	return blockhash.Extend(nil, parent, ids, m.blockSize)[0]
}

// adopt keeps b, whose parent is unknown or an orphan, as an orphan.
func (m *Mirror) adopt(k engineKey, b *mirrorBlock, parent engineKey, tokens []uint32) {
	if m.maxOrphans == 0 {
		delete(m.blocks, k)
		m.Stats.OrphansDropped++
		return
	}
	b.orphan, b.parent = true, parent
	b.tokens = append([]uint32(nil), tokens...)
	m.waiting[parent] = append(m.waiting[parent], k)
	m.orphans++
	if m.orphans > m.maxOrphans {
		m.dropOrphans()
	}
}

// dropOrphans drops orphans until the bound holds again, whole waiting
// lists at a time (map order: which goes first is arbitrary).
func (m *Mirror) dropOrphans() {
	for p, kids := range m.waiting {
		for _, k := range kids {
			if b := m.blocks[k]; b != nil && b.orphan {
				delete(m.blocks, k)
				m.orphans--
				m.Stats.OrphansDropped++
			}
		}
		delete(m.waiting, p)
		if m.orphans <= m.maxOrphans {
			return
		}
	}
}

// join gives the orphans waiting on k, now in the chain, their gateway
// hashes, and theirs in turn.
func (m *Mirror) join(k engineKey) {
	stack := []engineKey{k}
	for len(stack) > 0 {
		pk := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		p := m.blocks[pk]
		kids := m.waiting[pk]
		delete(m.waiting, pk)
		for _, ck := range kids {
			c := m.blocks[ck]
			if c == nil || !c.orphan {
				continue
			}
			c.ours = m.chain(p.ours, c.tokens)
			c.orphan, c.tokens = false, nil
			m.orphans--
			m.hold(c.ours, c.count)
			stack = append(stack, ck)
		}
	}
}

func (m *Mirror) remove(k engineKey) {
	b := m.blocks[k]
	if b == nil {
		m.Stats.UnknownRemovals++
		return
	}
	m.Stats.Removed++
	b.count--
	if !b.orphan {
		m.release(b.ours)
	}
	if b.count > 0 {
		return
	}
	delete(m.blocks, k)
	if b.orphan {
		m.orphans--
	}
}

// Holds reports whether the engine holds a block the gateway names h.
func (m *Mirror) Holds(h blockhash.Hash) bool { return m.ours[h] > 0 }

// Blocks returns the engine hash keys held and how many copies of each,
// for comparing a mirror with an engine.
func (m *Mirror) Blocks() map[uint64]int {
	out := make(map[uint64]int, len(m.blocks))
	for k, b := range m.blocks {
		out[uint64(k)] = int(b.count)
	}
	return out
}

// Held is how many distinct gateway hashes the mirror holds.
func (m *Mirror) Held() int { return len(m.ours) }

// Len is how many distinct engine blocks the mirror holds, orphans included.
func (m *Mirror) Len() int { return len(m.blocks) }

// Orphans is how many of them have no known parent yet.
func (m *Mirror) Orphans() int { return m.orphans }
