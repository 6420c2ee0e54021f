package index

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"

	"pgregory.net/rapid"
)

// testIndex is the conformance suite for Index implementations: what every
// source of truth must do with the gateway's records. Each subtest builds
// its index with newIndex and sets the capacity of every replica it uses.
func testIndex(t *testing.T, newIndex func() Index) {
	t.Run("Empty", func(t *testing.T) { testEmpty(t, newIndex()) })
	t.Run("Prefix", func(t *testing.T) { testPrefix(t, newIndex()) })
	t.Run("LastBlock", func(t *testing.T) { testLastBlock(t, newIndex()) })
	t.Run("TakeBack", func(t *testing.T) { testTakeBack(t, newIndex) })
	t.Run("Forget", func(t *testing.T) { testForget(t, newIndex()) })
	t.Run("Reset", func(t *testing.T) { testReset(t, newIndex()) })
	t.Run("Capacity", func(t *testing.T) { testCapacity(t, newIndex()) })
	t.Run("ManyReplicas", func(t *testing.T) { testManyReplicas(t, newIndex()) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, newIndex()) })
	t.Run("Soak", func(t *testing.T) { testSoak(t, newIndex()) })
}

const bs = 16 // block size in the suite

func match(idx Index, cands []string, p []blockhash.Hash) []int {
	return idx.Match(nil, cands, p, tokensFor(len(p), bs), bs)
}

func wantMatch(t *testing.T, idx Index, cands []string, p []blockhash.Hash, want ...int) {
	t.Helper()
	if got := match(idx, cands, p); !slices.Equal(got, want) {
		t.Errorf("Match(%v, %d blocks) = %v, want %v", cands, len(p), got, want)
	}
}

func testEmpty(t *testing.T, idx Index) {
	p := extend(nil, 5)
	wantMatch(t, idx, []string{"a", "b"}, p, 0, 0)
	wantMatch(t, idx, nil, p, []int{}...)
	if got := idx.Match(nil, []string{"a"}, nil, 0, bs); !slices.Equal(got, []int{0}) {
		t.Errorf("Match of no blocks = %v, want [0]", got)
	}
	idx.TakeBack(Token{}) // must not panic
	idx.Forget("a")
	idx.Reset("a")
	if st := idx.Stats(); st.Entries != 0 || len(st.Replicas) != 0 {
		t.Errorf("Stats of an empty index = %+v", st)
	}
	checkIndex(t, idx)
}

func testPrefix(t *testing.T, idx Index) {
	join(idx, "a", 100)
	join(idx, "b", 100)
	p := extend(nil, 8)
	idx.Record("a", p)
	wantMatch(t, idx, []string{"a", "b", "a", "zz"}, p, 8, 0, 8, 0)

	// A longer prompt over the same prefix: a holds its first 8 blocks.
	long := extend(p, 4)
	wantMatch(t, idx, []string{"a", "b"}, long, 8, 0)
	// A prompt that leaves p after 3 blocks.
	fork := extend(p[:3], 5)
	wantMatch(t, idx, []string{"a"}, fork, 3)
	// A shorter prompt inside p.
	wantMatch(t, idx, []string{"a"}, p[:5], 5)

	// b learns the fork; each replica answers for itself.
	idx.Record("b", fork)
	wantMatch(t, idx, []string{"a", "b"}, fork, 3, 8)
	wantMatch(t, idx, []string{"b", "a"}, long, 3, 8)

	// dst is reused when large enough and resized to the candidates.
	dst := make([]int, 1, 8)
	got := idx.Match(dst, []string{"a", "b", "a"}, long, tokensFor(len(long), bs), bs)
	if !slices.Equal(got, []int{8, 3, 8}) || &got[0] != &dst[0] {
		t.Errorf("Match into dst = %v (reused %v), want [8 3 8] in dst", got, &got[0] == &dst[0])
	}
	if st := idx.Stats(); st.Entries != 16 {
		t.Errorf("Stats().Entries = %d, want 16 (8 on a, 8 on b)", st.Entries)
	}
	checkIndex(t, idx)
}

