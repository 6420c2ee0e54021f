package fairshare

import (
	"math"
	"time"
)

// Flow names who shares: one key in one priority class, 0 the most
// important.
type Flow struct {
	Class int
	Key   string
}

// state is what the table knows of one flow.
type state struct {
	held     int       // requests waiting or in flight
	inFlight int       // of those, requests holding a slot
	idle     time.Time // when held last fell to 0; zero while it holds any

	// Usage: inFlight averaged over time, each moment weighted by
	// e^(-age/window), from the flow's first arrival (see Usage).
	sum, weight float64
	at          time.Time // when sum and weight were last brought up to date
}

// usage is the flow's in-flight count averaged over time at now (see
// Table.Usage).
func (s *state) usage(window time.Duration, now time.Time) float64 {
	c := *s
	c.fold(window, now)
	if c.weight <= 0 {
		return float64(c.inFlight)
	}
	return c.sum / c.weight
}

// fold brings the flow's usage average up to now: inFlight has been
// constant since s.at.
func (s *state) fold(window time.Duration, now time.Time) {
	if window <= 0 {
		s.at = now
		return
	}
	dt := now.Sub(s.at)
	if dt <= 0 {
		return
	}
	d := math.Exp(-float64(dt) / float64(window))
	s.sum = float64(s.inFlight)*(1-d) + s.sum*d
	s.weight = (1 - d) + s.weight*d
	s.at = now
}

// idled is a flow whose last request ended at at, in the order they ended.
type idled struct {
	flow Flow
	at   time.Time
}

// Table tracks the flows of one fleet. The zero value is not usable; make
// one with New.
type Table struct {
	window  time.Duration
	flows   map[Flow]*state
	holding []int   // per class: flows holding a request
	recent  []int   // per class: flows idle for less than window
	idles   []idled // flows as they went idle, oldest first; some stale
	head    int     // idles[:head] are consumed
	total   int     // slots held by every flow

	// The headroom of every class, worked out once per change of the
	// table (version) and slot count: a dispatcher asks Allowed of one
	// key after another without a change in between.
	version   uint64
	hrVersion uint64 // version hr was worked out at; 0: never
	hrSlots   int
	hr        []int // per class c: the unused shares of the flows counted against c with none waiting
}

// New returns an empty table for classes priority classes; flows idle for
// window are forgotten.
func New(classes int, window time.Duration) *Table {
	return &Table{window: window, flows: map[Flow]*state{}, holding: make([]int, classes), recent: make([]int, classes)}
}

// SetWindow changes how long a flow stays active after its last request.
// A shorter window takes effect at the next call that reads the time.
func (t *Table) SetWindow(d time.Duration) { t.window = d }

// Window returns how long a flow stays active after its last request.
func (t *Table) Window() time.Duration { return t.window }

// Arrive records that a request of f came in: f holds it until Leave.
func (t *Table) Arrive(f Flow, now time.Time) {
	t.expire(now)
	t.version++
	s := t.flows[f]
	if s == nil {
		s = &state{at: now}
		t.flows[f] = s
	}
	if s.held == 0 {
		if !s.idle.IsZero() {
			t.recent[f.Class]--
			s.idle = time.Time{}
		}
		t.holding[f.Class]++
	}
	s.held++
}

// Acquire records that a request of f, held since Arrive, took a slot at
// now.
func (t *Table) Acquire(f Flow, now time.Time) {
	if s := t.flows[f]; s != nil && s.inFlight < s.held {
		s.fold(t.window, now)
		s.inFlight++
		t.total++
		t.version++
	}
}

// Release records that a request of f let its slot go at now while it
// stays held (it may take one again with Acquire).
func (t *Table) Release(f Flow, now time.Time) {
	if s := t.flows[f]; s != nil && s.inFlight > 0 {
		s.fold(t.window, now)
		s.inFlight--
		t.total--
		t.version++
	}
}

// Leave records that a request of f ended; slot says whether it held one.
func (t *Table) Leave(f Flow, slot bool, now time.Time) {
	s := t.flows[f]
	if s == nil || s.held == 0 {
		return
	}
	t.version++
	s.fold(t.window, now)
	if slot && s.inFlight > 0 {
		s.inFlight--
		t.total--
	}
	s.held--
	if s.inFlight > s.held { // it said it held none, but its key held more than it waits for
		t.total -= s.inFlight - s.held
		s.inFlight = s.held // folded above, at the same now
	}
	if s.held == 0 {
		t.holding[f.Class]--
		s.idle = now
		t.recent[f.Class]++
		t.idles = append(t.idles, idled{f, now})
	}
	t.expire(now)
}

// expire forgets the flows idle for window or longer at now.
func (t *Table) expire(now time.Time) {
	for t.head < len(t.idles) {
		id := t.idles[t.head]
		if now.Sub(id.at) < t.window {
			break
		}
		t.idles[t.head] = idled{}
		t.head++
		if s := t.flows[id.flow]; s != nil && s.held == 0 && s.idle.Equal(id.at) {
			t.recent[id.flow.Class]--
			delete(t.flows, id.flow)
			t.version++
		}
	}
	if t.head > 32 && t.head*2 > len(t.idles) {
		t.idles = append(t.idles[:0], t.idles[t.head:]...)
		t.head = 0
	}
}

// Active returns how many flows count against a flow of class c at now:
// those active in classes 0 to c.
func (t *Table) Active(c int, now time.Time) int {
	t.expire(now)
	n := 0
	for i := 0; i <= c && i < len(t.holding); i++ {
		n += t.holding[i] + t.recent[i]
	}
	return n
}

