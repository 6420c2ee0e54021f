// Package events is the vendor-neutral form of an engine's KV cache events:
// the batches vLLM publishes (and SGLang, in its older array shape) when
// blocks enter the prefix cache, leave it, or the whole cache is cleared.
//
// The msgpack codec (both of vLLM's encodings and SGLang's shape) lives
// here as pure functions over bytes, so it can be fuzzed and benchmarked
// without a socket; the ZeroMQ transport that carries batches lives in
// package zmtp.
package events
