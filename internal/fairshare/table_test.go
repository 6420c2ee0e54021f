package fairshare

import (
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var t0 = time.Unix(1_700_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// op is one step of a table test: a request of flow arrives, takes a
// slot, or leaves (with or without one), at ms.
type op struct {
	kind string // arrive, acquire, leave, leaveQueued
	flow Flow
	ms   int
}

func apply(tb *Table, ops []op) {
	for _, o := range ops {
		switch o.kind {
		case "arrive":
			tb.Arrive(o.flow, at(o.ms))
		case "acquire":
			tb.Acquire(o.flow, at(o.ms))
		case "leave":
			tb.Leave(o.flow, true, at(o.ms))
		case "leaveQueued":
			tb.Leave(o.flow, false, at(o.ms))
		default:
			panic(o.kind)
		}
	}
}

// run is arrive then acquire: a request that took a slot at once.
func run(f Flow, ms int) []op { return []op{{"arrive", f, ms}, {"acquire", f, ms}} }

func TestShare(t *testing.T) {
	quiet, flood := Flow{1, "quiet"}, Flow{1, "flood"}
	crit, shed := Flow{0, "crit"}, Flow{2, "batch"}
	many := func(f Flow, n, ms int) []op {
		var out []op
		for range n {
			out = append(out, run(f, ms)...)
		}
		return out
	}
	cat := func(parts ...[]op) []op {
		var out []op
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name   string
		ops    []op
		ask    Flow
		slots  int
		nowMs  int
		share  int
		active int // Counted(ask)
		ok     bool
	}{
		{"alone_takes_every_slot", many(flood, 15, 0), flood, 16, 0, 16, 1, true},
		{"alone_full", many(flood, 16, 0), flood, 16, 0, 16, 1, false},
		{"newcomer_counts_itself", many(flood, 8, 0), quiet, 16, 0, 8, 2, true},
		{"flooder_held_to_half", cat(many(flood, 8, 0), run(quiet, 0)), flood, 16, 0, 8, 2, false},
		{"quiet_under_share", cat(many(flood, 8, 0), many(quiet, 7, 0)), quiet, 16, 0, 8, 2, true},
		{"quiet_recent_still_counts", cat(many(flood, 8, 0), run(quiet, 0), []op{{"leave", quiet, 100}}), flood, 16, 4_999 + 100, 8, 2, false},
		{"quiet_forgotten_after_window", cat(many(flood, 8, 0), run(quiet, 0), []op{{"leave", quiet, 100}}), flood, 16, 5_100, 16, 1, true},
		// 16 slots over 3 keys: shares of 5, and the slot rounding leaves
		// over may be borrowed: the others' headroom (4 + 4) stays free.
		{"three_keys_remainder_borrowed", cat(many(flood, 5, 0), run(quiet, 0), run(Flow{1, "third"}, 0)), flood, 16, 0, 5, 3, true},
		{"three_keys_headroom_kept", cat(many(flood, 6, 0), run(quiet, 0), run(Flow{1, "third"}, 0)), flood, 16, 0, 5, 3, false},
		{"share_at_least_one", cat(run(Flow{1, "a"}, 0), run(Flow{1, "b"}, 0), run(Flow{1, "c"}, 0)), Flow{1, "d"}, 2, 0, 1, 4, true},
		{"critical_ignores_sheddable", cat(many(shed, 3, 0), many(crit, 10, 0)), crit, 16, 0, 16, 1, true},
		{"sheddable_shares_with_critical", cat(many(crit, 3, 0), many(shed, 8, 0)), shed, 16, 0, 8, 2, false},
		// A key with a request waiting counts, but keeps no headroom: it
		// competes in the queue, where keys under their share go first.
		{"queued_counts_as_active", cat(many(flood, 8, 0), []op{{"arrive", quiet, 0}}), flood, 16, 0, 8, 2, true},
		{"borrowing_keeps_one_slot_free_per_idle_share", cat(many(flood, 15, 0), run(quiet, 0)), flood, 16, 0, 8, 2, false},
		{"queued_leaves_without_slot", cat(many(flood, 8, 0), []op{{"arrive", quiet, 0}, {"leaveQueued", quiet, 10}}), quiet, 16, 10, 8, 2, true},
		// A key's own standard requests do not count against its sheddable
		// ones: alone, a key has every slot whatever its classes.
		{"same_key_other_class_not_counted", cat(many(flood, 8, 0), run(Flow{2, "flood"}, 0)), Flow{2, "flood"}, 16, 0, 16, 1, true},
		// A key with requests of two classes counts once against a key
		// of the less important one: 16 slots over 2 keys, not 3 flows.
		{"key_of_two_classes_counts_once", cat(run(Flow{0, "flood"}, 0), many(flood, 7, 0), many(quiet, 7, 0)), quiet, 16, 0, 8, 2, true},
		{"key_of_two_classes_held_to_its_share", cat(run(Flow{0, "flood"}, 0), many(flood, 7, 0), many(quiet, 8, 0)), quiet, 16, 0, 8, 2, false},
		{"unbounded_slots_allow", many(flood, 100, 0), flood, 0, 0, 1, 1, true},
		// A quiet key holding 4 on average keeps room for its bursts up to
		// 4 + 3·√4 = 10, two past its share, which the flood leaves free:
		// it is held to 6, and the quiet key goes past 8 into that room.
		{"quiet_usage_keeps_burst_room", cat(many(flood, 6, 0), many(quiet, 4, 0)), flood, 16, 1000, 8, 2, false},
		{"flood_under_share_less_burst_room", cat(many(flood, 5, 0), many(quiet, 4, 0)), flood, 16, 1000, 8, 2, true},
		{"quiet_bursts_past_its_share", cat(many(flood, 6, 0), many(quiet, 4, 0), many(quiet, 4, 999)), quiet, 16, 1000, 8, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := New(3, 5*time.Second)
			apply(tb, tt.ops)
			now := at(tt.nowMs)
			if got := tb.Counted(tt.ask, now); got != tt.active {
				t.Errorf("Counted = %d, want %d", got, tt.active)
			}
			if tt.slots > 0 {
				if got := tb.Share(tt.ask, tt.slots, now); got != tt.share {
					t.Errorf("Share = %d, want %d", got, tt.share)
				}
			}
			if got := tb.Allowed(tt.ask, tt.slots, now); got != tt.ok {
				t.Errorf("Allowed = %v, want %v", got, tt.ok)
			}
		})
	}
}

// TestBurstRoomFromUsage: a flow's usage keeps room for its bursts past
// its share (usage + 3·√usage, rounded up) where that fits in its share
// plus its credit; a heavy flow's would not, and it keeps none.
func TestBurstRoomFromUsage(t *testing.T) {
	quiet, flood := Flow{1, "quiet"}, Flow{1, "flood"}
	for _, tt := range []struct {
		name                   string
		quietHolds, floodHolds int
		floodExtra, quietExtra int // Extra of each: the other's room past its share
	}{
		{"quiet_4_keeps_2_past_its_share", 4, 6, 2, 0},       // 4 + 6 = 10; the flood's 6 + 7.3 > 8 + 2
		{"quiet_3_keeps_1", 3, 6, 1, 0},                      // 3 + 5.2 → 9
		{"quiet_2_needs_no_more_than_its_share", 2, 8, 0, 0}, // 2 + 4.2 → 7
		{"both_heavy", 8, 8, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tb := New(3, 5*time.Second)
			for range tt.quietHolds {
				apply(tb, run(quiet, 0))
			}
			for range tt.floodHolds {
				apply(tb, run(flood, 0))
			}
			now := at(1000)
			if got := tb.Extra(flood, 16, now); got != tt.floodExtra {
				t.Errorf("Extra(flood) = %d, want %d", got, tt.floodExtra)
			}
			if got := tb.Extra(quiet, 16, now); got != tt.quietExtra {
				t.Errorf("Extra(quiet) = %d, want %d", got, tt.quietExtra)
			}
		})
	}
}