func testLastBlock(t *testing.T, idx Index) {
	join(idx, "a", 100)
	p := extend(nil, 8) // 8 full blocks of 16 tokens
	idx.Record("a", p)
	for _, c := range []struct {
		name          string
		blocks, toks  int
		bsize, wantHi int
	}{
		{"exact_multiple", 8, 128, 16, 7},
		{"one_past", 8, 129, 16, 8},
		{"partial_block", 8, 143, 16, 8},
		{"one_block_exact", 1, 16, 16, 0},
		{"one_block_and_token", 1, 17, 16, 1},
		{"no_tokens", 8, 0, 16, 0},
		{"one_token", 8, 1, 16, 0},
		{"fewer_tokens_than_blocks", 8, 50, 16, 3},
		{"block_size_one", 8, 8, 1, 7},
		{"block_size_one_more", 8, 9, 1, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := idx.Match(nil, []string{"a", "b"}, p[:c.blocks], c.toks, c.bsize)
			if want := []int{c.wantHi, 0}; !slices.Equal(got, want) {
				t.Errorf("Match(%d blocks, %d tokens, block size %d) = %v, want %v", c.blocks, c.toks, c.bsize, got, want)
			}
		})
	}
	t.Run("zero_block_size_panics", func(t *testing.T) {
		defer func() {
			if recover() == nil {
				t.Error("Match with block size 0 did not panic")
			}
		}()
		idx.Match(nil, []string{"a"}, p, 128, 0)
	})
}

func testTakeBack(t *testing.T, newIndex func() Index) {
	t.Run("added_blocks_go", func(t *testing.T) {
		idx := newIndex()
		join(idx, "a", 100)
		base := extend(nil, 4)
		idx.Record("a", base)
		p := extend(base, 4)
		tok := idx.Record("a", p)
		wantMatch(t, idx, []string{"a"}, p, 8)
		idx.TakeBack(tok)
		// The blocks held before the record stay.
		wantMatch(t, idx, []string{"a"}, p, 4)
		idx.TakeBack(tok) // twice: nothing more
		wantMatch(t, idx, []string{"a"}, p, 4)
		if st := idx.Stats(); st.Entries != 4 {
			t.Errorf("Entries after TakeBack = %d, want 4", st.Entries)
		}
		checkIndex(t, idx)
	})
	t.Run("later_record_keeps_blocks", func(t *testing.T) {
		idx := newIndex()
		join(idx, "a", 100)
		p := extend(nil, 6)
		first := idx.Record("a", p)
		second := idx.Record("a", p) // touches all of p again
		idx.TakeBack(first)
		wantMatch(t, idx, []string{"a"}, p, 6)
		idx.TakeBack(second) // added nothing
		wantMatch(t, idx, []string{"a"}, p, 6)
		checkIndex(t, idx)
	})
	t.Run("later_prompt_keeps_shared_prefix", func(t *testing.T) {
		idx := newIndex()
		join(idx, "a", 100)
		p := extend(nil, 6)
		tok := idx.Record("a", p)
		q := extend(p[:3], 2) // shares p's first 3 blocks
		idx.Record("a", q)
		idx.TakeBack(tok)
		wantMatch(t, idx, []string{"a", "a"}, p, 3, 3)
		wantMatch(t, idx, []string{"a"}, q, 5)
		checkIndex(t, idx)
	})
	t.Run("other_replicas_untouched", func(t *testing.T) {
		idx := newIndex()
		join(idx, "a", 100)
		join(idx, "b", 100)
		p := extend(nil, 5)
		idx.Record("b", p)
		tok := idx.Record("a", p)
		idx.TakeBack(tok)
		wantMatch(t, idx, []string{"a", "b"}, p, 0, 5)
		checkIndex(t, idx)
	})
	t.Run("after_reset_or_forget", func(t *testing.T) {
		idx := newIndex()
		join(idx, "a", 100)
		p := extend(nil, 5)
		tok := idx.Record("a", p)
		idx.Reset("a")
		idx.Record("a", p)
		idx.TakeBack(tok) // from before the reset: nothing
		wantMatch(t, idx, []string{"a"}, p, 5)
		tok = idx.Record("a", extend(p, 1))
		idx.Forget("a")
		join(idx, "a", 100)
		idx.Record("a", p)
		idx.TakeBack(tok) // from before a left: nothing
		wantMatch(t, idx, []string{"a"}, p, 5)
		checkIndex(t, idx)
	})
	t.Run("token_is_a_copy", func(t *testing.T) {
		idx := newIndex()
		join(idx, "a", 100)
		p := extend(nil, 5)
		tok := idx.Record("a", p)
		other := extend(nil, 5)
		copy(p, other) // the caller reuses its buffer
		idx.TakeBack(tok)
		if st := idx.Stats(); st.Entries != 0 {
			t.Errorf("Entries after TakeBack of a reused buffer = %d, want 0", st.Entries)
		}
		checkIndex(t, idx)
	})
}

