//go:build race

package gateway

// raceEnabled says the race detector is on: it slows the fault scenarios'
// simulators, which run in the test process, some ten times, so gw-kill
// sends a lighter load then (make stress runs the full one).
const raceEnabled = true
