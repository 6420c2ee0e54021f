//go:build race

package gateway

// hostileRace: under the race detector the hostile floods run smaller,
// being some ten times slower.
const hostileRace = true
