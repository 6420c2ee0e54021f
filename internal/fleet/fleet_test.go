package fleet

import (
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"pgregory.net/rapid"

	"github.com/inferrail/inferrail/internal/clock"
)

func replica(id string, models ...string) *Replica {
	u, _ := url.Parse("http://127.0.0.1:1")
	if len(models) == 0 {
		models = []string{"m"}
	}
	return NewReplica(id, u, models, 4, 2)
}

// TestLeasesMatchReference drives leases with random operations and checks
// the counters against plain arithmetic.
func TestLeasesMatchReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		maxConc := rapid.Int64Range(0, 5).Draw(t, "maxConcurrency")
		maxPend := rapid.Int64Range(0, 5).Draw(t, "maxPending")
		r := NewReplica("r", nil, []string{"m"}, maxConc, maxPend)
		var held []*Lease
		waiting := map[*Lease]bool{} // the held leases that count as pending
		var inFlight, pending int64
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0:
				want := (maxConc == 0 || inFlight < maxConc) && (maxPend == 0 || pending < maxPend)
				l, ok := r.TryAcquire()
				if ok != want {
					t.Fatalf("TryAcquire = %v with %d/%d in flight and %d/%d pending", ok, inFlight, maxConc, pending, maxPend)
				}
				if ok {
					held = append(held, l)
					waiting[l] = true
					inFlight++
					pending++
				}
			case 1: // the head arrives, or the lease is a whole answer's
				if len(held) == 0 {
					continue
				}
				l := held[rapid.IntRange(0, len(held)-1).Draw(t, "lease")]
				if waiting[l] {
					pending--
				}
				waiting[l] = false
				if rapid.Bool().Draw(t, "whole") {
					l.AnswersWhole()
				} else {
					l.Started()
				}
			case 2:
				if len(held) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(held)-1).Draw(t, "lease")
				l := held[i]
				if waiting[l] {
					pending--
				}
				delete(waiting, l)
				inFlight--
				l.Release()
				l.Release() // a second release changes nothing
				l.Started() // nor does anything after it
				held = append(held[:i], held[i+1:]...)
			case 3:
				if got := r.HasRoom(); got != ((maxConc == 0 || inFlight < maxConc) && (maxPend == 0 || pending < maxPend)) {
					t.Fatalf("HasRoom = %v with %d in flight, %d pending", got, inFlight, pending)
				}
			}
			if r.InFlight() != inFlight || r.Pending() != pending {
				t.Fatalf("counters %d/%d, want %d/%d", r.InFlight(), r.Pending(), inFlight, pending)
			}
		}
	})
}

// TestLeaseCapsUnderRace has many goroutines race for few slots: the caps
// are never overshot.
func TestLeaseCapsUnderRace(t *testing.T) {
	r := NewReplica("r", nil, []string{"m"}, 5, 3)
	var holders, pendingHolders, worst, worstPending atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 2000 {
				l, ok := r.TryAcquire()
				if !ok {
					continue
				}
				n := holders.Add(1)
				p := pendingHolders.Add(1)
				for m := worst.Load(); n > m && !worst.CompareAndSwap(m, n); m = worst.Load() {
				}
				for m := worstPending.Load(); p > m && !worstPending.CompareAndSwap(m, p); m = worstPending.Load() {
				}
				pendingHolders.Add(-1)
				l.Started()
				holders.Add(-1)
				l.Release()
			}
		})
	}
	wg.Wait()
	if worst.Load() > 5 || worstPending.Load() > 3 {
		t.Errorf("held %d leases (cap 5), %d pending (cap 3)", worst.Load(), worstPending.Load())
	}
	if r.InFlight() != 0 || r.Pending() != 0 {
		t.Errorf("counters left at %d/%d", r.InFlight(), r.Pending())
	}
}

func testHealth(f *Fleet) *Health {
	return NewHealth(HealthConfig{
		Interval: time.Second, Timeout: time.Second, UnhealthyThreshold: 3, HealthyThreshold: 1,
		EjectionBackoff: 5 * time.Second, MaxEjectionBackoff: 20 * time.Second, MaxEjectionPercent: 50,
	}, f, nil, nil, nil, nil)
}

