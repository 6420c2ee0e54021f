package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/auth"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/fairshare"
	"github.com/inferrail/inferrail/internal/flowqueue"
)

// countPrefix is how many of ids start with p.
func countPrefix(ids []string, p string) int {
	n := 0
	for _, id := range ids {
		if strings.HasPrefix(id, p) {
			n++
		}
	}
	return n
}

// TestFairShareSlots: on a replica of four slots, a key flooding beside
// another active key is held to its share (two) while slots are free, and
// the other key's next request starts at once instead of waiting behind
// the flood, without joining the flood's waiters; alone, the flooding key
// uses every slot; with
// flow.fair_share_window 0 it takes every free slot, and the other key's
// next request waits.
func TestFairShareSlots(t *testing.T) {
	tests := []struct {
		name       string
		window     time.Duration
		quiet      bool // the quiet key holds one request before the flood
		wantFlood  int  // flood requests the engine receives
		wantQuick  bool // the quiet key's next request starts at once
		wantShared int  // inferrail_flow_fair_share_slots of the class; 0 when off
	}{
		{"flood_alone_uses_every_slot", 5 * time.Second, false, 4, false, 4},
		{"flood_held_to_its_share", 5 * time.Second, true, 2, true, 2},
		{"fair_sharing_off", 0, true, 3, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, gw, flood, quiet := floodAndQuiet(t, 16, tt.window)

			var chs []<-chan sent
			if tt.quiet {
				chs = append(chs, async(gw, "q0", bearer(quiet)...))
				waitFor(t, "the engine to hold q0", 10*time.Second, func() bool { return countPrefix(e.received(), "q") == 1 })
			}
			for i := range 4 {
				chs = append(chs, async(gw, fmt.Sprintf("f%d", i), bearer(flood)...))
			}
			waitFor(t, "every flood request to start or wait", 10*time.Second, func() bool {
				return countPrefix(e.received(), "f")+int(waiting(gw)) == 4
			})
			if got := countPrefix(e.received(), "f"); got != tt.wantFlood {
				t.Errorf("the engine received %d flood requests, want %d", got, tt.wantFlood)
			}
			over := counterValue(t, gw, "inferrail_flow_over_share_total", "model", testModel, "class", "standard")
			if want := float64(4 - tt.wantFlood); tt.window > 0 && over != want {
				t.Errorf("inferrail_flow_over_share_total = %v, want %v", over, want)
			}
			share := series(t, gw, "inferrail_flow_fair_share_slots", []string{"model", testModel, "class", "standard"}).GetGauge().GetValue()
			if tt.window > 0 && share != float64(tt.wantShared) {
				t.Errorf("inferrail_flow_fair_share_slots = %v, want %d", share, tt.wantShared)
			}
			if tt.quiet {
				v := explainAs(t, gw, "flood", `{"model":"sim","prompt":"hello","max_tokens":1}`)
				wantReason := "over_fair_share"
				if tt.window == 0 {
					wantReason = notOfferedFull
				}
				if v.Verdict != verdictQueue || v.Reason != wantReason {
					t.Errorf("explain for the flood key: %s (%s), want queue (%s); %+v", v.Verdict, v.Reason, wantReason, v)
				}
				if fs := v.FairShare; tt.window > 0 && (fs == nil || fs.Slots != 4 || fs.ActiveKeys != 2 || fs.Share != 2 || fs.InFlight != 2 || !fs.OverShare || fs.Owed || fs.Usage <= 0) {
					t.Errorf("explain's fair share: %+v, want 4 slots, 2 keys, share 2, 2 in flight, over, some usage, not owed", fs)
				}
				before := waiting(gw)
				queued := counterValue(t, gw, "inferrail_flow_queued_total", "model", testModel, "class", "standard")
				chs = append(chs, async(gw, "q1", bearer(quiet)...))
				if tt.wantQuick {
					waitFor(t, "q1 to start", 10*time.Second, func() bool { return countPrefix(e.received(), "q") == 2 })
					// Under its share, with no waiter under theirs, it
					// never joined the flood's waiters.
					if n := counterValue(t, gw, "inferrail_flow_queued_total", "model", testModel, "class", "standard"); n != queued {
						t.Errorf("q1 was queued: inferrail_flow_queued_total %v, was %v", n, queued)
					}
				} else {
					waitFor(t, "q1 to wait", 10*time.Second, func() bool { return waiting(gw) == before+1 })
				}
			}
			e.open()
			expectStatus(t, http.StatusOK, chs...)
			if got := countPrefix(e.received(), "f"); got != 4 {
				t.Errorf("the engine received %d flood requests in the end, want 4", got)
			}
			// Every slot taken in the fair share is given back.
			mq := gw.g.flow.queues[testModel]
			waitFor(t, "every request to leave fair sharing", 10*time.Second, func() bool {
				mq.mu.Lock()
				defer mq.mu.Unlock()
				return mq.fair.InFlight(fairshare.Flow{Class: 1, Key: "flood"})+mq.fair.InFlight(fairshare.Flow{Class: 1, Key: "quiet"}) == 0
			})
		})
	}
}

