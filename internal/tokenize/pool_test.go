package tokenize

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestPool(t *testing.T) {
	p := NewPool(2, 2)
	defer p.Close()
	var ran atomic.Int32
	if err := p.Do(time.Second, func() { ran.Add(1) }); err != nil || ran.Load() != 1 {
		t.Fatalf("Do = %v, ran %d", err, ran.Load())
	}
	// Two workers stuck, two jobs queued: the next is refused at once.
	block := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { _ = p.Do(5*time.Second, func() { <-block }) })
	}
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	if err := p.Do(time.Second, func() {}); !errors.Is(err, ErrBusy) || time.Since(start) > 100*time.Millisecond {
		t.Errorf("with the queue full: %v after %v, want ErrBusy at once", err, time.Since(start))
	}
	close(block)
	wg.Wait()
	// A job that cannot finish in time is abandoned; if it has not started
	// it never runs.
	block = make(chan struct{})
	go func() { _ = p.Do(time.Second, func() { <-block }) }()
	go func() { _ = p.Do(time.Second, func() { <-block }) }()
	time.Sleep(20 * time.Millisecond)
	var late atomic.Bool
	if err := p.Do(10*time.Millisecond, func() { late.Store(true) }); !errors.Is(err, ErrSlow) {
		t.Errorf("waiting past max: %v, want ErrSlow", err)
	}
	close(block)
	time.Sleep(20 * time.Millisecond)
	if late.Load() {
		t.Error("an abandoned job ran")
	}
}
