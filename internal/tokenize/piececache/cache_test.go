package piececache

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// clockModel is a plain CLOCK over a slice, the reference for one shard:
// ring[0] is under the hand, and a new entry goes at the end, just behind
// it.
type clockModel struct {
	budget, tokens int
	ring           []clockModelEntry
}

type clockModelEntry struct {
	key   uint64
	text  string
	start bool
	ids   []int
	ref   bool
}

func (m *clockModel) find(key uint64) int {
	return slices.IndexFunc(m.ring, func(e clockModelEntry) bool { return e.key == key })
}

func (m *clockModel) get(key uint64, text string, start bool) ([]int, bool) {
	i := m.find(key)
	if i < 0 || m.ring[i].text != text || m.ring[i].start != start {
		return nil, false
	}
	m.ring[i].ref = true
	return m.ring[i].ids, true
}

// charge is what the model counts a piece at: its ids, or a token for
// every four bytes of text, begun or whole, when that is more.
func charge(text string, ids []int) int {
	byText := len(text) / 4
	if len(text)%4 != 0 {
		byText++
	}
	if byText > len(ids) {
		return byText
	}
	return len(ids)
}

func (m *clockModel) remove(i int) {
	m.tokens -= charge(m.ring[i].text, m.ring[i].ids)
	m.ring = slices.Delete(m.ring, i, i+1)
}

func (m *clockModel) put(key uint64, text string, start bool, ids []int) {
	if len(ids) == 0 || charge(text, ids) > m.budget/4 {
		return
	}
	if i := m.find(key); i >= 0 {
		if m.ring[i].text == text && m.ring[i].start == start {
			return
		}
		m.remove(i)
	}
	for m.tokens+charge(text, ids) > m.budget {
		if m.ring[0].ref {
			e := m.ring[0]
			e.ref = false
			m.ring = append(m.ring[1:], e)
			continue
		}
		m.remove(0)
	}
	m.ring = append(m.ring, clockModelEntry{key, text, start, ids, false})
	m.tokens += charge(text, ids)
}

// TestPieceCacheModel checks the cache against clockModel, one per shard,
// under random puts (hash collisions included) and lookups: the same
// entries stay, lookups agree, and no shard, hence not the cache, ever holds
// more tokens than its share of the bound.
func TestPieceCacheModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		maxTokens := rapid.OneOf(rapid.IntRange(1, 300), rapid.IntRange(1<<17, 1<<19)).Draw(rt, "maxTokens")
		c := New(maxTokens)
		total := 0
		models := make([]*clockModel, len(c.shards))
		for i := range c.shards {
			total += c.shards[i].budget
			models[i] = &clockModel{budget: c.shards[i].budget}
		}
		if total != maxTokens {
			rt.Fatalf("shard budgets add up to %d, want %d", total, maxTokens)
		}
		// Texts get ids proportional to the budget so that shards fill.
		scale := max(1, maxTokens/len(c.shards)/40)
		// Some texts span more bytes than four a token: runs of spaces,
		// as one long token each.
		texts := rapid.SliceOfNDistinct(rapid.StringMatching(`[a-e]{1,4}|[a-e] {40,600}`), 1, 30, rapid.ID).Draw(rt, "texts")
		var hits, misses uint64
		for step := range rapid.IntRange(1, 200).Draw(rt, "steps") {
			i := rapid.IntRange(0, len(texts)-1).Draw(rt, "text")
			text, start := texts[i], rapid.Bool().Draw(rt, "start")
			key := c.Key(text, start)
			if rapid.IntRange(0, 9).Draw(rt, "collide") == 0 {
				key = c.Key(texts[0], false) // another text under the same key
			}
			m := models[key%uint64(len(c.shards))]
			if rapid.Bool().Draw(rt, "put") {
				n := rapid.IntRange(0, 12).Draw(rt, "n") * scale
				ids := make([]int, n)
				for j := range ids {
					ids[j] = i*1000 + j
				}
				c.Put(key, text, start, ids)
				m.put(key, text, start, ids)
			} else {
				got, ok := c.AppendCached(nil, key, text, start)
				want, wantOK := m.get(key, text, start)
				if ok != wantOK || !slices.Equal(got, want) {
					rt.Fatalf("step %d: lookup %q start=%v = %v, %v; model %v, %v", step, text, start, got, ok, want, wantOK)
				}
				if ok {
					hits++
				} else {
					misses++
				}
			}
			for s := range c.shards {
				sh := &c.shards[s]
				var keys []uint64
				if e := sh.hand; e != nil {
					for {
						keys = append(keys, e.key)
						if e = e.next; e == sh.hand {
							break
						}
					}
				}
				var want []uint64
				for _, e := range models[s].ring {
					want = append(want, e.key)
				}
				if !slices.Equal(keys, want) || sh.tokens != models[s].tokens || len(sh.m) != len(want) {
					rt.Fatalf("step %d: shard %d holds %v (%d tokens, %d in map), model %v (%d tokens)",
						step, s, keys, sh.tokens, len(sh.m), want, models[s].tokens)
				}
				if sh.tokens > sh.budget {
					rt.Fatalf("step %d: shard %d holds %d tokens, budget %d", step, s, sh.tokens, sh.budget)
				}
			}
		}
		if _, tokens := c.Size(); tokens > maxTokens {
			rt.Fatalf("%d tokens cached, bound %d", tokens, maxTokens)
		}
		if h, m := c.Stats(); h != hits || m != misses {
			rt.Fatalf("stats() = %d, %d; counted %d, %d", h, m, hits, misses)
		}
	})
}

// TestLongTokensBoundTheText: pieces whose tokens each span many bytes
// (runs of spaces, one token per 128 in Llama 3) are charged by their
// text, so what the cache holds stays within four bytes a token of its
// budget, where counted by tokens alone it held 30 times that (a
// review's finding).
func TestLongTokensBoundTheText(t *testing.T) {
	const budget = 1 << 16
	c := New(budget)
	ids := make([]int, 32)
	for i := range 4 * budget / len(ids) {
		text := fmt.Sprintf("u%d", i) + strings.Repeat(" ", 4000)
		c.Put(c.Key(text, false), text, false, ids)
	}
	held := 0
	for i := range c.shards {
		for _, e := range c.shards[i].m {
			held += len(e.text)
		}
	}
	if pieces, _ := c.Size(); pieces == 0 || held > 4*budget {
		t.Errorf("%d pieces hold %d bytes of text, want some and at most %d", pieces, held, 4*budget)
	}
}