// Share returns f's share of slots slots at now: at least 1, and every
// slot while no other flow counts against it.
func (t *Table) Share(f Flow, slots int, now time.Time) int {
	return max(1, slots/t.Counted(f, now))
}

// Counted returns how many flows f shares with at now, itself included:
// what its share divides the slots by.
func (t *Table) Counted(f Flow, now time.Time) int {
	a := t.Active(f.Class, now)
	if t.flows[f] == nil {
		a++ // f itself, not yet known
	}
	return a
}

// Allowed reports whether a request of f may take one of slots slots now:
// when f holds fewer than its share in flight, or when a slot is free
// beyond the headroom of the others: the part of their shares they do not
// hold, summed over the flows that count against f and have no request
// waiting (a flow with one waiting competes in the queue's order
// instead). slots <= 0 means the fleet has no bound, and every request is
// allowed.
func (t *Table) Allowed(f Flow, slots int, now time.Time) bool {
	if slots <= 0 {
		return true
	}
	if t.Under(f, slots, now) {
		return true
	}
	free := slots - t.total
	return free > 0 && free-1 >= t.Headroom(f, slots, now)
}

// Under reports whether f holds fewer than its share of slots slots at
// now: a request of f then takes a slot before any of a flow at or past
// its share. slots <= 0 means no bound: every flow is under.
func (t *Table) Under(f Flow, slots int, now time.Time) bool {
	return slots <= 0 || t.InFlight(f) < t.Share(f, slots, now)
}

// Headroom returns the slots kept free for the flows that count against
// f at now, other than f, and have no request waiting: each one's share
// less what it holds, at least 0. It takes time in the number of flows
// once after each change of the table, and constant time until the next.
func (t *Table) Headroom(f Flow, slots int, now time.Time) int {
	t.expire(now)
	if f.Class < 0 || len(t.holding) == 0 {
		return 0
	}
	if t.hrVersion != t.version+1 || t.hrSlots != slots {
		t.workOutHeadroom(slots)
	}
	r := t.hr[min(f.Class, len(t.hr)-1)]
	if s := t.flows[f]; s != nil && f.Class < len(t.hr) && s.held <= s.inFlight {
		r -= t.unusedShare(s, f.Class, slots)
	}
	return r
}

// workOutHeadroom sets hr for slots slots: per class c, the unused shares
// of the flows of classes 0 to c that have no request waiting.
func (t *Table) workOutHeadroom(slots int) {
	n := len(t.holding)
	if cap(t.hr) < 2*n {
		t.hr = make([]int, 2*n)
	}
	t.hr = t.hr[:2*n]
	hr, counts := t.hr[:n], t.hr[n:] // counts: flows counted against a flow of each class
	for c := range n {
		counts[c] = t.holding[c] + t.recent[c]
		if c > 0 {
			counts[c] += counts[c-1]
		}
		hr[c] = 0
	}
	for g, s := range t.flows {
		if s.held > s.inFlight || g.Class < 0 || g.Class >= n {
			continue
		}
		hr[g.Class] += max(0, max(1, slots/max(1, counts[g.Class]))-s.inFlight)
	}
	for c := 1; c < n; c++ {
		hr[c] += hr[c-1]
	}
	t.hr = hr
	t.hrVersion, t.hrSlots = t.version+1, slots
}

// unusedShare is flow s's share of slots less what it holds, at least 0,
// for a flow of class c with nothing waiting.
func (t *Table) unusedShare(s *state, c, slots int) int {
	counted := 0
	for i := 0; i <= c && i < len(t.holding); i++ {
		counted += t.holding[i] + t.recent[i]
	}
	return max(0, max(1, slots/max(1, counted))-s.inFlight)
}

// Usage returns the slots f has held on average at now: in flight over
// time, each moment weighted by e^(-age/window), divided by the sum of
// the weights since f's first request (so a flow known for less than a
// window is judged by its short life, not by a history of zeros it never
// had). 0 for a flow the table does not know.
func (t *Table) Usage(f Flow, now time.Time) float64 {
	if s := t.flows[f]; s != nil {
		return s.usage(t.window, now)
	}
	return 0
}

// Credit returns the whole slots f has left unused of its share of slots
// slots on average at now (Share less Usage, rounded down, at least 0):
// how far past its share it may go ahead of flows that use theirs.
func (t *Table) Credit(f Flow, slots int, now time.Time) int {
	if slots <= 0 {
		return 0
	}
	return max(0, int(math.Floor(float64(t.Share(f, slots, now))-t.Usage(f, now))))
}

// Owed reports whether f, having used less than its share over time, may
// take a slot ahead of every flow that has not: it is Allowed one, has at
// least one slot of credit and holds fewer than its share plus its
// credit. Owed orders who gets a free slot; it makes no room, since an
// owed flow past its share is still held to what Allowed leaves it.
func (t *Table) Owed(f Flow, slots int, now time.Time) bool {
	if slots <= 0 {
		return false
	}
	c := t.Credit(f, slots, now)
	return c >= 1 && t.InFlight(f) < t.Share(f, slots, now)+c && t.Allowed(f, slots, now)
}

// InFlight returns the slots f holds.
func (t *Table) InFlight(f Flow) int {
	if s := t.flows[f]; s != nil {
		return s.inFlight
	}
	return 0
}

// Flows returns the number of flows the table remembers.
func (t *Table) Flows() int { return len(t.flows) }
