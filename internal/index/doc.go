// Package index remembers which replica holds which KV cache blocks, so that
// routing can ask, for a new prompt and a set of candidate replicas, how many
// leading blocks of the prompt each candidate already has cached.
//
// A prompt is known by the chained hashes of its full blocks
// (blockhash.Extend): because each hash names its whole prefix, a
// replica's cached part of a prompt is the run of leading blocks it holds,
// and the first block it lacks ends the run.
//
// [Index] is the contract every source of truth implements. [Approx] is the
// approximate mode: it learns only from the gateway's own decisions, keeping
// for each replica a shadow LRU of the blocks routed there, as large as the
// replica's KV cache. The exact mode, fed by the engines' KV events, will
// implement the same interface.
//
// Blocks are the unit throughout: capacities, counts and predictions are in
// blocks, never tokens. Multiply by the block size for tokens.
package index
