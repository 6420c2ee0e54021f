// Package tokenize turns prompts into the token ids an engine computes,
// which package blockhash then cuts into the blocks the index keys on: the
// reading of a request's prompt (shared by the simulator and the gateway),
// the rendering of chat requests with a model's chat template as vLLM
// prepares them (ChatRenderer), and the bounded worker pool the gateway
// tokenizes on. The tokenizers are in its sub-packages: hf reads Hugging
// Face tokenizer.json files, simtok is builtin:sim.
package tokenize