// TestExplainUnknownKey: /admin/explain?key= naming no key is a 400 in
// OpenAI's error shape, naming the key, unless what it names is a key
// itself, which the answer never quotes (a review's finding: it did).
func TestExplainUnknownKey(t *testing.T) {
	e := newOrderEngine(t)
	cfg := flowConfig(e.srv.URL, 4)
	secret, k := newKey("known", nil)
	withKeys(t, cfg, k)
	gw := startGatewayWith(t, cfg, Options{})
	for _, tc := range []struct{ name, key, says, never string }{
		{"a_name", "nobody", `"nobody"`, ""},
		{"a_known_key", secret, "a client key's name, not the key", secret},
		{"an_unknown_key", "irk-not-a-key-anyone-has", "a client key's name, not the key", "irk-not"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(gw.admin+"/admin/explain/v1/completions?key="+tc.key, "application/json", strings.NewReader(`{"model":"sim","prompt":"hello","max_tokens":1}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct {
				Error struct {
					Message string `json:"message"`
					Param   string `json:"param"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusBadRequest ||
				!strings.Contains(body.Error.Message, tc.says) || body.Error.Param != "key" ||
				tc.never != "" && strings.Contains(body.Error.Message, tc.never) {
				t.Errorf("explain ?key=%s: %d %+v (%v), want 400 saying %s", tc.key, resp.StatusCode, body, err, tc.says)
			}
		})
	}
	if v := explainAs(t, gw, "known", `{"model":"sim","prompt":"hello","max_tokens":1}`); v.Class != "standard" || v.FairShare == nil || v.FairShare.ActiveKeys != 1 {
		t.Errorf("explain ?key=known: %+v, want the key's class (standard) and a fair share of one active key", v)
	}
}

// TestFairShareRetryHoldsOneSlot: a request whose first replica fails
// holds exactly one slot in the fair share while its retry runs on another,
// and none once it has ended: a 503 is kept (with its slot, but not its
// place on the replica) until the retry answers; a refused connection
// gives its slot back at once, and the retry takes one again.
func TestFairShareRetryHoldsOneSlot(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		name := map[bool]string{false: "503_kept", true: "connection_refused"}[refuse]
		t.Run(name, func(t *testing.T) {
			var asked atomic.Int64
			bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/health":
					return
				case "/v1/completions":
				default:
					http.NotFound(w, r) // no metrics page: the replica is routed on the gateway's counts
					return
				}
				_, _ = io.Copy(io.Discard, r.Body)
				asked.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, `{"error":{"message":"busy","type":"overloaded"}}`)
			}))
			t.Cleanup(bad.Close)
			good := newOrderEngine(t)
			cfg := flowConfig(good.srv.URL, 16)
			// Round robin takes the first replica first: the one that fails.
			cfg.Models[0].Policy = "round_robin"
			cfg.Replicas = []config.Replica{
				{ID: "a-fails", URL: bad.URL, Models: []string{testModel}, MaxConcurrency: 1, MaxPending: 1},
				{ID: "b-holds", URL: good.srv.URL, Models: []string{testModel}, MaxConcurrency: 1, MaxPending: 1},
			}
			cfg.Retry.MaxAttempts = 2
			cfg.Flow.FairShareWindow = config.Duration(5 * time.Second)
			secret, k := newKey("retrying", nil)
			withKeys(t, cfg, k)
			gw := startGatewayWith(t, cfg, Options{})
			if refuse {
				bad.Close()
			}

			mq := gw.g.flow.queues[testModel]
			flow := fairshare.Flow{Class: 1, Key: "retrying"}
			held := func() int {
				mq.mu.Lock()
				defer mq.mu.Unlock()
				return mq.fair.InFlight(flow)
			}
			ch := async(gw, "r0", bearer(secret)...)
			waitFor(t, "the retry to reach the second replica", 10*time.Second, func() bool { return countPrefix(good.received(), "r") == 1 })
			if n := asked.Load(); !refuse && n != 1 {
				t.Fatalf("the failing replica was asked %d times, want 1 (the first attempt)", n)
			}
			if got := held(); got != 1 {
				t.Errorf("during the retry the key holds %d slots, want 1", got)
			}
			// The engine that refused does not run the request: routing
			// must not count it there (found by a review: a kept 503 held
			// its lease, so the retry's decision, and every other, saw the
			// refusing replica one request busier).
			if n := gw.g.fleet.Snapshot().Get("a-fails").InFlight(); n != 0 {
				t.Errorf("during the retry the replica that refused counts %d requests in flight, want 0", n)
			}
			good.open()
			expectStatus(t, http.StatusOK, ch)
			waitFor(t, "the request to leave fair sharing", 10*time.Second, func() bool { return held() == 0 })
		})
	}
}

