package tokenize

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Errors of Pool.Do: the request is routed without a prediction instead.
var (
	ErrBusy = errors.New("tokenize: every worker busy and the queue full")
	ErrSlow = errors.New("tokenize: no result within the wait allowed")
	// ErrPanicked wraps a job's panic (see Run); what the job wrote must
	// not be read.
	ErrPanicked = errors.New("tokenize: the job panicked")
)

// Run runs fn with stop and turns a panic into an error wrapping
// ErrPanicked: a request the tokenizer or a model's chat template cannot
// handle then costs its prediction, not the process (a panic on a pool
// worker would end it).
func Run(fn func(stop *atomic.Bool), stop *atomic.Bool) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: %v", ErrPanicked, v)
		}
	}()
	fn(stop)
	return nil
}

// Pool runs tokenization on a fixed set of goroutines behind a bounded
// queue, so large prompts never take more CPU than the workers and a burst
// never queues without end. Safe for concurrent use.
type Pool struct {
	jobs chan *poolJob
	wg   sync.WaitGroup

	mu     sync.RWMutex // held for reading while sending to jobs
	closed bool         // guarded by mu
}

type poolJob struct {
	fn        func(stop *atomic.Bool)
	done      chan struct{}
	abandoned atomic.Bool // the caller gave up: skip it if not started, stop it if running
	err       error       // Run's, read after done
}

// NewPool starts workers goroutines with room for queue waiting jobs.
func NewPool(workers, queue int) *Pool {
	p := &Pool{jobs: make(chan *poolJob, queue)}
	for range workers {
		p.wg.Go(p.work)
	}
	return p
}

func (p *Pool) work() {
	for j := range p.jobs {
		if !j.abandoned.Load() {
			j.err = Run(j.fn, &j.abandoned)
		}
		close(j.done)
	}
}

// Do runs fn on a worker and waits at most maxWait, queueing included. It
// returns ErrBusy at once when the queue is full, ErrSlow when the wait
// ran out and an error wrapping ErrPanicked when fn panicked; fn then may still run, or be skipped if it had not started, so it
// must only write what the caller reads after a nil error. fn is given stop,
// set once the caller gave up: a long fn should look at it now and then and
// return early, so that a worker does not spend seconds on an answer nobody
// waits for.
func (p *Pool) Do(maxWait time.Duration, fn func(stop *atomic.Bool)) error {
	j := &poolJob{fn: fn, done: make(chan struct{})}
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return ErrBusy
	}
	select {
	case p.jobs <- j:
		p.mu.RUnlock()
	default:
		p.mu.RUnlock()
		return ErrBusy
	}
	t := time.NewTimer(maxWait)
	defer t.Stop()
	select {
	case <-j.done:
		return j.err
	case <-t.C:
		j.abandoned.Store(true)
		return ErrSlow
	}
}

// Close stops the workers once the queued jobs are done; later calls of Do
// return ErrBusy.
func (p *Pool) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.jobs)
	}
	p.mu.Unlock()
	p.wg.Wait()
}
