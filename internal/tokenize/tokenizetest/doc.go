// Package tokenizetest holds what the tests and benchmarks of the tokenize
// packages share: the benchmark corpus and the chats built from it, texts
// of repeated pieces and the concurrent check of a tokenizer's piece cache.
// Only tests import it.
package tokenizetest