func testForget(t *testing.T, idx Index) {
	join(idx, "a", 100)
	join(idx, "b", 100)
	p := extend(nil, 6)
	idx.Record("a", p)
	idx.Record("b", p)
	idx.Forget("a")
	idx.Forget("a") // twice
	wantMatch(t, idx, []string{"a", "b"}, p, 0, 6)
	st := idx.Stats()
	if _, _, ok := held(st, "a"); ok || st.Entries != 6 {
		t.Errorf("Stats after Forget(a) = %+v, want only b with 6 blocks", st)
	}
	checkIndex(t, idx)
	// Back in the fleet, it starts empty.
	join(idx, "a", 100)
	wantMatch(t, idx, []string{"a", "b"}, p, 0, 6)
	idx.Record("a", p[:2])
	wantMatch(t, idx, []string{"a", "b"}, p, 2, 6)
	checkIndex(t, idx)
}

func testReset(t *testing.T, idx Index) {
	join(idx, "a", 50)
	join(idx, "b", 100)
	p := extend(nil, 6)
	idx.Record("a", p)
	idx.Record("b", p)
	idx.Reset("a")
	idx.Reset("nobody")
	wantMatch(t, idx, []string{"a", "b"}, p, 0, 6)
	if h, c, ok := held(idx.Stats(), "a"); !ok || h != 0 || c != 50 {
		t.Errorf("a after Reset: held %d, capacity %d, known %v; want 0, 50, true", h, c, ok)
	}
	checkIndex(t, idx)
}

func testCapacity(t *testing.T, idx Index) {
	join(idx, "a", 10)
	p := extend(nil, 8)
	q := extend(nil, 8)
	idx.Record("a", p)
	idx.Record("a", q)
	if h, c, _ := held(idx.Stats(), "a"); h > c || c != 10 {
		t.Errorf("a holds %d of capacity %d, want at most 10", h, c)
	}
	join(idx, "a", 0)
	wantMatch(t, idx, []string{"a"}, q, 0)
	if h, _, _ := held(idx.Stats(), "a"); h != 0 {
		t.Errorf("a holds %d at capacity 0", h)
	}
	idx.Record("a", q)
	if h, _, _ := held(idx.Stats(), "a"); h != 0 {
		t.Errorf("a holds %d after a Record at capacity 0", h)
	}
	join(idx, "a", -5)
	if _, c, _ := held(idx.Stats(), "a"); c != 0 {
		t.Errorf("capacity after SetCapacity(-5) = %d, want 0", c)
	}
	// A prompt longer than the cache keeps its head.
	join(idx, "a", 3)
	idx.Record("a", p)
	wantMatch(t, idx, []string{"a"}, p, 3)
	checkIndex(t, idx)
}

