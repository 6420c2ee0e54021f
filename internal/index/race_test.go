//go:build race

package index

// raceEnabled is whether the race detector is on: its sync.Pool drops
// items on purpose, so allocation counts mean nothing.
const raceEnabled = true
