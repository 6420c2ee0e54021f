package hf

import (
	"encoding/json"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// bpe is the BPE model of tokenizer.json, applied to one pre-token at a time
// exactly as tokenizers' BPE::merge_word does: the word starts as one symbol
// per character (per byte after the ByteLevel pre-tokenizer), unknown
// characters go to byte fallback or the unk token, then merges are applied
// lowest rank first, leftmost first among equal ranks.
//
// A bpe is immutable after newBPE, apart from its word cache.
type bpe struct {
	// vocab maps token text to id. In byte-level mode the keys are the raw
	// bytes a token stands for (the GPT-2 byte-to-character mapping undone),
	// so words are never mapped to characters and back.
	vocab     map[string]int32
	tokens    []string         // id → token as written in tokenizer.json ("" if none)
	size      int              // entries in the vocabulary
	extra     map[string]int32 // byte-level: entries with characters outside the byte mapping
	merges    mergeTable
	byteLevel bool
	byteIDs   [256]int32 // byte-level: id of each one-byte token, -1 if absent
	asciiIDs  [128]int32 // otherwise: id of each ASCII one-character token, -1 if absent
	bmpIDs    []int32    // otherwise: id of each one-character token below U+10000, -1 if absent
	fallback  [256]int32 // byte fallback: id of "<0xXX>", -1 if absent
	unk       int32      // -1: no unk token
	fuseUnk   bool
	byteFall  bool
	ignoreMrg bool
	// cutSpaces: long words are encoded as the words between their cuts
	// (see canCut), which gives the same ids and lets the word cache serve
	// SentencePiece-style tokenizers, whose pre-tokenizer cuts nothing.
	cutSpaces bool

	cache wordCache
}

// merge is what a pair of adjacent symbols becomes, and when.
type merge struct {
	rank int32
	id   int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func newBPE(m *modelJSON, byteLevel bool) (*bpe, error) {
	b := &bpe{
		vocab:     make(map[string]int32, len(m.Vocab)),
		merges:    newMergeTable(len(m.Merges)),
		byteLevel: byteLevel,
		unk:       -1,
		fuseUnk:   m.FuseUnk,
		byteFall:  m.ByteFallback,
		ignoreMrg: m.IgnoreMerges,
	}
	maxID := -1
	limit := maxVocabID(len(m.Vocab))
	for tok, id := range m.Vocab {
		if id < 0 || id > limit {
			return nil, fmt.Errorf("model: vocab[%q]: id %d out of range (at most %d for %d entries)", tok, id, limit, len(m.Vocab))
		}
		maxID = max(maxID, id)
	}
	b.tokens = make([]string, maxID+1)
	b.size = len(m.Vocab)
	b.extra = map[string]int32{}
	for tok, id := range m.Vocab {
		b.tokens[id] = tok
		key, ok := tok, true
		if byteLevel {
			key, ok = byteLevelDecode(tok)
		}
		if ok {
			b.vocab[key] = int32(id)
		} else {
			b.extra[tok] = int32(id)
		}
	}
	lookup := b.lookup
	for i, mg := range m.Merges {
		a, okA := lookup(mg[0])
		c, okC := lookup(mg[1])
		n, okN := lookup(mg[0] + mg[1])
		if !okA || !okC || !okN {
			return nil, fmt.Errorf("model: merges[%d] %q %q: token not in vocab", i, mg[0], mg[1])
		}
		// A repeated pair keeps its last rank, as tokenizers' map does.
		b.merges.put(pairKey(a, c), merge{rank: int32(i), id: n})
	}
	if m.UnkToken != nil {
		id, ok := lookup(*m.UnkToken)
		if !ok {
			// tokenizers fails only when an unknown character needs it;
			// fail early instead.
			return nil, fmt.Errorf("model: unk_token %q not in vocab", *m.UnkToken)
		}
		b.unk = id
	}
	b.indexChars(m.Vocab)
	b.cutSpaces = canCut(m.Vocab, byteLevel)
	b.cache.init()
	return b, nil
}

// maxVocabID is the largest vocabulary id newBPE accepts for a vocabulary
// of n entries. Ids index a dense table, so one id of 2^30 would allocate
// 16 GiB and kill the process where a bad file must only fail its load;
// tokenizers takes any u32, but real vocabularies have at most small holes.
func maxVocabID(n int) int { return 2*n + 1<<10 }

// readModel reads a tokenizer.json model section, refusing what the reader
// does not implement rather than encode differently from tokenizers.
func readModel(raw json.RawMessage) (*modelJSON, error) {
	typ, err := componentType(raw)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if typ != "BPE" {
		return nil, fmt.Errorf("model: type %q: %w (only BPE is implemented)", typ, ErrUnsupported)
	}
	var m modelJSON
	if err := strictUnmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, fmt.Errorf("model: dropout %v: %w (encoding would be random)", *m.Dropout, ErrUnsupported)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, fmt.Errorf("model: continuing_subword_prefix %q: %w", *m.ContinuingSubwordPrefix, ErrUnsupported)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("model: end_of_word_suffix %q: %w", *m.EndOfWordSuffix, ErrUnsupported)
	}
	if m.Vocab == nil {
		return nil, fmt.Errorf("model: missing vocab")
	}
	return &m, nil
}

// indexChars fills the tables that find single characters and bytes
// without a map lookup: ASCII, the BMP (without byte-level), bytes
// (with it) and byte fallback tokens.
func (b *bpe) indexChars(vocab map[string]int) {
	for i := range b.byteIDs {
		b.byteIDs[i] = -1
		b.fallback[i] = -1
	}
	for i := range b.asciiIDs {
		b.asciiIDs[i] = -1
		if id, ok := vocab[string(rune(i))]; ok && !b.byteLevel {
			b.asciiIDs[i] = int32(id)
		}
	}
	if !b.byteLevel {
		b.bmpIDs = make([]int32, 0x10000)
		for i := range b.bmpIDs {
			b.bmpIDs[i] = -1
		}
		for tok, id := range vocab {
			if r, n := utf8.DecodeRuneInString(tok); n == len(tok) && r < 0x10000 && (r != utf8.RuneError || n == 3) {
				b.bmpIDs[r] = int32(id)
			}
		}
	}
	for i := range 256 {
		if b.byteLevel {
			if id, ok := b.vocab[string([]byte{byte(i)})]; ok {
				b.byteIDs[i] = id
			}
		}
		if id, ok := vocab[fmt.Sprintf("<0x%02X>", i)]; ok {
			b.fallback[i] = int32(id)
		}
	}
}

// lookup finds a token written as in tokenizer.json.
func (b *bpe) lookup(tok string) (int32, bool) {
	if b.byteLevel {
		key, ok := byteLevelDecode(tok)
		if !ok {
			id, ok := b.extra[tok]
			return id, ok
		}
		tok = key
	}
	id, ok := b.vocab[tok]
	return id, ok
}

// symbol is one node of a word being merged: a token id, the byte length it
// covers (0 once merged into its left neighbour), and its neighbours.
type symbol struct {
	id         int32
	prev, next int32
	n          int32
}

// bpeScratch holds the buffers of one word encoding.
type bpeScratch struct {
	syms []symbol
	heap mergeHeap
	ids  []int32
	stop *atomic.Bool // the encoding's; nil never stops
}

// stopEvery is how many characters or merges a word's encoding goes
// through between looks at stop.
const stopEvery = 4096

// stopped reports whether the word's encoding was told to stop.
func (s *bpeScratch) stopped() bool { return s.stop != nil && s.stop.Load() }

var bpeScratchPool = sync.Pool{New: func() any { return new(bpeScratch) }}

// spaceMark is SentencePiece's space, which the Metaspace pre-tokenizer
// and the normalizers of such tokenizers write for " ".
const spaceMark = "\u2581"

// cutMinLen is the shortest word cut at its spaces: shorter ones are
// cheap to merge whole and are cached whole.
const cutMinLen = 64

// canCut reports whether a word may be cut before each space mark that
// follows another character and its parts encoded apart: no merge can join
// across such a cut when no vocabulary entry holds the mark after another
// character (a merge's result is an entry), and unknown characters cannot
// fuse across it when the mark is itself an entry.
func canCut(vocab map[string]int, byteLevel bool) bool {
	if _, ok := vocab[spaceMark]; byteLevel || !ok {
		return false
	}
	for tok := range vocab {
		if strings.Contains(strings.TrimLeft(tok, spaceMark), spaceMark) {
			return false
		}
	}
	return true
}

// encode appends the ids of one pre-token to dst. When stop is set during
// a long word's merges it gives up, appending nothing and caching nothing.
func (b *bpe) encode(dst []int, word string, stop *atomic.Bool) []int {
	if !b.cutSpaces || len(word) < cutMinLen {
		return b.encodeWord(dst, word, stop)
	}
	start := 0
	for i := 1; i < len(word); {
		j := strings.Index(word[i:], spaceMark)
		if j < 0 {
			break
		}
		cut := i + j
		if !strings.HasSuffix(word[:cut], spaceMark) {
			dst = b.encodeWord(dst, word[start:cut], stop)
			if stop != nil && stop.Load() {
				return dst
			}
			start = cut
		}
		i = cut + len(spaceMark)
	}
	return b.encodeWord(dst, word[start:], stop)
}

// encodeWord is encode of a word merged whole.
func (b *bpe) encodeWord(dst []int, word string, stop *atomic.Bool) []int {
	if word == "" {
		return dst
	}
	if b.ignoreMrg {
		if id, ok := b.vocab[word]; ok {
			return append(dst, int(id))
		}
	}
	if ids, ok := b.cache.get(word); ok {
		for _, id := range ids {
			dst = append(dst, int(id))
		}
		return dst
	}
	s := bpeScratchPool.Get().(*bpeScratch)
	defer s.release()
	s.stop = stop
	s.ids = b.mergeWord(s, s.ids[:0], word)
	s.stop = nil
	if stop != nil && stop.Load() {
		return dst
	}
	for _, id := range s.ids {
		dst = append(dst, int(id))
	}
	b.cache.put(word, s.ids)
	return dst
}

// maxPooledSymbols is the most symbols a pooled scratch keeps room for: a
// megabyte-long word (a hostile prompt with no spaces) needs tens of
// megabytes of buffers, which the pool would otherwise hold on to.
const maxPooledSymbols = 1 << 16

// release returns s to the pool, without buffers grown for a long word.
func (s *bpeScratch) release() {
	s.trim()
	bpeScratchPool.Put(s)
}

// trim drops s's buffers when a long word grew them past
// maxPooledSymbols.
func (s *bpeScratch) trim() {
	if cap(s.syms) > maxPooledSymbols || cap(s.heap) > maxPooledSymbols || cap(s.ids) > maxPooledSymbols {
		*s = bpeScratch{}
	}
}

// mergeWord appends the ids of word to ids.
func (b *bpe) mergeWord(s *bpeScratch, ids []int32, word string) []int32 {
	// A word has at most a symbol per byte: growing once spares a long
	// word's symbols being copied at every doubling.
	syms := slices.Grow(s.syms[:0], len(word))
	add := func(id int32, n int) {
		last := int32(len(syms)) - 1
		if last >= 0 {
			syms[last].next = last + 1
		}
		syms = append(syms, symbol{id: id, prev: last, next: -1, n: int32(n)})
	}
	unkID, unkLen := int32(-1), 0
	for i, k := 0, 1; i < len(word); k++ {
		if k%stopEvery == 0 && s.stopped() {
			s.syms = syms
			return ids
		}
		var id int32 = -1
		var n int
		if b.byteLevel {
			id, n = b.byteIDs[word[i]], 1
		} else if c := word[i]; c < utf8.RuneSelf {
			id, n = b.asciiIDs[c], 1
		} else {
			var r rune
			r, n = utf8.DecodeRuneInString(word[i:])
			if r < 0x10000 {
				id = b.bmpIDs[r]
			} else if v, ok := b.vocab[word[i:i+n]]; ok {
				id = v
			}
		}
		char := word[i : i+n]
		i += n
		if id >= 0 {
			if unkID >= 0 {
				add(unkID, unkLen)
				unkID = -1
			}
			add(id, n)
			continue
		}
		if b.byteFall {
			// The bytes of the character as the model sees it: after
			// ByteLevel, that is the UTF-8 of the mapped character.
			var buf [4]byte
			bs := []byte(char)
			if b.byteLevel {
				bs = buf[:utf8.EncodeRune(buf[:], byteLevelChars[char[0]])]
			}
			ok := true
			for _, c := range bs {
				if b.fallback[c] < 0 {
					ok = false
					break
				}
			}
			if ok {
				for _, c := range bs {
					add(b.fallback[c], 1)
				}
				continue
			}
		}
		if b.unk >= 0 {
			switch {
			case unkID >= 0 && b.fuseUnk:
				unkLen += n
			case unkID >= 0:
				add(unkID, unkLen)
				unkID, unkLen = b.unk, n
			default:
				unkID, unkLen = b.unk, n
			}
		}
		// Without an unk token the character is dropped, as tokenizers does.
	}
	if unkID >= 0 {
		add(unkID, unkLen)
	}
	syms = b.applyMerges(s, syms)
	for _, sym := range syms {
		if sym.n != 0 {
			ids = append(ids, sym.id)
		}
	}
	s.syms = syms
	return ids
}

// applyMerges is tokenizers' Word::merge_all without dropout: a min-heap of
// candidate merges ordered by (rank, position); stale entries are skipped when
// their pair no longer yields the same token.
func (b *bpe) applyMerges(s *bpeScratch, syms []symbol) []symbol {
	if len(syms) < 2 {
		return syms
	}
	h := s.heap[:0]
	for i := 0; i+1 < len(syms); i++ {
		if (i+1)%stopEvery == 0 && s.stopped() {
			s.heap = h
			return syms
		}
		if m, ok := b.merges.get(pairKey(syms[i].id, syms[i+1].id)); ok {
			h = h.push(newCand(m.rank, int32(i), m.id))
		}
	}
	for k := 1; len(h) > 0; k++ {
		if k%stopEvery == 0 && s.stopped() {
			break
		}
		var top mergeCand
		h, top = h.pop()
		pos := top.pos()
		cur := &syms[pos]
		if cur.n == 0 || cur.next == -1 {
			continue
		}
		nextPos := cur.next
		right := syms[nextPos]
		m, ok := b.merges.get(pairKey(cur.id, right.id))
		if !ok || m.id != top.id {
			continue
		}
		cur.id = top.id
		cur.n += right.n
		cur.next = right.next
		syms[nextPos].n = 0
		if right.next >= 0 && int(right.next) < len(syms) {
			syms[right.next].prev = pos
		}
		if cur.prev >= 0 {
			if m, ok := b.merges.get(pairKey(syms[cur.prev].id, cur.id)); ok {
				h = h.push(newCand(m.rank, cur.prev, m.id))
			}
		}
		if cur.next >= 0 && int(cur.next) < len(syms) {
			if m, ok := b.merges.get(pairKey(cur.id, syms[cur.next].id)); ok {
				h = h.push(newCand(m.rank, pos, m.id))
			}
		}
	}
	s.heap = h
	return syms
}

// mergeTable is an open-addressing hash table from symbol pairs to merges:
// the lookup of the merge loop, about twice as fast as a Go map here.
type mergeTable struct {
	slots []mergeSlot
	shift uint
}

type mergeSlot struct {
	key uint64 // emptyPair if unused
	val merge
}

const emptyPair = ^uint64(0)

func newMergeTable(n int) mergeTable {
	size, shift := 16, uint(60)
	for size < 2*n {
		size *= 2
		shift--
	}
	slots := make([]mergeSlot, size)
	for i := range slots {
		slots[i].key = emptyPair
	}
	return mergeTable{slots: slots, shift: shift}
}

func (t *mergeTable) slot(key uint64) uint64 { return (key * 0x9E3779B97F4A7C15) >> t.shift }

func (t *mergeTable) put(key uint64, v merge) {
	mask := uint64(len(t.slots) - 1)
	for i := t.slot(key); ; i = (i + 1) & mask {
		if s := &t.slots[i]; s.key == emptyPair || s.key == key {
			s.key, s.val = key, v
			return
		}
	}
}

func (t *mergeTable) get(key uint64) (merge, bool) {
	mask := uint64(len(t.slots) - 1)
	for i := t.slot(key); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == key {
			return s.val, true
		}
		if s.key == emptyPair {
			return merge{}, false
		}
	}
}

