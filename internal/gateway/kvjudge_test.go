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

// TestJudgeSilence: a stream is silent only when the gateway sent the
// engine a prompt that must store blocks, the engine computed at least a
// block's worth it did not have, and no batch came for the silence. A
// scrape from just before the last batch's own prompt was counted, and
// prompts the engine held whole, are not silence.
func TestJudgeSilence(t *testing.T) {
	cfg := config.Default()
	cfg.Index.KVEvents.Silence = config.Duration(3 * time.Second)
	k := newKVEvents(&cfg, index.NewApprox(1000), nil, nil, slog.New(slog.DiscardHandler), nil)
	batch := time.Unix(1000, 0)
	at := func(ms int) time.Time { return batch.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name      string
		expecting bool
		scrapes   []float64 // misses read at 0.25 s, 0.5 s, 0.75 s ... after the batch
		want      bool      // silent at the last scrape, 4 s after the batch
	}{
		{"prompts_missed", true, []float64{100, 100, 100, 400}, true},
		{"scrape_before_the_batchs_own_prompt", true, []float64{100, 400, 400, 400}, false},
		{"nothing_routed_that_stores", false, []float64{100, 100, 100, 400}, false},
		{"held_whole_prompts_miss_less_than_a_block", true, []float64{100, 100, 100, 115}, false},
		{"engine_restarted", true, []float64{100, 100, 100, 20}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &replicaFeed{id: "r", blockSize: 16}
			f.expecting.Store(tc.expecting)
			var got bool
			for i, misses := range tc.scrapes {
				now := at(250 * (i + 1))
				if i == len(tc.scrapes)-1 {
					now = at(4000)
				}
				got = k.silent(f, batch, misses, now)
			}
			if got != tc.want {
				t.Errorf("silent = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestClearedCacheRestoresTrust: an engine that empties its cache makes
// the mirror its whole cache again, so a replica that was catching up or
// had overflowed follows the events at once; stores to other media than
// the GPU do not count towards catching up.
func TestClearedCacheRestoresTrust(t *testing.T) {
	cfg := config.Default()
	cfg.Index.Mode = config.IndexExact
	idx := index.NewApprox(1000)
	idx.AttachEvents("r", index.EventsConfig{BlockSize: 16, MaxBlocks: 2, Seed: func(string, string) blockhash.Hash { return blockhash.Seed(testModel, "", "") }})
	scraper := load.NewScraper(load.ScrapeConfig{}, nil, func() []load.Target { return nil }, nil, nil, nil)
	k := newKVEvents(&cfg, idx, scraper, nil, slog.New(slog.DiscardHandler), nil)
	f := &replicaFeed{id: "r", purges: map[string]uint64{}, blockSize: 16}
	sink := &feedSink{f: f, index: idx}
	f.feed = kvfeed.New(kvfeed.Config{Endpoint: "tcp://127.0.0.1:1"}, sink)
	now := time.Now()

	stored := func(medium string, n int) events.Event {
		ev := events.Event{Kind: events.BlockStored, BlockSize: 16, Medium: medium, HasMedium: true, Tokens: make([]uint32, 16*n)}
		for i := range n {
			ev.Hashes = append(ev.Hashes, events.UintHash(uint64(i+1)))
		}
		return ev
	}
	sink.Apply(5, &events.Batch{Events: []events.Event{stored("CPU", 64)}}) // joined late
	if got := k.judge(f, now, 64); got != reasonCatchingUp {
		t.Fatalf("joined late, 64 blocks stored on the CPU: judged %q, want %q", got, reasonCatchingUp)
	}
	sink.Apply(6, &events.Batch{Events: []events.Event{stored("GPU", 3)}}) // past MaxBlocks
	if got := k.judge(f, now, 64); got != reasonOverflow {
		t.Fatalf("3 blocks into a mirror of 2: judged %q, want %q", got, reasonOverflow)
	}
	sink.Apply(7, &events.Batch{Events: []events.Event{{Kind: events.AllBlocksCleared}, stored("GPU", 1)}})
	if got := k.judge(f, now, 64); got != "" {
		t.Errorf("after the engine cleared its cache: judged %q, want the events", got)
	}
}