// TestEjectionBackoff: failures in a row eject a replica for a backoff that
// doubles on repeats up to the cap and resets after it serves again.
func TestEjectionBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, c := replica("a"), replica("b"), replica("c")
		f := New([]*Replica{a, b, c}, nil)
		h := testHealth(f)
		fail := func(n int) {
			for range n {
				h.Report(a, false)
			}
		}
		fail(2)
		if a.Ejected(time.Now()) {
			t.Fatal("ejected after 2 failures, threshold 3")
		}
		h.Report(a, true) // a success breaks the streak
		fail(2)
		if a.Ejected(time.Now()) {
			t.Fatal("a success did not reset the failure streak")
		}
		for i, want := range []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 20 * time.Second} {
			fail(3)
			if !a.Ejected(time.Now()) {
				t.Fatalf("ejection %d did not happen", i+1)
			}
			time.Sleep(want - time.Millisecond)
			if !a.Ejected(time.Now()) {
				t.Fatalf("ejection %d ended before %v", i+1, want)
			}
			time.Sleep(time.Millisecond)
			if a.Ejected(time.Now()) {
				t.Fatalf("ejection %d lasted past %v", i+1, want)
			}
		}
		h.Report(a, true) // serving again resets the backoff
		fail(3)
		time.Sleep(5 * time.Second)
		if a.Ejected(time.Now()) {
			t.Fatal("backoff not reset after the replica served again")
		}
		if a.EjectedTotal() != 5 {
			t.Errorf("EjectedTotal %d, want 5", a.EjectedTotal())
		}
	})
}

// TestRefusedEjectsAtOnce: one refused connection ejects a replica for the
// first backoff, where one failed request does not; refusals while it is
// out do not lengthen the ejection, and the next refusal after it ends
// doubles the backoff as a streak would.
func TestRefusedEjectsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, c := replica("a"), replica("b"), replica("c")
		h := testHealth(New([]*Replica{a, b, c}, nil))
		h.Report(b, false)
		if b.Ejected(time.Now()) {
			t.Fatal("one failed request ejected b")
		}
		h.Refused(a)
		if !a.Ejected(time.Now()) {
			t.Fatal("a refused connection did not eject a")
		}
		select {
		case <-a.probeNow:
		default:
			t.Error("a refused connection asked for no probe")
		}
		time.Sleep(4 * time.Second)
		h.Refused(a) // a late attempt, sent before the ejection
		time.Sleep(time.Second - time.Millisecond)
		if !a.Ejected(time.Now()) {
			t.Fatal("ejected for less than the first backoff")
		}
		time.Sleep(time.Millisecond)
		if a.Ejected(time.Now()) {
			t.Fatal("a refusal while ejected lengthened the ejection")
		}
		h.Refused(a)
		time.Sleep(10*time.Second - time.Millisecond)
		if !a.Ejected(time.Now()) {
			t.Fatal("a second ejection did not double the backoff")
		}
		if a.EjectedTotal() != 2 {
			t.Errorf("EjectedTotal %d, want 2", a.EjectedTotal())
		}
	})
}

// TestEjectionPercent: failures and refused connections never eject more
// than the cap of a model's replicas that pass their probes, before or
// after probes take others out.
func TestEjectionPercent(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		synctest.Test(t, func(t *testing.T) {
			n := rapid.IntRange(1, 8).Draw(rt, "replicas")
			pct := rapid.IntRange(0, 100).Draw(rt, "percent")
			var rs []*Replica
			for i := range n {
				rs = append(rs, replica(fmt.Sprint(i)))
			}
			down := rapid.IntRange(0, n).Draw(rt, "probedDown")
			for _, r := range rs[:down] {
				r.probeUp.Store(false)
			}
			f := New(rs, nil)
			h := testHealth(f)
			h.cfg.MaxEjectionPercent = pct
			refused := rapid.Bool().Draw(rt, "refused")
			for range 5 {
				for _, r := range rs {
					if refused {
						h.Refused(r)
						continue
					}
					for range 3 {
						h.Report(r, false)
					}
				}
			}
			// Then probes take more out, as the probe loop does: the cap
			// holds of the replicas still passing them.
			// (the last first: those least likely ejected, as the first
			// took the cap's room).
			later := n - rapid.IntRange(0, n-down).Draw(rt, "probedDownLater")
			for _, r := range rs[later:] {
				r.probeUp.Store(false)
				h.keepCap(r.Models)
			}
			ejected := 0
			for _, r := range rs[down:later] {
				if r.Ejected(time.Now()) {
					ejected++
				}
			}
			if healthy := later - down; ejected*100 > pct*healthy {
				rt.Fatalf("%d of %d healthy replicas ejected, cap %d%%", ejected, healthy, pct)
			}
		})
	})
}