func TestForgetsIdleFlows(t *testing.T) {
	tb := New(1, time.Second)
	for i := range 10_000 {
		f := Flow{0, fmt.Sprintf("k%d", i)}
		tb.Arrive(f, at(i))
		tb.Acquire(f, at(i))
		tb.Leave(f, true, at(i))
	}
	// Key i's one request ended at i ms; at 10 s those that ended less
	// than a second before are still active: 9001 to 9999.
	if got := tb.Active(0, at(10_000)); got != 999 {
		t.Errorf("Active = %d, want 999", got)
	}
	if got := tb.Flows(); got != 999 {
		t.Errorf("Flows = %d, want 999", got)
	}
	if got := tb.Active(0, at(20_000)); got != 0 {
		t.Errorf("Active after the window = %d, want 0", got)
	}
	if tb.Flows() != 0 || len(tb.idles)-tb.head != 0 {
		t.Errorf("remembers %d flows, %d idle records after every window passed", tb.Flows(), len(tb.idles)-tb.head)
	}
}

func TestUnbalancedCallsIgnored(t *testing.T) {
	tb := New(1, time.Second)
	f := Flow{0, "k"}
	tb.Leave(f, true, at(0)) // never arrived
	tb.Acquire(f, at(0))
	if tb.InFlight(f) != 0 || tb.Flows() != 0 {
		t.Fatalf("a flow that never arrived is remembered: in flight %d, flows %d", tb.InFlight(f), tb.Flows())
	}
	tb.Arrive(f, at(0))
	tb.Acquire(f, at(0))
	tb.Acquire(f, at(0)) // one request holds one slot at most
	if tb.InFlight(f) != 1 {
		t.Fatalf("InFlight = %d after two acquires of one request, want 1", tb.InFlight(f))
	}
}

