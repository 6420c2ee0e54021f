package gateway

import (
	"context"
	"log/slog"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/events"
	"github.com/inferrail/inferrail/internal/fleet"
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
	idx, at, k := exactKVEvents(0)

	f := &replicaFeed{id: "r", purges: map[string]uint64{}}
	sink := &feedSink{f: f, index: idx, at: at}
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
	idx, at, k := exactKVEvents(2)
	f := &replicaFeed{id: "r", purges: map[string]uint64{}, blockSize: 16}
	sink := &feedSink{f: f, index: idx, at: at}
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

// heldIndex holds the first ApplyEvents it is armed for until released,
// freezing a feed's goroutine where the scheduler may preempt it.
type heldIndex struct {
	*index.Approx
	armed                      atomic.Bool
	entered, release, returned chan struct{}
}

func (h *heldIndex) ApplyEvents(at index.Attachment, b *events.Batch) {
	if h.armed.CompareAndSwap(true, false) {
		close(h.entered)
		<-h.release
		defer close(h.returned)
	}
	h.Approx.ApplyEvents(at, b)
}

// TestReloadedReplicaKeepsTheOldFeedOut: a replica is replaced by one of
// its ID (a reload changed its kv_capacity_blocks) while its old feed is
// applying a batch. leave cancels the old feed without waiting for it, so
// that batch may land after the new mirror is attached: it must not land
// in it. The engine stores a block and removes it; the new mirror, fed
// from the engine's replay, ends empty. (Found by a code review: the old
// feed wrote by replica ID and the mirror kept the removed block.)
func TestReloadedReplicaKeepsTheOldFeedOut(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := newScriptedPublisher(t, events.EncodingMap, 0)
	e.heartbeat.Store(false)

	cfg := config.Default()
	cfg.Index.Mode = config.IndexExact
	idx := &heldIndex{Approx: index.NewApprox(1000),
		entered: make(chan struct{}), release: make(chan struct{}), returned: make(chan struct{})}
	idx.Join("r")
	scraper := load.NewScraper(load.ScrapeConfig{}, nil, func() []load.Target { return nil }, nil, nil, nil)
	attach := func(*fleet.Replica) (index.EventsConfig, bool) {
		return index.EventsConfig{BlockSize: 16, Seed: func(string, string) blockhash.Hash { return blockhash.Seed(testModel, "", "") }}, true
	}
	k := newKVEvents(&cfg, idx, scraper, nil, slog.New(slog.DiscardHandler), attach)
	u, _ := url.Parse("http://127.0.0.1:1")
	kv := fleet.KVEvents{Endpoint: e.endpoint(), ReplayEndpoint: e.router.Endpoint()}
	r1 := &fleet.Replica{ID: "r", URL: u, Models: []string{testModel}, KVEvents: kv}
	r2 := &fleet.Replica{ID: "r", URL: u, Models: []string{testModel}, KVEvents: kv, KVCapacityBlocks: 2000}

	done := make(chan struct{})
	go func() { defer close(done); k.run(ctx, func() []*fleet.Replica { return []*fleet.Replica{r1} }) }()
	defer func() { cancel(); <-done }()
	feedOf := func() *replicaFeed { k.mu.Lock(); defer k.mu.Unlock(); return k.feeds["r"] }
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("the first feed", func() bool { return feedOf() != nil })
	old := feedOf()
	waitFor("the first feed to subscribe and replay", func() bool {
		return e.pub.Stats().Subscribers == 1 && old.feed.Stats().Replays == 1
	})

	block := events.Event{Kind: events.BlockStored, Hashes: []events.Hash{events.UintHash(100)},
		Tokens: make([]uint32, 16), BlockSize: 16, Medium: "GPU", HasMedium: true}
	idx.armed.Store(true)
	e.publish(&events.Batch{TS: 1, HasDPRank: true, Events: []events.Event{block}})
	<-idx.entered // the old feed is applying batch 0

	// What the gateway's fleet watcher does on a reload.
	idx.Forget("r")
	idx.Join("r")
	idx.SetCapacity("r", 2000)
	k.leave([]*fleet.Replica{r1})
	k.join([]*fleet.Replica{r2})
	nf := feedOf()
	waitFor("the new feed to replay batch 0", func() bool { return nf.feed.Stats().Applied == 1 })
	close(idx.release)
	<-idx.returned // the old feed's batch 0 went wherever it goes

	e.publish(&events.Batch{TS: 2, HasDPRank: true, Events: []events.Event{{Kind: events.BlockRemoved,
		Hashes: []events.Hash{events.UintHash(100)}, Medium: "GPU", HasMedium: true}}})
	// The new feed may have subscribed after batch 1 went out: the
	// heartbeat's batches that follow make it a gap, filled by replay.
	e.heartbeat.Store(true)
	waitFor("the new feed to apply batch 1", func() bool { st := nf.feed.Stats(); return st.HasSeq && st.LastSeq >= 1 })
	if ev := idx.Events("r"); ev.Mirrored != 0 {
		t.Errorf("the new mirror holds %d blocks; the engine holds none (stored %d, removed %d)",
			ev.Mirrored, ev.Mirror.Stored, ev.Mirror.Removed)
	}
}

// exactKVEvents is an exact index that knows replica "r", its events
// attached in blocks of 16 (at most maxBlocks mirrored; 0 for the
// default), and the gateway's KV-event state over it, with no scraper
// targets: the judging tests drive its feed by hand.
func exactKVEvents(maxBlocks int) (*index.Approx, index.Attachment, *kvEvents) {
	cfg := config.Default()
	cfg.Index.Mode = config.IndexExact
	idx := index.NewApprox(1000)
	idx.Join("r")
	at := idx.AttachEvents("r", index.EventsConfig{BlockSize: 16, MaxBlocks: maxBlocks, Seed: func(string, string) blockhash.Hash { return blockhash.Seed(testModel, "", "") }})
	scraper := load.NewScraper(load.ScrapeConfig{}, nil, func() []load.Target { return nil }, nil, nil, nil)
	return idx, at, newKVEvents(&cfg, idx, scraper, nil, slog.New(slog.DiscardHandler), nil)
}
