// Package capture records a gateway's traffic as a Mooncake-format trace:
// one JSON line per request, with its arrival in milliseconds from the
// capture's start, its prompt and output lengths in tokens and its
// prompt's KV blocks as small integer ids, never any text. inferrail-bench
// replays such a file (workload trace), so a user can take their own
// traffic home and run it against every policy.
//
// A line reads
//
//	{"timestamp":1520.250,"input_length":2117,"output_length":180,"hash_ids":[0,1,2],
//	 "model":"m","block_size":16,"input_source":"tokenizer","output_source":"usage"}
//
// on one line. timestamp, input_length, output_length and hash_ids are
// Mooncake's keys; the others say what the numbers stand for. Block i of
// hash_ids is the i-th full block of block_size tokens of the prompt as
// the model's engines cut it, and its id stands for the block's chained
// hash, that is for the whole prompt up to it: two requests whose lists
// start alike share that prefix. Ids are numbered per model in the order
// the writer first meets the blocks, from 0, and never reused.
// input_source is "tokenizer" when the gateway tokenized the prompt
// (input_length exact, hash_ids given) and "estimate" when it could not
// (its body's bytes over four, or a completion's prompt array counted by
// its content, an id a token and a text its bytes over four; no
// hash_ids). output_source is where the
// output length came from: "usage" (the engine's), or an estimate,
// "stream_chunks" or "bytes"; an empty output is written as 1 token, the
// least the format holds. block_size is left out of a line without
// hash_ids. Only requests an engine answered with a 2xx are captured, each
// when its response ends: lines are in the order responses ended, not
// arrivals (a replay sorts them by timestamp).
//
// The id maps are the writer's alone and bounded: each model's holds at
// most Options.MaxBlockIDs hashes, in two generations; when the young one
// fills, the old one is forgotten and the young one takes its place. A
// forgotten block met again gets a new id, so the replay misses that
// prefix once; Stats counts the hashes forgotten.
//
// Each Writer is a capture of its own, its timestamps and ids starting
// again: a file already at its path (an earlier capture's) is moved aside
// as a rotated file, never appended to.
package capture
