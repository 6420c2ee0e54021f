package bench

import (
	"context"
	"sync"

	"github.com/inferrail/inferrail/internal/workload"
)

// aheadBytes bounds the request bodies an open-loop run holds made and
// not yet written: about 250 requests of 100,000 tokens, thousands of
// short ones, so that bursts of a trace find their prompts made.
const aheadBytes = 64 << 20

// ahead makes a run's requests in order in a goroutine of its own, at
// most a budget of body bytes made and not yet written: making a prompt
// (a trace's are made on demand) does not delay its send, and a long
// trace holds only that window and the requests in flight.
//
// A body's bytes are given back once it is written (sent), not when it is
// taken: the next prompt is then made after the send, not during it. On
// two cores, making 100,000-token prompts as they were taken put the p90
// send lag 0.4 ms above an eager replay's; made after the write, it
// matched it.
type ahead struct {
	budget, n int // bytes held at most; requests in all

	mu      sync.Mutex
	changed sync.Cond // on mu: a request made, taken or written, or stopped
	made    map[int]workload.Request
	next    int  // the request to make next
	bytes   int  // of the bodies made and not yet written
	stopped bool // nothing more is made
}

// startAhead starts making reqs, at most budget bytes of bodies ahead,
// until they are all made or ctx is done.
func startAhead(ctx context.Context, reqs *workload.Requests, budget int) *ahead {
	a := &ahead{budget: budget, n: reqs.Len(), made: make(map[int]workload.Request)}
	a.changed.L = &a.mu
	release := context.AfterFunc(ctx, a.stop)
	go func() {
		defer release()
		for i := range a.n {
			a.mu.Lock()
			for a.bytes >= budget && !a.stopped {
				a.changed.Wait()
			}
			stopped := a.stopped
			a.mu.Unlock()
			if stopped {
				return
			}
			r := reqs.Request(i)
			a.mu.Lock()
			a.made[i], a.next, a.bytes = r, i+1, a.bytes+len(r.Body)
			a.changed.Broadcast()
			a.mu.Unlock()
		}
	}()
	return a
}

// ready waits for the window to be made: the budget's bytes, or every
// request, unless ahead stopped first. A run that starts then does not
// share the machine with the making of its first requests.
func (a *ahead) ready() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.bytes < a.budget && a.next < a.n && !a.stopped {
		a.changed.Wait()
	}
}

// take waits for request i to be made and hands it over; false when ahead
// stopped before making it. Requests are made in order, so every request
// before i must be taken, or be due to be, for i to come. Its bytes are
// held until written is called.
func (a *ahead) take(i int) (workload.Request, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		if r, ok := a.made[i]; ok {
			delete(a.made, i)
			return r, true
		}
		if a.stopped {
			return workload.Request{}, false
		}
		a.changed.Wait()
	}
}

// written gives back the bytes of a body taken, once it is written or its
// request has failed without it.
func (a *ahead) written(bytes int) {
	a.mu.Lock()
	a.bytes -= bytes
	a.changed.Broadcast()
	a.mu.Unlock()
}

// stop ends the making: requests not made yet never are.
func (a *ahead) stop() {
	a.mu.Lock()
	a.stopped = true
	a.changed.Broadcast()
	a.mu.Unlock()
}
