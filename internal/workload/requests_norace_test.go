//go:build !race

package workload

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// TestLazyTraceHeldHeap: planning a trace of 200 prompts of 200,000
// tokens, some 95 MiB of bodies, holds none of them, and making them one
// by one while keeping the last 8 holds about those 8. The live heap is
// read after a collection; the race detector's runtime allocates on its
// own, so make norace runs this without it.
func TestLazyTraceHeldHeap(t *testing.T) {
	var b strings.Builder
	for i := range 200 {
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": 200000, "output_length": 1, "hash_ids": [%d, 7]}`+"\n", i, i%5)
	}
	path := writeTrace(t, b.String())
	live := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	base := live()
	reqs, err := GenerateRequests(t.Context(), Spec{Workload: Trace, Model: "m", TracePath: path})
	if err != nil {
		t.Fatal(err)
	}
	if held := live() - base; held > 1<<20 {
		t.Errorf("planning holds %d KiB", held>>10)
	}
	const window = 8
	var kept [window][]byte
	var size, total, most int64
	for i := range reqs.Len() {
		body := reqs.Request(i).Body
		size, total = max(size, int64(len(body))), total+int64(len(body))
		kept[i%window] = body
		if i%20 == 19 {
			most = max(most, live()-base)
		}
	}
	runtime.KeepAlive(&kept)
	t.Logf("live heap at most %d MiB above the start's, bodies of at most %d KiB, %d MiB in all", most>>20, size>>10, total>>20)
	if bound := (window+2)*size + 1<<20; most > bound || total < 10*bound {
		t.Errorf("live heap up to %d MiB above the start's, want at most %d MiB of %d MiB made", most>>20, bound>>20, total>>20)
	}
}
