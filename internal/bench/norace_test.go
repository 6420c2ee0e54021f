//go:build !race

package bench

import ()

const raceEnabled = false
