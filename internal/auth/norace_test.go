//go:build !race

package auth

// raceEnabled says the race detector is on: the long single-goroutine
// tests skip then, and make norace runs them without it.
const raceEnabled = false
