package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/index"
	"github.com/inferrail/inferrail/internal/kvfeed"
	"github.com/inferrail/inferrail/internal/sim"
	"github.com/inferrail/inferrail/internal/stress"
)

// KVMirrorLoad is kv-mirror's load, the same for each variant.
type KVMirrorLoad struct {
	Requests int `json:"requests"` // per variant
	Rate     int `json:"rate"`     // requests per second, open loop
	// NumGPUBlocks is the simulator's cache, small enough to evict
	// constantly.
	NumGPUBlocks int `json:"num_gpu_blocks"`
	// BufferSteps is the simulator's replay buffer, in batches; at least
	// ReplayCheck.
	BufferSteps int `json:"buffer_steps"`
	// ReplayCheck is how many of the last batches must replay byte for
	// byte as they went out live.
	ReplayCheck int `json:"replay_check"`
	Prefixes    int `json:"prefixes"`   // shared system prompts
	MaxTokens   int `json:"max_tokens"` // outputs are 16..MaxTokens tokens
	// SaltEvery gives every SaltEvery-th request a cache_salt (0: none).
	SaltEvery int `json:"salt_every"`
	// Downtime is how long the subscriber or the engine stays down in the
	// restart variants. Zero means 200 ms.
	Downtime time.Duration `json:"downtime"`
	// Timeout bounds each request. Zero means 60 s.
	Timeout time.Duration `json:"timeout"`
	Seed    uint64        `json:"seed"`
}

// withDefaults is l with its zero durations at their defaults: 200 ms
// down, a 60 s timeout.
func (l KVMirrorLoad) withDefaults() KVMirrorLoad {
	l.Downtime = stress.OrDefault(l.Downtime, 200*time.Millisecond)
	l.Timeout = stress.OrDefault(l.Timeout, 60*time.Second)
	return l
}

// Validate reports every problem with l at once.
func (l KVMirrorLoad) Validate() error {
	var check error
	if l.ReplayCheck > l.BufferSteps {
		check = fmt.Errorf("replay_check: must not exceed buffer_steps (%d), got %d", l.BufferSteps, l.ReplayCheck)
	}
	var tokens error
	if l.MaxTokens < 16 {
		tokens = fmt.Errorf("max_tokens: must be at least 16 (one block), got %d", l.MaxTokens)
	}
	return errors.Join(stress.Positive("requests", l.Requests), stress.Positive("rate", l.Rate),
		stress.Positive("num_gpu_blocks", l.NumGPUBlocks), stress.Positive("buffer_steps", l.BufferSteps),
		stress.Positive("replay_check", l.ReplayCheck), check, stress.Positive("prefixes", l.Prefixes), tokens,
		stress.NotNegative("salt_every", l.SaltEvery), stress.NotNegative("downtime", l.Downtime), stress.NotNegative("timeout", l.Timeout))
}

// KV mirror variants: what goes wrong mid-run.
const (
	KVSteady            = "steady"             // nothing
	KVSubscriberRestart = "subscriber-restart" // the feed is stopped and a new one started
	KVEngineRestart     = "engine-restart"     // the simulator is killed and restarted
)

var kvVariants = []string{KVSteady, KVSubscriberRestart, KVEngineRestart}

