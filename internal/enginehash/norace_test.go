//go:build !race

package enginehash

const raceEnabled = false
