package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/events"
	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/index"
	"github.com/inferrail/inferrail/internal/kvfeed"
	"github.com/inferrail/inferrail/internal/load"
)

// kvEvents follows the KV event stream of every engine in the fleet (index
// mode exact or auto): one kvfeed per replica, started when the replica
// joins and stopped when it leaves, feeding the index's mirror of that
// engine. Every tick it decides, per replica, whether predictions follow
// the events or the gateway's own routing:
//   - no stream: nothing applied since the feed started or was purged
//     (unless a replay showed the engine has published nothing at all);
//   - catching up: the mirror lacks history (it did not start at the
//     stream's first batch) and has not yet keyed as many blocks as the
//     engine's cache holds since (orphans, whose parents it never saw,
//     do not count: a prefix the engine cached before the stream's reach
//     and keeps reusing is never stored again, so its descendants stay
//     orphans however much the engine stores, until a routed prompt
//     reveals it, index.Index.Reveal);
//   - silent: since the last batch the gateway sent the engine a prompt
//     that must store new blocks, the engine computed at least a block's
//     worth of prompt tokens it did not have (its prefix cache misses),
//     and the stream said nothing for index.kv_events.silence;
//   - overflow: the stream stored more blocks than the mirror's bound
//     (several times the engine's cache) since it was last purged;
//   - drift (mode auto): the replica's predictions over-counted its
//     engine's cached tokens (see drift), for driftCooldown;
//   - block size: the engine reports pages of another size than the
//     model's block_size (see wrongBlockSize).
//
// Safe for concurrent use; run owns every feed's goroutine.
type kvEvents struct {
	index   index.Index
	scraper *load.Scraper
	drift   *drift
	cfg     *config.Config
	log     *slog.Logger
	// attach describes a replica's engine for its mirror; false when its
	// model has no tokenizer (so no predictions to make).
	attach func(r *fleet.Replica) (index.EventsConfig, bool)
	// budget is shared by every feed: what they decode at once is bounded
	// for the gateway, not per engine (kvfeed.Budget).
	budget *kvfeed.Budget

	mu    sync.Mutex
	ctx   context.Context // nil until run starts; guarded by mu
	feeds map[string]*replicaFeed
	wg    sync.WaitGroup
}

// replicaFeed is one replica's stream and what the gateway concluded
// about it.
type replicaFeed struct {
	id       string
	endpoint string
	replay   string
	feed     *kvfeed.Feed
	cancel   context.CancelFunc

	mu       sync.Mutex // the feed's goroutine and the tick share what follows
	started  bool       // a batch applied since the last purge
	complete bool       // ... and the first of them was the stream's first
	// keyedMark is the mirror's Keyed count at the last purge: the blocks
	// it keyed since are what it learned of the engine's cache.
	keyedMark uint64
	purges    map[string]uint64
	// overflowMark is the mirror's Overflow count at the last purge: a
	// mirror that refused blocks since holds more than any cache could,
	// so the stream is broken or hostile until it starts over.
	overflowMark uint64
	source       index.Source // what the last tick decided
	reason       string       // and why not events, "" when events

	suspect bool // nearly every routed prompt's blocks go unconfirmed: tokens differ?
	// unseenPrefix: nearly every routed prompt's blocks go unconfirmed,
	// and what the engine stores has mostly no parent the mirror knows.
	unseenPrefix bool

	// expecting is set when the gateway routes the engine a prompt that
	// must store new blocks, and cleared by the next batch.
	expecting atomic.Bool
	blockSize int

	// Owned by the tick.
	wrongSize  bool      // the engine's block size is not blockSize (warned when it became so)
	specMark   specCount // the counts when the current speculation window began
	missesMark float64   // the engine's prefix cache misses soon after the last batch
	batchMark  time.Time // that batch's arrival
}

