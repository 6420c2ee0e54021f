package harness

import (
	"context"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/measure"
)

// Loop is an open-loop schedule: N requests, request i due at Start plus
// At(i), each sent whatever the earlier ones are doing.
type Loop struct {
	Start time.Time
	N     int
	// At is request i's offset from Start; it must not decrease with i.
	At func(i int) time.Duration
	// OnSchedule, when not nil, is called by the dispatcher at each
	// request's scheduled time, before dispatching it. It exists so tests
	// can stall the dispatcher; it must not block otherwise.
	OnSchedule func(i int)
}

// Run calls send for each request, from a goroutine of its own, at its
// scheduled time, and waits for every call to return. The dispatcher only
// sleeps and starts goroutines, never waiting on a response, and sleeps
// precisely (measure.SleepUntil) so that send lag measures the harness, not
// the timer. dispatched is when the dispatcher handed request i over, from
// Start. Run returns how many requests it dispatched: all of them, or those
// due before ctx ended.
func (l Loop) Run(ctx context.Context, send func(i int, dispatched time.Duration)) int {
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range l.N {
		if !measure.SleepUntil(ctx, l.Start.Add(l.At(i))) {
			return i
		}
		if l.OnSchedule != nil {
			l.OnSchedule(i)
		}
		dispatched := time.Since(l.Start)
		wg.Go(func() { send(i, dispatched) })
	}
	return l.N
}