// TestKeptAnswerLeavesTheSlot: a request whose 503 was kept while its
// retry ran still holds its one slot once the retry's answer comes and
// the kept 503 is let go, for as long as the retry streams (found by a
// review: the slot went with the kept attempt, and a flooding key could
// stream past its share); and none once it ends.
func TestKeptAnswerLeavesTheSlot(t *testing.T) {
	var asked atomic.Int32
	gate := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/completions" {
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		if asked.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"message":"busy","type":"overloaded"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})
	a, b := httptest.NewServer(h), httptest.NewServer(h)
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	cfg := flowConfig(a.URL, 16)
	cfg.Models[0].Policy = "round_robin"
	cfg.Replicas = []config.Replica{
		{ID: "a", URL: a.URL, Models: []string{testModel}, MaxConcurrency: 4, MaxPending: 4},
		{ID: "b", URL: b.URL, Models: []string{testModel}, MaxConcurrency: 4, MaxPending: 4},
	}
	cfg.Flow.FairShareWindow = config.Duration(5 * time.Second)
	cfg.Retry.Backoff, cfg.Retry.MaxBackoff = config.Duration(time.Millisecond), config.Duration(time.Millisecond)
	secret, k := newKey("kept", nil)
	withKeys(t, cfg, k)
	gw := startGatewayWith(t, cfg, Options{})
	mq := gw.g.flow.queues[testModel]
	held := func() int {
		mq.mu.Lock()
		defer mq.mu.Unlock()
		return mq.fair.InFlight(fairshare.Flow{Class: 1, Key: "kept"})
	}
	leases := func() (n int64) {
		for _, r := range gw.g.fleet.Snapshot().Replicas {
			n += r.InFlight()
		}
		return n
	}
	ch := asyncBody(gw, "r1", `{"model":"sim","prompt":"hello","max_tokens":1,"stream":true}`, bearer(secret)...)
	// The kept 503 is let go when the retry's head comes: one lease left.
	waitFor(t, "the retry to stream alone", 10*time.Second, func() bool { return asked.Load() == 2 && leases() == 1 })
	if got := held(); got != 1 {
		t.Errorf("while its retry streams the key holds %d slots, want 1", got)
	}
	close(gate)
	<-ch
	waitFor(t, "the request to leave fair sharing", 10*time.Second, func() bool { return held() == 0 && leases() == 0 })
}

