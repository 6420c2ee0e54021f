package load

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/sim"
)

func BenchmarkParseVLLMPage(b *testing.B) {
	m := sim.NewMetrics(sim.MetricsConfig{ModelName: "m", Engine: "0", MaxModelLen: 32768,
		CacheConfig: [][2]string{{"block_size", "16"}, {"num_gpu_blocks", "4096"}}, Start: time.Unix(1, 0)})
	m.Record(&sim.StepStats{Running: 5, Waiting: 2, KVUsage: 0.25, PrefixQueries: 100, PrefixHits: 64, TTFT: []float64{0.1}})
	var page bytes.Buffer
	_, _ = m.WriteTo(&page)
	b.SetBytes(int64(page.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(bytes.NewReader(page.Bytes())); err != nil {
			b.Fatal(err)
		}
	}
}

// manySeries is a page whose running family has n series, one a rank,
// and a repeat of the first when repeat is set.
func manySeries(n int, repeat bool) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "vllm:num_requests_running{engine=\"%d\"} 1\n", i)
	}
	if repeat {
		b.WriteString("vllm:num_requests_running{engine=\"0\"} 1\n")
	}
	b.WriteString("vllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.5\n")
	return b.Bytes()
}

// TestManySeries: a page of many series is read, and one series among
// them repeated is found.
func TestManySeries(t *testing.T) {
	for _, n := range []int{1, 2, 50_000} {
		rep, err := Parse(bytes.NewReader(manySeries(n, false)))
		if err != nil || rep.Running != float64(n) || rep.Ranks != n {
			t.Errorf("%d series: %+v, %v; want %d running over %d ranks", n, rep, err, n, n)
		}
		if _, err := Parse(bytes.NewReader(manySeries(n, true))); !errors.Is(err, ErrUnreadable) {
			t.Errorf("%d series and a repeat: %v, want ErrUnreadable", n, err)
		}
	}
}

// BenchmarkParseManySeries: parsing costs about the same per series at
// 10,000 and at 100,000 (ns/op over the series count); checking for
// repeats pair by pair took the larger page 2.3 s (47 times as long).
func BenchmarkParseManySeries(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		page := manySeries(n, false)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.SetBytes(int64(len(page)))
			for b.Loop() {
				if _, err := Parse(bytes.NewReader(page)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
