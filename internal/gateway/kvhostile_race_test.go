//go:build race

package gateway

// hostileRace: under the race detector the hostile floods are skipped,
// being some ten times slower; make norace runs them.
const hostileRace = true
