// Package tokenize turns prompts into the token ids an engine computes,
// which package blockhash then cuts into the blocks the index keys on: the
// reading of a request's prompt (shared by the simulator and the gateway),
// and the bounded worker pool the gateway tokenizes on. Its sub-packages
// hold the tokenizers (hf reads Hugging Face tokenizer.json files, simtok
// is builtin:sim) and the rendering of chat requests with a model's chat
// template as vLLM prepares them (chattemplate).
package tokenize