// mergeCand is a merge waiting in the heap: key orders by rank, then
// position.
type mergeCand struct {
	key uint64 // rank<<32 | pos
	id  int32
}

func newCand(rank, pos, id int32) mergeCand {
	return mergeCand{key: uint64(uint32(rank))<<32 | uint64(uint32(pos)), id: id}
}

func (c mergeCand) pos() int32 { return int32(uint32(c.key)) }

// mergeHeap is a 4-ary min-heap of merge candidates.
type mergeHeap []mergeCand

func (h mergeHeap) push(c mergeCand) mergeHeap {
	h = append(h, c)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 4
		if h[p].key <= c.key {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = c
	return h
}

func (h mergeHeap) pop() (mergeHeap, mergeCand) {
	top := h[0]
	n := len(h) - 1
	last := h[n]
	h = h[:n]
	if n == 0 {
		return h, top
	}
	i := 0
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		for k := c + 1; k < c+4 && k < n; k++ {
			if h[k].key < h[m].key {
				m = k
			}
		}
		if h[m].key >= last.key {
			break
		}
		h[i] = h[m]
		i = m
	}
	h[i] = last
	return h, top
}

// wordCache remembers the ids of words already merged. It is sharded to keep
// lock contention low; a full shard is emptied rather than evicted piecemeal.
type wordCache struct {
	seed   maphash.Seed
	shards [wordCacheShards]wordCacheShard
}

