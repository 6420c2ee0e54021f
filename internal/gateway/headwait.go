package gateway

import (
	"context"
	"sync"

	"github.com/inferrail/inferrail/internal/fleet"
)

// headWait is an attempt's wait for its response head, which the head
// timer and the down watcher may give up on (send). Once the transport
// returned a head, its body is the client's answer, and a cancel would cut
// it mid-relay: the give-up and the head's arrival are ordered under mu,
// so a give-up after the head does nothing and one just before it, which
// the transport could not see, makes the head a failed attempt. Safe for
// concurrent use.
type headWait struct {
	cancel context.CancelCauseFunc
	came   chan struct{} // closed once the head came (or the transport failed)

	mu      sync.Mutex
	arrived bool  // guarded by mu
	cause   error // why it gave up, if it did before the head; guarded by mu
}

func newHeadWait(cancel context.CancelCauseFunc) *headWait {
	return &headWait{cancel: cancel, came: make(chan struct{})}
}

// giveUp cancels the request with cause unless its head has come.
func (w *headWait) giveUp(cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.arrived && w.cause == nil {
		w.cause = cause
		w.cancel(cause)
	}
}

// done ends the wait as the transport returns, and returns why the request
// was given up before, or nil.
func (w *headWait) done() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.arrived = true
	close(w.came)
	return w.cause
}

// testHookRoundTripped runs in send as the transport returns, before the
// wait ends: a test sets it to give up on the request in that moment.
var testHookRoundTripped = func(context.Context, *fleet.Replica) {}
