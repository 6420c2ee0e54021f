package sim

import (
	"context"
	"errors"
	"time"
)

// ErrStopped is returned to requests that reach an engine that has stopped.
var ErrStopped = errors.New("sim: engine stopped")

// Engine runs the scheduler on a virtual timeline in one goroutine. Each step
// starts when the previous one ends in virtual time and its outputs are
// delivered when the real clock reaches that end, so a late timer delays
// delivery but never shifts the steps after it. HTTP handlers talk to it only
// through Submit, Cancel and ResetPrefixCache.
type Engine struct {
	cfg     Config
	sched   *scheduler
	metrics *Metrics
	epoch   time.Time
	inbox   chan message
	done    chan struct{}
	// afterStep, when set, runs on the engine goroutine after each step
	// has handed out its tokens, before the next step is planned. Only
	// tests set it, before Run.
	afterStep func(plan []work)
	// wokeAt is when what woke an idle engine happened: the arrival of
	// the request that did, stamped before its message was sent, or when
	// another message was handled; 0 before the first wake.
	wokeAt float64
}

type msgKind uint8

const (
	msgSubmit msgKind = iota
	msgCancel
	msgReset
	msgInspect
)

type message struct {
	kind    msgKind
	r       *request
	reply   chan bool
	inspect func(*scheduler)
}

// NewEngine returns an engine for cfg, which must be valid. It records its
// steps in m. Call Run to start it.
func NewEngine(cfg Config, m *Metrics) *Engine {
	e := &Engine{
		cfg:     cfg,
		metrics: m,
		epoch:   time.Now(),
		inbox:   make(chan message, 1024),
		done:    make(chan struct{}),
	}
	e.sched = newScheduler(&e.cfg)
	return e
}

// now is the real clock in seconds since the engine's epoch.
func (e *Engine) now() float64 { return time.Since(e.epoch).Seconds() }

// Submit hands a request to the engine. Its arrival time is now.
func (e *Engine) submit(ctx context.Context, r *request) error {
	r.arrival = e.now()
	return e.send(ctx, message{kind: msgSubmit, r: r})
}

// cancel withdraws a submitted request whose client left.
func (e *Engine) cancel(r *request) {
	// Cancelling must not wait on a client that is already gone; only a
	// stopped engine makes it give up.
	_ = e.send(context.Background(), message{kind: msgCancel, r: r})
}

