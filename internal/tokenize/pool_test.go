package tokenize

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestPool(t *testing.T) {
	p := NewPool(2, 2)
	defer p.Close()
	var ran atomic.Int32
	if err := p.Do(time.Second, func(*atomic.Bool) { ran.Add(1) }); err != nil || ran.Load() != 1 {
		t.Fatalf("Do = %v, ran %d", err, ran.Load())
	}
	// Two workers stuck, two jobs queued: the next is refused at once.
	// (Reaching that state step by step, not by sleeping: a loaded machine
	// may take long to start goroutines, and jobs sent before a worker
	// takes one would be refused.)
	block := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(block) }) }
	defer release() // before the deferred Close, which waits for the workers
	started := make(chan struct{}, 4)
	var wg sync.WaitGroup
	submit := func() {
		wg.Go(func() { _ = p.Do(30*time.Second, func(*atomic.Bool) { started <- struct{}{}; <-block }) })
	}
	submit()
	submit()
	<-started
	<-started
	submit()
	submit()
	waitFor(t, func() bool { return len(p.jobs) == 2 })
	start := time.Now()
	if err := p.Do(10*time.Second, func(*atomic.Bool) {}); !errors.Is(err, ErrBusy) || time.Since(start) > 2*time.Second {
		t.Errorf("with the queue full: %v after %v, want ErrBusy at once", err, time.Since(start))
	}
	release()
	wg.Wait()
	// A job that cannot finish in time is abandoned; if it has not started
	// it never runs.
	block2, started2 := make(chan struct{}), make(chan struct{}, 2)
	var once2 sync.Once
	release2 := func() { once2.Do(func() { close(block2) }) }
	defer release2()
	for range 2 {
		go func() { _ = p.Do(30*time.Second, func(*atomic.Bool) { started2 <- struct{}{}; <-block2 }) }()
	}
	<-started2
	<-started2
	var late atomic.Bool
	if err := p.Do(10*time.Millisecond, func(*atomic.Bool) { late.Store(true) }); !errors.Is(err, ErrSlow) {
		t.Errorf("waiting past max: %v, want ErrSlow", err)
	}
	release2()
	// The workers drain the queue, the abandoned job included, and stop.
	p.Close()
	if late.Load() {
		t.Error("an abandoned job ran")
	}
}

// TestPoolStop: a running job whose caller gave up is told to stop, and
// one whose caller got its answer is not.
func TestPoolStop(t *testing.T) {
	p := NewPool(1, 1)
	defer p.Close()
	ended := make(chan bool, 1)
	err := p.Do(10*time.Millisecond, func(stop *atomic.Bool) {
		for !stop.Load() {
			time.Sleep(time.Millisecond)
		}
		ended <- true
	})
	if !errors.Is(err, ErrSlow) {
		t.Fatalf("Do = %v, want ErrSlow", err)
	}
	if !<-ended {
		t.Fatal("the abandoned job did not end")
	}
	var stopped bool
	if err := p.Do(time.Minute, func(stop *atomic.Bool) { stopped = stop.Load() }); err != nil || stopped {
		t.Errorf("a job waited for: Do = %v, stop set %v", err, stopped)
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
	}
}

// TestPoolPanic: a job that panics makes Do return ErrPanicked, and the
// worker lives on for the next job; Run does the same inline.
func TestPoolPanic(t *testing.T) {
	p := NewPool(1, 1)
	defer p.Close()
	for range 2 { // the one worker survives the first
		err := p.Do(10*time.Second, func(*atomic.Bool) { panic("template engine defect") })
		if !errors.Is(err, ErrPanicked) || !strings.Contains(err.Error(), "template engine defect") {
			t.Fatalf("Do of a panicking job = %v, want ErrPanicked with its value", err)
		}
	}
	var ran bool
	if err := p.Do(10*time.Second, func(*atomic.Bool) { ran = true }); err != nil || !ran {
		t.Fatalf("after a panic: Do = %v, ran %v", err, ran)
	}
	var nilMap map[string]int
	if err := Run(func(*atomic.Bool) { nilMap["x"] = 1 }, nil); !errors.Is(err, ErrPanicked) {
		t.Errorf("Run of a panicking job = %v, want ErrPanicked", err)
	}
	if err := Run(func(*atomic.Bool) {}, nil); err != nil {
		t.Errorf("Run = %v", err)
	}
}