// model is the naive reference: every flow's counts and when it went
// idle, Active by scanning them all.
type model struct {
	window time.Duration
	flows  map[Flow]*state
	hist   map[Flow][]seg // per flow: its in-flight count since it arrived
}

// seg is a flow's in-flight count from at until the next seg (or now).
type seg struct {
	at       time.Time
	inFlight int
}

// record notes f's in-flight count at now.
func (m *model) record(f Flow, now time.Time) {
	m.hist[f] = append(m.hist[f], seg{now, m.flows[f].inFlight})
}

// usage integrates f's history from its first slot: each stretch of
// constant in-flight n from t1 to t2 weighs n times the integral of
// e^(-(now-t)/window) over it.
func (m *model) usage(f Flow, now time.Time) float64 {
	h := m.hist[f]
	for len(h) > 0 && h[0].inFlight == 0 {
		h = h[1:]
	}
	if len(h) == 0 {
		return 0
	}
	w := m.window.Seconds()
	var num, den float64
	for i, sg := range h {
		end := now
		if i+1 < len(h) {
			end = h[i+1].at
		}
		part := w * (math.Exp(-now.Sub(end).Seconds()/w) - math.Exp(-now.Sub(sg.at).Seconds()/w))
		num += float64(sg.inFlight) * part
		den += part
	}
	if den <= 0 {
		return float64(h[len(h)-1].inFlight)
	}
	return num / den
}

func (m *model) active(f Flow, now time.Time) bool {
	s := m.flows[f]
	return s != nil && (s.held > 0 || !s.idle.IsZero() && now.Sub(s.idle) < m.window)
}

// keysUpTo is the set of keys with a flow of class 0 to c active at now.
func (m *model) keysUpTo(c int, now time.Time) map[string]bool {
	keys := map[string]bool{}
	for g := range m.flows {
		if g.Class <= c && m.active(g, now) {
			keys[g.Key] = true
		}
	}
	return keys
}

// counted is what f's share divides the slots by: the keys active in its
// class and more important ones, each once, f's own among them.
func (m *model) counted(f Flow, now time.Time) int {
	keys := m.keysUpTo(f.Class, now)
	keys[f.Key] = true
	return len(keys)
}

// countedAll is what the shares of the room kept for others divide the
// slots by: every key active in g's class and more important ones.
func (m *model) countedAll(g Flow, now time.Time) int {
	return len(m.keysUpTo(g.Class, now))
}

// headroom is the slots kept free for the flows other than f that count
// against it and have none waiting: each one's room less what it holds,
// and the part of that beyond their shares, each share counting f (where
// f counts against it) whether or not f is active yet. ambiguous is set when a
// flow's credit sits too near a whole slot for float rounding to agree.
func (m *model) headroom(f Flow, slots int, now time.Time) (whole, burst int, ambiguous bool) {
	whole, burst, _, ambiguous = m.kept(f, slots, now)
	return whole, burst, ambiguous
}

