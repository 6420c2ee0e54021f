package fairshare

import (
	"math"
	"math/bits"
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
	// e^(-age/window), from the flow's first slot (see Usage).
	sum, weight float64
	at          time.Time // when sum and weight were last brought up to date
	started     bool      // it has held a slot: the average runs

	// Peak: the most slots held at once in the window-long stretch of
	// time numbered bucket (see bucketOf) and in the one before it.
	bucket         int64
	peak, prevPeak int

	// What usage and peak were before the last Acquire, while nothing
	// changed since (undoable): a slot given back unused (Unacquire)
	// leaves no trace.
	before   record
	undoable bool
}

// record is the part of a flow's state an Acquire changes besides its
// in-flight count.
type record struct {
	sum, weight    float64
	at             time.Time
	started        bool
	bucket         int64
	peak, prevPeak int
}

func (s *state) record() record {
	return record{s.sum, s.weight, s.at, s.started, s.bucket, s.peak, s.prevPeak}
}

func (s *state) restore(r record) {
	s.sum, s.weight, s.at, s.started, s.bucket, s.peak, s.prevPeak = r.sum, r.weight, r.at, r.started, r.bucket, r.peak, r.prevPeak
}

// bucketOf numbers the window-long stretch of time now falls in.
func bucketOf(window time.Duration, now time.Time) int64 {
	if window <= 0 {
		return 0
	}
	return now.UnixNano() / int64(window)
}

// change brings the flow's usage and peak up to now and then changes its
// in-flight count by delta.
func (s *state) change(window time.Duration, now time.Time, delta int) {
	s.undoable = false
	s.fold(window, now)
	switch b := bucketOf(window, now); {
	case b == s.bucket:
	case b == s.bucket+1:
		s.bucket, s.prevPeak, s.peak = b, s.peak, s.inFlight
	default: // a whole stretch went by with inFlight as it is
		s.bucket, s.prevPeak, s.peak = b, s.inFlight, s.inFlight
	}
	s.inFlight += delta
	s.peak = max(s.peak, s.inFlight)
}

// peakAt returns the most slots the flow held at once from the start of
// the stretch before now's to now: at least over the last window, at most
// over the last two.
func (s *state) peakAt(window time.Duration, now time.Time) int {
	switch b := bucketOf(window, now); {
	case b == s.bucket:
		return max(s.peak, s.prevPeak)
	case b == s.bucket+1:
		return max(s.peak, s.inFlight)
	}
	return s.inFlight
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

	// Keys are what shares divide by, each once however many classes it
	// has flows in: per key the classes it has a flow of (bit c), and per
	// class c the keys whose most important flow is of class c.
	keyClasses map[string]uint64
	lowest     []int

	// The headroom of every class, worked out once per change of the
	// table (version) and slot count: a dispatcher asks Allowed of one
	// key after another without a change in between.
	version   uint64
	hrVersion uint64 // version hr was worked out at; 0: never
	hrSlots   int
	hrAt      time.Time
	hrUsage   bool       // hr read a flow's usage: it holds for hrAt only
	hr        []keptRoom // per class c: the room kept for the flows counted against c with none waiting
	counts    []int      // workOutHeadroom's scratch
}

// maxClasses is the most priority classes a table tells apart: a key's
// classes are bits of a word.
const maxClasses = 64

// New returns an empty table for classes priority classes (at most 64);
// flows idle for window are forgotten.
func New(classes int, window time.Duration) *Table {
	if classes > maxClasses {
		panic("fairshare: more than 64 priority classes") // a programming error: the classes are the code's
	}
	return &Table{window: window, flows: map[Flow]*state{}, holding: make([]int, classes), recent: make([]int, classes),
		keyClasses: map[string]uint64{}, lowest: make([]int, classes)}
}

// join notes that f has become known: its key has a flow of its class.
func (t *Table) join(f Flow) {
	was := t.keyClasses[f.Key]
	now := was | 1<<uint(f.Class)
	t.keyClasses[f.Key] = now
	t.moveLowest(was, now)
}

// part notes that f is forgotten.
func (t *Table) part(f Flow) {
	was := t.keyClasses[f.Key]
	now := was &^ (1 << uint(f.Class))
	if now == 0 {
		delete(t.keyClasses, f.Key)
	} else {
		t.keyClasses[f.Key] = now
	}
	t.moveLowest(was, now)
}

// moveLowest moves a key from the count of the most important class in
// was to that of the one in now (no class: no count).
func (t *Table) moveLowest(was, now uint64) {
	if was != 0 {
		t.lowest[bits.TrailingZeros64(was)]--
	}
	if now != 0 {
		t.lowest[bits.TrailingZeros64(now)]++
	}
}

