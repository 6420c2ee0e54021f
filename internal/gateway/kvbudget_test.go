package gateway

import (
	"context"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/index"
)

// TestFeedsShareOneBudget: every replica's feed decodes under the one
// budget of the gateway, so what the feeds decode at once is bounded
// whatever the number of replicas. (A review's finding: each feed decoded
// as much as its engine sent, and ten hostile publishers multiplied it.)
func TestFeedsShareOneBudget(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cfg := config.Default()
	cfg.Index.Mode = config.IndexExact
	idx := index.NewApprox(1000)
	attach := func(*fleet.Replica) (index.EventsConfig, bool) {
		return index.EventsConfig{BlockSize: 16, Seed: func(string, string) blockhash.Hash { return blockhash.Seed(testModel, "", "") }}, true
	}
	k := newKVEvents(&cfg, idx, nil, nil, slog.New(slog.DiscardHandler), attach)
	u, _ := url.Parse("http://127.0.0.1:1")
	var reps []*fleet.Replica
	for _, id := range []string{"a", "b", "c"} {
		idx.Join(id)
		reps = append(reps, &fleet.Replica{ID: id, URL: u, Models: []string{testModel},
			KVEvents: fleet.KVEvents{Endpoint: "tcp://127.0.0.1:1"}})
	}
	done := make(chan struct{})
	go func() { defer close(done); k.run(ctx, func() []*fleet.Replica { return reps }) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		k.mu.Lock()
		n := len(k.feeds)
		k.mu.Unlock()
		if n == len(reps) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d feeds, have %d", len(reps), n)
		}
	}
	if k.budget == nil {
		t.Fatal("the gateway has no budget for its feeds")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for id, f := range k.feeds {
		if got := f.feed.Budget(); got != k.budget {
			t.Errorf("replica %s's feed decodes under budget %p, want the gateway's %p", id, got, k.budget)
		}
	}
}