// kept is headroom and extra: all of those flows' rooms past their shares.
func (m *model) kept(f Flow, slots int, now time.Time) (whole, burst, extra int, ambiguous bool) {
	for g, s := range m.flows {
		if g.Key == f.Key || g.Class > f.Class || s.held > s.inFlight || !m.active(g, now) {
			continue // nothing is kept against f for its own key
		}
		counted := m.countedAll(g, now)
		if !m.active(f, now) && f.Class <= g.Class && !m.keysUpTo(g.Class, now)[f.Key] {
			counted++ // f's key will count against g once f arrives
		}
		share := max(1, slots/counted)
		room, amb := m.room(g, share, now)
		ambiguous = ambiguous || amb
		whole += max(0, room-s.inFlight)
		burst += max(0, room-max(share, s.inFlight))
		extra += max(0, room-share)
	}
	return whole, burst, extra, ambiguous
}

// room is the slots kept for g: its share, or the larger of its peak and
// its usage plus three times its square root, rounded up, up to its share
// plus its credit.
func (m *model) room(g Flow, share int, now time.Time) (room int, ambiguous bool) {
	u := m.usage(g, now)
	want := m.peak(g, now)
	unused := float64(share) - u + 1e-6
	limit := share + max(0, int(math.Floor(unused)))
	ambiguous = math.Abs(unused-math.Round(unused)) < 1e-9
	if u > 0 {
		b := u + 3*math.Sqrt(u)
		if int(math.Ceil(b)) <= limit {
			want = max(want, int(math.Ceil(b)))
		}
		ambiguous = ambiguous || math.Abs(b-math.Round(b)) < 1e-6
	}
	if want <= share {
		return share, ambiguous
	}
	return min(want, limit), ambiguous
}

// peak is the most g held at once from the start of the window-long
// stretch of time before now's (stretches counted from the Unix epoch)
// to now, a count still held at that start included.
func (m *model) peak(g Flow, now time.Time) int {
	w := int64(m.window)
	start := time.Unix(0, (now.UnixNano()/w-1)*w)
	h, p := m.hist[g], 0
	for i, sg := range h {
		end := now
		if i+1 < len(h) {
			end = h[i+1].at
		}
		if !end.Before(start) {
			p = max(p, sg.inFlight)
		}
	}
	return p
}

// allowed is what Allowed should say, and whether headroom found it
// ambiguous.
func (m *model) allowed(f Flow, slots int, now time.Time) (ok, ambiguous bool) {
	if slots <= 0 {
		return true, false
	}
	used, inFlight := 0, 0
	for g, s := range m.flows {
		used += s.inFlight
		if g == f {
			inFlight = s.inFlight
		}
	}
	free := slots - used
	whole, burst, extra, ambiguous := m.kept(f, slots, now)
	share := max(1, slots/m.counted(f, now))
	if inFlight < max(1, share-extra) {
		return burst == 0 || free-1 >= burst, ambiguous
	}
	if m.flows[f] != nil {
		room, amb := m.room(f, share, now)
		ambiguous = ambiguous || amb
		if inFlight < room-extra {
			return free > 0 && free-1 >= burst, ambiguous
		}
	}
	return free > 0 && free-1 >= whole, ambiguous
}

// modelStep applies one operation to the table and the model: 0 arrive,
// 1 acquire, 2 leave (with or without a slot), 3 release.
func modelStep(t *rapid.T, tb *Table, m *model, f Flow, op int, now time.Time) {
	s := m.flows[f]
	switch op {
	case 3:
		tb.Release(f, now)
		if s != nil && s.inFlight > 0 {
			s.inFlight--
			m.record(f, now)
		}
	case 0:
		tb.Arrive(f, now)
		if s == nil || !m.active(f, now) {
			s = &state{}
			m.flows[f] = s
			m.hist[f] = nil
			m.record(f, now)
		}
		s.held++
		s.idle = time.Time{}
	case 1:
		tb.Acquire(f, now)
		if s != nil && s.inFlight < s.held {
			s.inFlight++
			m.record(f, now)
		}
	case 2:
		slot := rapid.Bool().Draw(t, "slot")
		tb.Leave(f, slot, now)
		if s != nil && s.held > 0 {
			if slot && s.inFlight > 0 {
				s.inFlight--
			}
			s.held--
			s.inFlight = min(s.inFlight, s.held)
			if s.held == 0 {
				s.idle = now
			}
			m.record(f, now)
		}
	}
}

func TestAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		classes := rapid.IntRange(1, 3).Draw(t, "classes")
		window := time.Duration(rapid.IntRange(1, 5).Draw(t, "window")) * time.Second
		tb := New(classes, window)
		m := &model{window: window, flows: map[Flow]*state{}, hist: map[Flow][]seg{}}
		keys := []string{"a", "b", "c", "d"}[:rapid.IntRange(1, 4).Draw(t, "keys")]
		now := t0
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			now = now.Add(time.Duration(rapid.IntRange(0, 1500).Draw(t, "dt")) * time.Millisecond)
			f := Flow{rapid.IntRange(0, classes-1).Draw(t, "class"), rapid.SampledFrom(keys).Draw(t, "key")}
			op := rapid.IntRange(0, 5).Draw(t, "op")
			if op >= 4 { // a request that arrives and starts at once: bursts past a share
				modelStep(t, tb, m, f, 0, now)
				op = 1
			}
			modelStep(t, tb, m, f, op, now)
			slots := rapid.IntRange(0, 8).Draw(t, "slots")
			for g := range m.flows {
				if !m.active(g, now) {
					delete(m.flows, g)
					delete(m.hist, g)
				}
			}
			for c := range classes {
				for _, k := range keys {
					g := Flow{c, k}
					want := m.counted(g, now)
					if got := tb.Counted(g, now); got != want {
						t.Fatalf("Counted(%v) = %d, model %d", g, got, want)
					}
					inFlight := 0
					if s := m.flows[g]; s != nil {
						inFlight = s.inFlight
					}
					if got := tb.InFlight(g); got != inFlight {
						t.Fatalf("InFlight(%v) = %d, model %d", g, got, inFlight)
					}
					whole, burst, extra, ambiguous := m.kept(g, slots, now)
					allowed, amb := m.allowed(g, slots, now)
					if ambiguous || amb {
						continue
					}
					under := slots <= 0 || inFlight < max(1, max(1, slots/want)-extra)
					if got := tb.Under(g, slots, now); got != under {
						t.Fatalf("Under(%v, %d) = %v, model %v", g, slots, got, under)
					}
					if inFlight == 0 && !under {
						// A share is at least one slot, whatever room the others keep.
						t.Fatalf("%v holds no slot of %d but is not under its share", g, slots)
					}
					if got := tb.Extra(g, slots, now); slots > 0 && got != extra {
						t.Fatalf("Extra(%v, %d) = %d, model %d", g, slots, got, extra)
					}
					if got := tb.Headroom(g, slots, now); got != whole {
						t.Fatalf("Headroom(%v, %d) = %d, model %d", g, slots, got, whole)
					}
					if got := tb.Burst(g, slots, now); got != burst {
						t.Fatalf("Burst(%v, %d) = %d, model %d", g, slots, got, burst)
					}
					if got := tb.Allowed(g, slots, now); got != allowed {
						t.Fatalf("Allowed(%v, %d) = %v, model %v", g, slots, got, allowed)
					}
					total := 0
					for _, s := range m.flows {
						total += s.inFlight
					}
					if got, held := tb.Held(g, slots, now), !allowed && slots > total; got != held {
						t.Fatalf("Held(%v, %d) = %v, model %v (%d of the slots taken)", g, slots, got, held, total)
					}
					checkOwed(t, tb, m, g, slots, now, allowed)
				}
			}
			if got := tb.Flows(); got != len(m.flows) {
				t.Fatalf("remembers %d flows, model %d active", got, len(m.flows))
			}
		}
	})
}