// TestSetGroup: members that stay keep their state; leavers are removed.
func TestSetGroup(t *testing.T) {
	f := New([]*Replica{replica("static")}, nil)
	var changes [][2]int
	f.Watch(func(added, removed []*Replica) { changes = append(changes, [2]int{len(added), len(removed)}) })
	a1, b1 := replica("g-a"), replica("g-b")
	f.SetGroup("g", []*Replica{a1, b1})
	l, _ := a1.TryAcquire()
	a2, c := replica("g-a"), replica("g-c")
	f.SetGroup("g", []*Replica{a2, c})
	snap := f.Snapshot()
	if snap.Get("g-a") != a1 || a1.InFlight() != 1 {
		t.Error("a member that stayed lost its identity or counters")
	}
	if snap.Get("g-b") != nil || !b1.Removed() {
		t.Error("a departed member is still in the fleet or not marked removed")
	}
	if got := len(snap.ForModel("m")); got != 3 {
		t.Errorf("%d replicas serve m, want static + 2 members", got)
	}
	if added, removed := f.SetGroup("g", []*Replica{replica("g-a"), replica("g-c")}); added != nil || removed != nil {
		t.Error("an unchanged group reported changes")
	}
	if len(changes) != 2 || changes[0] != [2]int{2, 0} || changes[1] != [2]int{1, 1} {
		t.Errorf("watchers saw %v", changes)
	}
	l.Release()
}

// TestReplicaLayout: what routing reads of a replica lies in its first
// cache line, and replicas are a whole number of lines, so that the heap's
// size class for them starts each one on a line.
func TestReplicaLayout(t *testing.T) {
	var r Replica
	for _, f := range []struct {
		name         string
		offset, size uintptr
	}{
		{"maxConcurrency", unsafe.Offsetof(r.maxConcurrency), unsafe.Sizeof(r.maxConcurrency)},
		{"maxPending", unsafe.Offsetof(r.maxPending), unsafe.Sizeof(r.maxPending)},
		{"inFlight", unsafe.Offsetof(r.inFlight), unsafe.Sizeof(r.inFlight)},
		{"pending", unsafe.Offsetof(r.pending), unsafe.Sizeof(r.pending)},
		{"ejectedUntil", unsafe.Offsetof(r.ejectedUntil), unsafe.Sizeof(r.ejectedUntil)},
		{"probeUp", unsafe.Offsetof(r.probeUp), unsafe.Sizeof(r.probeUp)},
		{"removed", unsafe.Offsetof(r.removed), unsafe.Sizeof(r.removed)},
		{"load", unsafe.Offsetof(r.load), unsafe.Sizeof(r.load)},
		{"prefill.drainedAt", unsafe.Offsetof(r.prefill) + unsafe.Offsetof(r.prefill.drainedAt), unsafe.Sizeof(r.prefill.drainedAt)},
	} {
		if f.offset+f.size > 64 {
			t.Errorf("%s at bytes %d to %d, past the first line", f.name, f.offset, f.offset+f.size)
		}
	}
	if n := unsafe.Sizeof(r); n%64 != 0 {
		t.Errorf("a replica is %d bytes, not a whole number of lines", n)
	}
}