// Why a replica's predictions come from the approximate source.
const (
	reasonNoStream   = "no_stream"
	reasonCatchingUp = "catching_up"
	reasonSilent     = "silent"
	reasonOverflow   = "overflow"
	reasonDrift      = "drift" // mode auto: the events over-predicted the engine's hits
	reasonBlockSize  = "block_size"
)

func newKVEvents(cfg *config.Config, idx index.Index, scraper *load.Scraper, d *drift, log *slog.Logger,
	attach func(r *fleet.Replica) (index.EventsConfig, bool)) *kvEvents {
	return &kvEvents{index: idx, scraper: scraper, drift: d, cfg: cfg, log: log, attach: attach,
		budget: kvfeed.NewBudget(kvfeed.DefaultBudget), feeds: map[string]*replicaFeed{}}
}

// endpoints returns where replica r's engine publishes: its configured
// kv_events, else index.kv_events' ports on its URL's host.
func endpoints(cfg *config.Config, r *fleet.Replica) (pub, replay, topic string) {
	ix := cfg.Index.KVEvents
	pub, replay, topic = r.KVEvents.Endpoint, r.KVEvents.ReplayEndpoint, r.KVEvents.Topic
	if topic == "" {
		topic = ix.Topic
	}
	host := r.URL.Hostname()
	if pub == "" {
		pub = "tcp://" + net.JoinHostPort(host, strconv.Itoa(ix.Port))
	}
	if replay == "" && ix.ReplayPort > 0 {
		replay = "tcp://" + net.JoinHostPort(host, strconv.Itoa(ix.ReplayPort))
	}
	return pub, replay, topic
}

// run starts a feed for every replica in the fleet (current lists it, read
// once join can start feeds, so that none joins unseen in between), then
// ticks until ctx ends; it stops and waits for every feed before it
// returns.
func (k *kvEvents) run(ctx context.Context, current func() []*fleet.Replica) {
	k.mu.Lock()
	k.ctx = ctx
	k.mu.Unlock()
	k.join(current())
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			k.mu.Lock()
			for id, f := range k.feeds {
				f.cancel()
				delete(k.feeds, id)
			}
			k.mu.Unlock()
			k.wg.Wait()
			return
		case now := <-t.C:
			k.tick(now)
		}
	}
}

// join starts feeds for replicas that joined (once run has started; run
// starts those present before it).
func (k *kvEvents) join(reps []*fleet.Replica) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ctx == nil || k.ctx.Err() != nil {
		return
	}
	for _, r := range reps {
		if _, ok := k.feeds[r.ID]; ok {
			continue
		}
		ec, ok := k.attach(r)
		if !ok {
			continue
		}
		pub, replay, topic := endpoints(k.cfg, r)
		at := k.index.AttachEvents(r.ID, ec)
		f := &replicaFeed{id: r.ID, endpoint: pub, replay: replay, source: index.SourceApproximate,
			reason: reasonNoStream, purges: map[string]uint64{}, blockSize: ec.BlockSize}
		f.feed = kvfeed.New(kvfeed.Config{Endpoint: pub, ReplayEndpoint: replay, Topic: topic,
			Budget: k.budget, Log: k.log.With("replica", r.ID)}, &feedSink{f: f, index: k.index, at: at})
		ctx, cancel := context.WithCancel(k.ctx)
		f.cancel = cancel
		k.feeds[r.ID] = f
		k.wg.Go(func() {
			if err := f.feed.Run(ctx); err != nil && ctx.Err() == nil {
				k.log.Warn("kv events: cannot follow the engine's stream", "replica", f.id, "endpoint", pub, "err", err)
			}
		})
	}
}

// leave stops the feeds of replicas that left.
func (k *kvEvents) leave(reps []*fleet.Replica) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range reps {
		if f, ok := k.feeds[r.ID]; ok {
			f.cancel()
			delete(k.feeds, r.ID)
		}
	}
}

