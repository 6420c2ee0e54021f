package config

import (
	"fmt"
	"time"
)

// Flow configures flow control: what a request does when every replica
// serving its model is at its guards (max_concurrency, max_pending). It
// changes while the gateway runs.
type Flow struct {
	// MaxQueued is how many requests may wait per model for a replica to
	// free, in every class together. 0, the default, turns the queue off:
	// a request that finds no room gets 503, as without flow control.
	MaxQueued int `yaml:"max_queued"`
	// ClassMaxQueued caps the requests of each priority class waiting per
	// model. A class's 0, the default, lets it use all of MaxQueued.
	ClassMaxQueued ClassCounts `yaml:"class_max_queued"`
	// KeyMaxQueued caps the requests one key may have waiting per model
	// and class (without keys every client is one key). 0, the default,
	// means no cap below its class's.
	KeyMaxQueued int `yaml:"key_max_queued"`
	// MaxWait bounds the time a request may wait in the queue; it never
	// waits past its server.request_timeout either. 0, the default, means
	// server.request_timeout alone. Must be >= 0.
	MaxWait Duration `yaml:"max_wait"`
	// FairShareWindow turns on fair sharing of in-flight slots while the
	// queue is on: a key (within a priority class) counts as active while
	// it has requests waiting or in flight and for this long after its
	// last one ended, and a key already holding its share of the model's
	// slots (the replicas' max_concurrency, summed, over the keys active
	// in its class and the more important ones) waits even while a slot is
	// free, so another active key always finds room at once. Alone, a key
	// may use every slot. It is also the span over which a key's usage is
	// averaged: a key that used less than its share lately goes first and
	// keeps room for its bursts (package fairshare). 0 turns it off: keys
	// then share only the queue's order. Default 5s. Must be >= 0.
	FairShareWindow Duration `yaml:"fair_share_window"`
	// PacePrefills, under fair sharing, holds a backlogged key (more of its
	// requests wait in the queue) to one prompt awaiting its first token
	// per replica while other keys are active: its prefills then join an
	// engine's steps one at a time instead of in cohorts, which would
	// lengthen every other key's first token in those steps. A streamed
	// request's prompt awaits its first token until its first byte; a
	// non-streamed one's until its estimated time to first token. Default
	// true.
	PacePrefills bool `yaml:"pace_prefills"`
}

// ClassCounts holds a number per priority class.
type ClassCounts struct {
	Critical  int `yaml:"critical"`
	Standard  int `yaml:"standard"`
	Sheddable int `yaml:"sheddable"`
}

// List returns the counts in the order of PriorityClasses.
func (c ClassCounts) List() []int { return []int{c.Critical, c.Standard, c.Sheddable} }

// Enabled reports whether requests wait for room instead of getting 503.
func (f *Flow) Enabled() bool { return f.MaxQueued > 0 }

// FairShare reports whether keys share the in-flight slots fairly.
func (f *Flow) FairShare() bool { return f.Enabled() && f.FairShareWindow > 0 }

// Paced reports whether backlogged keys have their prefills paced.
func (f *Flow) Paced() bool { return f.FairShare() && f.PacePrefills }

// PriorityClasses are the priority class names, most important first,
// as keys files and x-inferrail-priority name them.
var PriorityClasses = []string{"critical", "standard", "sheddable"}

// MaxTTFTTarget is the longest TTFT target a model may default to.
const MaxTTFTTarget = Duration(time.Hour)

func (v *validator) flow(c *Config) {
	f := &c.Flow
	v.atLeast("flow.max_queued", f.MaxQueued, 0)
	v.atLeast("flow.key_max_queued", f.KeyMaxQueued, 0)
	if f.MaxWait < 0 {
		v.fail("flow.max_wait", "must be >= 0")
	}
	if f.FairShareWindow < 0 {
		v.fail("flow.fair_share_window", "must be >= 0")
	}
	for i, n := range f.ClassMaxQueued.List() {
		path := "flow.class_max_queued." + PriorityClasses[i]
		switch {
		case n < 0:
			v.fail(path, "must be >= 0")
		case f.MaxQueued > 0 && n > f.MaxQueued:
			v.fail(path, "must be at most flow.max_queued (%d)", f.MaxQueued)
		}
	}
	if !f.Enabled() && (f.ClassMaxQueued != ClassCounts{} || f.KeyMaxQueued > 0 || f.MaxWait > 0) {
		v.fail("flow.max_queued", "must be > 0 when other flow keys are set: 0 turns the queue off")
	}
	for i := range c.Models {
		if t := c.Models[i].TTFTTarget; t < 0 || t > MaxTTFTTarget {
			v.fail(fmt.Sprintf("models[%d].ttft_target", i), "must be between 0s (none) and 1h")
		}
	}
}
