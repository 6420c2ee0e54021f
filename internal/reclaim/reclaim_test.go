package reclaim

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

var sink [][]byte

// burst allocates and touches n bytes in 1 MiB pieces and lets them go.
func burst(n int) {
	for range n >> 20 {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		sink = append(sink, b)
	}
	sink = nil
}

func TestTick(t *testing.T) {
	var work atomic.Uint64
	var returned [][2]uint64
	runtime.GC()
	w := watcher{o: Options{Work: work.Load, Threshold: 16 << 20, Returned: func(b, a uint64) { returned = append(returned, [2]uint64{b, a}) }},
		mark: Held()}
	w.work = work.Load()

	burst(96 << 20)
	work.Add(1)
	if w.tick() {
		t.Fatal("returned memory in an interval in which work began")
	}
	before := Held()
	if !w.tick() {
		t.Fatalf("idle with %d MiB held above the mark: nothing returned", (before-w.mark)>>20)
	}
	after := Held()
	if len(returned) != 1 || before-after < 64<<20 {
		t.Fatalf("held %d MiB before the return and %d MiB after, want at least 64 MiB less (Returned saw %v)", before>>20, after>>20, returned)
	}
	if w.tick() {
		t.Fatal("returned again with nothing new held")
	}
	// A small burst, under the threshold, is left to the runtime.
	burst(4 << 20)
	if w.tick() {
		t.Fatal("returned memory for a burst under the threshold")
	}
}

// TestTickWaitsForWorkUnderWay: no work began, but some is under way: not
// idle, nothing returned; once it ends, the burst is returned.
func TestTickWaitsForWorkUnderWay(t *testing.T) {
	var busy atomic.Bool
	runtime.GC()
	w := watcher{o: Options{Work: func() uint64 { return 0 }, Busy: busy.Load, Threshold: 16 << 20}, mark: Held()}
	busy.Store(true)
	burst(96 << 20)
	for i := range 3 {
		if w.tick() {
			t.Fatalf("tick %d: returned memory while work was under way", i)
		}
	}
	busy.Store(false)
	if !w.tick() {
		t.Fatal("idle after the work ended, with the burst held: nothing returned")
	}
}

func TestRunStops(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var calls atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Options{Work: func() uint64 { calls.Add(1); return 0 }, Interval: time.Millisecond})
	}()
	for calls.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
}