// TestBurstRoomAgainstModel drives two flows the way a quiet key and a
// flood do (requests that start at once, end, or wait and start later,
// in bursts against a small number of slots) and checks Headroom, Burst,
// Allowed and Owed against the model at every step; it also checks that
// burst room was kept at a good number of them, so the generator keeps
// reaching the case it is for.
func TestBurstRoomAgainstModel(t *testing.T) {
	var checked, kept int
	rapid.Check(t, func(t *rapid.T) {
		window := time.Duration(rapid.IntRange(1, 3).Draw(t, "window")) * time.Second
		tb := New(1, window)
		m := &model{window: window, flows: map[Flow]*state{}, hist: map[Flow][]seg{}}
		flows := []Flow{{0, "quiet"}, {0, "flood"}}
		slots := rapid.IntRange(2, 8).Draw(t, "slots")
		now := t0
		for range rapid.IntRange(1, 150).Draw(t, "steps") {
			now = now.Add(time.Duration(rapid.IntRange(0, 400).Draw(t, "dt")) * time.Millisecond)
			who := rapid.IntRange(0, 1).Draw(t, "who")
			f := flows[who]
			op := rapid.IntRange(0, 4).Draw(t, "op")
			if who == 0 { // the quiet key never waits: it starts a request or ends one
				op = rapid.IntRange(0, 1).Draw(t, "ends")
			}
			switch op {
			case 0: // a request that starts at once
				modelStep(t, tb, m, f, 0, now)
				modelStep(t, tb, m, f, 1, now)
			case 1: // one that ends
				if s := m.flows[f]; s != nil && s.inFlight > 0 {
					tb.Leave(f, true, now)
					s.inFlight--
					s.held--
					if s.held == 0 {
						s.idle = now
					}
					m.record(f, now)
				}
			default: // one that waits, or a waiter that starts
				modelStep(t, tb, m, f, rapid.IntRange(0, 1).Draw(t, "queue"), now)
			}
			for g := range m.flows {
				if !m.active(g, now) {
					delete(m.flows, g)
					delete(m.hist, g)
				}
			}
			for _, g := range flows {
				whole, burst, ambiguous := m.headroom(g, slots, now)
				allowed, amb := m.allowed(g, slots, now)
				if ambiguous || amb {
					continue
				}
				checked++
				if burst > 0 {
					kept++
				}
				if got := tb.Headroom(g, slots, now); got != whole {
					t.Fatalf("Headroom(%v) = %d, model %d", g, got, whole)
				}
				if got := tb.Burst(g, slots, now); got != burst {
					t.Fatalf("Burst(%v) = %d, model %d", g, got, burst)
				}
				if got := tb.Allowed(g, slots, now); got != allowed {
					t.Fatalf("Allowed(%v) = %v, model %v", g, got, allowed)
				}
				checkOwed(t, tb, m, g, slots, now, allowed)
			}
		}
	})
	if kept < 20 {
		t.Errorf("burst room kept at %d of %d checks: the generator no longer reaches it", kept, checked)
	}
	t.Logf("burst room kept at %d of %d checks", kept, checked)
}

// checkOwed compares the table's Usage, Credit and Owed of g with the
// model's, leaving Credit and Owed alone where the model's unused share
// is too near a whole slot for float rounding to agree on.
func checkOwed(t *rapid.T, tb *Table, m *model, g Flow, slots int, now time.Time, allowed bool) {
	use := m.usage(g, now)
	if got := tb.Usage(g, now); math.Abs(got-use) > 1e-6*max(1, use) {
		t.Fatalf("Usage(%v) = %v, model %v", g, got, use)
	}
	if slots <= 0 {
		if tb.Owed(g, slots, now) {
			t.Fatalf("Owed(%v) with no bound on slots", g)
		}
		return
	}
	share := max(1, slots/m.counted(g, now))
	unused := float64(share) - use + 1e-6
	if math.Abs(unused-math.Round(unused)) < 1e-9 {
		return
	}
	credit := max(0, int(math.Floor(unused)))
	if got := tb.Credit(g, slots, now); got != credit {
		t.Fatalf("Credit(%v, %d) = %d, model %d (usage %v, share %d)", g, slots, got, credit, use, share)
	}
	inFlight := 0
	if s := m.flows[g]; s != nil {
		inFlight = s.inFlight
	}
	owed := credit >= 1 && inFlight < share+credit && allowed
	if got := tb.Owed(g, slots, now); got != owed {
		t.Fatalf("Owed(%v, %d) = %v, model %v", g, slots, got, owed)
	}
}

// TestSharesFit checks what the design promises: however the active
// flows take slots, each only while allowed, a flow that is allowed finds
// a slot free (as long as there are at least as many slots as flows): the
// others' shares leave it room, so it never waits for one to end.
func TestSharesFit(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		slots := rapid.IntRange(1, 64).Draw(t, "slots")
		n := rapid.IntRange(1, min(slots, 10)).Draw(t, "flows")
		tb := New(1, time.Minute)
		flows := make([]Flow, n)
		for i := range flows {
			flows[i] = Flow{0, fmt.Sprintf("k%d", i)}
			tb.Arrive(flows[i], t0) // each has a request waiting
		}
		used := 0
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			f := flows[rapid.IntRange(0, n-1).Draw(t, "who")]
			anyUnder := false
			for _, g := range flows {
				anyUnder = anyUnder || tb.Under(g, slots, t0)
			}
			// As the dispatcher does: flows under their share first, then
			// the others where a slot is free beyond the headroom.
			if tb.Under(f, slots, t0) && used >= slots {
				t.Fatalf("%v is under its share but all %d slots are taken", f, slots)
			}
			if tb.Under(f, slots, t0) || !anyUnder && tb.Allowed(f, slots, t0) {
				if used >= slots {
					t.Fatalf("%v is allowed a slot but all %d are taken", f, slots)
				}
				tb.Arrive(f, t0)
				tb.Acquire(f, t0)
				used++
			} else if tb.InFlight(f) > 0 && rapid.Bool().Draw(t, "end") {
				tb.Leave(f, true, t0)
				used--
			}
		}
	})
}

