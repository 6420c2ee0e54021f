package gateway

import (
	"log/slog"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/events"
	"github.com/inferrail/inferrail/internal/index"
	"github.com/inferrail/inferrail/internal/kvfeed"
	"github.com/inferrail/inferrail/internal/load"
)

// TestJudgeBetweenApplyAndCount freezes the moment a tick can land in: the
// sink has applied a stream's first batch and the feed has not counted it
// yet. The stream is there; calling it absent would send the replica's next
// predictions to the approximate source for a whole tick (the
// TestExactIndexPredictsEveryHit flake). After a purge it is absent again.
func TestJudgeBetweenApplyAndCount(t *testing.T) {
	cfg := config.Default()
	cfg.Index.Mode = config.IndexExact
	idx := index.NewApprox(1000)
	idx.AttachEvents("r", index.EventsConfig{BlockSize: 16, Seed: func(string, string) blockhash.Hash { return blockhash.Seed(testModel, "", "") }})
	scraper := load.NewScraper(load.ScrapeConfig{}, nil, func() []load.Target { return nil }, nil, nil, nil)
	k := newKVEvents(&cfg, idx, scraper, nil, slog.New(slog.DiscardHandler), nil)

	f := &replicaFeed{id: "r", purges: map[string]uint64{}}
	sink := &feedSink{f: f, index: idx}
	f.feed = kvfeed.New(kvfeed.Config{Endpoint: "tcp://127.0.0.1:1"}, sink)
	if got := k.judge(f, time.Now(), 64); got != reasonNoStream {
		t.Fatalf("before any batch: judged %q, want %q", got, reasonNoStream)
	}
	sink.Apply(0, &events.Batch{})
	if st := f.feed.Stats(); st.Applied != 0 || st.HasSeq {
		t.Fatalf("the feed counted a batch it never read: %+v", st)
	}
	if got := k.judge(f, time.Now(), 64); got != "" {
		t.Errorf("first batch applied, not yet counted: judged %q, want events", got)
	}
	sink.Purge(kvfeed.PurgeLost)
	if got := k.judge(f, time.Now(), 64); got != reasonNoStream {
		t.Errorf("after a purge: judged %q, want %q", got, reasonNoStream)
	}
}
