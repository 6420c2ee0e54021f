//go:build race

package engine

// raceEnabled says the race detector is on: it slows the in-process
// simulator and the feed some ten times, so TestKVMirror sends a smaller
// load then (make stress runs the full one).
const raceEnabled = true
