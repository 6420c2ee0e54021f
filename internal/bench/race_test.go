//go:build race

package bench

// raceEnabled is true when the tests run with the race detector, which
// slows the simulator children enough to blur timing comparisons.
const raceEnabled = true
