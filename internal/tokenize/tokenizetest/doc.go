// Package tokenizetest holds what the tests and benchmarks of the tokenize
// packages share: the benchmark corpus and the chats built from it, texts
// of repeated pieces, the concurrent check of a tokenizer's piece cache,
// and the checks every Hugging Face family's encoding passes. Only tests
// import it.
package tokenizetest
