package sim

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/enginehash"
	"github.com/inferrail/inferrail/internal/events"
	"github.com/inferrail/inferrail/internal/index"
	"github.com/inferrail/inferrail/internal/zmtp"
)

// kvSim starts a simulator publishing KV events with replay, on ports the
// kernel picks, with a small cache so that traffic evicts.
func kvSim(t *testing.T, algo, encoding string, bytesHashes bool) *Local {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ZeroLatency = true
	cfg.NumGPUBlocks = 96
	cfg.MaxModelLen = 1024
	cfg.MaxNumSeqs = 8
	cfg.MaxNumBatchedTokens = 256
	cfg.KVEvents = DefaultKVEventsConfig()
	cfg.KVEvents.Enable, cfg.KVEvents.Publisher = true, "zmq"
	cfg.KVEvents.Endpoint, cfg.KVEvents.ReplayEndpoint = "tcp://*:0", "tcp://*:0"
	cfg.KVEvents.Topic = "kv"
	cfg.PrefixCachingHashAlgo, cfg.KVEventsEncoding, cfg.BytesBlockHashes = algo, encoding, bytesHashes
	cfg.HashSeed, cfg.HashSeedSet = "0", true
	l, err := StartLocal(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// subscriber collects every batch a simulator publishes, by sequence.
type subscriber struct {
	mu      sync.Mutex
	batches map[uint64][]byte
	first   uint64
	gaps    int
	last    uint64
	started bool
}

func subscribe(t *testing.T, ctx context.Context, endpoint string) (*subscriber, *zmtp.Sub) {
	t.Helper()
	sub, err := zmtp.DialSub(ctx, endpoint, zmtp.Options{}, "kv")
	if err != nil {
		t.Fatal(err)
	}
	s := &subscriber{batches: map[uint64][]byte{}}
	go func() {
		for {
			msg, err := sub.Recv(ctx)
			if err != nil {
				return
			}
			if len(msg) != 3 || string(msg[0]) != "kv" || len(msg[1]) != 8 {
				t.Errorf("a message of %d frames, topic %q", len(msg), msg[0])
				continue
			}
			seq := binary.BigEndian.Uint64(msg[1])
			s.mu.Lock()
			if s.started && seq != s.last+1 {
				s.gaps++
			}
			if !s.started {
				s.first, s.started = seq, true
			}
			s.last = seq
			s.batches[seq] = msg[2]
			s.mu.Unlock()
		}
	}()
	return s, sub
}

// replay asks the simulator's replay socket for every batch from start and
// returns them in order, checking vLLM's framing and end marker.
func replay(t *testing.T, ctx context.Context, endpoint string, start uint64) [][]byte {
	t.Helper()
	d, err := zmtp.DialDealer(ctx, endpoint, zmtp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Send(ctx, [][]byte{{}, binary.BigEndian.AppendUint64(nil, start)}); err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for want := start; ; want++ {
		msg, err := d.Recv(ctx)
		if err != nil {
			t.Fatalf("replay: %v after %d batches", err, len(out))
		}
		if len(msg) != 4 || len(msg[0]) != 0 {
			t.Fatalf("replay message of %d frames, want 4: %q", len(msg), msg)
		}
		if len(msg[1]) == 0 && bytes.Equal(msg[2], events.ReplayEnd) && len(msg[3]) == 0 {
			return out
		}
		if string(msg[1]) != "kv" || binary.BigEndian.Uint64(msg[2]) != want {
			t.Fatalf("replay: topic %q seq %x, want kv %d", msg[1], msg[2], want)
		}
		out = append(out, msg[3])
	}
}

// kvTraffic sends n chat requests over shared prefixes, some salted, some
// streamed, with outputs long enough to fill blocks.
func kvTraffic(t *testing.T, base string, n int, salts bool) {
	t.Helper()
	prefixes := make([]string, 6)
	for i := range prefixes {
		prefixes[i] = strings.Repeat(fmt.Sprintf("system %d says ", i), 10+i*7)
	}
	var wg sync.WaitGroup
	work := make(chan int)
	for range 12 {
		wg.Go(func() {
			for i := range work {
				rng := rand.New(rand.NewPCG(uint64(i), 7))
				body := fmt.Sprintf(`{"model":"inferrail/sim-8b","messages":[{"role":"system","content":%q},{"role":"user","content":"question %d"}],"max_tokens":%d,"ignore_eos":true,"stream":%v`,
					prefixes[rng.IntN(len(prefixes))], rng.IntN(40), 1+rng.IntN(60), i%3 == 0)
				if salts && i%5 == 0 {
					body += fmt.Sprintf(`,"cache_salt":"tenant-%d"`, i%2)
				}
				res, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body+"}"))
				if err != nil {
					t.Error(err)
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					t.Errorf("request %d: status %d", i, res.StatusCode)
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

// engineCache is what the engine's pool holds: copies per event hash key,
// and the gateway-side hashes of those blocks.
func engineCache(t *testing.T, l *Local) (map[uint64]int, []blockhash.Hash) {
	t.Helper()
	keys := map[uint64]int{}
	var ours []blockhash.Hash
	err := l.Server().Engine().inspect(context.Background(), func(s *scheduler) {
		for _, b := range s.pool.blocks {
			if !b.hashed {
				continue
			}
			k, ok := b.ext.Uint()
			if !ok {
				k = enginehash.EventInt(b.ext.Bytes())
			}
			keys[k]++
			ours = append(ours, b.hash)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys, ours
}

func TestKVEventsMirrorTheCache(t *testing.T) {
	for _, tc := range []struct {
		algo, encoding string
		bytesHashes    bool
		salts          bool // SGLang's shape has no extra keys to carry a salt
	}{
		{"sha256", "map", false, true},
		{"xxhash_cbor", "array", true, true},
		{"sha256_cbor", "sglang", false, false},
	} {
		t.Run(tc.algo+"_"+tc.encoding, func(t *testing.T) {
			l := kvSim(t, tc.algo, tc.encoding, tc.bytesHashes)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			live, sub := subscribe(t, ctx, l.KVEventsEndpoint())
			defer sub.Close()
			for l.Server().kvpub.pub.Stats().Subscribers == 0 {
				time.Sleep(time.Millisecond) // so the live stream starts at batch 0
			}

			kvTraffic(t, l.URL(), 150, tc.salts)
			// A reset while idle clears the cache and says so.
			res, err := http.Post(l.URL()+"/reset_prefix_cache", "", nil)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			kvTraffic(t, l.URL(), 150, tc.salts)
			// The engine publishes a step's events after the step's tokens
			// went out: the last answer can be read before its batch is
			// sent, and the replay would lack what the live stream gets.
			if _, err := l.Server().KVEventsFlushed(ctx); err != nil {
				t.Fatal(err)
			}

			all := replay(t, ctx, l.KVReplayEndpoint(), 0)
			if len(all) == 0 {
				t.Fatal("the replay buffer is empty")
			}
			// The live stream caught up with the replayed one, without a
			// gap after its first batch and with the same bytes.
			deadline := time.Now().Add(5 * time.Second)
			for {
				live.mu.Lock()
				done := live.started && live.last == uint64(len(all)-1)
				live.mu.Unlock()
				if done || time.Now().After(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			live.mu.Lock()
			if live.gaps != 0 || !live.started || live.first != 0 || live.last != uint64(len(all)-1) {
				t.Errorf("live stream: first %d last %d gaps %d; the replay has %d batches", live.first, live.last, live.gaps, len(all))
			}
			for seq, p := range live.batches {
				if seq >= uint64(len(all)) {
					t.Errorf("batch %d: live, and not in the replay of %d", seq, len(all))
				} else if !bytes.Equal(p, all[seq]) {
					t.Errorf("batch %d: the live and replayed payloads differ", seq)
				}
			}
			live.mu.Unlock()

			cfg := l.Server().Config()
			model := cfg.ModelName()
			m := index.NewMirror(16, func(adapter, salt string) blockhash.Hash { return blockhash.Seed(model, adapter, salt) }, 1<<16, 0)
			cleared := 0
			var b events.Batch
			for seq, p := range all {
				if err := events.DecodeBatch(p, &b); err != nil {
					t.Fatalf("batch %d: %v", seq, err)
				}
				for _, ev := range b.Events {
					if ev.Kind == events.AllBlocksCleared {
						cleared++
					}
				}
				m.Apply(&b)
			}
			if cleared != 1 {
				t.Errorf("%d AllBlocksCleared events, want 1", cleared)
			}
			keys, ours := engineCache(t, l)
			if got := m.Blocks(); !mapsEqual(got, keys) {
				t.Errorf("the mirror holds %d distinct blocks, the engine %d: they differ", len(got), len(keys))
			}
			held := m.GatewayHashes()
			for _, h := range ours {
				if !held[h] {
					t.Fatalf("the mirror has no block the gateway would name %v, which the engine holds", h)
				}
			}
			t.Logf("%d batches, live first %d; mirror %d blocks, stats %+v", len(all), live.first, m.Len(), m.Stats)
			if m.Stats.Removed == 0 {
				t.Error("no block was ever evicted: the test cache is too large to exercise removals")
			}
			if m.Stats.UnknownRemovals != 0 || m.Orphans() != 0 || m.Stats.Skipped != 0 {
				t.Errorf("mirror stats %+v, orphans %d", m.Stats, m.Orphans())
			}
		})
	}
}

func mapsEqual(a, b map[uint64]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// batchCount counts the batches a simulator publishes.
type batchCount struct {
	mu sync.Mutex
	n  int
}

func (c *batchCount) Publish(*events.Batch) { c.mu.Lock(); c.n++; c.mu.Unlock() }

func (c *batchCount) count() int { c.mu.Lock(); defer c.mu.Unlock(); return c.n }

// TestFailedResetPublishesNothing: a prefix-cache reset refused because
// blocks are in use, during a step, publishes nothing: the running step's
// events go out when it ends, once per step, as vLLM drains them (found by
// a review: the refused reset flushed the step's BlockStored early).
func TestFailedResetPublishesNothing(t *testing.T) {
	cfg := testConfig()
	cfg.Latency.PrefillFixed = time.Hour // the step outlasts the test
	e := NewEngine(cfg, nil)
	sink := &batchCount{}
	e.sched.pool.log = newKVLog(enginehash.New(enginehash.SHA256, enginehash.PythonHashSeed("0")), true, 0, cfg.BlockSize, sink)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = e.Run(ctx) }()
	r := testRequest(&cfg, "a", prompt(0, 64), 1)
	e.sched.pool.log.extend(r)
	if err := e.submit(ctx, r); err != nil {
		t.Fatal(err)
	}
	for running := false; !running; {
		if err := e.inspect(ctx, func(*scheduler) { running = r.state == stateRunning }); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := e.ResetPrefixCache(ctx); err != nil || ok {
		t.Fatalf("reset = %v, %v; want refused: blocks are in use", ok, err)
	}
	if n := sink.count(); n != 0 {
		t.Errorf("%d batches published during a step that has not ended", n)
	}
}

// storedFrom0 counts the BlockStored events a simulator publishes that
// have no parent: blocks stored from block 0.
type storedFrom0 struct {
	mu     sync.Mutex
	blocks []int
}

func (s *storedFrom0) Publish(b *events.Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range b.Events {
		if e.Kind == events.BlockStored && !e.HasParent {
			s.blocks = append(s.blocks, len(e.Hashes))
		}
	}
}

func (s *storedFrom0) take() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.blocks
	s.blocks = nil
	return out
}

// TestReportModeFull: a request whose vllm_xargs ask for
// kv_cache_report_mode "full" gets the prefix-cache hits it reuses
// reported as stored again, from block 0 with no parent, as vLLM does; a
// request without it reports nothing for its hits (found by a review:
// the mode was accepted and ignored).
func TestReportModeFull(t *testing.T) {
	cfg := zeroLatencyConfig()
	srv, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	sink := &storedFrom0{}
	srv.engine.sched.pool.log = newKVLog(enginehash.New(enginehash.SHA256, enginehash.PythonHashSeed("0")), true, 0, cfg.BlockSize, sink)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); <-srv.Engine().Done() }()
	go func() { _ = srv.Run(ctx) }()
	text := strings.Repeat("the quick brown fox jumps over the lazy dog ", 12)
	post := func(extra string) []int {
		body := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":1%s}`, cfg.ModelName(), text, extra)
		req := httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
		// A step's events are out once the engine has handled a message after it.
		if err := srv.engine.inspect(ctx, func(*scheduler) {}); err != nil {
			t.Fatal(err)
		}
		return sink.take()
	}
	first := post("")
	if len(first) != 1 || first[0] == 0 {
		t.Fatalf("the first request stored %v from block 0, want one run of blocks", first)
	}
	if again := post(""); len(again) != 0 {
		t.Errorf("a request without the mode reported its hits: %v", again)
	}
	if full := post(`,"vllm_xargs":{"kv_cache_report_mode":"full"}`); len(full) != 1 || full[0] != first[0] {
		t.Errorf("with kv_cache_report_mode full: %v stored from block 0, want its %d hit blocks", full, first[0])
	}
}

// TestSGLangHashesAreInts: SGLang's events carry block hashes as integers
// only, so VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 leaves them integers
// there; it sent digests SGLang's own BlockStored cannot decode (found by
// a review). vLLM's encodings send the digests.
func TestSGLangHashesAreInts(t *testing.T) {
	for _, encoding := range []string{"sglang", "map"} {
		l := kvSim(t, "sha256", encoding, true)
		kvTraffic(t, l.URL(), 10, false)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var b events.Batch
		stored := 0
		for seq, p := range replay(t, ctx, l.KVReplayEndpoint(), 0) {
			if err := events.DecodeBatch(p, &b); err != nil {
				t.Fatalf("%s batch %d: %v", encoding, seq, err)
			}
			for _, ev := range b.Events {
				for _, h := range ev.Hashes {
					stored++
					if h.IsBytes() != (encoding != "sglang") {
						t.Fatalf("%s: a block hash sent as bytes %v", encoding, h.IsBytes())
					}
				}
			}
		}
		if stored == 0 {
			t.Fatalf("%s: no block hashes published", encoding)
		}
	}
}
