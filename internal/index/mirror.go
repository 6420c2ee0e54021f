package index

import (
	"math"
	"slices"
	"strconv"
	"unsafe"

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
// gateway hash, as soon as its parent does, or as soon as a routed prompt
// reveals the parent (see reveal). Orphans are bounded: past maxOrphans
// the oldest are dropped and counted.
//
// Not safe for concurrent use: one goroutine applies an engine's batches.
type Mirror struct {
	blockSize int
	seed      SeedFunc

	blocks blockTable
	keyed  int // blocks with a gateway hash (not orphans)
	// digest adds up digestMix of every keyed block's gateway hash
	// (wrapping), kept as blocks are keyed and dropped: see Digest.
	digest uint64
	// waiting lists the orphans under each unseen parent; orphans holds
	// their tokens; byTokens lists them by TokenKey of their tokens.
	waiting    map[engineKey][]engineKey
	orphans    map[engineKey]orphan
	byTokens   map[uint64][]engineKey
	maxOrphans int
	maxBlocks  int

	rev revealed // what routed prompts revealed (see reveal)
	// saltedRoots and saltedOrder: see noteSaltedRoot.
	saltedRoots map[uint64]saltedRoot
	saltedOrder []uint64

	// held and dropped, when set, hear of every gateway hash the engine
	// comes to hold (its first copy, once keyed) and stops holding (its
	// last copy). One gateway hash per engine block: two engine blocks of
	// the same tokens after the same parent differ only by what the
	// gateway does not hash (multimodal inputs, prompt embeddings), which
	// text prompts do not have.
	held, dropped func(blockhash.Hash)

	// work counts what the mirror has done, in units of about the same
	// cost: one per event and per block of an event, one per table slot
	// a walk visits, one per orphan joined or dropped. ApplyEvents reads
	// it to bound what it does under its replica's lock.
	work uint64
	// clearing is where a clear that applySome left unfinished goes on
	// walking the table, nil when none is; joining are the keyed blocks
	// whose waiting orphans are still to join. See settle.
	clearing *tablePos
	joining  []engineKey
	// holes is set once a keyed block went while a block keyed after it
	// stayed: see Holes. Until the next clear.
	holes bool
	// goneParents are the keyed blocks this batch removed while children
	// of theirs were held, each with how many still are. A batch that
	// removes their children too (SGLang evicts a node's pages first
	// to last) leaves no hole; what is left here when it ends is one.
	goneParents map[engineKey]int
	// groups tells a hybrid model's KV-cache groups apart (see kvGroups),
	// nil until a store shows the engine keeps more than one, and again
	// after Clear.
	groups *kvGroups

	Stats MirrorStats
}

// SeedFunc gives the chain seed of a sequence's first block, from the
// adapter and cache_salt the engine folded into it, exactly as the gateway
// seeds the prompts it routes (blockhash.Seed with the replica's model).
type SeedFunc func(adapter, cacheSalt string) blockhash.Hash

// MirrorStats counts what a Mirror applied and what it could not.
type MirrorStats struct {
	Stored, Removed, Cleared uint64 // blocks stored and removed, caches cleared
	// Keyed are blocks that gained a gateway hash: stored after a known
	// parent (or as a sequence's first), or joined with their parent.
	// Orphaned are blocks stored after a parent the mirror does not know,
	// to wait for it as orphans.
	Keyed, Orphaned uint64
	// UnknownRemovals are removals of hashes the mirror does not hold.
	UnknownRemovals uint64
	// Skipped are stored blocks the mirror cannot key: a block size other
	// than the gateway's, token ids that do not fill the blocks, or another
	// medium than GPU.
	Skipped uint64
	// OrphansDropped are orphans evicted past the bound before joining.
	OrphansDropped uint64
	// Adopted are blocks a routed prompt revealed: the parent of an orphan
	// (see reveal) and the blocks before it, held without their store.
	Adopted uint64
	// Overflow are stored blocks refused because the mirror was full: an
	// engine never stores more blocks than its cache holds, so a stream
	// that does is broken or hostile.
	Overflow uint64
}

// engineKey is an engine hash reduced to 64 bits: the integer an engine
// sends, or a digest's last eight bytes, the same reduction vLLM applies
// when it sends integers.
type engineKey uint64

func keyOf(h events.Hash) engineKey { return engineKey(h.Low64()) }

// mirrorBlock is one engine block, as blockTable packs it into a slot.
// An orphan's gateway hash is not known yet; what it needs to learn it
// waits in Mirror.orphans.
type mirrorBlock struct {
	ours   blockhash.Hash // valid unless orphan
	count  int32          // copies the engine holds, at least 1, at most maxCopies
	orphan bool
	// parent, when hasParent, is the block this one was keyed after, kept
	// so that its removal counts its parent's kids down. kids are the
	// blocks held that were keyed after this one, at most maxKids (where
	// the count stays). Both only serve to tell holes (see Holes).
	parent    engineKey
	hasParent bool
	kids      int32
}

// orphan is what an orphan keeps to join the chain later, and where it
// waits: m.waiting[parent][at], and m.byTokens[TokenKey(tokens)][tokenAt].
type orphan struct {
	parent  engineKey
	at      int
	tokenAt int
	tokens  []uint32
}

// NewMirror returns an empty mirror of an engine whose blocks hold
// blockSize tokens. maxOrphans bounds the blocks kept without a known
// parent (0 keeps none); maxBlocks bounds all blocks (0: no bound).
func NewMirror(blockSize int, seed SeedFunc, maxOrphans, maxBlocks int) *Mirror {
	return &Mirror{
		blockSize:   blockSize,
		seed:        seed,
		blocks:      newBlockTable(),
		waiting:     make(map[engineKey][]engineKey),
		orphans:     make(map[engineKey]orphan),
		byTokens:    make(map[uint64][]engineKey),
		rev:         newRevealed(),
		saltedRoots: make(map[uint64]saltedRoot),
		maxOrphans:  max(0, maxOrphans),
		maxBlocks:   max(0, maxBlocks),
	}
}

// setBounds changes the mirror's bounds; blocks already held stay (a
// lowered bound refuses new ones until enough are removed), and orphans
// past a lowered bound go at the next orphan.
func (m *Mirror) setBounds(maxOrphans, maxBlocks int) {
	m.maxOrphans, m.maxBlocks = max(0, maxOrphans), max(0, maxBlocks)
}

// Apply applies one batch's events in order.
func (m *Mirror) Apply(b *events.Batch) {
	m.applySome(b, &applyCursor{}, math.MaxUint64)
}

// ApplyEvent applies one event.
func (m *Mirror) ApplyEvent(ev *events.Event) {
	m.Apply(&events.Batch{Events: unsafe.Slice(ev, 1)})
}

// applyCursor is how far applySome got in a batch: its next event, and the
// blocks of that event already applied.
type applyCursor struct{ event, block int }

// applySome applies b's events from cur on, in order, until budget units
// of work are done (see work; a store's last block may run over by what
// keying it costs) or the batch is, and reports whether the batch is. A
// store, a removal, a clear or the joins a store sets off may stop part
// way; the rest is done first thing at the next call (see settle).
func (m *Mirror) applySome(b *events.Batch, cur *applyCursor, budget uint64) bool {
	stopAt := m.work + min(budget, math.MaxUint64-m.work)
	for {
		if !m.settle(stopAt) {
			return false
		}
		if cur.event == len(b.Events) {
			m.judgeHoles()
			return true
		}
		if m.work >= stopAt {
			return false
		}
		ev := &b.Events[cur.event]
		if cur.block == 0 {
			m.work++
		}
		switch ev.Kind {
		case events.BlockStored:
			cur.block = m.store(ev, cur.block, stopAt)
		case events.BlockRemoved:
			cur.block = m.removeSome(ev, cur.block, stopAt)
		default:
			if ev.Kind == events.AllBlocksCleared {
				m.beginClear()
				m.Stats.Cleared++
			}
			cur.block = len(ev.Hashes)
		}
		if cur.block >= len(ev.Hashes) {
			cur.event, cur.block = cur.event+1, 0
		}
	}
}

// settle goes on with a clear, then with joins, that applySome left
// unfinished, until m.work reaches stopAt, and reports whether it
// finished them. Nothing else may change the mirror before they are.
func (m *Mirror) settle(stopAt uint64) bool {
	if m.clearing != nil && !m.clearSome(stopAt) {
		return false
	}
	return m.joinSome(stopAt)
}

// Clear forgets everything, as after the engine reset its cache or
// restarted. It costs what the mirror holds, nothing when it is empty.
// Unlike the engine's own clear (AllBlocksCleared), it forgets the KV-cache
// groups too, learnt again from the stores after it: an engine started
// again may keep other groups (another model, or vLLM's
// --disable-hybrid-kv-cache-manager), and a group it no longer has would
// lack every block. Match may read the old ones, emptied, until the
// replica's are published again.
func (m *Mirror) Clear() {
	if m.clearing == nil {
		m.beginClear()
	}
	m.clearSome(math.MaxUint64)
	m.groups = nil
}

// beginClear starts a clear, which clearSome goes on with. Orphans still
// to join are forgotten with everything else.
func (m *Mirror) beginClear() {
	m.joining = m.joining[:0]
	m.clearing = &tablePos{}
}

// clearSome tells dropped of the keyed blocks the clear has not walked
// yet, until m.work reaches stopAt, and once it walked them all forgets
// everything and reports true. The table and maps are dropped for new
// ones rather than emptied: they never shrink, and zeroing a table sized
// for the most the mirror ever held cost a batch of clears minutes.
func (m *Mirror) clearSome(stopAt uint64) bool {
	if m.dropped != nil && m.Held() > 0 {
		visited, done := m.blocks.walk(m.clearing, stopAt-min(stopAt, m.work), func(_ engineKey, b mirrorBlock) {
			if !b.orphan {
				m.dropped(b.ours)
			}
		})
		m.work += uint64(visited)
		if !done {
			return false
		}
		m.eachAdopted(m.dropped)
	}
	m.clearing = nil
	m.blocks.reset()
	if m.groups != nil {
		m.groups.reset()
	}
	m.holes = false
	clear(m.goneParents)
	m.keyed = 0
	m.digest = 0
	if len(m.waiting) > 0 || len(m.orphans) > 0 {
		m.waiting = make(map[engineKey][]engineKey)
		m.orphans = make(map[engineKey]orphan)
		m.byTokens = make(map[uint64][]engineKey)
	}
	if len(m.rev.adopted) > 0 || len(m.rev.anchors) > 0 {
		m.rev = newRevealed()
	}
	return true
}

// removeSome applies the removals of ev from its block from on, until
// m.work reaches stopAt (one at least), and returns the next block.
func (m *Mirror) removeSome(ev *events.Event, from int, stopAt uint64) int {
	j := from
	group, grouped := groupOf(ev)
	for j < len(ev.Hashes) {
		if !ev.HasMedium || ev.Medium == "GPU" {
			m.remove(keyOf(ev.Hashes[j]), group, grouped)
		}
		j++
		if m.work++; m.work >= stopAt {
			break
		}
	}
	return j
}

// unnamedAdapter prefixes the seed name of an adapter an engine named only
// by its number: no model a client can ask for starts with a NUL.
const unnamedAdapter = "\x00lora_id="

// store applies the blocks of a BlockStored from its block from on (the
// block before, if any, is their parent, applied already), until m.work
// reaches stopAt (one block at least), and returns the next block. The
// joins the last block sets off may be left to settle.
func (m *Mirror) store(ev *events.Event, from int, stopAt uint64) int {
	bs := m.blockSize
	if ev.BlockSize != bs || len(ev.Tokens) != len(ev.Hashes)*bs || (ev.HasMedium && ev.Medium != "GPU") {
		m.Stats.Skipped += uint64(len(ev.Hashes) - from)
		m.work += uint64(len(ev.Hashes) - from)
		return len(ev.Hashes)
	}
	group, grouped := m.storeGroup(ev)
	lora := ""
	if ev.HasLoRAName {
		lora = ev.LoRAName
	}
	salt := ""
	if !ev.HasParent && from == 0 {
		switch {
		case len(ev.ExtraKeys) > 0:
			salt = events.CacheSalt(ev.ExtraKeys[0], lora)
		case ev.HasCacheSalt: // SGLang's, from its metadata
			salt = ev.CacheSalt
		}
	}
	if !ev.HasLoRAName && ev.HasLoRAID {
		// An adapter known only by its number (servers before lora_name):
		// its blocks are no prompt's the gateway routes, and must not pass
		// for the base model's.
		lora = unnamedAdapter + strconv.FormatInt(ev.LoRAID, 10)
	}
	// parent is the block before the one at hand: known (keyed), or not.
	hasParent, parent := ev.HasParent, ev.Parent
	if from > 0 {
		hasParent, parent = true, ev.Hashes[from-1]
	}
	parentKey, parentKnown := engineKey(0), false
	var parentOurs blockhash.Hash
	if hasParent {
		parentKey = keyOf(parent)
		p, ok := m.blocks.get(parentKey)
		parentKnown, parentOurs = ok && !p.orphan, p.ours
	}
	for j := from; j < len(ev.Hashes); j++ {
		if j > from && (m.work >= stopAt || len(m.joining) > 0) {
			return j
		}
		m.work++
		k := keyOf(ev.Hashes[j])
		b, seen := m.blocks.get(k)
		if !seen && m.maxBlocks > 0 && m.blocks.len() >= m.maxBlocks {
			m.Stats.Overflow++
			parentKey, parentKnown = k, false // its children cannot be keyed either
			continue
		}
		if b.count < maxCopies {
			b.count++
		}
		m.Stats.Stored++
		switch {
		case seen && !b.orphan:
			m.blocks.set(k, b) // one more copy of a keyed block
		case j == 0 && !hasParent:
			m.keyRoot(k, b, ev, lora, salt)
		case parentKnown:
			m.link(&b, k, parentKey)
			m.key(k, b, parentOurs, ev.Tokens[j*bs:(j+1)*bs])
		case seen: // an orphan stored again, still without its parent
			m.blocks.set(k, b)
		default:
			b.orphan = true
			m.blocks.set(k, b)
			m.Stats.Orphaned++
			m.adopt(k, parentKey, ev.Tokens[j*bs:(j+1)*bs])
		}
		m.joinSome(stopAt)
		b, _ = m.blocks.get(k)
		if grouped && b.count > 0 { // not refused or dropped
			m.groups.stored(k, b, group)
		}
		parentKey, parentKnown, parentOurs = k, !b.orphan && b.count > 0, b.ours
	}
	return len(ev.Hashes)
}

// key gives block k (new, or an orphan) its gateway hash, the chain of
// tokens after base, and has the orphans waiting on it join (joinSome).
func (m *Mirror) key(k engineKey, b mirrorBlock, base blockhash.Hash, tokens []uint32) {
	m.keyAs(k, b, blockhash.Next(base, tokens))
}

// keyRoot keys a chain's first block k, stored by ev for adapter lora
// ("" for the base model) under salt: an event that carries no salt (no
// extra keys, no SGLang cache_salt), of a block a salted prompt of its
// model routed here begins with, is that prompt's (noteSaltedRoot).
func (m *Mirror) keyRoot(k engineKey, b mirrorBlock, ev *events.Event, lora, salt string) {
	tokens := ev.Tokens[:m.blockSize]
	if len(ev.ExtraKeys) == 0 && !ev.HasCacheSalt {
		if root := m.saltedRootOf(lora, tokens); root != nil {
			m.keyAs(k, b, *root)
			return
		}
	}
	m.key(k, b, m.seed(lora, salt), tokens)
}

// keyAs is key with the block's gateway hash given.
func (m *Mirror) keyAs(k engineKey, b mirrorBlock, ours blockhash.Hash) {
	if b.orphan {
		m.unwait(k)
		b.orphan = false
		if m.groups != nil {
			m.groups.joined(k, ours)
		}
	}
	b.ours = ours
	m.blocks.set(k, b)
	m.keyed++
	m.Stats.Keyed++
	m.digest += digestMix(b.ours)
	if m.held != nil {
		m.held(b.ours)
	}
	m.joining = append(m.joining, k)
}

// maxSaltedRoots bounds the salted prompts' first blocks a mirror keeps
// (noteSaltedRoot): the newest, as their stores follow their routing.
const maxSaltedRoots = 1024

// saltedRoot is a salted prompt's first block as routing hashed it, and
// the unsalted seed of its model, which tells the blocks of that model
// (or adapter) from others' (see noteSaltedRoot).
type saltedRoot struct {
	root, unsalted blockhash.Hash
}

// noteSaltedRoot keeps root, the gateway hash of the first block of a
// salted prompt routed to the engine, and unsalted, its model's seed
// without the salt, under key, the TokenKey of its tokens. A first block
// an event stores without extra keys (the engine's events carry no salt)
// is keyed with the newest root kept for its tokens and its model, else as
// unsalted: keyed as unsalted, a salted prompt's blocks were predicted hits
// for the same prompt without the salt, which the engine does not share
// them with, and misses for itself. A prompt sent with and without a salt,
// or under two salts, close together is taken for the last one routed.
func (m *Mirror) noteSaltedRoot(key uint64, root, unsalted blockhash.Hash) {
	if _, ok := m.saltedRoots[key]; !ok {
		if len(m.saltedOrder) >= maxSaltedRoots {
			delete(m.saltedRoots, m.saltedOrder[0])
			m.saltedOrder = slices.Delete(m.saltedOrder, 0, 1)
		}
		m.saltedOrder = append(m.saltedOrder, key)
	}
	m.saltedRoots[key] = saltedRoot{root: root, unsalted: unsalted}
}

// saltedRootOf is the root noteSaltedRoot kept for a first block's tokens
// stored for adapter lora ("" for the base model), or nil: one kept for
// another model's prompt keys nothing here.
func (m *Mirror) saltedRootOf(lora string, tokens []uint32) *blockhash.Hash {
	if len(m.saltedRoots) == 0 {
		return nil
	}
	if r, ok := m.saltedRoots[TokenKey(tokens)]; ok && r.unsalted == m.seed(lora, "") {
		return &r.root
	}
	return nil
}

// adopt keeps the tokens of orphan k, whose parent is unknown or an
// orphan, until the parent joins the chain.
func (m *Mirror) adopt(k, parent engineKey, tokens []uint32) {
	if m.maxOrphans == 0 {
		m.blocks.del(k)
		m.Stats.OrphansDropped++
		return
	}
	kids := m.waiting[parent]
	tk := TokenKey(tokens)
	same := m.byTokens[tk]
	m.orphans[k] = orphan{parent: parent, at: len(kids), tokenAt: len(same), tokens: append([]uint32(nil), tokens...)}
	m.waiting[parent] = append(kids, k)
	m.byTokens[tk] = append(same, k)
	if len(m.orphans) > m.maxOrphans {
		m.dropOrphans()
	}
}

// dropOrphans drops orphans until the bound holds again, whole waiting
// lists at a time (map order: which goes first is arbitrary).
func (m *Mirror) dropOrphans() {
	for p, kids := range m.waiting {
		m.work += uint64(len(kids))
		for _, k := range kids {
			m.untoken(k)
			delete(m.orphans, k)
			m.blocks.del(k)
			if m.groups != nil {
				m.groups.forget(k, mirrorBlock{orphan: true})
			}
			m.Stats.OrphansDropped++
		}
		delete(m.waiting, p)
		if len(m.orphans) <= m.maxOrphans {
			return
		}
	}
}

// joinSome gives the orphans waiting on the blocks in m.joining (keyed
// after them) their gateway hashes, and theirs in turn, one at a time
// until m.work reaches stopAt, and reports whether none are left.
func (m *Mirror) joinSome(stopAt uint64) bool {
	for len(m.joining) > 0 {
		pk := m.joining[len(m.joining)-1]
		kids := m.waiting[pk]
		if len(kids) == 0 {
			m.joining = m.joining[:len(m.joining)-1]
			continue
		}
		if m.work >= stopAt {
			return false
		}
		m.work++
		ck := kids[len(kids)-1]
		o := m.orphans[ck]
		m.unwait(ck)
		p, _ := m.blocks.get(pk)
		c, _ := m.blocks.get(ck)
		c.orphan = false // taken off its waiting list above
		m.link(&c, ck, pk)
		m.key(ck, c, p.ours, o.tokens)
	}
	return true
}

// remove takes a copy of block k out of the mirror, one of group's when
// grouped (the mirror tells the group apart).
func (m *Mirror) remove(k engineKey, group int, grouped bool) {
	b, ok := m.blocks.get(k)
	if !ok {
		m.Stats.UnknownRemovals++
		return
	}
	m.Stats.Removed++
	b.count--
	if b.count > 0 {
		m.blocks.set(k, b)
		if m.groups != nil && grouped {
			m.groups.removed(k, b, group)
		}
		return
	}
	if m.groups != nil {
		m.groups.forget(k, b)
	}
	m.blocks.del(k)
	adopted := len(m.rev.anchors) > 0 && m.unanchor(k, b.ours) // held still, as an ancestor
	if !b.orphan {
		m.unlink(k, b)
		m.keyed--
		if !adopted {
			m.digest -= digestMix(b.ours)
			if m.dropped != nil {
				m.dropped(b.ours)
			}
		}
	}
	if _, ok := m.orphans[k]; ok {
		m.unwait(k)
	}
}

// link makes b, block k about to be keyed after block parent (held and
// keyed), parent's child.
func (m *Mirror) link(b *mirrorBlock, k, parent engineKey) {
	p, ok := m.blocks.get(parent)
	if !ok || parent == k {
		return
	}
	b.parent, b.hasParent = parent, true
	if p.kids < maxKids {
		p.kids++
		m.blocks.set(parent, p)
	}
}

// unlink notes that keyed block b, of key k, is gone: a child of it still
// held makes a hole unless the batch removes it too (judgeHoles), and its
// parent has a child fewer. (A parent that went in an earlier batch left a
// hole already, which stays until the next clear: if its key was stored
// again since, the count lowered here is the new block's, and no longer
// matters.)
func (m *Mirror) unlink(k engineKey, b mirrorBlock) {
	switch {
	case b.kids >= maxKids:
		m.holes = true // too many to count down
	case b.kids > 0:
		if m.goneParents == nil {
			m.goneParents = map[engineKey]int{}
		}
		m.goneParents[k] = int(b.kids)
	}
	if !b.hasParent {
		return
	}
	if p, ok := m.blocks.get(b.parent); ok && !p.orphan && p.kids > 0 && p.kids < maxKids {
		p.kids--
		m.blocks.set(b.parent, p)
	} else if n, ok := m.goneParents[b.parent]; ok {
		if n <= 1 {
			delete(m.goneParents, b.parent)
		} else {
			m.goneParents[b.parent] = n - 1
		}
	}
}

// judgeHoles ends a batch: a block it removed whose children it did not
// all remove left them held past a hole.
func (m *Mirror) judgeHoles() {
	if len(m.goneParents) > 0 {
		m.holes = true
		clear(m.goneParents)
	}
}

// Holes reports whether the mirror may hold a block whose parent it no
// longer holds: a keyed block was removed while a block keyed after it
// stayed. An engine looks a prompt up block by block and stops at the
// first it lacks, so the blocks past such a hole are held but never hit.
// vLLM frees a request's blocks tail first, so that its evictions make
// none; a stream that removes a block in the middle of a chain does.
// Holes stays set until the next clear.
func (m *Mirror) Holes() bool { return m.holes }

// unwait forgets orphan k, keyed or gone: its tokens, and its place in
// its parent's waiting list, which the list's last takes. (Left there, an
// orphan keyed later stayed in the list until its parent came, which
// might be never, and unaccounted in bytes.)
func (m *Mirror) unwait(k engineKey) {
	m.untoken(k)
	o := m.orphans[k]
	delete(m.orphans, k)
	kids := m.waiting[o.parent]
	last := len(kids) - 1
	if moved := kids[last]; o.at != last {
		kids[o.at] = moved
		mo := m.orphans[moved]
		mo.at = o.at
		m.orphans[moved] = mo
	}
	if last == 0 {
		delete(m.waiting, o.parent)
	} else {
		m.waiting[o.parent] = kids[:last]
	}
}

// untoken takes orphan k out of byTokens, the list's last taking its
// place.
func (m *Mirror) untoken(k engineKey) {
	o := m.orphans[k]
	tk := TokenKey(o.tokens)
	same := m.byTokens[tk]
	last := len(same) - 1
	if moved := same[last]; o.tokenAt != last {
		same[o.tokenAt] = moved
		mo := m.orphans[moved]
		mo.tokenAt = o.tokenAt
		m.orphans[moved] = mo
	}
	if last == 0 {
		delete(m.byTokens, tk)
	} else {
		m.byTokens[tk] = same[:last]
	}
}

// GatewayHashes returns the gateway hash of every block the engine holds
// that the mirror could key, for comparing a mirror with an engine. It
// walks the whole mirror.
func (m *Mirror) GatewayHashes() map[blockhash.Hash]bool {
	out := make(map[blockhash.Hash]bool, m.keyed)
	m.eachKeyed(func(h blockhash.Hash) { out[h] = true })
	return out
}

// eachKeyed calls f with the gateway hash of every keyed block, adopted
// ones included.
func (m *Mirror) eachKeyed(f func(blockhash.Hash)) {
	m.work += uint64(m.blocks.each(func(_ engineKey, b mirrorBlock) {
		if !b.orphan {
			f(b.ours)
		}
	}))
	m.eachAdopted(f)
}

// Blocks returns the engine hash keys held and how many copies of each,
// for comparing a mirror with an engine.
func (m *Mirror) Blocks() map[uint64]int {
	out := make(map[uint64]int, m.blocks.len())
	m.work += uint64(m.blocks.each(func(k engineKey, b mirrorBlock) { out[uint64(k)] = int(b.count) }))
	return out
}

// Digest sums a mix of the gateway hash of every block the mirror keyed
// (wrapping at 64 bits): two mirrors holding the same blocks under the same
// gateway hashes have the same digest, whatever order the blocks came in,
// and mirrors that differ by a block differ in it but by chance (one in
// 2^64). It is kept as blocks come and go, so reading it costs nothing;
// orphans, which have no gateway hash yet, are not in it.
func (m *Mirror) Digest() uint64 { return m.digest }

// digestMix spreads a gateway hash over 64 bits for Digest: both halves
// through a SplitMix64 finalizer, so that the sum of many is uniform and a
// change to any bit of a hash changes it.
func digestMix(h blockhash.Hash) uint64 {
	return splitMix(h.Hi ^ splitMix(h.Lo))
}

func splitMix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// Held is how many blocks the mirror holds under a gateway hash, adopted
// ones included.
func (m *Mirror) Held() int { return m.keyed + len(m.rev.adopted) - m.rev.both }

// Len is how many distinct engine blocks the mirror holds, orphans included.
func (m *Mirror) Len() int { return m.blocks.len() }

// bytes approximates the memory the mirror takes: its table, each
// orphan's tokens with its map entries, and what reveals adopted.
func (m *Mirror) bytes() int64 {
	const orphanEntries = 112 // an orphans entry, a waiting entry, a byTokens entry, slice headers
	const saltedEntry = 48    // a saltedRoots entry with its share of empty slots, an order entry
	n := int64(unsafe.Sizeof(*m)) + m.blocks.bytes() + int64(len(m.orphans))*int64(orphanEntries+4*m.blockSize) + m.rev.bytes() +
		int64(len(m.saltedRoots))*saltedEntry
	if m.groups != nil {
		n += m.groups.bytes()
	}
	return n
}

// Orphans is how many of them have no known parent yet.
func (m *Mirror) Orphans() int { return len(m.orphans) }