// tick decides every replica's source and ends stale speculation.
func (k *kvEvents) tick(now time.Time) {
	k.index.ExpireSpeculation()
	capacity := map[string]int{}
	for _, rs := range k.index.Stats().Replicas {
		capacity[rs.ID] = rs.Capacity
	}
	k.mu.Lock()
	feeds := make([]*replicaFeed, 0, len(k.feeds))
	for _, f := range k.feeds {
		feeds = append(feeds, f)
	}
	k.mu.Unlock()
	for _, f := range feeds {
		reason := k.judge(f, now, capacity[f.id])
		want := index.SourceEvents
		if reason != "" {
			want = index.SourceApproximate
		}
		got := k.index.SetSource(f.id, want == index.SourceEvents)
		f.mu.Lock()
		changed := got != f.source || reason != f.reason
		f.source, f.reason = got, reason
		f.mu.Unlock()
		if changed {
			k.log.Info("kv index source", "replica", f.id, "source", string(got), "reason", reason)
		}
		k.watchSpeculation(f)
	}
}

// Speculation windows: after this many speculations end, their share that
// ran out unconfirmed is judged; past unconfirmedSuspect the engine is
// suspected of tokenizing otherwise (a healthy engine confirms nearly all
// of them; some run out when requests wait in its queue past the TTL).
const (
	speculationWindow  = 200
	unconfirmedSuspect = 0.9
)

// specCount is what a speculation window is judged by: speculations
// confirmed and expired, and blocks the mirror stored and stored as
// orphans.
type specCount struct{ confirmed, expired, stored, orphaned uint64 }

// watchSpeculation judges f's last window of speculation. Speculation
// that runs out unconfirmed means the engine stores other blocks than the
// gateway routes: other tokens, or the same after a prefix the mirror
// never saw stored (the engine cached it before the stream's history
// reaches, and reuses it without a word): its stores are then orphans.
func (k *kvEvents) watchSpeculation(f *replicaFeed) {
	ev := k.index.Events(f.id)
	now := specCount{ev.Confirmed, ev.Expired, ev.Mirror.Stored, ev.Mirror.Orphaned}
	w := specCount{now.confirmed - f.specMark.confirmed, now.expired - f.specMark.expired,
		now.stored - f.specMark.stored, now.orphaned - f.specMark.orphaned}
	if w.confirmed+w.expired < speculationWindow {
		return
	}
	f.specMark = now
	unconfirmed := float64(w.expired)/float64(w.confirmed+w.expired) >= unconfirmedSuspect
	unseen := unconfirmed && w.orphaned > 0 && 2*w.orphaned >= w.stored
	suspect := unconfirmed && !unseen
	f.mu.Lock()
	was := f.suspect || f.unseenPrefix
	changed := suspect != f.suspect || unseen != f.unseenPrefix
	f.suspect, f.unseenPrefix = suspect, unseen
	f.mu.Unlock()
	switch {
	case changed && suspect:
		k.log.Error("the engine stores none of the blocks routed to it: its tokens likely differ from the gateway's (check the model's tokenizer and chat template)",
			"replica", f.id, "unconfirmed", w.expired, "confirmed", w.confirmed)
	case changed && unseen:
		k.log.Warn("the engine stores the blocks routed to it after a prefix it cached before the gateway's view of its events "+
			"begins (their parents are unknown: orphan blocks); predictions there miss that prefix until a routed prompt reveals it",
			"replica", f.id, "unconfirmed", w.expired, "confirmed", w.confirmed, "orphaned", w.orphaned, "stored", w.stored)
	case changed && was && !unconfirmed:
		k.log.Info("the engine confirms the blocks routed to it again", "replica", f.id)
	}
}

