package gateway

import (
	"fmt"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/policy"
)

// BenchmarkApplyPatch is what a PATCH /admin/config costs the gateway,
// body read aside, as servePatchConfig does it: the merge onto the config in effect, its validation and
// the new generation's build and swap. The patches alternate between two
// routing policies, so every one is applied.
func BenchmarkApplyPatch(b *testing.B) {
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: testModel}}
	for i := range 3 {
		cfg.Replicas = append(cfg.Replicas, config.Replica{ID: fmt.Sprintf("r%d", i), URL: fmt.Sprintf("http://127.0.0.1:%d", 1+i), Models: []string{testModel}, MaxConcurrency: 8, MaxPending: 8})
	}
	cfg.Routing.DefaultPolicy = policy.CostModel
	cfg.Routing.Shadow = config.PolicyList{"round_robin", "random", "least_request", "p2c", "prefix_hash", "kv_aware"}
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	g, err := New(&cfg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	patches := [][]byte{[]byte(`{"routing":{"default_policy":"kv_aware"}}`), []byte(`{"routing":{"default_policy":"cost_model"}}`)}
	b.ReportAllocs()
	i, applied := 0, time.Duration(0)
	for b.Loop() {
		doc, err := g.current().document()
		if err != nil {
			b.Fatal(err)
		}
		next, err := config.PatchDocument(doc, patches[i%2])
		if err != nil {
			b.Fatal(err)
		}
		result, gen, err := g.apply(next, "bench")
		if err != nil || result != reloadApplied {
			b.Fatal(result, err)
		}
		applied += gen.applied
		i++
	}
	// What the stress scenario and apply_secs report: the apply alone, from
	// a config parsed to its generation published.
	b.ReportMetric(float64(applied.Microseconds())/float64(i), "apply-µs/op")
}
