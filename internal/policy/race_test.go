//go:build race

package policy

// raceEnabled is whether the race detector is on: it makes simulations
// slow, so they shrink.
const raceEnabled = true