// TestSetStaticChangesCapsInPlace: a static replica reloaded with other
// caps is kept, leases and all, and its leases count against the new caps:
// lowered below what it holds, it takes nothing more until enough end.
func TestSetStaticChangesCapsInPlace(t *testing.T) {
	f := New(nil, nil)
	same := func(old, next *Replica) bool { return old.URL.String() == next.URL.String() }
	kept := replica("r") // caps 4 and 2
	f.SetStatic([]*Replica{kept}, same)
	var held []*Lease
	for range 2 {
		l, ok := kept.TryAcquire()
		if !ok {
			t.Fatal("no room on a new replica")
		}
		held = append(held, l)
	}
	next := replica("r")
	next.SetCaps(1, 1)
	if added, removed := f.SetStatic([]*Replica{next}, same); len(added)+len(removed) != 0 {
		t.Fatalf("caps alone replaced the replica: %d added, %d removed", len(added), len(removed))
	}
	if got := f.Snapshot().Get("r"); got != kept || got.MaxConcurrency() != 1 || got.MaxPending() != 1 || got.InFlight() != 2 {
		t.Fatalf("after the reload: kept %v, caps %d/%d, %d in flight; want the same replica, 1/1, 2", got == kept, got.MaxConcurrency(), got.MaxPending(), got.InFlight())
	}
	for _, l := range held {
		if _, ok := kept.TryAcquire(); ok {
			t.Fatal("a lease past the lowered cap")
		}
		l.Release()
	}
	if _, ok := kept.TryAcquire(); !ok {
		t.Error("no room once the leases past the cap ended")
	}
}

// TestReplacementOnTheSameEngineCountsItsLoad: a static replica replaced
// by one of its ID and URL (other KV settings: the same engine) counts the
// old one's requests still running against its caps, in flight, pending,
// prompt tokens, queued prefill and pace alike. It started at zero, and
// the engine got up to twice its max_concurrency until the old requests
// ended (found by a review: 4 running under a cap of 2). So does one
// removed by a change and added again by the next. A replacement at
// another URL is another engine, and starts fresh.
func TestReplacementOnTheSameEngineCountsItsLoad(t *testing.T) {
	same := func(*Replica, *Replica) bool { return false } // its KV settings changed
	now := time.Now()
	for _, tc := range []struct {
		name      string
		url       string
		removed   bool   // removed by one change, added again by the next
		id        string // the replacement's ID
		keepOld   bool   // the old one stays beside it
		wantShare bool
	}{
		{"same_url", "http://127.0.0.1:1", false, "r", false, true},
		{"other_url", "http://127.0.0.1:2", false, "r", false, false},
		{"removed_then_same_url", "http://127.0.0.1:1", true, "r", false, true},
		{"removed_then_other_url", "http://127.0.0.1:2", true, "r", false, false},
		// Found by a review: renamed at its URL in one change, the engine
		// ran 8 under caps of 4 until the old requests ended.
		{"renamed_same_url", "http://127.0.0.1:1", false, "r2", false, true},
		{"renamed_other_url", "http://127.0.0.1:2", false, "r2", false, false},
		// Two replicas naming one engine each have their own caps (README).
		{"second_id_same_url", "http://127.0.0.1:1", false, "r2", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New(nil, nil)
			old := replica("r") // caps 4 and 2
			f.SetStatic([]*Replica{old}, same)
			var held []*Lease
			for range 2 {
				l, ok := old.TryAcquire()
				if !ok {
					t.Fatal("no room on a new replica")
				}
				l.Queue(now, 0.5, 2, 100)
				l.Expect(now, 0.5, 1)
				held = append(held, l)
			}
			held[0].FirstToken(now.Add(time.Second))
			u, _ := url.Parse(tc.url)
			next := NewReplica(tc.id, u, []string{"m"}, 2, 2)
			if tc.removed {
				// Found by a review: removed, then added again with the
				// same ID and URL, the engine ran 4 under a cap of 2.
				f.SetStatic(nil, same)
			}
			replicas := []*Replica{next}
			if tc.keepOld {
				replicas = []*Replica{NewReplica("r", old.URL, []string{"m"}, 4, 2), next}
			}
			f.SetStatic(replicas, same)
			if f.Snapshot().Get(tc.id) != next {
				t.Fatal("the replica was not replaced")
			}
			inFlight, pending := int64(0), int64(0)
			tokens, queued := int64(0), 0.0
			if tc.wantShare {
				inFlight, pending, tokens, queued = 2, 2, 200, old.QueuedPrefill(now)
			}
			gotTokens, _ := next.PromptLoad()
			if next.InFlight() != inFlight || next.Pending() != pending || gotTokens != tokens || next.QueuedPrefill(now) != queued ||
				(next.Pace() == old.Pace()) != tc.wantShare {
				t.Errorf("the new replica: %d in flight, %d pending, %d prompt tokens, %.2f s queued, pace shared %v; want %d, %d, %d, %.2f, %v",
					next.InFlight(), next.Pending(), gotTokens, next.QueuedPrefill(now), next.Pace() == old.Pace(),
					inFlight, pending, tokens, queued, tc.wantShare)
			}
			_, ok := next.TryAcquire()
			if ok == tc.wantShare {
				t.Errorf("a lease on the new replica with the old one's 2 running under its cap of 2: granted %v", ok)
			}
			for _, l := range held {
				l.Release()
			}
			if !ok {
				if _, ok = next.TryAcquire(); !ok {
					t.Error("no room on the new replica once the old requests ended")
				}
			}
			if got := next.InFlight(); got != 1 {
				t.Errorf("%d in flight on the new replica, want its own 1", got)
			}
		})
	}
}

