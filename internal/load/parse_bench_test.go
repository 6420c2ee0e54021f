package load

import (
	"bytes"
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
