package sim

import (
	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/events"
)

// blockPool is the engine's KV cache: one pool of ref-counted blocks, with a
// free queue whose order is vLLM's eviction order and a map from block hash
// to the blocks that hold it. Block 0 is the reserved null block and never
// handed out. Owned by the engine goroutine.
type blockPool struct {
	blocks  []block
	head    int32 // first free block, the next one handed out; nilBlock when none
	tail    int32 // last free block
	numFree int
	cached  map[blockhash.Hash]int32   // hash → the oldest block holding it
	dups    map[blockhash.Hash][]int32 // hash → later blocks holding it too, oldest first
	caching bool                       // prefix caching enabled
	events  poolEvents
	log     *kvLog // where stores, evictions and resets are logged; nil when the engine publishes no events
}

// poolEvents counts what happened to cached blocks, for KV events and tests.
type poolEvents struct {
	stored, evicted int
}

const nilBlock = -1

type block struct {
	ref        int32
	prev, next int32 // free queue links, nilBlock at the ends or when not free
	hashed     bool
	hash       blockhash.Hash // the key it is cached under: see groupKey
	ext        events.Hash    // the engine's own hash of the block, for events; set with hash when events are on
	group      uint8          // the KV-cache group it holds (see window.go), for events
}

func newBlockPool(numBlocks int, caching bool) *blockPool {
	p := &blockPool{
		blocks:  make([]block, numBlocks),
		head:    nilBlock,
		tail:    nilBlock,
		cached:  make(map[blockhash.Hash]int32),
		dups:    make(map[blockhash.Hash][]int32),
		caching: caching,
	}
	p.blocks[0].ref = 1 // the null block
	p.blocks[0].prev, p.blocks[0].next = nilBlock, nilBlock
	for id := 1; id < numBlocks; id++ {
		p.blocks[id].prev, p.blocks[id].next = nilBlock, nilBlock
		p.pushTail(int32(id))
	}
	return p
}

// usable is the number of blocks requests can hold.
func (p *blockPool) usable() int { return len(p.blocks) - 1 }

// usage is vLLM's kv_cache_usage_perc: the share of usable blocks not free.
// Free includes cached blocks nobody holds.
func (p *blockPool) usage() float64 {
	if p.usable() == 0 {
		return 0
	}
	return 1 - float64(p.numFree)/float64(p.usable())
}

func (p *blockPool) pushTail(id int32) {
	b := &p.blocks[id]
	b.prev, b.next = p.tail, nilBlock
	if p.tail != nilBlock {
		p.blocks[p.tail].next = id
	} else {
		p.head = id
	}
	p.tail = id
	p.numFree++
}

func (p *blockPool) pushHead(id int32) {
	b := &p.blocks[id]
	b.prev, b.next = nilBlock, p.head
	if p.head != nilBlock {
		p.blocks[p.head].prev = id
	} else {
		p.tail = id
	}
	p.head = id
	p.numFree++
}

func (p *blockPool) unlink(id int32) {
	b := &p.blocks[id]
	if b.prev != nilBlock {
		p.blocks[b.prev].next = b.next
	} else {
		p.head = b.next
	}
	if b.next != nilBlock {
		p.blocks[b.next].prev = b.prev
	} else {
		p.tail = b.prev
	}
	b.prev, b.next = nilBlock, nilBlock
	p.numFree--
}

// lookup returns the longest run of leading hashes that are cached in the
// full-attention group, as the blocks holding them, appended to dst.
func (p *blockPool) lookup(dst []int32, hashes []blockhash.Hash) []int32 {
	if !p.caching {
		return dst
	}
	for _, h := range hashes {
		id, ok := p.cached[h]
		if !ok {
			break
		}
		dst = append(dst, id)
	}
	return dst
}

// countFree returns how many of ids are free, so touching them would take
// them from the free queue.
func (p *blockPool) countFree(ids []int32) int {
	n := 0
	for _, id := range ids {
		if p.blocks[id].ref == 0 {
			n++
		}
	}
	return n
}