// ResetPrefixCache drops every cached block, failing while any is held.
func (e *Engine) ResetPrefixCache(ctx context.Context) (bool, error) {
	reply := make(chan bool, 1)
	if err := e.send(ctx, message{kind: msgReset, reply: reply}); err != nil {
		return false, err
	}
	select {
	case ok := <-reply:
		return ok, nil
	case <-e.done:
		return false, ErrStopped
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// inspect runs f on the engine goroutine between steps, for tests that
// read the engine's state.
func (e *Engine) inspect(ctx context.Context, f func(*scheduler)) error {
	reply := make(chan bool, 1)
	if err := e.send(ctx, message{kind: msgInspect, inspect: f, reply: reply}); err != nil {
		return err
	}
	select {
	case <-reply:
		return nil
	case <-e.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *Engine) send(ctx context.Context, m message) error {
	select {
	case e.inbox <- m:
		return nil
	case <-e.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed once Run has returned.
func (e *Engine) Done() <-chan struct{} { return e.done }

// Run steps the engine until ctx ends. Requests still inside are finished
// with reason "abort".
func (e *Engine) Run(ctx context.Context) error {
	defer close(e.done)
	defer e.abortAll()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var vnow float64
	idle := true
	for {
		e.drain(vnow)
		if e.sched.idle() {
			if !e.await(ctx) {
				return nil
			}
			idle = true
			continue
		}
		switch {
		case e.cfg.ZeroLatency || idle && e.wokeAt == 0:
			vnow = max(vnow, e.now())
		case idle:
			// An idle engine starts on a request when it arrives, not
			// when its loop gets to run: its TTFT is P to the nanosecond.
			// Requests that came while it woke join the step, which then
			// starts when the last of them arrived, never before; nor
			// before what woke it (a cancel that freed blocks).
			vnow = max(vnow, e.wokeAt, e.sched.lastArrival())
		case e.sched.noneRunning():
			// Its last step finished every request: the next starts no
			// earlier than the requests that came since.
			vnow = max(vnow, e.sched.lastArrival())
		}
		idle = false
		plan := e.sched.schedule(vnow)
		if len(plan) == 0 {
			// Nothing can run until something changes (only cancels
			// and arrivals do); wait for it as if idle.
			if !e.await(ctx) {
				return nil
			}
			idle = true
			continue
		}
		end := vnow
		if !e.cfg.ZeroLatency {
			end += e.sched.cost(plan)
		}
		for {
			wait := time.Duration((end - e.now()) * float64(time.Second))
			if wait <= 0 {
				break
			}
			timer.Reset(wait)
			select {
			case <-timer.C:
			case m := <-e.inbox:
				timer.Stop()
				e.handle(m, e.now())
			case <-ctx.Done():
				timer.Stop()
				return nil
			}
		}
		e.sched.complete(plan, end)
		vnow = end
		e.record()
		e.flushKV()
		if e.afterStep != nil {
			e.afterStep(plan)
		}
	}
}

// flushKV publishes the step's KV events, if the engine publishes any.
func (e *Engine) flushKV() {
	if l := e.sched.pool.log; l != nil {
		l.flush()
	}
}

// drain handles every queued message without waiting.
// await records the engine's state, then waits for a message and handles
// it; false when ctx ends first.
func (e *Engine) await(ctx context.Context) bool {
	e.record()
	select {
	case m := <-e.inbox:
		now := e.now()
		e.wokeAt = now
		if m.kind == msgSubmit {
			e.wokeAt = min(m.r.arrival, now)
		}
		e.handle(m, now)
		return true
	case <-ctx.Done():
		return false
	}
}

func (e *Engine) drain(now float64) {
	for {
		select {
		case m := <-e.inbox:
			e.handle(m, max(now, e.now()))
		default:
			return
		}
	}
}

func (e *Engine) handle(m message, now float64) {
	switch m.kind {
	case msgSubmit:
		e.sched.add(m.r)
	case msgCancel:
		e.sched.cancel(m.r, now)
	case msgReset:
		ok := e.sched.pool.reset()
		if ok {
			// vLLM would publish the clear with its next step's batch; an
			// idle engine has none, so it goes out at once. A reset that
			// failed (blocks in use, most often mid-step) clears nothing,
			// and must not publish the running step's events before the
			// step ends.
			e.flushKV()
		}
		m.reply <- ok
	case msgInspect:
		m.inspect(e.sched)
		m.reply <- true
	}
}

// record publishes what happened since the last call to the metrics.
func (e *Engine) record() {
	st := e.sched.takeStats()
	st.Running = len(e.sched.running)
	st.Waiting = e.sched.waiting.n
	st.KVUsage = e.sched.pool.usage()
	if e.metrics != nil {
		e.metrics.Record(st)
	}
	e.sched.resetStats()
}

// abortAll ends every request still in the engine, so no handler waits on a
// stopped engine.
func (e *Engine) abortAll() {
	now := e.now()
	for r := e.sched.waiting.head; r != nil; r = e.sched.waiting.head {
		e.sched.waiting.remove(r)
		e.sched.finish(r, "abort", now)
	}
	for _, r := range e.sched.running {
		e.sched.release(r)
		e.sched.finish(r, "abort", now)
	}
	e.sched.running = nil
	for {
		select {
		case m := <-e.inbox:
			if m.kind == msgSubmit {
				e.sched.finish(m.r, "abort", now)
			}
			if m.kind == msgReset {
				m.reply <- false
			}
		default:
			e.record()
			return
		}
	}
}
