//go:build !race

package gateway

const hostileRace = false