// TestLoneKeyOnFullFleetIsNotHeldByShare: one key alone on a full fleet
// waits for room, not for its share (every slot is its share): it is not
// counted in inferrail_flow_over_share_total and explain says at_capacity,
// with fair sharing on as with it off (found by a review: both counted it
// as held by fair sharing).
func TestLoneKeyOnFullFleetIsNotHeldByShare(t *testing.T) {
	for _, window := range []time.Duration{5 * time.Second, 0} {
		t.Run(window.String(), func(t *testing.T) {
			e := newOrderEngine(t)
			cfg := flowConfig(e.srv.URL, 4) // one replica of one slot
			cfg.Flow.FairShareWindow = config.Duration(window)
			gw := startGatewayWith(t, cfg, Options{})
			hold := holdSlot(t, gw, e)
			w1, w2 := queue(t, gw, "w1"), queue(t, gw, "w2")
			if over := counterValue(t, gw, "inferrail_flow_over_share_total", "model", testModel, "class", "standard"); over != 0 {
				t.Errorf("inferrail_flow_over_share_total = %v for a lone key on a full fleet, want 0", over)
			}
			v := explainAdmission(t, gw, `{"model":"sim","prompt":"hello","max_tokens":1}`)
			if v.Reason != notOfferedFull || v.FairShare != nil && v.FairShare.OverShare {
				t.Errorf("explain: %s (%s), fair share %+v; want %s, not over its share", v.Verdict, v.Reason, v.FairShare, notOfferedFull)
			}
			e.open()
			expectStatus(t, http.StatusOK, hold, w1, w2)
		})
	}
}

// fairRig starts a gateway with fair sharing (a 5 s window) on one
// replica of four slots, and returns it with its model's queue, for tests
// that set the fair share table's state by hand.
func fairRig(t *testing.T) (*Gateway, *modelQueue) {
	t.Helper()
	e := newOrderEngine(t)
	cfg := flowConfig(e.srv.URL, 16)
	cfg.Replicas[0].MaxConcurrency, cfg.Replicas[0].MaxPending = 4, 4
	cfg.Flow.FairShareWindow = config.Duration(5 * time.Second)
	gw := startGatewayWith(t, cfg, Options{})
	return gw.g, gw.g.flow.queues[testModel]
}

// standardFlow is key's flow in the standard class, as fairRig's tests
// share it.
func standardFlow(key string) fairshare.Flow {
	return fairshare.Flow{Class: auth.Standard.Index(), Key: key}
}

// holdSlots records n requests of key's standard flow that arrived and
// took a slot at at; call it under mq.mu.
func holdSlots(mq *modelQueue, key string, n int, at time.Time) {
	for range n {
		mq.fair.Arrive(standardFlow(key), at)
		mq.fair.Acquire(standardFlow(key), at)
	}
}

