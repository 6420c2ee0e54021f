package fleet

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"
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
	f := New([]*Replica{r, up})
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
