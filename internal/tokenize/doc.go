// Package tokenize turns prompts into the token ids an engine computes:
// the builtin:sim tokenizer shared by the simulator and the gateway, and the
// chat rendering that comes before tokenization.
package tokenize