// keysUpTo counts the keys with a flow of class 0 to c.
func (t *Table) keysUpTo(c int) int {
	n := 0
	for i := 0; i <= c && i < len(t.lowest); i++ {
		n += t.lowest[i]
	}
	return n
}

// keyUpTo reports whether key has a flow of class 0 to c.
func (t *Table) keyUpTo(key string, c int) bool {
	m := t.keyClasses[key]
	return m != 0 && bits.TrailingZeros64(m) <= c
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
		s = &state{at: now, bucket: bucketOf(t.window, now)}
		t.flows[f] = s
		t.join(f)
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
		r := s.record()
		if !s.started {
			// The average starts with the first slot: the moments before
			// it (a request read, tokenized, queued) say nothing of how
			// much the flow uses. Counted as zeros, a new flow that took
			// its share in its first milliseconds read as a quiet one
			// (usage 0.34 while it held 2), with credit and burst room.
			s.started, s.sum, s.weight, s.at = true, 0, 0, now
		}
		s.change(t.window, now, 1)
		s.before, s.undoable = r, true
		t.total++
		t.version++
	}
}

// Unacquire gives back the slot f took with its last Acquire, unused: a
// request that reserved its share and then found no replica to take it.
// While nothing else changed f since, its usage and peak are as though
// the slot was never taken, so a key that never got a request through
// keeps the credit of one that used nothing; otherwise it is Release.
func (t *Table) Unacquire(f Flow, now time.Time) {
	s := t.flows[f]
	if s == nil || s.inFlight == 0 {
		return
	}
	if !s.undoable {
		t.Release(f, now)
		return
	}
	s.restore(s.before)
	s.undoable = false
	s.inFlight--
	t.total--
	t.version++
}

// Release records that a request of f let its slot go at now while it
// stays held (it may take one again with Acquire).
func (t *Table) Release(f Flow, now time.Time) {
	if s := t.flows[f]; s != nil && s.inFlight > 0 {
		s.change(t.window, now, -1)
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
	if slot && s.inFlight > 0 {
		s.change(t.window, now, -1)
		t.total--
	}
	s.held--
	if s.inFlight > s.held { // it said it held none, but its key held more than it waits for
		t.total -= s.inFlight - s.held
		s.change(t.window, now, s.held-s.inFlight)
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
			t.part(id.flow)
			t.version++
		}
	}
	if t.head > 32 && t.head*2 > len(t.idles) {
		t.idles = append(t.idles[:0], t.idles[t.head:]...)
		t.head = 0
	}
}

// Active returns how many keys count against a flow of class c at now:
// those with a flow active in classes 0 to c, each once.
func (t *Table) Active(c int, now time.Time) int {
	t.expire(now)
	return t.keysUpTo(c)
}

// Share returns f's share of slots slots at now: at least 1, and every
// slot while no other flow counts against it.
func (t *Table) Share(f Flow, slots int, now time.Time) int {
	return max(1, slots/t.Counted(f, now))
}

// Counted returns how many keys f shares with at now, its own included:
// what its share divides the slots by. Sharing is between keys: a key
// counts once however many classes it has requests in, so a key alone has
// every slot whatever their classes, and a key with requests of two
// classes takes no more from the others' shares than a key with one.
func (t *Table) Counted(f Flow, now time.Time) int {
	a := t.Active(f.Class, now)
	if !t.keyUpTo(f.Key, f.Class) {
		a++ // f's key, not yet known in these classes
	}
	return a
}

// Allowed reports whether a request of f may take one of slots slots now.
// A flow under its share (less the others' burst room, at least one) may, unless the slot is part of the burst room
// kept for others (Burst). A flow past its share but within the room kept
// for itself (see room) may take a free slot on the same terms. Any other
// only while a slot is free beyond the others' headroom (Headroom): the
// room kept for the flows that count against f and have no request
// waiting (a flow with one waiting competes in the queue's order
// instead). Burst room past a flow's share comes out of the others':
// their share and room count less by it (Extra). slots <= 0 means the
// fleet has no bound, and every request is allowed.
func (t *Table) Allowed(f Flow, slots int, now time.Time) bool {
	if slots <= 0 {
		return true
	}
	free := slots - t.total
	k, share := t.kept(f, slots, now), t.Share(f, slots, now)
	if t.InFlight(f) < max(1, share-k.extra) {
		return k.burst == 0 || free-1 >= k.burst
	}
	if s := t.flows[f]; s != nil && s.inFlight < t.roomOf(s, share, now)-k.extra {
		return free > 0 && free-1 >= k.burst
	}
	return free > 0 && free-1 >= k.whole
}

// Held reports whether fair sharing keeps a request of f from a slot of
// slots at now: Allowed is false while one is free. With none free the
// fleet is full and the request waits for room whatever its share.
func (t *Table) Held(f Flow, slots int, now time.Time) bool {
	return slots > t.total && !t.Allowed(f, slots, now)
}