// judge returns why replica f's predictions cannot follow its events now,
// or "" when they can.
func (k *kvEvents) judge(f *replicaFeed, now time.Time, capacityBlocks int) string {
	if k.wrongBlockSize(f) {
		return reasonBlockSize
	}
	// The feed counts a batch only after the sink has applied it, so
	// reading its stats before started never sees a batch counted but not
	// applied. (The feed's own HasSeq is not asked: it is set a moment
	// after started, and a tick in between would call a live stream
	// absent for a whole tick.)
	st := f.feed.Stats()
	f.mu.Lock()
	started, complete, keyedMark, overflowMark := f.started, f.complete, f.keyedMark, f.overflowMark
	f.mu.Unlock()
	// A replay that answered with nothing, and no batch applied since: the
	// engine had published nothing at all, so an empty mirror is its cache
	// (a batch received but not yet applied changes nothing until it is).
	idle := !started && st.Applied == 0 && st.Replays > st.ReplayErrs
	if !started && !idle || st.Unconnected {
		// Replayed batches alone are no stream: without a connection
		// nothing says what the engine stores or evicts next.
		return reasonNoStream
	}
	mirror := k.index.Events(f.id).Mirror
	if mirror.Overflow > overflowMark {
		return reasonOverflow
	}
	if !complete && !idle && mirror.Keyed-keyedMark < uint64(max(capacityBlocks, 0)) {
		return reasonCatchingUp
	}
	var misses float64
	if s := k.scraper.Last(f.id); s != nil && s.Report != nil {
		misses = s.Report.PrefixQueries - s.Report.PrefixHits
	}
	if k.silent(f, st.LastBatch, misses, now) {
		return reasonSilent
	}
	if k.cfg.Index.Mode == config.IndexAuto {
		if alarmed, since := k.drift.alarmed(f.id); alarmed {
			if now.Sub(since) < driftCooldown {
				return reasonDrift
			}
			k.drift.restart(f.id) // try the events again, judged afresh
		}
	}
	return ""
}

// wrongBlockSize reports whether replica f's engine, by its last metrics
// page, caches blocks of another size than its model's block_size, and
// warns when it starts to. Its events would then store blocks of that
// size, which the mirror cannot key: the mirror would stay empty while the
// stream looks healthy. Only SGLang's page size is compared, as its events
// store one block a page (assumed: the spec gives their schema only);
// vLLM's cache_config_info block_size need not be the size its events hash
// (vllm-spec.md §4.1: times DCP, or a hybrid model's), so a vLLM engine is
// left, as before, to the speculation check (watchSpeculation).
func (k *kvEvents) wrongBlockSize(f *replicaFeed) bool {
	var rep *load.Report
	if k.scraper != nil {
		if s := k.scraper.Last(f.id); s != nil {
			rep = s.Report
		}
	}
	wrong := rep != nil && rep.Engine == load.SGLang && rep.BlockSize > 0 && rep.BlockSize != f.blockSize
	if wrong && !f.wrongSize {
		k.log.Warn("the engine's KV page size is not the model's block_size: its KV events cannot be mirrored, and its "+
			"predictions come from the gateway's own routing (set models[].block_size to the page size)",
			"replica", f.id, "page_size", rep.BlockSize, "block_size", f.blockSize)
	}
	f.wrongSize = wrong
	return wrong
}

// silent judges whether f's stream fell silent (see kvEvents), given the
// engine's prefix cache misses now. They are marked from the scrapes of
// the first third of the silence after each batch, so that a scrape taken
// before the batch's own prompt was counted does not make that prompt
// look like one the stream missed.
func (k *kvEvents) silent(f *replicaFeed, lastBatch time.Time, misses float64, now time.Time) bool {
	silence := time.Duration(k.cfg.Index.KVEvents.Silence)
	if !lastBatch.Equal(f.batchMark) || misses < f.missesMark || now.Sub(lastBatch) < silence/3 {
		f.batchMark, f.missesMark = lastBatch, misses
	}
	return f.expecting.Load() && misses-f.missesMark >= float64(max(f.blockSize, 1)) && now.Sub(lastBatch) > silence
}

// expect notes that replica id was sent a prompt that must store new
// blocks, for judging silence.
func (k *kvEvents) expect(id string) {
	k.mu.Lock()
	f := k.feeds[id]
	k.mu.Unlock()
	if f != nil && !f.expecting.Load() {
		f.expecting.Store(true)
	}
}

