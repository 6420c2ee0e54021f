package stress

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferrail/inferrail/internal/harness"
	"github.com/inferrail/inferrail/internal/measure"
)

// FixedSchedule sends n requests at rate per second, evenly spaced.
func FixedSchedule(rate, n int) []time.Duration {
	s := make([]time.Duration, n)
	step := float64(time.Second) / float64(rate)
	for i := range s {
		s[i] = time.Duration(float64(i) * step)
	}
	return s
}

// PoissonSchedule sends n requests as a Poisson process of rate per
// second: exponential gaps drawn from seed.
func PoissonSchedule(rate, n int, seed uint64) []time.Duration {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	s := make([]time.Duration, n)
	var t float64
	for i := range s {
		s[i] = time.Duration(t)
		t += r.ExpFloat64() / float64(rate) * float64(time.Second)
	}
	return s
}

// Shot is one request of an open-loop run. Times are offsets from the
// run's start.
type Shot struct {
	Sched, Sent, Done time.Duration
	Status            int
	Replica           string
	Err               *measure.RequestError // nil when the request succeeded
}

// ShotFunc performs request i and reports the status and serving replica
// it got, or why it failed.
type ShotFunc func(ctx context.Context, i int) (status int, replica string, err error)

// OpenLoop sends request i at start+sched[i] through the harness's
// open-loop driver (harness.Loop), each from its own goroutine, whether or
// not earlier ones have answered, and waits for all of them. timeout bounds
// each request. It returns the requests sent: all of them, or those due
// before ctx ended.
func OpenLoop(ctx context.Context, start time.Time, sched []time.Duration, timeout time.Duration, do ShotFunc) []Shot {
	shots := make([]Shot, len(sched))
	loop := harness.Loop{Start: start, N: len(sched), At: func(i int) time.Duration { return sched[i] }}
	sent := loop.Run(ctx, func(i int, _ time.Duration) {
		s := &shots[i]
		s.Sched = sched[i]
		s.Sent = time.Since(start)
		rctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		status, replica, err := do(rctx, i)
		s.Done = time.Since(start)
		s.Status, s.Replica = status, replica
		if err != nil {
			s.Err = measure.Classify(rctx, err)
		}
	})
	return shots[:sent]
}

// TallyShots counts the failures among shots.
func TallyShots(shots []Shot) (int, map[string]int, []string) {
	var t ErrorTally
	for _, s := range shots {
		if s.Err != nil {
			t.Add(s.Err)
		}
	}
	return t.Result()
}

// Burst calls prepare(i) for every i in [0, n), then runs the functions
// they return, each in a goroutine of its own, all released at once, and
// waits for them: n requests sent together, their bodies built before.
func Burst(n int, prepare func(i int) (run func())) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		run := prepare(i)
		wg.Go(func() {
			<-start
			run()
		})
	}
	close(start)
	wg.Wait()
}

// Pool calls do(i) for every i in [from, to) on at most workers goroutines,
// each taking the next i once its last call has returned (a closed loop),
// until ctx ends, and waits for them.
func Pool(ctx context.Context, from, to, workers int, do func(i int)) {
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	for range min(workers, to-from) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= to {
					return
				}
				do(i)
			}
		})
	}
	wg.Wait()
}