// Under reports whether f holds fewer than its share of slots slots at
// now, less the burst room the others keep past theirs (Extra), and never
// less than one slot, as a share is never less: a request of f then takes
// a slot before any of a flow at or past its share.
// slots <= 0 means no bound: every flow is under.
func (t *Table) Under(f Flow, slots int, now time.Time) bool {
	return slots <= 0 || t.InFlight(f) < max(1, t.Share(f, slots, now)-t.kept(f, slots, now).extra)
}

// Headroom returns the slots kept free at now for the flows that count
// against f, other than f, and have no request waiting: each one's room
// (see reserve) less what it holds, at least 0. It takes time in the
// number of flows once after each change of the table or of now, and
// constant time until the next.
func (t *Table) Headroom(f Flow, slots int, now time.Time) int {
	return t.kept(f, slots, now).whole
}

// Burst returns the part of Headroom beyond the others' shares: the
// room kept for quiet flows' bursts past their share, which a flow under
// its share must leave free too.
func (t *Table) Burst(f Flow, slots int, now time.Time) int {
	return t.kept(f, slots, now).burst
}

// Extra returns the others' burst room past their shares, used or not:
// what f's share and room count less by, so that a quiet flow's bursts
// come out of the shares of the flows that fill theirs.
func (t *Table) Extra(f Flow, slots int, now time.Time) int {
	return t.kept(f, slots, now).extra
}

// keptRoom is the room kept for some flows with nothing waiting: what
// they do not hold of it (whole), the part of that past their shares
// (burst), and all of it past their shares (extra).
type keptRoom struct{ whole, burst, extra int }

func (k *keptRoom) add(o keptRoom, sign int) {
	k.whole += sign * o.whole
	k.burst += sign * o.burst
	k.extra += sign * o.extra
}

// kept returns Headroom, Burst and Extra.
func (t *Table) kept(f Flow, slots int, now time.Time) keptRoom {
	t.expire(now)
	if f.Class < 0 || len(t.holding) == 0 {
		return keptRoom{}
	}
	if t.flows[f] == nil {
		return t.keptForNewcomer(f, slots, now)
	}
	if !t.hrFresh(slots, now) {
		t.workOutHeadroom(slots, now)
	}
	c := min(f.Class, len(t.hr)-1)
	k := t.hr[c]
	// Nothing is kept against f for f itself or its key's flows of more
	// important classes (see Counted).
	if s := t.flows[f]; s != nil && f.Class < len(t.hr) && s.held <= s.inFlight {
		k.add(t.reserve(s, t.shareOf(f.Class, slots), now), -1)
	}
	for own := 0; own < c; own++ {
		if t.holding[own]+t.recent[own] == 0 {
			continue
		}
		if s := t.flows[Flow{Class: own, Key: f.Key}]; s != nil && s.held <= s.inFlight {
			k.add(t.reserve(s, t.shareOf(own, slots), now), -1)
		}
	}
	return k
}

// keptForNewcomer is kept for a flow the table does not know yet: the
// shares of the others of its class count it, as they will once it
// arrives (a more important class's do not). It takes time in the number
// of flows.
func (t *Table) keptForNewcomer(f Flow, slots int, now time.Time) keptRoom {
	var k keptRoom
	for g, s := range t.flows {
		if s.held > s.inFlight || g.Class < 0 || g.Class > f.Class || g.Key == f.Key {
			continue
		}
		counted := t.Active(g.Class, now) // as workOutHeadroom counts for g
		if g.Class == f.Class && !t.keyUpTo(f.Key, f.Class) {
			counted++ // f's key, once it arrives
		}
		k.add(t.reserve(s, max(1, slots/counted), now), 1)
	}
	return k
}

// reserve returns the room kept for a flow with nothing waiting, given
// its share: less what it holds (whole), the part of that beyond its
// share (burst), and all of the room beyond its share (extra).
func (t *Table) reserve(s *state, share int, now time.Time) keptRoom {
	room := t.roomOf(s, share, now)
	return keptRoom{max(0, room-s.inFlight), max(0, room-max(share, s.inFlight)), max(0, room-share)}
}

// burstSigmas is how far past a flow's usage, in standard deviations of
// independent (Poisson) arrivals, its bursts are expected to reach: a
// flow holding u requests on average holds more than u + 3√u at once a
// few moments in a thousand.
const burstSigmas = 3

// burstOf is the most a flow of usage u is expected to hold at once,
// rounded up: u + burstSigmas·√u.
func burstOf(u float64) int {
	if !(u > 0) {
		return 0
	}
	return int(math.Ceil(u + burstSigmas*math.Sqrt(u) - 1e-9))
}