// TestStartNowKeepsUnderShareOrder: while others wait, a request under its
// key's share starts at once only when no waiter is under its own share:
// those the dispatcher serves first, and a newcomer does not pass them.
func TestStartNowKeepsUnderShareOrder(t *testing.T) {
	g, mq := fairRig(t)
	class := auth.Standard
	exFor := func(key string) *exchange {
		ex := &exchange{gen: g.current(), model: testModel, adm: &admission{class: class, key: key}, fair: true}
		mq.mu.Lock()
		mq.fair.Arrive(flowOf(ex.adm), time.Now())
		mq.mu.Unlock()
		return ex
	}
	flood, newcomer := exFor("flood"), exFor("newcomer")
	exFor("waiter")
	mq.mu.Lock()
	mq.fair.Acquire(flowOf(flood.adm), time.Now()) // the flood holds 2 of 4 slots: its share of 3 keys is 1
	mq.fair.Acquire(flowOf(flood.adm), time.Now())
	floodWaits := &flowqueue.Entry[*waiter]{Class: class.Index(), Key: "flood", Deadline: time.Now().Add(time.Minute)}
	if err := mq.q.Push(floodWaits); err != nil {
		t.Fatal(err)
	}
	mq.waiting.Store(int64(mq.q.Len()))
	mq.mu.Unlock()
	if !g.startNow(newcomer, mq) || !newcomer.slot {
		t.Fatal("behind an over-share waiter only, the newcomer under its share did not start at once")
	}
	mq.freed(newcomer)

	mq.mu.Lock()
	waiterWaits := &flowqueue.Entry[*waiter]{Class: class.Index(), Key: "waiter", Deadline: time.Now().Add(time.Minute)}
	if err := mq.q.Push(waiterWaits); err != nil {
		t.Fatal(err)
	}
	mq.waiting.Store(int64(mq.q.Len()))
	mq.mu.Unlock()
	if g.startNow(newcomer, mq) || newcomer.slot {
		t.Fatal("the newcomer started before a waiter under its share")
	}
	if g.startNow(flood, mq) {
		t.Fatal("the flood, past its share, started while others wait")
	}
	// Take the stand-in waiters out again: no dispatcher may find them.
	mq.mu.Lock()
	mq.q.Remove(floodWaits)
	mq.q.Remove(waiterWaits)
	mq.waiting.Store(int64(mq.q.Len()))
	mq.mu.Unlock()
}