// TestMemberWithStaticID: a DNS member whose ID a static replica has is
// left out, whichever came first, with one warning, and joins once the
// static replica is gone: the fleet never holds two replicas with one ID
// (their metric series would collide and every scrape fail).
func TestMemberWithStaticID(t *testing.T) {
	logs := &strings.Builder{}
	f := New([]*Replica{replica("s")}, slog.New(slog.NewTextHandler(logs, nil)))
	same := func(old, next *Replica) bool { return true }
	unique := func(step string) {
		t.Helper()
		seen := map[string]bool{}
		for _, r := range f.Snapshot().Replicas {
			if seen[r.ID] {
				t.Fatalf("%s: two replicas with ID %s", step, r.ID)
			}
			seen[r.ID] = true
		}
	}

	static := replica("g-10.0.0.1-80")
	f.SetStatic([]*Replica{static}, same)
	f.SetGroup("g", []*Replica{replica("g-10.0.0.1-80"), replica("g-10.0.0.2-80")})
	f.SetGroup("g", []*Replica{replica("g-10.0.0.1-80"), replica("g-10.0.0.2-80")})
	unique("member after static")
	if f.Snapshot().Get("g-10.0.0.1-80") != static || f.Snapshot().Get("g-10.0.0.2-80") == nil {
		t.Fatal("the static replica or the other member is missing")
	}
	if n := strings.Count(logs.String(), "dns member left out"); n != 1 {
		t.Errorf("%d warnings for one member left out twice, want 1:\n%s", n, logs)
	}

	member := f.Snapshot().Get("g-10.0.0.2-80")
	next := replica("g-10.0.0.2-80")
	added, removed := f.SetStatic([]*Replica{static, next}, same)
	unique("static after member")
	if f.Snapshot().Get("g-10.0.0.2-80") != next || !member.Removed() {
		t.Error("a static replica did not take its ID from the member")
	}
	if len(added) != 1 || len(removed) != 1 || removed[0] != member {
		t.Errorf("SetStatic reported %d added, %d removed; want the static one added and the member removed", len(added), len(removed))
	}

	f.SetStatic(nil, same)
	f.SetGroup("g", []*Replica{replica("g-10.0.0.1-80"), replica("g-10.0.0.2-80")})
	unique("static gone")
	if got := len(f.Snapshot().Replicas); got != 2 {
		t.Errorf("%d replicas once the static ones left, want both members", got)
	}
}

// TestRejoinKeepsReplica: a DNS member that drops out of one lookup and is
// back in the next is the Replica that left: the leases it still holds
// count against max_concurrency (a fresh one started at zero, so the engine
// took more than its cap), and a member that probes took out is not back
// in rotation for the flap.
func TestRejoinKeepsReplica(t *testing.T) {
	f := New(nil, nil)
	f.SetGroup("pool", []*Replica{replica("pool-a"), replica("pool-b")})
	a, b := f.Snapshot().Get("pool-a"), f.Snapshot().Get("pool-b")
	for range 4 {
		l, ok := a.TryAcquire()
		if !ok {
			t.Fatal("no lease")
		}
		l.Started() // streaming: only max_concurrency holds it back
	}
	MarkDown(b)
	f.SetGroup("pool", []*Replica{replica("pool-c")})
	f.SetGroup("pool", []*Replica{replica("pool-a"), replica("pool-b"), replica("pool-c")})
	a2, b2 := f.Snapshot().Get("pool-a"), f.Snapshot().Get("pool-b")
	if a2 != a {
		t.Error("pool-a came back as a new replica")
	}
	if l, ok := a2.TryAcquire(); ok {
		l.Release()
		t.Errorf("pool-a took a lease past max_concurrency 4 with %d held", a.InFlight())
	}
	if a2.Removed() || b2.Usable(clock.Of(time.Now())) {
		t.Errorf("after the flap: pool-a removed %v; pool-b, failing probes, usable %v", a2.Removed(), b2.Usable(clock.Of(time.Now())))
	}
}