// roomOf is the slots kept for a flow of share share at now (see room).
func (t *Table) roomOf(s *state, share int, now time.Time) int {
	room, _ := t.room(s, share, now)
	return room
}

// room is the slots kept for a flow of share share: its share; and where
// it held more than that at once lately (its peak over the last one to
// two windows), or its usage says its bursts will (burstOf, where that
// fits in its share plus its credit), as much as that, up to its share
// plus its credit. A quiet flow whose requests come in bursts thus finds
// room for them, even for the first past its share, while a flow that
// used its share all along has no credit, and no burst room. moving
// reports whether the room may change with time alone, as the flow's
// usage does.
func (t *Table) room(s *state, share int, now time.Time) (room int, moving bool) {
	if t.window <= 0 {
		return share, false // no window, no history to judge bursts by
	}
	u := s.usage(t.window, now)
	peak := s.peakAt(t.window, now)
	// While nothing changes, usage only moves toward what the flow holds;
	// its bursts count only between where they pass its share and where
	// they no longer fit its share plus its credit (burstOf rises with
	// usage, credit falls), so they can move the room only if the ends of
	// that stretch allow it.
	lo, hi := min(u, float64(s.inFlight)), max(u, float64(s.inFlight))
	moving = peak > share || burstOf(hi) > share && burstOf(lo) <= share+creditOf(share, lo)
	limit := share + creditOf(share, u)
	want := peak
	if b := burstOf(u); b <= limit {
		// Only bursts that fit: a flow that would burst past its share
		// and its credit is not quiet but heavy, held below its share.
		want = max(want, b)
	}
	if want > share {
		return min(want, limit), moving
	}
	return share, moving
}

// hrFresh reports whether hr, worked out last, holds for slots
// slots at now: the table has not changed since, and time has not moved
// them. A room that time alone may move (room's moving: it reads a usage,
// which changes at every moment) holds for that moment only; otherwise
// rooms are shares, a peak only falls as time goes on, and a usage moves
// only toward what its flow holds, so none rises past its share later.
// Earlier is another matter: a caller whose clock read before hr was
// worked out (it took now before the lock) may find a usage further from
// what its flow holds, and a room past its share, so hr is worked out
// again for it.
func (t *Table) hrFresh(slots int, now time.Time) bool {
	if t.hrVersion != t.version+1 || t.hrSlots != slots || now.Before(t.hrAt) {
		return false
	}
	if t.hrUsage {
		return t.hrAt.Equal(now)
	}
	return bucketOf(t.window, t.hrAt) == bucketOf(t.window, now)
}

// workOutHeadroom sets hr for slots slots at now: per class c, the room
// kept for the flows of classes 0 to c that have no request waiting.
func (t *Table) workOutHeadroom(slots int, now time.Time) {
	n := len(t.holding)
	if len(t.hr) != n {
		t.hr = make([]keptRoom, n)
	}
	if len(t.counts) != n {
		t.counts = make([]int, n)
	}
	counts := t.counts // keys counted against a flow of each class
	for c := range n {
		counts[c] = t.lowest[c]
		if c > 0 {
			counts[c] += counts[c-1]
		}
		t.hr[c] = keptRoom{}
	}
	usage := false // a room read a flow's usage
	for g, s := range t.flows {
		if s.held > s.inFlight || g.Class < 0 || g.Class >= n {
			continue
		}
		share := max(1, slots/max(1, counts[g.Class]))
		_, moving := t.room(s, share, now)
		usage = usage || moving
		t.hr[g.Class].add(t.reserve(s, share, now), 1)
	}
	for c := 1; c < n; c++ {
		t.hr[c].add(t.hr[c-1], 1)
	}
	t.hrVersion, t.hrSlots, t.hrAt, t.hrUsage = t.version+1, slots, now, usage
}

// shareOf is the share of slots of a flow of class c that the table
// knows.
func (t *Table) shareOf(c, slots int) int {
	return max(1, slots/max(1, t.keysUpTo(c)))
}

// Usage returns the slots f has held on average at now: in flight over
// time, each moment weighted by e^(-age/window), divided by the sum of
// the weights since f first took a slot (so a flow known for less than a
// window is judged by its short life, not by a history of zeros it never
// had, nor by the moments its first request spent before its slot). 0
// for a flow the table does not know or that has held no slot yet.
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
	return creditOf(t.Share(f, slots, now), t.Usage(f, now))
}

// creditOf is the whole slots of share a usage leaves unused, at least 0.
// A usage a hair over a whole number from float rounding (a flow that held
// one count all along) still leaves the slots it did not use.
func creditOf(share int, usage float64) int {
	return max(0, int(math.Floor(float64(share)-usage+1e-6)))
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