// TestOwedKeyGoesFirst: a quiet key that used half its share over the
// last seconds and now bursts past it is served the next free slot ahead
// of a flood that always used its whole share, though the flood is under
// its share at that moment; and a quiet request arriving then starts at
// once instead of queueing behind the flood.
func TestOwedKeyGoesFirst(t *testing.T) {
	g, mq := fairRig(t)
	class := auth.Standard
	now := time.Now()
	past := now.Add(-10 * time.Second)
	hold := func(key string, n int, at time.Time) { holdSlots(mq, key, n, at) }
	push := func(key string) *flowqueue.Entry[*waiter] {
		e := &flowqueue.Entry[*waiter]{Class: class.Index(), Key: key, Deadline: now.Add(time.Minute)}
		mq.fair.Arrive(standardFlow(key), now)
		if err := mq.q.Push(e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	// 4 slots, 2 keys: a share of 2 each. The flood held 2 for ten
	// seconds and one just ended; the quiet key held 1 for five seconds,
	// then none, and now 2: a usage near 0.3, a credit of one slot.
	mq.mu.Lock()
	hold("flood", 2, past)
	mq.fair.Leave(standardFlow("flood"), true, now)
	hold("quiet", 1, past)
	mq.fair.Release(standardFlow("quiet"), past.Add(5*time.Second))
	mq.fair.Acquire(standardFlow("quiet"), now)
	hold("quiet", 1, now)
	floodWaits := push("flood")
	quietWaits := push("quiet")
	mq.waiting.Store(int64(mq.q.Len()))
	slots := g.slots(g.current(), testModel, now)
	if slots != 4 {
		mq.mu.Unlock()
		t.Fatalf("slots = %d, want 4", slots)
	}
	if !mq.fair.Under(standardFlow("flood"), slots, now) || mq.fair.Under(standardFlow("quiet"), slots, now) {
		mq.mu.Unlock()
		t.Fatal("set-up: the flood should be under its share and the quiet key at it")
	}
	got := mq.next(slots, now, nil)
	mq.mu.Unlock()
	if got != quietWaits {
		t.Fatalf("the dispatcher serves %q first, want the quiet key that left half its share unused", got.Key)
	}

	mq.mu.Lock()
	mq.q.Remove(quietWaits)
	mq.fair.Arrive(standardFlow("quiet"), now)
	mq.mu.Unlock()
	quiet := &exchange{gen: g.current(), model: testModel, adm: &admission{class: class, key: "quiet"}, fair: true}
	if !g.startNow(quiet, mq) || !quiet.slot {
		t.Fatal("a quiet request owed a slot queued behind a flood that is only under its share")
	}
	mq.freed(quiet)
	flood := &exchange{gen: g.current(), model: testModel, adm: &admission{class: class, key: "flood"}, fair: true}
	mq.mu.Lock()
	mq.fair.Arrive(standardFlow("flood"), now)
	mq.mu.Unlock()
	if g.startNow(flood, mq) {
		t.Fatal("a flood request started while a flood request waits in the queue")
	}
	mq.mu.Lock()
	mq.q.Remove(floodWaits)
	mq.waiting.Store(int64(mq.q.Len()))
	mq.mu.Unlock()
}

// TestBurstRoomKeptFromFlood: a quiet key that burst to three slots a
// moment ago, after using well under its share of two, keeps the third
// free: a flood request, under its share, does not start in it, and a
// quiet request does.
func TestBurstRoomKeptFromFlood(t *testing.T) {
	g, mq := fairRig(t)
	class := auth.Standard
	now := time.Now()
	start := func(key string, at time.Time) { holdSlots(mq, key, 1, at) }
	mq.mu.Lock()
	start("flood", now.Add(-10*time.Second)) // its whole share of two, until a moment ago
	start("flood", now.Add(-10*time.Second))
	mq.fair.Leave(standardFlow("flood"), true, now.Add(-time.Millisecond))
	start("quiet", now.Add(-10*time.Second)) // one request for five seconds
	mq.fair.Leave(standardFlow("quiet"), true, now.Add(-5*time.Second))
	for range 3 { // then a burst of three, one of which ended
		start("quiet", now.Add(-100*time.Millisecond))
	}
	mq.fair.Leave(standardFlow("quiet"), true, now.Add(-50*time.Millisecond))
	mq.mu.Unlock()
	// 4 slots: flood 1, quiet 2, one free; the quiet key's room is its peak of 3.
	newEx := func(key string) *exchange {
		ex := &exchange{gen: g.current(), model: testModel, adm: &admission{class: class, key: key}, fair: true}
		mq.mu.Lock()
		mq.fair.Arrive(standardFlow(key), now)
		mq.mu.Unlock()
		return ex
	}
	flood := newEx("flood")
	if g.startNow(flood, mq) {
		t.Fatal("a flood request under its share took the slot kept for the quiet key's burst")
	}
	mq.mu.Lock()
	mq.fair.Leave(standardFlow("flood"), false, now)
	mq.mu.Unlock()
	quiet := newEx("quiet")
	if !g.startNow(quiet, mq) || !quiet.slot {
		t.Fatal("a quiet request did not start in the room its own burst took")
	}
	mq.freed(quiet)
}

// floodAndQuiet is a gateway queueing up to maxQueued requests in front of
// one replica of four slots (an order engine that holds every request
// until released), with fair sharing over window (0: off) between two
// keys, "flood" and "quiet", whose secrets it returns.
func floodAndQuiet(t *testing.T, maxQueued int, window time.Duration) (e *orderEngine, gw *running, flood, quiet string) {
	t.Helper()
	e = newOrderEngine(t)
	cfg := flowConfig(e.srv.URL, maxQueued)
	cfg.Replicas[0].MaxConcurrency, cfg.Replicas[0].MaxPending = 4, 4
	cfg.Flow.FairShareWindow = config.Duration(window)
	flood, fk := newKey("flood", nil)
	quiet, qk := newKey("quiet", nil)
	withKeys(t, cfg, fk, qk)
	return e, startGatewayWith(t, cfg, Options{}), flood, quiet
}
