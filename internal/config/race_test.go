//go:build race

package config

// raceEnabled says the race detector is on: the long single-goroutine
// tests skip then, and make norace runs them without it.
const raceEnabled = true