// testManyReplicas crosses the 64-replica boundary of a holder word.
func testManyReplicas(t *testing.T, idx Index) {
	const n = 200
	ids := make([]string, n)
	prompts := make([][]blockhash.Hash, n)
	base := extend(nil, 3)
	for i := range n {
		ids[i] = "r" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		join(idx, ids[i], 100)
		prompts[i] = extend(base, i%7)
		idx.Record(ids[i], prompts[i])
	}
	long := prompts[n-1]
	got := match(idx, ids, long)
	for i := range n {
		want := 3
		if i == n-1 {
			want = len(long)
		}
		if got[i] != want {
			t.Errorf("Match: %s = %d, want %d", ids[i], got[i], want)
		}
	}
	// Forget some in the middle and reuse their handles.
	for i := 10; i < 150; i += 3 {
		idx.Forget(ids[i])
	}
	join(idx, "late", 100)
	idx.Record("late", long)
	got = match(idx, []string{"late", ids[10], ids[n-1], ids[11]}, long)
	if want := []int{len(long), 0, len(long), 3}; !slices.Equal(got, want) {
		t.Errorf("Match after Forget = %v, want %v", got, want)
	}
	checkIndex(t, idx)
}

// testConcurrent records, takes back, matches, forgets and resets from many
// goroutines at once, for the race detector and the consistency check.
func testConcurrent(t *testing.T, idx Index) {
	const (
		replicas  = 16
		recorders = 12
		matchers  = 6
		churners  = 2
	)
	ids := make([]string, replicas)
	for i := range ids {
		ids[i] = "r" + string(rune('a'+i))
		join(idx, ids[i], 200)
	}
	// A pool of chained prompts: system prompts, then conversations.
	var pool [][]blockhash.Hash
	for range 8 {
		sys := extend(nil, 4+rand.IntN(8))
		for range 16 {
			pool = append(pool, extend(sys, rand.IntN(40)))
		}
	}
	duration := time.Second
	if testing.Short() {
		duration = 200 * time.Millisecond
	}
	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		records atomic.Int64
		matches atomic.Int64
	)
	for g := range recorders {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for !stop.Load() {
				p := pool[rng.IntN(len(pool))]
				tok := idx.Record(ids[rng.IntN(replicas)], p)
				if rng.IntN(4) == 0 {
					idx.TakeBack(tok)
				}
				records.Add(1)
			}
		})
	}
	for g := range matchers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			var dst []int
			for !stop.Load() {
				p := pool[rng.IntN(len(pool))]
				toks := len(p)*bs - rng.IntN(2)*(bs-1)
				dst = idx.Match(dst, ids, p, toks, bs)
				limit := hitLimit(len(p), toks, bs)
				for i, d := range dst {
					if d < 0 || d > limit {
						t.Errorf("Match: %s = %d, want within [0, %d]", ids[i], d, limit)
						return
					}
				}
				matches.Add(1)
			}
		})
	}
	for g := range churners {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for !stop.Load() {
				id := ids[rng.IntN(replicas)]
				switch rng.IntN(3) {
				case 0:
					idx.Forget(id)
					join(idx, id, 200)
				case 1:
					idx.Reset(id)
				case 2:
					join(idx, id, 50+rng.IntN(300))
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	time.Sleep(duration)
	stop.Store(true)
	wg.Wait()
	t.Logf("%d records, %d matches", records.Load(), matches.Load())
	st := idx.Stats()
	for _, r := range st.Replicas {
		if r.Held > r.Capacity {
			t.Errorf("%s holds %d blocks, capacity %d", r.ID, r.Held, r.Capacity)
		}
	}
	checkIndex(t, idx)
}

// testSoak records 40,000 distinct prompts and checks that no replica ever
// holds more than its capacity.
func testSoak(t *testing.T, idx Index) {
	const replicas = 8
	prompts := 40_000
	if testing.Short() {
		prompts = 4_000
	}
	ids := make([]string, replicas)
	for i := range ids {
		ids[i] = "r" + string(rune('a'+i))
		join(idx, ids[i], 500+100*i)
	}
	soak(t, idx, ids, prompts, 16, 1)
	checkIndex(t, idx)
}

// soak records n distinct prompts of up to maxBlocks blocks (a few shared
// system prompts, each extended by fresh blocks), spread over ids, and
// fails when a replica holds more than its capacity. It returns the blocks
// recorded.
func soak(t testing.TB, idx Index, ids []string, n, maxBlocks int, seed uint64) int {
	rng := rand.New(rand.NewPCG(seed, 4))
	systems := make([][]blockhash.Hash, 16)
	for i := range systems {
		systems[i] = extend(nil, 1+rng.IntN(maxBlocks/4))
	}
	recorded := 0
	for i := range n {
		sys := systems[rng.IntN(len(systems))]
		p := extend(sys, 1+rng.IntN(maxBlocks-len(sys)))
		idx.Record(ids[rng.IntN(len(ids))], p)
		recorded += len(p)
		if i%1000 == 999 || i == n-1 {
			for _, r := range idx.Stats().Replicas {
				if r.Held > r.Capacity {
					t.Fatalf("after %d prompts %s holds %d blocks, capacity %d", i+1, r.ID, r.Held, r.Capacity)
				}
			}
		}
	}
	return recorded
}

func TestApprox(t *testing.T) {
	testIndex(t, func() Index { return NewApprox(1000) })
}

// TestApproxIDs checks that candidates are told apart by their contents,
// however their strings were made: the registry's fast path compares the
// address and the length of ID strings.
func TestApproxIDs(t *testing.T) {
	idx := NewApprox(100)
	long := "replica-10"
	short := strings.Clone(long[:9]) // "replica-1", another allocation
	p := extend(nil, 4)
	idx.Join(long)
	idx.Join(short)
	idx.Record(long, p)
	idx.Record(short, p[:2])
	for _, c := range []struct {
		name string
		id   string
		want int
	}{
		{"same_string", long, 4},
		{"copy", strings.Clone(long), 4},
		{"prefix_of_the_same_bytes", long[:9], 2},
		{"built", fmt.Sprintf("replica-%d", 10), 4},
		{"empty", "", 0},
		{"unknown_sharing_bytes", long[:8], 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := match(idx, []string{c.id}, p); got[0] != c.want {
				t.Errorf("Match(%q) = %d, want %d", c.id, got[0], c.want)
			}
		})
	}
	idx.Join("") // the empty ID is an ID like any other
	idx.Record("", p[:1])
	if got := match(idx, []string{""}, p); got[0] != 1 {
		t.Errorf(`Match("") = %d, want 1`, got[0])
	}
	checkIndex(t, idx)
}

// TestApproxNotChains feeds hashes that break the chain contract (repeats,
// blocks at two depths). Answers may then be wrong, but the index must not
// hang, panic or lose its consistency.
func TestApproxNotChains(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		idx := NewApprox(rapid.IntRange(0, 10).Draw(t, "defaultCapacity"))
		pool := extend(nil, 6)
		ids := []string{"a", "b", "c"}
		for _, id := range ids {
			idx.Join(id)
		}
		var toks []Token
		for range rapid.IntRange(1, 40).Draw(t, "steps") {
			id := rapid.SampledFrom(ids).Draw(t, "replica")
			p := rapid.SliceOfN(rapid.SampledFrom(pool), 0, 12).Draw(t, "hashes")
			switch rapid.IntRange(0, 4).Draw(t, "op") {
			case 0, 1:
				toks = append(toks, idx.Record(id, p))
			case 2:
				if len(toks) > 0 {
					idx.TakeBack(toks[rapid.IntRange(0, len(toks)-1).Draw(t, "token")])
				}
			case 3:
				join(idx, id, rapid.IntRange(0, 8).Draw(t, "capacity"))
			case 4:
				got := idx.Match(nil, ids, p, len(p)+1, 1)
				for i, d := range got {
					if d < 0 || d > len(p) {
						t.Fatalf("Match: %s = %d of %d blocks", ids[i], d, len(p))
					}
				}
			}
			if err := idx.check(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestRecordPromptFollowsEngineEviction replays, on a cache of four blocks,
// the eviction the engine's free queue makes when prompts end in a partial
// block: that block takes a slot while the prompt is computed and is freed
// unhashed, so one more cached block goes.
func TestRecordPromptFollowsEngineEviction(t *testing.T) {
	x := NewApprox(4)
	chain := func(seed uint64, n int) []blockhash.Hash {
		var hs []blockhash.Hash
		for i := range n {
			hs = append(hs, blockhash.Hash{Hi: seed, Lo: uint64(i)})
		}
		return hs
	}
	a, b, c, d := chain(1, 1), chain(2, 2), chain(3, 2), chain(4, 2)
	x.Join("r")
	x.RecordPrompt("r", a, 1) // A: 1 full block + a partial one
	x.RecordPrompt("r", b, 1) // B: 2 + partial: cache {A0, B0, B1}
	x.RecordPrompt("r", c, 1) // C: 2 + partial: the engine evicts A0 and B1
	held := func(hs []blockhash.Hash) int {
		return x.Match(nil, []string{"r"}, hs, 1000*16, 16)[0]
	}
	if held(a) != 0 || held(b) != 1 || held(c) != 2 {
		t.Errorf("after C: A holds %d, B %d, C %d blocks; the engine keeps B0, C0, C1", held(a), held(b), held(c))
	}
	x.RecordPrompt("r", d, 0) // D: 2 full blocks, no partial: one more eviction
	if held(b) != 0 || held(c) != 2 || held(d) != 2 {
		t.Errorf("after D: B holds %d, C %d, D %d; the engine keeps C0, C1, D0, D1", held(b), held(c), held(d))
	}
	if st := x.Stats(); st.Entries != 4 {
		t.Errorf("%d blocks held, want all 4 slots hashed once no partial block is left", st.Entries)
	}
}

// TestMatchAllocatesNothing: once warm, matching allocates nothing, by ID
// or by handle, within one holder word or beyond it (candidates past the
// 64th replica, or more than 64 of them): every routing decision matches.
func TestMatchAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items on purpose")
	}
	for _, n := range []int{8, 64, 200} {
		idx := NewApprox(1 << 12)
		var ids []string
		for i := range n {
			ids = append(ids, fmt.Sprintf("r%03d", i))
		}
		prompt := extend(nil, 100)
		for i, id := range ids {
			idx.Join(id)
			idx.Record(id, prompt[:i%len(prompt)])
		}
		hd := idx.Resolve(ids)
		last := []int{n - 1} // past the first holder word when n > 64
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		dst := make([]int, 0, n)
		for name, match := range map[string]func(){
			"ids":        func() { dst = idx.Match(dst, ids, prompt, tokensFor(len(prompt), 1), 1) },
			"handles":    func() { dst = idx.MatchHandles(dst, hd, all, prompt, tokensFor(len(prompt), 1), 1) },
			"one handle": func() { dst = idx.MatchHandles(dst, hd, last, prompt, tokensFor(len(prompt), 1), 1) },
			"one ID":     func() { dst = idx.Match(dst, ids[n-1:], prompt, tokensFor(len(prompt), 1), 1) },
		} {
			match()
			if got := testing.AllocsPerRun(50, match); got != 0 {
				t.Errorf("%d replicas, %s: %v allocations a match", n, name, got)
			}
		}
	}
}
