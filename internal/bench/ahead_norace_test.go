//go:build !race

package bench

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/progress"
	"github.com/inferrail/inferrail/internal/workload"
)

// TestOpenLoopHeldHeap replays a trace of 1,500 prompts of 100,000
// tokens, 2 ms apart, some 350 MiB of bodies, and reads the live heap
// every 25 requests: less the bodies sent and not yet answered, it stays
// within the window made ahead (aheadBytes) and a little more, not the
// trace's size. A sent body leaves the window but is held until its
// answer, and how many wait so depends on how busy the machine is (CI
// runs this beside the race tests), not on the window. The race
// detector's runtime allocates on its own, so make norace runs this
// without it.
func TestOpenLoopHeldHeap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	var b strings.Builder
	for i := range 1500 {
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": 100000, "output_length": 1, "hash_ids": [%d]}`+"\n", i*2, i%4)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	reqs, err := workload.GenerateRequests(t.Context(), workload.Spec{Workload: workload.Trace, Model: "m", TracePath: path})
	if err != nil {
		t.Fatal(err)
	}
	var read, received atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		read.Add(n)
		received.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, sseBody(1))
	}))
	defer srv.Close()
	live := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	var count progress.Counts
	base, most, mostFlying := live(), int64(0), int64(0)
	outs := RunOpenLoop(t.Context(), time.Now(), reqs, OpenLoopOptions{URL: srv.URL, Timeout: time.Minute, Progress: &count, OnSchedule: func(i int) {
		if i%25 == 0 {
			// Bodies the server has read were sent (the window gave their
			// bytes back) and stay held until the client's request is
			// done. The bodies are all of a size: the mean read is each's.
			got, body := received.Load(), int64(0)
			if got > 0 {
				body = read.Load() / got
			}
			flying := max(got-count.Done.Load(), 0)
			mostFlying = max(mostFlying, flying)
			most = max(most, live()-base-flying*body)
		}
	}})
	for i, o := range outs {
		if !o.OK() {
			t.Fatalf("request %d: %s", i, o.String())
		}
	}
	const bound = aheadBytes + 32<<20 // and the transport's buffers
	t.Logf("live heap at most %d MiB above the start's and the bodies sent and not answered (at most %d); %d MiB of bodies sent", most>>20, mostFlying, read.Load()>>20)
	if most > bound || read.Load() < 3*bound {
		t.Errorf("live heap up to %d MiB above the start's, want at most %d MiB, %d MiB of bodies sent", most>>20, bound>>20, read.Load()>>20)
	}
}
