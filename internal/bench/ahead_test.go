package bench

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/workload"
)

// sizedRequests are n requests of size-byte bodies, each body naming its
// request.
func sizedRequests(n, size int) *workload.Requests {
	reqs := make([]workload.Request, n)
	for i := range reqs {
		body := fmt.Appendf(nil, "%-*d", size, i)
		reqs[i] = workload.Request{At: time.Duration(i), Body: body}
	}
	return workload.NewRequests(reqs)
}

// ahead holds no more than its budget (and one request past it) made and
// not yet written, and hands each request over once, whatever order they
// are taken in.
func TestAheadKeepsItsBudget(t *testing.T) {
	reqs := sizedRequests(20, 1000)
	a := startAhead(t.Context(), reqs, 3500)
	defer a.stop()
	made := func() int {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.next
	}
	settled := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); made() < want && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond) // time to make more, were it to
		if n := made(); n != want {
			t.Fatalf("%d requests made, want %d", n, want)
		}
	}
	settled(4)
	for _, i := range []int{2, 0, 1} {
		r, ok := a.take(i)
		if !ok || string(r.Body) != string(reqs.Request(i).Body) {
			t.Fatalf("take(%d) = %q, %v", i, r.Body, ok)
		}
	}
	settled(4) // taken is not written
	a.written(1000)
	a.written(1000)
	settled(6)
	for i := 3; i < reqs.Len(); i++ {
		r, ok := a.take(i)
		if !ok || string(r.Body) != string(reqs.Request(i).Body) {
			t.Fatalf("take(%d) = %q, %v", i, r.Body, ok)
		}
		a.written(len(r.Body))
	}
}

// A run stopped before a request is made never gets it: take says so
// rather than wait.
func TestAheadStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	a := startAhead(ctx, sizedRequests(10, 100), 150)
	if _, ok := a.take(0); !ok {
		t.Fatal("request 0 not made")
	}
	a.written(100)
	a.ready()
	cancel()
	done := make(chan bool)
	go func() {
		_, ok := a.take(9)
		done <- ok
	}()
	select {
	case ok := <-done:
		if ok {
			t.Error("request 9 made past the budget after the run stopped")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("take waited on a stopped run")
	}
}

// bodyServer answers every chat at once and keeps a digest of each body
// it read.
func bodyServer(t *testing.T) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		if _, err := io.Copy(h, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, fmt.Sprintf("%x", h.Sum(nil)))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, sseBody(1))
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// A trace replayed lazily sends the bodies the eager replay made.
func TestOpenLoopSendsLazyTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	var b strings.Builder
	for i := range 30 {
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": 2, "hash_ids": [%d, %d]}`+"\n", i*3, 100+i*37, i%3, i)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := workload.Spec{Workload: workload.Trace, Model: "m", TracePath: path, Seed: 5}
	eager, err := workload.Generate(spec)
	if err != nil {
		t.Fatal(err)
	}
	lazy, err := workload.GenerateRequests(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	srv, bodies := bodyServer(t)
	outs := RunOpenLoop(t.Context(), time.Now(), lazy, OpenLoopOptions{URL: srv.URL, Timeout: 10 * time.Second})
	var want []string
	for i, o := range outs {
		if !o.OK() || o.Kind != workload.Trace || o.Sched != eager[i].At {
			t.Errorf("request %d: %s, kind %q", i, o.String(), o.Kind)
		}
		want = append(want, fmt.Sprintf("%x", sha256.Sum256(eager[i].Body)))
	}
	got := bodies()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the server read %d bodies unlike the %d of the eager replay", len(got), len(want))
	}
}
