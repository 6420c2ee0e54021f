package gateway

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/policy"
)

// BenchmarkShadowJob is what one routed request costs the shadow worker:
// six shadows' picks over three candidates, their counts and, with the
// log on, its line; off the request path, but on the same CPUs.
func BenchmarkShadowJob(b *testing.B) {
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: testModel}}
	cfg.Replicas = []config.Replica{{ID: "r", URL: "http://127.0.0.1:1", Models: []string{testModel}, MaxConcurrency: 8, MaxPending: 8}}
	cfg.Routing.DefaultPolicy = policy.CostModel
	cfg.Routing.Shadow = config.PolicyList{"round_robin", "random", "least_request", "p2c", "prefix_hash", "kv_aware"}
	gen, err := newGeneration(&cfg, 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	cands := []policy.Candidate{{ID: "sim-1", Cached: 64, Running: 3, KVUsage: 0.4}, {ID: "sim-2", Cached: 0, Running: 5, KVUsage: 0.2}, {ID: "sim-3", Cached: -1, Running: -1, KVUsage: -1}}
	blocks := blockhash.Extend(nil, blockhash.Seed(testModel, "", ""), make([]int, 32*16), 16)
	for _, withLog := range []bool{false, true} {
		b.Run(fmt.Sprintf("log=%v", withLog), func(b *testing.B) {
			var sl *shadowLog
			if withLog {
				if sl, err = openShadowLog(filepath.Join(b.TempDir(), "shadow.jsonl"), slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
					b.Fatal(err)
				}
				defer sl.close()
			}
			s := newShadowRunner(prometheus.NewRegistry(), sl)
			job := shadowJob{gen: gen, model: testModel, cands: cands, routed: policy.Decision{Index: 0, EstimatedTTFT: 0.01}, policy: policy.CostModel,
				req: policy.Request{Model: testModel, ID: "req", PromptTokens: 530, Blocks: blocks, BlockSize: 16, At: time.Now().Round(0)}}
			b.ReportAllocs()
			for b.Loop() {
				s.decide(&job)
			}
		})
	}
}
