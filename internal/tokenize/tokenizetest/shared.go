package tokenizetest

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// SharedGoroutines are the goroutine counts BenchShared is run at: one,
// the single-threaded figure, and the spec's sixteen sharing one
// tokenizer.
var SharedGoroutines = []int{1, 16}

// BenchShared encodes b.N texts in all from goroutines goroutines sharing
// encode (one tokenizer and its piece cache), taking texts in turn, and
// checks every id of every encoding against want, the single-threaded
// result of the same text. It reports tokens/s over the wall time of the
// whole run.
func BenchShared(b *testing.B, goroutines int, texts []string, want [][]int, encode func(dst []int, text string) []int) {
	b.Helper()
	var next, tokens atomic.Int64
	var mu sync.Mutex
	var wrong []string
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			var dst []int
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				k := int(i % int64(len(texts)))
				dst = encode(dst[:0], texts[k])
				tokens.Add(int64(len(dst)))
				if !slices.Equal(dst, want[k]) {
					mu.Lock()
					wrong = append(wrong, fmt.Sprintf("text %d: %d ids differ from the single-threaded %d", k, len(dst), len(want[k])))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if len(wrong) > 0 {
		b.Fatalf("%d of %d encodings not exact, first: %s", len(wrong), b.N, wrong[0])
	}
	b.ReportMetric(float64(tokens.Load())/elapsed.Seconds(), "tokens/s")
}
