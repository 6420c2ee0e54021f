package engine

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"
)

// TestKVMirror runs kv-mirror short: 1,000 requests at 500 req/s per
// variant, through a cache small enough to evict. Under the race detector,
// 300 at 50 req/s through half the cache: at 500 req/s a busy machine
// served some 35 a second, and the backlog outlived the requests' timeout
// and the simulator's 10 s wait for a new connection's first request.
func TestKVMirror(t *testing.T) {
	out := t.TempDir()
	c := DefaultConfig()
	c.OutDir, c.Scenarios = out, []string{ScenarioKVMirror}
	c.KVMirror = KVMirrorLoad{Requests: 1000, Rate: 500, NumGPUBlocks: 1024, BufferSteps: 2000, ReplayCheck: 500,
		Prefixes: 8, MaxTokens: 64, SaltEvery: 5, Downtime: 100 * time.Millisecond, Timeout: 30 * time.Second, Seed: 1}
	if raceEnabled {
		c.KVMirror.Requests, c.KVMirror.Rate, c.KVMirror.NumGPUBlocks = 300, 50, 512
	}
	c.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := Run(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	res := readResult(t, filepath.Join(out, ScenarioKVMirror+".json"))
	if len(res.Runs) != len(kvVariants) {
		t.Fatalf("%d runs, want %d", len(res.Runs), len(kvVariants))
	}
	for _, run := range res.Runs {
		f := run.KVMirror
		if f == nil {
			t.Fatalf("%s: no figures", run.Variant)
		}
		t.Logf("%s: %+v", run.Variant, *f)
		for _, p := range f.Problems {
			t.Errorf("%s: %s", run.Variant, p)
		}
		// The replay window is the last 500 batches, or all of them when a
		// quick machine batched the load into fewer steps.
		if f.Feed.Applied == 0 || f.EngineCopies == 0 || f.ReplayChecked == 0 ||
			(run.Variant != KVEngineRestart && (f.ReplayChecked != f.ReplayWindow || f.ReplayWindow > 500)) {
			t.Errorf("%s: figures not filled: %+v", run.Variant, *f)
		}
	}
}