// BenchmarkAllowedManyKeys: 10,000 active keys sharing 20,000 slots, two
// each; half hold their two and half none (idle within the window). A
// key at its share is asked whether it may borrow, one after another, as
// a dispatcher passing over them asks between two changes of the table:
// no, the idle keys are owed every free slot.
func BenchmarkAllowedManyKeys(b *testing.B) {
	const keys, slots = 10_000, 20_000
	now := time.Unix(1_700_000_000, 0)
	tb := New(3, 5*time.Second)
	busy := make([]Flow, 0, keys/2)
	for i := range keys {
		f := Flow{Class: 1, Key: strconv.Itoa(i)}
		tb.Arrive(f, now)
		if i%2 == 0 {
			tb.Leave(f, false, now) // idle, still counted
			continue
		}
		tb.Acquire(f, now)
		tb.Arrive(f, now)
		tb.Acquire(f, now)
		busy = append(busy, f)
	}
	b.ResetTimer()
	for i := range b.N {
		if tb.Allowed(busy[i%len(busy)], slots, now) {
			b.Fatal("a key at its share borrowed what the idle keys are owed")
		}
	}
}

// TestUnacquireLeavesNoTrace: a table where requests now and then take a
// slot and give it back unused (Unacquire) answers every question as one
// where those tries never happened, as long as nothing else changed the
// flow in between; a try another change of the flow interrupts counts as
// a Release.
func TestUnacquireLeavesNoTrace(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		window := time.Duration(rapid.IntRange(1, 5).Draw(t, "window")) * time.Second
		tried, clean := New(2, window), New(2, window)
		flows := []Flow{{0, "a"}, {1, "b"}, {1, "c"}}
		ms := 0
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			ms += rapid.IntRange(0, 2000).Draw(t, "dt")
			f := rapid.SampledFrom(flows).Draw(t, "flow")
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0:
				tried.Arrive(f, at(ms))
				clean.Arrive(f, at(ms))
			case 1:
				tried.Acquire(f, at(ms))
				clean.Acquire(f, at(ms))
			case 2:
				slot := rapid.Bool().Draw(t, "slot")
				tried.Leave(f, slot, at(ms))
				clean.Leave(f, slot, at(ms))
			case 3:
				if tried.InFlight(f) >= heldOf(tried, f) {
					continue // nothing waits that could try
				}
				tried.Acquire(f, at(ms))
				ms += rapid.IntRange(0, 500).Draw(t, "held")
				tried.Unacquire(f, at(ms))
			}
			now := at(ms + rapid.IntRange(0, 3000).Draw(t, "ahead"))
			slots := rapid.IntRange(0, 6).Draw(t, "slots")
			for _, g := range flows {
				if a, b := tried.Usage(g, now), clean.Usage(g, now); a != b {
					t.Fatalf("Usage(%v) = %v after tries, %v without", g, a, b)
				}
				if a, b := tried.InFlight(g), clean.InFlight(g); a != b {
					t.Fatalf("InFlight(%v) = %d after tries, %d without", g, a, b)
				}
				if a, b := tried.Credit(g, slots, now), clean.Credit(g, slots, now); a != b {
					t.Fatalf("Credit(%v, %d) = %d after tries, %d without", g, slots, a, b)
				}
				if a, b := tried.Headroom(g, slots, now), clean.Headroom(g, slots, now); a != b {
					t.Fatalf("Headroom(%v, %d) = %d after tries, %d without", g, slots, a, b)
				}
				if a, b := tried.Allowed(g, slots, now), clean.Allowed(g, slots, now); a != b {
					t.Fatalf("Allowed(%v, %d) = %v after tries, %v without", g, slots, a, b)
				}
				if a, b := tried.Owed(g, slots, now), clean.Owed(g, slots, now); a != b {
					t.Fatalf("Owed(%v, %d) = %v after tries, %v without", g, slots, a, b)
				}
			}
		}
	})
}

