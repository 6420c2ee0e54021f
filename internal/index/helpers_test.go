package index

import (
	"slices"
	"sync/atomic"
	"testing"

	"github.com/inferrail/inferrail/internal/blockhash"
)

var testSeed = blockhash.Seed("test-model", "", "")

// fresh counts tokens handed out, so every extension is new.
var fresh atomic.Int64

// extend returns prefix followed by n blocks never hashed before, chained
// as tokenize chains real prompts (block size 1: one fresh token a block).
func extend(prefix []blockhash.Hash, n int) []blockhash.Hash {
	toks := make([]int, len(prefix)+n)
	base := fresh.Add(int64(n)) - int64(n)
	for i := range n {
		toks[len(prefix)+i] = int(base) + i + 1
	}
	return blockhash.Extend(slices.Clip(slices.Clone(prefix)), testSeed, toks, 1)
}

// tokensFor is a prompt length with n full blocks of size bs and a partial
// block after them, so no block is lost to the last-token rule.
func tokensFor(n, bs int) int { return n*bs + 1 }

func checkIndex(t testing.TB, idx Index) {
	t.Helper()
	if c, ok := idx.(checker); ok {
		if err := c.check(); err != nil {
			t.Fatalf("index inconsistent:\n%v", err)
		}
	}
}

func held(st Stats, id string) (held, capacity int, ok bool) {
	for _, r := range st.Replicas {
		if r.ID == id {
			return r.Held, r.Capacity, true
		}
	}
	return 0, 0, false
}

// join has replica id join idx, holding up to capacity blocks.
func join(idx Index, id string, capacity int) {
	idx.Join(id)
	idx.SetCapacity(id, capacity)
}
