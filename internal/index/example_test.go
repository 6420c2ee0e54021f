package index_test

import (
	"fmt"

	"github.com/inferrail/inferrail/internal/blockhash"

	"github.com/inferrail/inferrail/internal/index"
)

func ExampleApprox() {
	const blockSize = 16
	idx := index.NewApprox(4096) // replicas hold 4,096 blocks unless told
	idx.Join("a")                // a and b joined the fleet; c did not
	idx.Join("b")
	idx.SetCapacity("b", 1024)

	// A 100-token prompt: 6 full blocks and 4 tokens that never form one.
	seed := blockhash.Seed("qwen3", "", "")
	tokens := make([]int, 100)
	for i := range tokens {
		tokens[i] = i
	}
	hashes := blockhash.Extend(nil, seed, tokens, blockSize)

	// Routed to a; the attempt on b fails before the engine answers.
	idx.Record("a", hashes)
	tok := idx.Record("b", hashes)
	idx.TakeBack(tok)

	cached := idx.Match(nil, []string{"a", "b", "c"}, hashes, len(tokens), blockSize)
	fmt.Println("cached blocks:", cached)

	// The first 96 tokens as a prompt of their own: the last block holds
	// the last token, which the engine computes, so one block less.
	cached = idx.Match(cached, []string{"a"}, hashes, 96, blockSize)
	fmt.Println("96 tokens:", cached)
	// Output:
	// cached blocks: [6 0 0]
	// 96 tokens: [5]
}