// TestDepartedBounded: a group remembers at most maxDeparted members that
// left, the latest.
func TestDepartedBounded(t *testing.T) {
	f := New(nil, nil)
	for i := range maxDeparted + 10 {
		f.SetGroup("pool", []*Replica{replica(fmt.Sprint("pool-", i))})
	}
	f.SetGroup("pool", nil)
	d := f.departed["pool"]
	if len(d) != maxDeparted || d[len(d)-1].ID != fmt.Sprint("pool-", maxDeparted+9) {
		t.Errorf("remembered %d, the last %s; want %d, the last pool-%d", len(d), d[len(d)-1].ID, maxDeparted, maxDeparted+9)
	}
}

// TestDepartedInSnapshot: a static replica removed, or replaced by one of
// its ID at another URL (another engine), is among its models' departed
// replicas, which may still run requests; one replaced at its URL is not
// (the replacement counts its load), nor one added back at its URL.
func TestDepartedInSnapshot(t *testing.T) {
	f := New(nil, nil)
	same := func(*Replica, *Replica) bool { return false }
	a, b := replica("a"), replica("b", "m", "n")
	f.SetStatic([]*Replica{a, b}, same)
	departed := func(model string) []string {
		var ids []string
		for _, r := range f.Snapshot().Departed(model) {
			ids = append(ids, r.ID)
		}
		return ids
	}
	elsewhere := replica("b", "m", "n")
	elsewhere.URL, _ = url.Parse("http://127.0.0.1:2")
	f.SetStatic([]*Replica{elsewhere}, same) // a removed, b replaced at another URL
	if got := departed("m"); !slices.Equal(got, []string{"a", "b"}) || !slices.Equal(departed("n"), []string{"b"}) {
		t.Errorf("departed of m %v and n %v; want [a b] and [b]", got, departed("n"))
	}
	f.SetStatic([]*Replica{replica("a"), elsewhere}, same) // a back at its URL
	if got := departed("m"); !slices.Equal(got, []string{"b"}) {
		t.Errorf("after a came back: departed %v, want [b]", got)
	}
	// b back at its first URL takes back the one removed there; the one
	// at the other URL leaves, remembered.
	f.SetStatic([]*Replica{replica("a"), replica("b", "m", "n")}, same)
	if got := f.Snapshot().Departed("n"); len(got) != 1 || got[0] != elsewhere {
		t.Errorf("departed of n %v, want the b at the other URL", departed("n"))
	}
}

// TestReaddedAtAnEarlierURL: a static replica moved between URLs and back
// counts the load still running on the engine at the URL it comes back
// to, wherever it was removed from in between; the remembered replica at
// another URL stays remembered. The oldest of its ID was taken back,
// whatever its URL (found by a review of the change that remembered
// replicas whose URL changed).
func TestReaddedAtAnEarlierURL(t *testing.T) {
	same := func(*Replica, *Replica) bool { return false }
	at := func(port string) []*Replica {
		r := replica("b", "m")
		r.URL, _ = url.Parse("http://127.0.0.1:" + port)
		return []*Replica{r}
	}
	hold := func(f *Fleet) *Lease {
		l, ok := f.Snapshot().Get("b").TryAcquire()
		if !ok {
			t.Fatal("no lease")
		}
		return l
	}
	check := func(f *Fleet, what string) {
		if back := f.Snapshot().Get("b"); back.InFlight() != 1 {
			t.Errorf("%s: b back at :2 counts %d in flight, want the lease on that engine", what, back.InFlight())
		}
	}
	f := New(nil, nil)
	f.SetStatic(at("1"), same)
	f.SetStatic(at("2"), same)
	l := hold(f)
	f.SetStatic(nil, same)
	f.SetStatic(at("2"), same)
	check(f, "moved, removed, back")
	l.Release()

	f = New(nil, nil)
	f.SetStatic(at("2"), same)
	l = hold(f)
	f.SetStatic(at("1"), same)
	f.SetStatic(at("2"), same)
	check(f, "moved and moved back")
	l.Release()
}
