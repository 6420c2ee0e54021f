package fleet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/clock"
	"github.com/inferrail/inferrail/internal/syncbuf"
)

// TestSuspectProbesAtOnce: with probes an hour apart, Suspect has a replica
// whose port stopped accepting probed back to back and marked down, and a
// healthy replica probed once more and left up.
func TestSuspectProbesAtOnce(t *testing.T) {
	var probes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			probes.Add(1)
		}
	}))
	defer srv.Close()
	healthy := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer healthy.Close()
	u, _ := url.Parse(srv.URL)
	hu, _ := url.Parse(healthy.URL)
	r, up := NewReplica("dying", u, []string{"m"}, 8, 8), NewReplica("fine", hu, []string{"m"}, 8, 8)
	f := New([]*Replica{r, up}, nil)
	h := NewHealth(HealthConfig{
		Interval: time.Hour, Timeout: time.Second, UnhealthyThreshold: 3, HealthyThreshold: 1,
		EjectionBackoff: time.Second, MaxEjectionBackoff: time.Second, MaxEjectionPercent: 50,
	}, f, &http.Client{}, nil, nil, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = h.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitUntil(t, "the first probe", func() bool { return probes.Load() == 1 })

	h.Suspect(r)
	waitUntil(t, "a second probe on suspicion", func() bool { return probes.Load() == 2 })
	if !r.Healthy() {
		t.Fatal("a replica whose probe passed was marked down")
	}
	srv.Close() // its port now refuses connections
	h.Suspect(r)
	waitUntil(t, "the replica to be marked down", func() bool { return !r.Healthy() })
	if !up.Healthy() {
		t.Error("the other replica was marked down")
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestDownReplicaProbedMoreOften: with probes an hour apart while a
// replica is up and 5 ms apart once probes took it out, a replica whose
// health fails is probed on the short interval until it answers again, and
// is back in rotation long before the hour; once back, the hour applies.
func TestDownReplicaProbedMoreOften(t *testing.T) {
	var probes atomic.Int64
	var failing atomic.Bool
	failing.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			return
		}
		probes.Add(1)
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	r := NewReplica("restarting", u, []string{"m"}, 8, 8)
	h := NewHealth(HealthConfig{
		Interval: time.Hour, UnhealthyInterval: 5 * time.Millisecond, Timeout: time.Second, UnhealthyThreshold: 1, HealthyThreshold: 2,
		EjectionBackoff: time.Second, MaxEjectionBackoff: time.Second, MaxEjectionPercent: 50,
	}, New([]*Replica{r}, nil), &http.Client{}, nil, nil, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = h.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	waitUntil(t, "the replica to be marked down", func() bool { return !r.Healthy() })
	waitUntil(t, "probes on the short interval while down", func() bool { return probes.Load() >= 5 })
	failing.Store(false)
	waitUntil(t, "the replica back in rotation", r.Healthy)
	n := probes.Load()
	time.Sleep(50 * time.Millisecond)
	if m := probes.Load(); m != n {
		t.Errorf("%d probes in 50 ms after it came back, want none before the hour", m-n)
	}
}

// TestDownInterval: unset, a down replica is probed four times as often;
// set, as set, but never less often than an up one.
func TestDownInterval(t *testing.T) {
	tests := []struct {
		interval, unhealthy, want time.Duration
	}{
		{time.Second, 0, 250 * time.Millisecond},
		{time.Second, 100 * time.Millisecond, 100 * time.Millisecond},
		{time.Second, 2 * time.Second, time.Second},
		{2 * time.Millisecond, 0, time.Millisecond},
	}
	for _, tc := range tests {
		if got := (HealthConfig{Interval: tc.interval, UnhealthyInterval: tc.unhealthy}).downInterval(); got != tc.want {
			t.Errorf("interval %v, unhealthy_interval %v: %v, want %v", tc.interval, tc.unhealthy, got, tc.want)
		}
	}
}

// capConfig ejects for a minute after three failures, at most half of a
// model's replicas passing probes.
func capConfig() HealthConfig {
	return HealthConfig{Interval: 10 * time.Millisecond, Timeout: 5 * time.Millisecond, UnhealthyThreshold: 3, HealthyThreshold: 1,
		EjectionBackoff: time.Minute, MaxEjectionBackoff: time.Minute, MaxEjectionPercent: 50}
}

// usableIDs lists the replicas of model that routing may offer now.
func usableIDs(f *Fleet, model string) []string {
	now := clock.Of(time.Now())
	var ids []string
	for _, r := range f.Snapshot().ForModel(model) {
		if r.Usable(now) {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// TestLeavingKeepsEjectionCap: of four replicas, the cap lets two be
// ejected; when the other two leave the fleet (a DNS group shrinks, a
// reload drops static replicas), the cap is applied again and one of the
// two left is readmitted, instead of the model having none for the whole
// backoff.
func TestLeavingKeepsEjectionCap(t *testing.T) {
	u, _ := url.Parse("http://127.0.0.1:1")
	mk := func(id string) *Replica { return NewReplica(id, u, []string{"m"}, 0, 0) }
	for _, tc := range []struct {
		name   string
		shrink func(f *Fleet, keep []*Replica)
		fill   func(f *Fleet, all []*Replica)
	}{
		{"dns", func(f *Fleet, keep []*Replica) { f.SetGroup("pool", keep) }, func(f *Fleet, all []*Replica) { f.SetGroup("pool", all) }},
		{"static", func(f *Fleet, keep []*Replica) {
			f.SetStatic(keep, func(o, n *Replica) bool { return true })
		}, func(f *Fleet, all []*Replica) { f.SetStatic(all, func(o, n *Replica) bool { return true }) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New(nil, nil)
			h := NewHealth(capConfig(), f, &http.Client{}, nil, nil, nil)
			tc.fill(f, []*Replica{mk("a"), mk("b"), mk("c"), mk("d")})
			s := f.Snapshot().ForModel("m")
			for _, r := range s[:3] {
				h.Refused(r) // the third is refused by the cap
			}
			if got := usableIDs(f, "m"); len(got) != 2 {
				t.Fatalf("usable before the shrink %v, want two", got)
			}
			tc.shrink(f, []*Replica{mk("a"), mk("b")})
			if got := usableIDs(f, "m"); len(got) != 1 {
				t.Errorf("usable after c and d left %v, want one: the cap of 50%% of two", got)
			}
		})
	}
}

// TestProbeReturnKeepsEjectionCap: a replica that probes took out, and
// whose waiting requests then failed and ejected it (uncounted by the cap,
// as it did not pass probes), comes back by probes still ejected; with
// another of three ejected, that is two of three passing probes, over the
// cap of half, so one is readmitted.
func TestProbeReturnKeepsEjectionCap(t *testing.T) {
	var aFails atomic.Bool
	aFails.Store(true)
	srvA := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if aFails.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srvA.Close()
	srvOK := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srvOK.Close()
	ua, _ := url.Parse(srvA.URL)
	uok, _ := url.Parse(srvOK.URL)
	a, b, c := NewReplica("a", ua, []string{"m"}, 0, 0), NewReplica("b", uok, []string{"m"}, 0, 0), NewReplica("c", uok, []string{"m"}, 0, 0)
	f := New([]*Replica{a, b, c}, nil)
	cfg := capConfig()
	cfg.UnhealthyThreshold = 1
	cfg.Timeout = time.Second
	aBack := make(chan struct{})
	h := NewHealth(cfg, f, &http.Client{}, nil, nil, func(r *Replica, up bool) {
		if r == a && up {
			close(aBack) // once the probe loop is done with the return
		}
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = h.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitUntil(t, "a out by probes", func() bool { return !a.Healthy() })
	h.Report(a, false) // a request that waited on a's head fails
	h.Report(b, false) // b fails one: the cap allows one of b and c
	if !a.Ejected(time.Now()) || !b.Ejected(time.Now()) {
		t.Fatalf("setup: a ejected %v, b ejected %v; want both", a.Ejected(time.Now()), b.Ejected(time.Now()))
	}
	aFails.Store(false)
	<-aBack
	if got := usableIDs(f, "m"); len(got) != 2 {
		t.Errorf("usable once a is back %v, want two: at most one of three ejected", got)
	}
}

// TestSuccessKeepsRacingEjection: a success of a replica whose ejection
// just ended, racing with a failure that ejects it anew, must not clear
// the new ejection (counted and reported, yet never out of rotation).
// The race is hit by repetition; on the old code, under -race, some
// dozens of the tries lose their ejection.
func TestSuccessKeepsRacingEjection(t *testing.T) {
	u, _ := url.Parse("http://127.0.0.1:1")
	var rs []*Replica
	for _, id := range []string{"a", "b", "c", "d"} {
		rs = append(rs, NewReplica(id, u, []string{"m"}, 0, 0))
	}
	f := New(rs, nil)
	cfg := capConfig()
	cfg.UnhealthyThreshold = 1
	h := NewHealth(cfg, f, &http.Client{}, nil, nil, nil)
	r := rs[0]
	lost := 0
	const tries = 20000
	for range tries {
		r.ejections.Store(1)
		r.ejectedUntil.Store(int64(clock.Of(time.Now().Add(-time.Millisecond))))
		r.failStreak.Store(0)
		before := r.EjectedTotal()
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() { <-start; h.Report(r, true) })
		wg.Go(func() { <-start; h.Report(r, false) })
		close(start)
		wg.Wait()
		if r.EjectedTotal() > before && !r.Ejected(time.Now()) {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d ejections lost: counted, but the replica stayed in rotation", lost, tries)
	}
}

// TestLeftMemberProbedWhileLeased: a member that leaves the fleet while a
// request holds a lease on it is probed on, so when its engine stops
// answering, its Down channel closes and the request waiting on the head
// moves elsewhere, instead of waiting for good on an engine that nothing
// probes any more.
func TestLeftMemberProbedWhileLeased(t *testing.T) {
	var failing, aProbed atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/pool-a/health" {
			aProbed.Store(true)
		}
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	mk := func(id string) *Replica { return NewReplica(id, u.JoinPath(id), []string{"m"}, 0, 0) }
	f := New(nil, nil)
	f.SetGroup("pool", []*Replica{mk("pool-a"), mk("pool-b")})
	cfg := capConfig()
	cfg.UnhealthyThreshold = 1
	cfg.Timeout = time.Second
	h := NewHealth(cfg, f, &http.Client{}, nil, nil, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = h.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitUntil(t, "a probed", aProbed.Load)
	a := f.Snapshot().Get("pool-a")
	lease, ok := a.TryAcquire()
	if !ok {
		t.Fatal("no lease")
	}
	defer lease.Release()
	down := a.Down()
	f.SetGroup("pool", []*Replica{mk("pool-b")}) // a leaves with its request
	failing.Store(true)                          // and its engine hangs
	waitUntil(t, "the Down channel of the member that left to close", func() bool {
		select {
		case <-down:
			return true
		default:
			return false
		}
	})
}

// TestReplacedReplicaStopsProbing: a replica replaced on the same engine
// (its settings changed) shares its load counters with the one that
// replaced it; its prober stops once its own leases end, not once the
// shared count reaches zero, which under steady traffic it never did: each
// such reload left one more prober behind (found by a review).
func TestReplacedReplicaStopsProbing(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	same := func(*Replica, *Replica) bool { return false }
	f := New(nil, nil)
	old := NewReplica("r", u, []string{"m"}, 0, 0)
	f.SetStatic([]*Replica{old}, same)
	own, ok := old.TryAcquire()
	if !ok {
		t.Fatal("no lease")
	}
	next := NewReplica("r", u, []string{"m"}, 0, 0)
	f.SetStatic([]*Replica{next}, same)
	shared, ok := next.TryAcquire()
	if !ok {
		t.Fatal("no lease")
	}
	defer shared.Release()
	if !old.Removed() || old.InFlight() != 2 {
		t.Fatalf("old: removed %v, %d in flight; want removed, counting both leases", old.Removed(), old.InFlight())
	}
	cfg := capConfig()
	cfg.Interval = 10 * time.Millisecond
	h := NewHealth(cfg, f, &http.Client{}, nil, nil, nil)
	done := make(chan struct{})
	go func() { h.probeLoop(t.Context(), old); close(done) }()
	select {
	case <-done:
		t.Fatal("the old replica's prober stopped while a request of its own ran there")
	case <-time.After(100 * time.Millisecond):
	}
	own.Release()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the old replica's prober still runs after its own request ended, the new one's still running")
	}
}

// TestUnservedModelWarned: an engine whose /v1/models lacks a model its
// replica is configured for is warned of once, and again only after it
// listed the model in between (found by a review: requests for the model
// got the engine's 404 there, with nothing logged).
func TestUnservedModelWarned(t *testing.T) {
	var lists atomic.Value
	lists.Store(`{"object":"list","data":[{"id":"other"}]}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, lists.Load().(string))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	r := NewReplica("r", u, []string{"m"}, 0, 0)
	var logs syncbuf.Buffer
	// Each fetch must finish: capConfig's 5 ms timeout cut one short under
	// the race detector beside other work, and no warning came (1 run).
	cfg := capConfig()
	cfg.Interval, cfg.Timeout = 10*time.Second, 10*time.Second
	h := NewHealth(cfg, New(nil, nil), &http.Client{}, slog.New(slog.NewTextHandler(&logs, nil)), nil, nil)
	warned := func() int { return strings.Count(logs.String(), "does not list a model") }
	for _, step := range []struct {
		list string
		want int
	}{
		{`{"object":"list","data":[{"id":"other"}]}`, 1},
		{`{"object":"list","data":[{"id":"other"}]}`, 1}, // said already
		{`{"object":"list","data":[{"id":"m"}]}`, 1},
		{`{"object":"list","data":[]}`, 2}, // lacks it again
	} {
		lists.Store(step.list)
		h.fetchCards(t.Context(), r)
		if got := warned(); got != step.want {
			t.Fatalf("after %s: %d warnings, want %d:\n%s", step.list, got, step.want, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "model=m") || !strings.Contains(logs.String(), "replica=r") {
		t.Errorf("the warning does not name the replica and model: %s", logs.String())
	}
}

// TestCardsFetchedAfterAFailedProbe: an engine that fails a probe may have
// restarted with other settings, so its model cards are fetched again at
// the next passing probe, not up to cardsEvery probes later (found by a
// review: a restarted engine's new context length showed about 10 s late).
func TestCardsFetchedAfterAFailedProbe(t *testing.T) {
	var failing, back atomic.Bool
	var maxLen, probesBack atomic.Int64
	maxLen.Store(4096)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if back.Load() && req.URL.Path == "/health" {
			probesBack.Add(1)
		}
		switch {
		case failing.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
		case req.URL.Path == "/v1/models":
			fmt.Fprintf(w, `{"object":"list","data":[{"id":"m","max_model_len":%d}]}`, maxLen.Load())
		}
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	r := NewReplica("r", u, []string{"m"}, 0, 0)
	cfg := capConfig()
	cfg.Interval, cfg.UnhealthyInterval, cfg.HealthyThreshold, cfg.UnhealthyThreshold = 5*time.Millisecond, 5*time.Millisecond, 1, 100
	h := NewHealth(cfg, New(nil, nil), &http.Client{}, nil, nil, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { h.probeLoop(ctx, r); close(done) }()
	defer func() { cancel(); <-done }()
	card := func() string {
		if c := r.Cards(); c != nil {
			return string(c.Cards["m"])
		}
		return ""
	}
	waitUntil(t, "the first cards", func() bool { return strings.Contains(card(), "4096") })
	// The engine goes away for a probe and comes back with another
	// context length, well inside cardsEvery probes.
	maxLen.Store(8192)
	failing.Store(true)
	time.Sleep(20 * time.Millisecond)
	back.Store(true)
	failing.Store(false)
	waitUntil(t, "the new cards", func() bool { return strings.Contains(card(), "8192") })
	if n := probesBack.Load(); n > 2 {
		t.Errorf("the new cards came %d probes after the engine was back, want at the first passing one", n)
	}
}

// TestProbeNeedsTheWholeAnswer: a probe passes with a 200 whose body is
// read whole within the probe's timeout. An engine, or a proxy in front of
// one, that sends a 200's head and then hangs, or cuts the body short,
// fails it (a review's finding: the body's read error was ignored, and a
// hung engine behind a head-first proxy passed every probe).
func TestProbeNeedsTheWholeAnswer(t *testing.T) {
	tests := []struct {
		name   string
		health http.HandlerFunc
		want   bool
	}{
		{"ok", func(w http.ResponseWriter, _ *http.Request) {}, true},
		{"ok_with_body", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "fine") }, true},
		{"ok_body_past_what_is_read", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, strings.Repeat("x", 128<<10))
		}, true},
		{"unavailable", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }, false},
		{"head_then_hang", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "fi")
			_ = http.NewResponseController(w).Flush()
			<-r.Context().Done() // until the probe gives up
		}, false},
		{"body_cut_short", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "10")
			_, _ = io.WriteString(w, "fi")
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.health)
			t.Cleanup(srv.Close)
			u, _ := url.Parse(srv.URL)
			r := NewReplica("one", u, []string{"m"}, 8, 8)
			// The timeout only bounds the hanging case; no result
			// depends on how fast the machine is.
			h := NewHealth(HealthConfig{Interval: time.Hour, Timeout: time.Second, UnhealthyThreshold: 1, HealthyThreshold: 1},
				New([]*Replica{r}, nil), &http.Client{}, nil, nil, nil)
			if got := h.probe(t.Context(), r); got != tt.want {
				t.Errorf("probe = %v, want %v", got, tt.want)
			}
		})
	}
}