// KVMirrorFigures is what one kv-mirror variant measured and checked.
type KVMirrorFigures struct {
	Requests  int `json:"requests"`
	Completed int `json:"completed"`
	stress.Failures
	LoadSeconds float64 `json:"load_seconds"`
	// Feed counts what the feed (both feeds, in subscriber-restart) saw.
	Feed FeedCounts `json:"feed"`
	// SinkSkipped are replayed batches the sink had already applied
	// before the subscriber restarted.
	SinkSkipped uint64 `json:"sink_skipped"`
	// Mirror is the mirror's counters at the end.
	Mirror index.MirrorStats `json:"mirror"`
	// Orphans held at the end.
	Orphans int `json:"orphans"`
	// The engine's cache at the end: copies, distinct blocks; the mirror's
	// distinct blocks.
	EngineCopies   int `json:"engine_copies"`
	EngineDistinct int `json:"engine_distinct"`
	MirrorDistinct int `json:"mirror_distinct"`
	// KeyMismatches are engine hash keys whose copy counts differ between
	// the engine and the mirror; MissingHashes engine blocks the mirror
	// does not hold under the gateway's hash.
	KeyMismatches int `json:"key_mismatches"`
	MissingHashes int `json:"missing_hashes"`
	// ReplayWindow is how many of the last batches were asked for again
	// (ReplayCheck, or fewer when the stream is shorter); ReplayChecked of
	// them were also seen live, and ReplayEqual of those had the same bytes.
	// ReplayUnseen were replayed but never seen live: the tap was
	// reconnecting to a restarted engine when they went out.
	ReplayWindow  int `json:"replay_window"`
	ReplayChecked int `json:"replay_checked"`
	ReplayEqual   int `json:"replay_equal"`
	ReplayUnseen  int `json:"replay_unseen,omitempty"`
	// DisruptedAt is the request index at which the disruption began.
	DisruptedAt int `json:"disrupted_at,omitempty"`
	// Problems lists every check that failed; empty when the mirror
	// followed the engine.
	Problems []string `json:"problems,omitempty"`
}

// FeedCounts are a kvfeed's counters, summed over the feeds of a run.
type FeedCounts struct {
	Received   uint64 `json:"received"`
	Applied    uint64 `json:"applied"`
	Duplicates uint64 `json:"duplicates"`
	Gaps       uint64 `json:"gaps"`
	Replays    uint64 `json:"replays"`
	ReplayErrs uint64 `json:"replay_errors"`
	Purges     uint64 `json:"purges"`
	Malformed  uint64 `json:"malformed"`
}

func (c *FeedCounts) add(s kvfeed.Stats) {
	c.Received += s.Received
	c.Applied += s.Applied
	c.Duplicates += s.Duplicates
	c.Gaps += s.Gaps
	c.Replays += s.Replays
	c.ReplayErrs += s.ReplayErrs
	c.Purges += s.Purges
	c.Malformed += s.Malformed
}

func stressKVMirror(ctx context.Context, r *simRun) error {
	c, l := r.c, r.c.KVMirror.withDefaults()
	for _, v := range kvVariants {
		cfg := kvSimConfig(c, l)
		kv, _ := json.Marshal(cfg.KVEvents)
		run := SimRun{Variant: v, SimArgs: []string{"--max-num-seqs", fmt.Sprint(cfg.MaxNumSeqs), "--zero-latency",
			"--max-model-len", fmt.Sprint(kvMaxModelLen), "--num-gpu-blocks-override", fmt.Sprint(l.NumGPUBlocks), "--kv-events-config", string(kv)},
			Parameters: stress.Params(l)}
		c.Logger.Info("kv-mirror", "variant", v, "requests", l.Requests, "rate", l.Rate)
		f, err := runKVMirror(ctx, c, cfg, v)
		if err != nil {
			return fmt.Errorf("%s: %w", v, err)
		}
		run.KVMirror = f
		c.Logger.Info("kv-mirror done", "variant", v, "completed", f.Completed, "errors", f.Errors, "batches", f.Feed.Applied,
			"gaps", f.Feed.Gaps, "replays", f.Feed.Replays, "purges", f.Feed.Purges, "problems", len(f.Problems))
		r.res.Runs = append(r.res.Runs, run)
	}
	return nil
}

// kvMaxModelLen is kv-mirror's --max-model-len: its prompts and outputs
// are short, and a small cache must still fit one whole request.
const kvMaxModelLen = 4096

// kvSimConfig is the simulator kv-mirror runs: zero latency, a small cache,
// KV events with replay on ports the kernel picks.
func kvSimConfig(c *Config, l KVMirrorLoad) sim.Config {
	cfg := sim.DefaultConfig()
	cfg.ZeroLatency = true
	cfg.MaxNumSeqs = c.MaxNumSeqs
	cfg.NumGPUBlocks = l.NumGPUBlocks
	cfg.MaxModelLen = kvMaxModelLen
	cfg.KVEvents = sim.DefaultKVEventsConfig()
	cfg.KVEvents.Enable, cfg.KVEvents.Publisher = true, "zmq"
	cfg.KVEvents.Endpoint, cfg.KVEvents.ReplayEndpoint = "tcp://*:0", "tcp://*:0"
	cfg.KVEvents.BufferSteps = l.BufferSteps
	cfg.KVEvents.Topic = "kv"
	return cfg
}

