package decisionlog

import (
	"math"

	"github.com/zeebo/xxh3"
)

// Sampler decides which requests are logged, by ID: the same ID gets the
// same answer from every Sampler of the same rate, and an ID logged at one
// rate is logged at every higher one. The zero value logs nothing.
type Sampler struct {
	threshold uint64 // an ID whose hash is below it is logged
	all       bool
}

// NewSampler logs a rate share of requests, 0 to 1 (clamped).
func NewSampler(rate float64) Sampler {
	switch t := math.Ldexp(rate, 64); {
	case rate >= 1 || t >= math.Ldexp(1, 64):
		return Sampler{all: true}
	case rate > 0:
		return Sampler{threshold: uint64(t)}
	}
	return Sampler{}
}

// Sampled reports whether the request with ID id is logged.
func (s Sampler) Sampled(id string) bool {
	return s.all || (s.threshold > 0 && xxh3.HashString(id) < s.threshold)
}

// On reports whether the sampler logs any request.
func (s Sampler) On() bool { return s.all || s.threshold > 0 }
