package enginehash_test

import (
	"fmt"

	"github.com/inferrail/inferrail/internal/enginehash"
)

// A simulated vLLM started with PYTHONHASHSEED=0 and the default algorithm
// hashes a 40-token prompt of block size 16: two full blocks, whose KV
// event carries these block hashes and extra keys.
func Example() {
	algo, _ := enginehash.ParseAlgo("sha256")
	h := enginehash.New(algo, enginehash.PythonHashSeed("0"))
	prompt := make([]uint32, 40)
	for i := range prompt {
		prompt[i] = uint32(i + 1)
	}
	req := enginehash.Request{}
	chain := h.AppendChain(nil, prompt, 16, req)
	for i, hash := range algo.AppendEventInts(nil, chain) {
		fmt.Println(i, hash, req.ExtraKeys(i) == nil)
	}
	// Output:
	// 0 7536218907325174565 true
	// 1 9048537298590080561 true
}

// With a LoRA adapter and a cache salt, the salt enters block 0 only.
func ExampleRequest_ExtraKeys() {
	req := enginehash.Request{LoRA: "sql-adapter", CacheSalt: "tenant-7"}
	fmt.Printf("%q %q\n", req.ExtraKeys(0), req.ExtraKeys(1))
	// Output: ["sql-adapter" "tenant-7"] ["sql-adapter"]
}
