//go:build !race

package workload

// raceEnabled says the race detector is on: the long single-goroutine
// tests skip then, and make norace runs them without it.
const raceEnabled = false