// kvRun is one kv-mirror variant in progress.
type kvRun struct {
	l       KVMirrorLoad
	variant string
	sim     *sim.Local
	sink    *mirrorSink
	tap     *tap
	fcfg    kvfeed.Config

	mu    sync.Mutex
	feed  *runningFeed // guarded by mu
	total FeedCounts   // counters of the feeds already stopped; guarded by mu
}

// runKVMirror runs one variant against a fresh in-process simulator.
func runKVMirror(ctx context.Context, c *Config, cfg sim.Config, variant string) (*KVMirrorFigures, error) {
	l := c.KVMirror.withDefaults()
	local, err := sim.StartLocal(cfg, "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer local.Close()
	model := cfg.ModelName()
	seed := func(adapter, salt string) blockhash.Hash { return blockhash.Seed(model, adapter, salt) }
	k := &kvRun{l: l, variant: variant, sim: local,
		sink: &mirrorSink{m: index.NewMirror(cfg.BlockSize, seed, 1<<16, 0)},
		fcfg: kvfeed.Config{Endpoint: local.KVEventsEndpoint(), ReplayEndpoint: local.KVReplayEndpoint(), Topic: "kv",
			ReplayTimeout: 30 * time.Second, Log: c.Logger}}
	if k.tap, err = startTap(ctx, local.KVEventsEndpoint(), 2*l.ReplayCheck); err != nil {
		return nil, err
	}
	defer k.tap.stop()
	k.startFeed(ctx)
	defer k.stopFeed()
	if err := k.waitSubscribed(ctx); err != nil {
		return nil, err
	}
	f := &KVMirrorFigures{Requests: l.Requests}
	k.load(ctx, f)
	if err := k.settle(ctx); err != nil {
		f.Problems = append(f.Problems, err.Error())
	}
	k.stopFeed()
	k.mu.Lock()
	f.Feed = k.total
	k.mu.Unlock()
	f.SinkSkipped = k.sink.skipped
	if err := k.compare(ctx, f); err != nil {
		return nil, err
	}
	k.checkReplay(ctx, f)
	k.judge(f)
	return f, nil
}

// runningFeed is a feed and how to stop it.
type runningFeed struct {
	feed   *kvfeed.Feed
	cancel context.CancelFunc
	done   chan struct{}
}

func (k *kvRun) startFeed(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	f := &runningFeed{feed: kvfeed.New(k.fcfg, k.sink), cancel: cancel, done: make(chan struct{})}
	go func() { defer close(f.done); _ = f.feed.Run(ctx) }()
	k.mu.Lock()
	k.feed = f
	k.mu.Unlock()
}

// stopFeed stops the running feed, if any, and adds up its counters.
func (k *kvRun) stopFeed() {
	k.mu.Lock()
	f := k.feed
	k.feed = nil
	k.mu.Unlock()
	if f == nil {
		return
	}
	f.cancel()
	<-f.done
	k.mu.Lock()
	k.total.add(f.feed.Stats())
	k.mu.Unlock()
}

// feedStats is the running feed's counters, ok false when none runs.
func (k *kvRun) feedStats() (kvfeed.Stats, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.feed == nil {
		return kvfeed.Stats{}, false
	}
	return k.feed.feed.Stats(), true
}

// waitSubscribed waits until the feed and the tap are subscribed and the
// feed has done its first replay, so that the live stream starts at batch 0.
func (k *kvRun) waitSubscribed(ctx context.Context) error {
	return poll(ctx, 10*time.Second, func() bool {
		s, _ := k.feedStats()
		srv := k.sim.Server()
		return srv != nil && srv.KVEventsSubscribers() >= 2 && s.Replays >= 1
	}, "the feed and the tap to subscribe")
}

// poll calls ok every 5 ms until it holds or timeout passes.
func poll(ctx context.Context, timeout time.Duration, ok func() bool, what string) error {
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// load sends the requests open loop and carries out the variant's
// disruption halfway.
func (k *kvRun) load(ctx context.Context, f *KVMirrorFigures) {
	l := k.l
	prefixes := make([]string, l.Prefixes)
	for i := range prefixes {
		prefixes[i] = strings.Repeat(fmt.Sprintf("system prompt %d says ", i), 12+(i*7)%40)
	}
	client := stress.NewClient(256)
	defer client.CloseIdleConnections()
	var disrupt sync.WaitGroup
	half := l.Requests / 2
	if k.variant != KVSteady {
		f.DisruptedAt = half
	}
	start := time.Now()
	shots := stress.OpenLoop(ctx, start, stress.PoissonSchedule(l.Rate, l.Requests, l.Seed), l.Timeout,
		func(rctx context.Context, i int) (int, string, error) {
			if i == half && k.variant != KVSteady {
				disrupt.Go(func() {
					if err := k.disrupt(ctx); err != nil {
						f.Problems = append(f.Problems, err.Error())
					}
				})
			}
			return k.send(rctx, client, prefixes, i)
		})
	disrupt.Wait()
	if k.variant == KVEngineRestart {
		// Requests sent while the engine was down (or to its dead
		// connections) failed; the restarted engine serves until the feed
		// has seen its new stream begin, whatever the machine's speed (a
		// SUB still backing off may miss the new stream's first batches).
		k.serveUntilRestartSeen(ctx, prefixes, l.Requests)
	}
	f.LoadSeconds = time.Since(start).Seconds()
	f.Errors, f.ErrorKinds, f.ErrorSamples = stress.TallyShots(shots)
	f.Completed = len(shots) - f.Errors
}

// serveUntilRestartSeen sends requests from i on, on fresh connections,
// until the feed has purged for the restart, for up to 15 s.
func (k *kvRun) serveUntilRestartSeen(ctx context.Context, prefixes []string, i int) {
	client := stress.NewClient(1)
	defer client.CloseIdleConnections()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		_, _, _ = k.send(ctx, client, prefixes, i)
		k.mu.Lock()
		f := k.feed
		k.mu.Unlock()
		if f != nil && f.feed.Stats().Purges > 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// disrupt stops the feed or the engine, waits the downtime and starts it
// again, within the run's ctx (the request that triggers it ends sooner).
func (k *kvRun) disrupt(ctx context.Context) error {
	down := k.l.Downtime
	switch k.variant {
	case KVSubscriberRestart:
		k.stopFeed()
		time.Sleep(down)
		k.startFeed(ctx)
	case KVEngineRestart:
		k.sim.Kill()
		time.Sleep(down)
		// The dead engine's KV event sockets may hold their ports a moment
		// longer on a busy machine: try again for a few seconds.
		var err error
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if err = k.sim.Restart(); err == nil || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("restarting the simulator: %w", err)
		}
	}
	return nil
}

// send posts request i, a chat completion over one of the shared system
// prompts, salted now and then, whose output fills blocks.
func (k *kvRun) send(ctx context.Context, client *http.Client, prefixes []string, i int) (int, string, error) {
	l := k.l
	rng := rand.New(rand.NewPCG(l.Seed, uint64(i)))
	req := map[string]any{
		"model": "inferrail/sim-8b",
		"messages": []map[string]string{
			{"role": "system", "content": prefixes[rng.IntN(len(prefixes))]},
			{"role": "user", "content": fmt.Sprintf("question %d of request %d", rng.IntN(500), i)},
		},
		"max_tokens": 16 + rng.IntN(l.MaxTokens-15),
		"ignore_eos": true,
	}
	if l.SaltEvery > 0 && i%l.SaltEvery == 0 {
		req["cache_salt"] = fmt.Sprintf("tenant-%d", rng.IntN(3))
	}
	body, err := json.Marshal(req)
	if err != nil {
		return 0, "", err
	}
	resp, err := stress.Post(ctx, client, k.sim.URL()+"/v1/chat/completions", body, "application/json")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return resp.StatusCode, "", err
	}
	return resp.StatusCode, "", nil
}

// compare checks the mirror against a snapshot of the engine's cache.
func (k *kvRun) compare(ctx context.Context, f *KVMirrorFigures) error {
	srv := k.sim.Server()
	if srv == nil {
		return errors.New("the simulator is not running: nothing to compare the mirror with")
	}
	blocks, err := srv.Engine().CachedBlocks(ctx)
	if err != nil {
		return err
	}
	m := k.sink.m
	held := m.GatewayHashes()
	engine := make(map[uint64]int, len(blocks))
	for _, b := range blocks {
		engine[b.Key]++
		if !held[b.Hash] {
			f.MissingHashes++
		}
	}
	mirror := m.Blocks()
	for key, n := range engine {
		if mirror[key] != n {
			f.KeyMismatches++
		}
	}
	for key := range mirror {
		if _, ok := engine[key]; !ok {
			f.KeyMismatches++
		}
	}
	f.EngineCopies, f.EngineDistinct, f.MirrorDistinct = len(blocks), len(engine), len(mirror)
	f.Mirror, f.Orphans = m.Stats, m.Orphans()
	return nil
}

// judge lists the checks the figures fail.
func (k *kvRun) judge(f *KVMirrorFigures) {
	bad := func(format string, args ...any) { f.Problems = append(f.Problems, fmt.Sprintf(format, args...)) }
	if f.KeyMismatches != 0 || f.MissingHashes != 0 || f.EngineDistinct != f.MirrorDistinct {
		bad("the mirror differs from the engine: %d keys with other copy counts, %d blocks missing under the gateway's hash (engine %d distinct, mirror %d)",
			f.KeyMismatches, f.MissingHashes, f.EngineDistinct, f.MirrorDistinct)
	}
	if f.EngineCopies == 0 {
		bad("the engine's cache is empty at the end")
	}
	if f.Mirror.Removed == 0 {
		bad("no block was evicted: the cache is too large for the load")
	}
	if f.ReplayEqual != f.ReplayChecked || f.ReplayChecked+f.ReplayUnseen != f.ReplayWindow || f.ReplayChecked == 0 {
		bad("of the last %d batches, %d replayed and seen live, %d of them byte-equal, %d replayed but not seen live",
			f.ReplayWindow, f.ReplayChecked, f.ReplayEqual, f.ReplayUnseen)
	}
	if f.ReplayUnseen != 0 && k.variant != KVEngineRestart {
		bad("%d replayed batches were never seen live", f.ReplayUnseen)
	}
	if f.Feed.Malformed != 0 || f.Orphans != 0 || f.Mirror.Skipped != 0 {
		bad("%d malformed batches, %d orphans, %d blocks skipped", f.Feed.Malformed, f.Orphans, f.Mirror.Skipped)
	}
	if k.sink.lost != 0 {
		bad("the sink saw %d jumps past batches it never had", k.sink.lost)
	}
	switch k.variant {
	case KVSteady:
		if f.Feed.Gaps != 0 || f.Feed.Purges != 0 || f.Errors != 0 {
			bad("steady run: %d gaps, %d purges, %d request errors; want none", f.Feed.Gaps, f.Feed.Purges, f.Errors)
		}
	case KVSubscriberRestart:
		if f.Feed.Replays < 2 || f.Feed.Purges != 0 || f.SinkSkipped == 0 || f.Errors != 0 {
			bad("subscriber restart: %d replays, %d purges, %d batches skipped as seen, %d request errors; want at least 2 replays, no purge, some skipped, no errors",
				f.Feed.Replays, f.Feed.Purges, f.SinkSkipped, f.Errors)
		}
	case KVEngineRestart:
		if f.Feed.Purges == 0 || k.sink.purges["restart"] == 0 {
			bad("engine restart: %d purges (%v); want one for the restart", f.Feed.Purges, k.sink.purges)
		}
	}
}
