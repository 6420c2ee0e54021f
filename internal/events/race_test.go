//go:build race

package events

// raceEnabled: the race detector's sync and allocation bookkeeping makes
// allocation counts meaningless, so the allocation test skips under it.
const raceEnabled = true
