// Package sim is inferrail-sim: a CPU stand-in for one vLLM engine that
// routers and benchmarks can run by the dozen without a GPU.
//
// It speaks vLLM's OpenAI-compatible HTTP API (chat and completions,
// streamed or not, their render endpoints, model cards, health, version,
// prefix cache reset, tokenize) with vLLM's bytes, and exports vLLM's Prometheus metrics. Behind the API, an
// Engine steps a scheduler shaped like vLLM's V1 scheduler on a virtual
// timeline: continuous batching with chunked prefill under a token budget,
// one reference-counted pool of KV blocks with prefix caching and vLLM's
// eviction order, preemption when blocks run out, and a latency model whose
// prefill cost has the shape the router's cost model prices. With
// --kv-events-config the engine publishes its KV cache events as vLLM does:
// one numbered batch per step that stores, evicts or clears blocks, on a
// ZeroMQ PUB socket, with a replay socket for the last batches, the block
// hashes computed with vLLM's own algorithm (package enginehash). Local
// starts one on a loopback port for tests and the benchmark harness.
package sim
