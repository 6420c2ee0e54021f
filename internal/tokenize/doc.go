// Package tokenize turns prompts into the token ids an engine computes,
// which package blockhash then cuts into the blocks the index keys on: the
// reading of a request's prompt (shared by the simulator and the gateway),
// a reader of Hugging Face tokenizer.json files that matches transformers
// token for token, the
// rendering of chat requests with a model's chat template as vLLM prepares
// them (ChatRenderer), a cache of the pieces of prompts that requests
// repeat (system prompts, earlier turns), and the bounded worker pool the
// gateway tokenizes on.
package tokenize