// touch takes a reference on each of ids, taking free ones off the queue.
func (p *blockPool) touch(ids []int32) {
	for _, id := range ids {
		if p.blocks[id].ref == 0 {
			p.unlink(id)
		}
		p.blocks[id].ref++
	}
}

// allocate hands out n blocks from the head of the free queue, appended to
// dst. A handed-out block that still carries a hash is evicted from the
// cache. The caller has checked that n blocks are free.
func (p *blockPool) allocate(dst []int32, n int) []int32 {
	for range n {
		id := p.head
		p.unlink(id)
		b := &p.blocks[id]
		if b.hashed {
			p.evict(id)
		}
		b.ref = 1
		dst = append(dst, id)
	}
	return dst
}

func (p *blockPool) evict(id int32) {
	b := &p.blocks[id]
	if first := p.cached[b.hash]; first == id {
		if d := p.dups[b.hash]; len(d) > 0 {
			p.cached[b.hash] = d[0]
			p.setDups(b.hash, d[1:])
		} else {
			delete(p.cached, b.hash)
		}
	} else {
		d := p.dups[b.hash]
		for i, other := range d {
			if other == id {
				p.setDups(b.hash, append(d[:i:i], d[i+1:]...))
				break
			}
		}
	}
	b.hashed = false
	b.hash = blockhash.Hash{}
	p.events.evicted++
	if p.log != nil {
		p.log.removed(b.ext, int(b.group))
	}
}

// cachedIn reports whether a block of group holds hash.
func (p *blockPool) cachedIn(hash blockhash.Hash, group int) (int32, bool) {
	id, ok := p.cached[groupKey(hash, group)]
	return id, ok
}

// groupKey is the key a block of group holding hash is cached under: the
// hash itself in group 0, set apart in others, as vLLM keys its cache by
// hash and group. It is its own inverse: groupKey of a key gives the hash.
func groupKey(hash blockhash.Hash, group int) blockhash.Hash {
	if group != 0 {
		hash.Hi ^= 0x9e3779b97f4a7c15 * uint64(group)
	}
	return hash
}

func (p *blockPool) setDups(h blockhash.Hash, d []int32) {
	if len(d) == 0 {
		delete(p.dups, h)
	} else {
		p.dups[h] = d
	}
}

// cache marks a full block of group as holding hash (ext in the engine's
// own terms), so later prompts can hit it. It reports whether the block was
// not cached before.
func (p *blockPool) cache(id int32, hash blockhash.Hash, ext events.Hash, group int) bool {
	if !p.caching {
		return false
	}
	b := &p.blocks[id]
	if b.hashed {
		return false
	}
	h := groupKey(hash, group)
	b.hashed, b.hash, b.ext, b.group = true, h, ext, uint8(group)
	if _, taken := p.cached[h]; taken {
		// Two requests computed the same block at once; both copies
		// serve hits until evicted, as in vLLM.
		p.dups[h] = append(p.dups[h], id)
	} else {
		p.cached[h] = id
	}
	p.events.stored++
	return true
}

// free drops one reference on each of ids, which are a request's blocks in
// order. They are released tail first: blocks nobody holds any more go to
// the tail of the free queue when they carry a hash (so they serve hits until
// they reach the head) and to the head when they do not (reused first).
func (p *blockPool) free(ids []int32) {
	var unhashed []int32
	for i := len(ids) - 1; i >= 0; i-- {
		id := ids[i]
		b := &p.blocks[id]
		b.ref--
		if b.ref > 0 {
			continue
		}
		if b.hashed {
			p.pushTail(id)
		} else {
			unhashed = append(unhashed, id)
		}
	}
	for i := len(unhashed) - 1; i >= 0; i-- {
		p.pushHead(unhashed[i])
	}
}

// reset drops every cached hash. It fails, as vLLM's does, while any block
// is held.
func (p *blockPool) reset() bool {
	if p.numFree != p.usable() {
		return false
	}
	for id := range p.blocks {
		p.blocks[id].hashed = false
		p.blocks[id].hash = blockhash.Hash{}
		p.blocks[id].ext = events.Hash{}
	}
	clear(p.cached)
	clear(p.dups)
	if p.log != nil {
		p.log.cleared()
	}
	return true
}