// TestUnacquireAfterAChangeReleases: once the flow changed after the
// Acquire, the slot given back counts as used for the time it was held.
func TestUnacquireAfterAChangeReleases(t *testing.T) {
	f := Flow{0, "k"}
	tried, clean := New(1, time.Second), New(1, time.Second)
	for _, tb := range []*Table{tried, clean} {
		tb.Arrive(f, at(0))
		tb.Arrive(f, at(0))
		tb.Acquire(f, at(0)) // the first request runs
	}
	tried.Acquire(f, at(100)) // the second tries a slot
	for _, tb := range []*Table{tried, clean} {
		tb.Leave(f, true, at(150)) // the first ends: a change
	}
	tried.Unacquire(f, at(200))
	if got := tried.InFlight(f); got != 0 {
		t.Fatalf("InFlight = %d after the try was given back, want 0", got)
	}
	if a, b := tried.Usage(f, at(300)), clean.Usage(f, at(300)); a <= b {
		t.Fatalf("Usage = %v after the try, %v without it; want more: the slot was held 100 ms", a, b)
	}
	tried.Unacquire(f, at(300)) // nothing left to give back
	if got := tried.InFlight(f); got != 0 {
		t.Fatalf("InFlight = %d, want 0", got)
	}
}

// heldOf is how many requests f holds (waiting or in flight).
func heldOf(tb *Table, f Flow) int {
	if s := tb.flows[f]; s != nil {
		return s.held
	}
	return 0
}

// TestNewFlowIsNotQuiet: a flow whose first request spent a while before
// its slot (read, tokenized, queued), and which then took its share at
// once, is judged by the slots it holds, not by the moments before: it
// earns no credit and no burst room, and the third slot it asks for
// stays the quiet flow's. Counted from its arrival, its usage read 0.34
// while it held 2 of a share of 2, and the third slot was its.
func TestNewFlowIsNotQuiet(t *testing.T) {
	quiet, flood := Flow{1, "quiet"}, Flow{1, "flood"}
	tb := New(3, 5*time.Second)
	tb.Arrive(quiet, at(0))
	tb.Acquire(quiet, at(0))
	for range 3 {
		tb.Arrive(flood, at(1000))
	}
	tb.Acquire(flood, at(1010))
	tb.Acquire(flood, at(1010))
	now := at(1012)
	if u := tb.Usage(flood, now); math.Abs(u-2) > 1e-9 {
		t.Errorf("Usage(flood) = %v, want 2: the slots it held since its first", u)
	}
	if c := tb.Credit(flood, 4, now); c != 0 {
		t.Errorf("Credit(flood) = %d, want 0", c)
	}
	if tb.Allowed(flood, 4, now) || tb.Owed(flood, 4, now) {
		t.Error("the flood may take a third slot, past its share, the quiet flow's room")
	}
	if !tb.Allowed(quiet, 4, now) {
		t.Error("the quiet flow may not take its second slot")
	}
}

// TestHeadroomForAnEarlierClock: headroom worked out at one moment is not
// reused for a caller whose clock read earlier (a request that took the
// time before the lock), where a flow's usage is further from what it
// holds and its room past its share: that caller got a headroom of -1.
func TestHeadroomForAnEarlierClock(t *testing.T) {
	tb := New(2, time.Second)
	a, b := Flow{0, "a"}, Flow{1, "b"}
	tb.Arrive(a, at(0))
	tb.Acquire(a, at(0))
	tb.Arrive(b, at(0))
	tb.Leave(a, false, at(1))
	later := tb.Headroom(a, 3, at(2))
	fresh := New(2, time.Second)
	fresh.Arrive(a, at(0))
	fresh.Acquire(a, at(0))
	fresh.Arrive(b, at(0))
	fresh.Leave(a, false, at(1))
	if got, want := tb.Headroom(a, 3, at(1)), fresh.Headroom(a, 3, at(1)); got != want || got < 0 {
		t.Errorf("Headroom at 1 ms after one at 2 ms = %d, worked out afresh %d (headroom %d at 2 ms)", got, want, later)
	}
}
