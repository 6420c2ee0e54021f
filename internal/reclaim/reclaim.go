// Package reclaim gives the operating system back the memory a burst left a
// Go process holding, once the process is idle.
//
// The Go runtime keeps the heap it freed: its background scavenger returns
// pages only down to a little above the heap goal, and the goal shrinks only
// at a collection, which an idle process runs once every two minutes. After
// a burst of large requests an idle gateway therefore keeps its peak
// resident size for minutes, which an operator reads as a leak. A memory
// limit (GOMEMLIMIT, debug.SetMemoryLimit) does not fit as a default: set
// below the peak it makes the collector run hard under exactly the load
// that needs the memory, and above it it returns nothing.
//
// Run instead watches three things each interval: whether any work began
// (a counter the caller advances), whether work is under way (long
// requests began before the interval), and how much memory the runtime
// holds from the OS, not counting what it already returned. When no work
// began for a whole interval, none is under way and the runtime holds at
// least Threshold more than just after the last return, it calls
// debug.FreeOSMemory: one collection and every free page back to the OS. Under load it never runs; memory the
// process really keeps (caches that grew) raises the mark, so it runs once
// per burst, not every interval.
package reclaim

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Defaults of Options.
const (
	DefaultInterval  = 500 * time.Millisecond
	DefaultThreshold = 32 << 20
)

// Options configure Run.
type Options struct {
	// Work counts the work begun so far (requests arrived); the process
	// is idle over an interval in which it did not change. Required.
	Work func() uint64
	// Busy, when set, reports whether work is under way now: an interval
	// that ends busy is not idle. Without it a burst of long requests
	// that stopped arriving was reclaimed while it ran, which freed
	// nothing and raised the mark to its peak, so nothing was returned
	// once it ended.
	Busy func() bool
	// Interval is how often Run looks; zero means DefaultInterval.
	Interval time.Duration
	// Threshold is how many bytes the runtime must hold above its mark
	// before an idle interval returns them; zero means DefaultThreshold.
	Threshold uint64
	// Returned, when set, is called after each return with the bytes held
	// before and after it.
	Returned func(before, after uint64)
}

// Run watches the process until ctx ends.
func Run(ctx context.Context, o Options) {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Threshold == 0 {
		o.Threshold = DefaultThreshold
	}
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	w := watcher{o: o, mark: Held(), work: o.Work()}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.tick()
		}
	}
}

// watcher is Run's state between ticks.
type watcher struct {
	o    Options
	mark uint64 // held just after the last return, or at the start
	work uint64 // o.Work() at the last tick
}

// tick looks once; it reports whether it returned memory.
func (w *watcher) tick() bool {
	work := w.o.Work()
	idle := work == w.work && (w.o.Busy == nil || !w.o.Busy())
	w.work = work
	held := Held()
	if held < w.mark {
		w.mark = held // the scavenger gave some back on its own
	}
	if !idle || held-w.mark < w.o.Threshold {
		return false
	}
	debug.FreeOSMemory()
	w.mark = Held()
	if w.o.Returned != nil {
		w.o.Returned(held, w.mark)
	}
	return true
}

var heldSamples = []string{"/memory/classes/total:bytes", "/memory/classes/heap/released:bytes"}

// Held is the memory the Go runtime holds from the OS, less what it
// returned and has not reused: close to the process's resident size.
func Held() uint64 {
	s := make([]metrics.Sample, len(heldSamples))
	for i, name := range heldSamples {
		s[i].Name = name
	}
	metrics.Read(s)
	return s[0].Value.Uint64() - s[1].Value.Uint64()
}
