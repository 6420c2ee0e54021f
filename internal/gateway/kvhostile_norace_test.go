//go:build !race

package gateway

// raceEnabled says the race detector is on: the tests it makes some ten
// times slower (the hostile floods, the Hugging Face tokenizer) skip then,
// and make norace runs them.
const raceEnabled = false