const (
	wordCacheShards   = 32
	wordCacheShardCap = 2048 // words per shard
	wordCacheMaxWord  = 256  // longer words are not cached (bytes)
)

type wordCacheShard struct {
	mu sync.RWMutex
	m  map[string][]int32 // guarded by mu
}

func (c *wordCache) init() {
	c.seed = maphash.MakeSeed()
	for i := range c.shards {
		c.shards[i].m = make(map[string][]int32)
	}
}

// reset empties the cache.
func (c *wordCache) reset() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		clear(s.m)
		s.mu.Unlock()
	}
}

func (c *wordCache) shard(word string) *wordCacheShard {
	return &c.shards[maphash.String(c.seed, word)%wordCacheShards]
}

func (c *wordCache) get(word string) ([]int32, bool) {
	if len(word) > wordCacheMaxWord {
		return nil, false
	}
	s := c.shard(word)
	s.mu.RLock()
	ids, ok := s.m[word]
	s.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(word string, ids []int32) {
	if len(word) > wordCacheMaxWord {
		return
	}
	s := c.shard(word)
	s.mu.Lock()
	if len(s.m) >= wordCacheShardCap {
		clear(s.m)
	}
	s.m[strings.Clone(word)] = append([]int32(nil), ids...)
	s.mu.Unlock()
}