// feedSink hands one replica's stream to the index and keeps what judge
// needs to know about it. It writes through its own attachment, never by
// replica ID: leave cancels a feed without waiting for it, and a batch it
// is still applying must not reach the mirror of the replica that took
// its ID (a reload).
type feedSink struct {
	f     *replicaFeed
	index index.Index
	at    index.Attachment
}

func (s *feedSink) Apply(seq uint64, b *events.Batch) {
	s.index.ApplyEvents(s.at, b)
	cleared := slices.ContainsFunc(b.Events, func(ev events.Event) bool { return ev.Kind == events.AllBlocksCleared })
	f := s.f
	f.expecting.Store(false)
	var mirror index.MirrorStats
	if cleared {
		mirror = s.index.Events(f.id).Mirror
	}
	f.mu.Lock()
	if !f.started {
		f.started, f.complete = true, seq == 0
	}
	if cleared {
		// The engine emptied its cache: the mirror, emptied with it, is
		// its whole cache again, whatever it lacked or refused before.
		f.complete, f.keyedMark, f.overflowMark = true, mirror.Keyed, mirror.Overflow
	}
	f.mu.Unlock()
}

func (s *feedSink) Purge(reason string) {
	s.index.PurgeEvents(s.at)
	mirror := s.index.Events(s.f.id).Mirror
	f := s.f
	f.mu.Lock()
	f.started, f.complete = false, false
	f.keyedMark, f.overflowMark = mirror.Keyed, mirror.Overflow
	f.purges[reason]++
	f.mu.Unlock()
}

// cardsBase is the base model baseModel found in one fetch of cards.
type cardsBase struct {
	cards *fleet.ModelCards
	model string
}

// baseModel is the model of models an engine stores blocks for when its
// events name no adapter: the first whose card names no parent (vLLM lists
// a LoRA adapter with its base model as parent), else the first. A
// replica listing an adapter before its base seeded every base prompt's
// blocks with the adapter's name, so none was ever predicted from events
// (found by a review).
func baseModel(models []string, cards *fleet.ModelCards) string {
	if cards != nil {
		for _, m := range models {
			card, ok := cards.Cards[m]
			if !ok {
				continue
			}
			var c struct {
				Parent *string `json:"parent"`
			}
			if json.Unmarshal(card, &c) == nil && (c.Parent == nil || *c.Parent == "" || *c.Parent == m) {
				return m
			}
		}
	}
	return models[0]
}

// eventsConfig is what the index needs to mirror replica r's engine: the
// block size of the model it serves (its first) and the chain seed routing
// hashes its prompts with. Blocks an engine stored for an adapter are
// seeded with the adapter's name as the model's, which is how a client
// asks for it and so how routing hashes it; the others with its base
// model's (baseModel).
func (g *Gateway) eventsConfig(r *fleet.Replica) (index.EventsConfig, bool) {
	if len(r.Models) == 0 {
		return index.EventsConfig{}, false
	}
	mt := g.tokenizers[r.Models[0]]
	if mt == nil {
		return index.EventsConfig{}, false
	}
	var last atomic.Pointer[cardsBase]
	cfg := index.EventsConfig{BlockSize: mt.blockSize, Seed: func(adapter, salt string) blockhash.Hash {
		if adapter != "" {
			return blockhash.Seed(adapter, "", salt)
		}
		cards := r.Cards()
		b := last.Load()
		if b == nil || b.cards != cards {
			b = &cardsBase{cards: cards, model: baseModel(r.Models, cards)}
			last.Store(b)
		}
		return blockhash.Seed(b.model, "", salt)
	}}
	if c := r.KVCapacityBlocks; c > index.MaxMirrorBlocks/4 {
		// The operator's kv_capacity_blocks, unlike an engine's word, may
		// size the mirror past the ceiling: four caches' worth, as below it.
		cfg.MaxBlocks = 4 * min(c, math.MaxInt32)
	}
	return cfg, true
}
