package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/clock"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/events"
	"github.com/inferrail/inferrail/internal/index"
	"github.com/inferrail/inferrail/internal/kvfeed"
	"github.com/inferrail/inferrail/internal/load"
	"github.com/inferrail/inferrail/internal/policy"
	"github.com/inferrail/inferrail/internal/syncbuf"
)

// pageEngine is an engine that only answers its health check and serves
// the metrics page the test sets.
type pageEngine struct {
	*httptest.Server
	page atomic.Pointer[string]
}

func startPageEngine(t *testing.T, page string) *pageEngine {
	t.Helper()
	e := &pageEngine{}
	e.set(page)
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			fmt.Fprint(w, *e.page.Load())
		}
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *pageEngine) set(page string) { e.page.Store(&page) }

// sglangMetrics is an SGLang page of one scheduler with pages of pageSize
// tokens and a pool of tokens.
func sglangMetrics(pageSize, tokens int) string {
	const labels = `{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"}`
	return fmt.Sprintf("sglang:num_running_reqs%[1]s 1\nsglang:num_queue_reqs%[1]s 0\nsglang:token_usage%[1]s 0.5\n"+
		"sglang:page_size%[1]s %[2]d\nsglang:max_total_num_tokens%[1]s %[3]d\n", labels, pageSize, tokens)
}

// vllmMetrics is a vLLM page of an engine of blocks blocks of blockSize.
func vllmMetrics(blockSize, blocks int) string {
	return fmt.Sprintf("vllm:num_requests_running{engine=\"0\"} 1\nvllm:num_requests_waiting{engine=\"0\"} 0\n"+
		"vllm:kv_cache_usage_perc{engine=\"0\"} 0.5\nvllm:cache_config_info{block_size=\"%d\",engine=\"0\",num_gpu_blocks=\"%d\"} 1\n", blockSize, blocks)
}

// pageGateway is a gateway whose one replica, "e", is eng, serving the
// test model in blocks of blockSize tokens.
func pageGateway(t *testing.T, eng *pageEngine, blockSize int, mode string) *running {
	t.Helper()
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: testModel, Tokenizer: "builtin:sim", BlockSize: blockSize}}
	cfg.Replicas = []config.Replica{{ID: "e", URL: eng.URL, Models: []string{testModel}, MaxConcurrency: 8, MaxPending: 8}}
	cfg.Tokenizer.Verify = false
	cfg.Index.Mode = mode
	cfg.Load.ScrapeInterval = config.Duration(20 * time.Millisecond)
	return startGateway(t, &cfg)
}

// TestEngineCapacityInGatewayBlocks: the capacity an engine reports sizes
// the replica's shadow cache and the free-blocks guard in the gateway's
// blocks (models[].block_size tokens): SGLang's pool of tokens cut into
// them, with no block kept back, and vLLM's blocks less its null block, as
// before, whatever their size. (Found by a review: an SGLang pool of
// 160,000 tokens in pages of 1 read as 159,999 blocks of 16 tokens.)
func TestEngineCapacityInGatewayBlocks(t *testing.T) {
	for _, tc := range []struct {
		name      string
		page      string
		blockSize int
		want      int
	}{
		{"sglang_page1_block16", sglangMetrics(1, 160000), 16, 10000},
		{"sglang_page16_block16", sglangMetrics(16, 160000), 16, 10000},
		{"sglang_page64_block16", sglangMetrics(64, 160000), 16, 10000},
		{"sglang_page1_block1", sglangMetrics(1, 160000), 1, 160000},
		{"sglang_page16_block32", sglangMetrics(16, 160000), 32, 5000},
		{"vllm_block16_block16", vllmMetrics(16, 1024), 16, 1023},
		{"vllm_block16_block32", vllmMetrics(16, 1024), 32, 1023},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw := pageGateway(t, startPageEngine(t, tc.page), tc.blockSize, config.IndexApproximate)
			capacity := func() int { return indexCapacity(gw, "e") }
			waitFor(t, "the engine's capacity", 5*time.Second, func() bool {
				return capacity() != 0 && capacity() != config.Default().Index.DefaultCapacityBlocks
			})
			if got := capacity(); got != tc.want {
				t.Errorf("shadow cache of %d blocks, want %d", got, tc.want)
			}
			var c policy.Candidate
			waitFor(t, "a fresh report", 5*time.Second, func() bool {
				rt := gw.g.routes(gw.g.current()).model(testModel).routes[0]
				gw.g.candidate(&c, &rt, clock.Of(time.Now()))
				return c.KVCapacityBlocks > 0
			})
			if c.KVCapacityBlocks != tc.want {
				t.Errorf("the candidate's capacity is %d blocks, want %d", c.KVCapacityBlocks, tc.want)
			}
		})
	}
}

// TestEngineCapacityHasACeiling: an engine's own word sizes its replica's
// index, and the mirror of its events, up to index.MaxMirrorBlocks; the
// operator's kv_capacity_blocks may size them past it (found by a review:
// an engine that claimed num_gpu_blocks 536,870,913 raised its mirror's
// bound to 2^31 blocks, over 100 GB of the gateway's memory).
func TestEngineCapacityHasACeiling(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		claimed, configured   int
		wantCapacity, wantMax int
	}{
		{"claimed", 1<<29 + 1, 0, index.MaxMirrorBlocks, index.MaxMirrorBlocks},
		{"claimed_below", 1<<20 + 1, 0, 1 << 20, 1 << 22},
		{"configured", 1<<29 + 1, 1 << 25, 1 << 25, 1 << 27},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := startPageEngine(t, vllmMetrics(16, tc.claimed))
			cfg := config.Default()
			cfg.Models = []config.Model{{Name: testModel, Tokenizer: "builtin:sim", BlockSize: 16}}
			cfg.Replicas = []config.Replica{{ID: "e", URL: eng.URL, Models: []string{testModel}, MaxConcurrency: 8, MaxPending: 8,
				KVCapacityBlocks: tc.configured, KVEvents: config.ReplicaKVEvents{Endpoint: "tcp://127.0.0.1:1"}}}
			cfg.Tokenizer.Verify = false
			cfg.Index.Mode = config.IndexExact
			cfg.Load.ScrapeInterval = config.Duration(20 * time.Millisecond)
			gw := startGateway(t, &cfg)
			capacity := func() int { return indexCapacity(gw, "e") }
			waitFor(t, "the engine's capacity", 5*time.Second, func() bool {
				return gw.g.scraper.Last("e") != nil && capacity() != config.Default().Index.DefaultCapacityBlocks
			})
			if got := capacity(); got != tc.wantCapacity {
				t.Errorf("index capacity %d blocks, want %d", got, tc.wantCapacity)
			}
			if ev := gw.g.index.Events("e"); !ev.Attached || ev.Bound != tc.wantMax {
				t.Errorf("mirror attached %v, bound %d blocks; want attached, %d", ev.Attached, ev.Bound, tc.wantMax)
			}
		})
	}
}

// TestEngineRedirectsNotFollowed: the gateway judges an engine by its own
// answers. A /health, /metrics, /v1/models or /tokenize that redirects is a
// failed probe, scrape, card fetch or check; the host it points to, which
// answers all of them well, is never asked (found by a review: a replica
// whose /health answered 302 to another replica passed its probes, and
// one whose /metrics did reported the other's load).
func TestEngineRedirectsNotFollowed(t *testing.T) {
	for _, redirected := range []string{"health", "pages"} {
		t.Run(redirected, func(t *testing.T) {
			var elsewhere atomic.Int64
			other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				elsewhere.Add(1)
				switch r.URL.Path {
				case "/metrics":
					fmt.Fprint(w, vllmMetrics(16, 1024))
				case "/v1/models":
					fmt.Fprint(w, `{"object":"list","data":[{"id":"`+testModel+`","object":"model"}]}`)
				case "/tokenize":
					fmt.Fprint(w, `{"tokens":[1],"count":1,"max_model_len":4096}`)
				}
			}))
			t.Cleanup(other.Close)
			var mu sync.Mutex
			asked := map[string]int{}
			eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				asked[r.URL.Path]++
				mu.Unlock()
				if r.URL.Path == "/health" && redirected == "pages" {
					return
				}
				http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
			}))
			t.Cleanup(eng.Close)
			cfg := onlyEngine(t, eng.URL)
			cfg.Load.ScrapeInterval = config.Duration(20 * time.Millisecond)
			gw := startGateway(t, cfg)
			paths := map[string][]string{"health": {"/health", "/metrics"}, "pages": {"/health", "/metrics", "/v1/models"}}[redirected]
			waitFor(t, "the engine asked twice for each page", 10*time.Second, func() bool {
				mu.Lock()
				defer mu.Unlock()
				for _, p := range paths {
					if asked[p] < 2 {
						return false
					}
				}
				return true
			})
			if n := elsewhere.Load(); n != 0 {
				t.Errorf("%d requests reached the host the engine redirected to, want none", n)
			}
			rep := gw.g.fleet.Snapshot().Get("odd")
			if redirected == "health" {
				waitFor(t, "the replica out of rotation", 10*time.Second, func() bool { return !rep.Healthy() })
			} else if rep.Cards() != nil {
				t.Errorf("model cards %v taken from a redirect", rep.Cards().Cards)
			}
			if page := scrape(t, gw.admin); !strings.Contains(page, `inferrail_load_scrapes_total{replica="odd",result="error"}`) ||
				strings.Contains(page, `inferrail_load_scrapes_total{replica="odd",result="ok"}`) {
				t.Errorf("scrapes of a redirecting /metrics:\n%s", grep(page, "inferrail_load_scrapes_total"))
			}
		})
	}
}

// TestJudgeBlockSize: an SGLang engine whose page size is not the model's
// block_size takes its replica off its events (reason block_size), with
// one warning: its stream looks healthy but the mirror can key none of its
// blocks. A vLLM engine's cache_config_info block size is not compared
// (its events may hash blocks of another size). (Found by a review: with
// pages of 1 against blocks of 16 the replica stayed on its events with an
// empty mirror and predicted nothing.)
func TestJudgeBlockSize(t *testing.T) {
	for _, tc := range []struct {
		name      string
		page      string
		blockSize int
		want      string
	}{
		{"sglang_page1_block16", sglangMetrics(1, 160000), 16, reasonBlockSize},
		{"sglang_page64_block16", sglangMetrics(64, 160000), 16, reasonBlockSize},
		{"sglang_page16_block16", sglangMetrics(16, 160000), 16, ""},
		{"sglang_page1_block1", sglangMetrics(1, 160000), 1, ""},
		{"vllm_block32_block16", vllmMetrics(32, 1024), 16, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := startPageEngine(t, tc.page)
			u, _ := url.Parse(eng.URL)
			scraper := load.NewScraper(load.ScrapeConfig{Interval: 10 * time.Millisecond, Timeout: time.Second, MaxAge: time.Second},
				http.DefaultClient, func() []load.Target { return []load.Target{{ID: "r", URL: u}} }, nil, nil, nil)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- scraper.Run(ctx) }()
			waitFor(t, "a scrape", 5*time.Second, func() bool { return scraper.Last("r") != nil })
			cancel()
			<-done

			cfg := config.Default()
			cfg.Index.Mode = config.IndexExact
			idx := index.NewApprox(1000)
			idx.Join("r")
			seed := func(string, string) blockhash.Hash { return blockhash.Seed(testModel, "", "") }
			at := idx.AttachEvents("r", index.EventsConfig{BlockSize: tc.blockSize, Seed: seed})
			var logs syncbuf.Buffer
			k := newKVEvents(&cfg, idx, scraper, nil, slog.New(slog.NewTextHandler(&logs, nil)), nil)
			f := &replicaFeed{id: "r", purges: map[string]uint64{}, blockSize: tc.blockSize}
			sink := &feedSink{f: f, index: idx, at: at}
			f.feed = kvfeed.New(kvfeed.Config{Endpoint: "tcp://127.0.0.1:1"}, sink)
			sink.Apply(0, &events.Batch{}) // the stream's first batch: healthy
			for range 2 {
				if got := k.judge(f, time.Now(), 64); got != tc.want {
					t.Fatalf("judged %q, want %q", got, tc.want)
				}
			}
			warned := strings.Count(logs.String(), "level=WARN")
			if want := map[bool]int{true: 1, false: 0}[tc.want != ""]; warned != want {
				t.Errorf("%d warnings, want %d:\n%s", warned, want, logs.String())
			}
		})
	}
}

// indexCapacity is the capacity the gateway's index assumes for replica
// id; 0 while it does not know the replica.
func indexCapacity(gw *running, id string) int {
	for _, r := range gw.g.index.Stats().Replicas {
		if r.ID == id {
			return r.Capacity
		}
	}
	return 0
}

// TestSGLangPredictionsInWholePages: SGLang matches its radix cache a page
// at a time, so a prompt's predicted cached tokens are its held blocks
// rounded down to the engine's pages when those are larger than the
// model's blocks; vLLM's reported block size is not read so (a review's
// finding: with pages of 64, predictions ran up to 48 tokens ahead).
func TestSGLangPredictionsInWholePages(t *testing.T) {
	body := strings.Replace(chatBody(strings.Repeat("a prompt of some blocks ", 20), ""), `"model":"sim"`, `"model":"`+testModel+`"`, 1)
	for _, tc := range []struct {
		name      string
		page      string
		whole     int // rounding: the predicted tokens are a multiple of it
		roundDown bool
	}{
		{"sglang_page64", sglangMetrics(64, 160000), 64, true},
		{"sglang_page16", sglangMetrics(16, 160000), 16, false},
		{"sglang_page1", sglangMetrics(1, 160000), 16, false},
		{"vllm_block64", vllmMetrics(64, 1024), 16, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw := pageGateway(t, startPageEngine(t, tc.page), 16, config.IndexApproximate)
			waitFor(t, "the engine's page", 5*time.Second, func() bool {
				s := gw.g.scraper.Last("e")
				return s != nil && s.Report != nil && s.Report.BlockSize > 0
			})
			pred, result := tokenizeBody(gw.g.tokenizers[testModel], testModel, []byte(body), true, noContext, nil)
			if pred == nil {
				t.Fatalf("tokenizing: %s", result)
			}
			gw.g.index.Record("e", pred.hashes)
			held := len(pred.hashes) * 16
			if held%64 == 0 {
				t.Fatalf("the prompt holds %d tokens in whole blocks, a multiple of 64: pick another", held)
			}
			got := promptCached(t, gw, body, "e")["e"]
			want := held
			if tc.roundDown {
				want = held / 64 * 64
			}
			if got != want || got%tc.whole != 0 {
				t.Errorf("explained: predicted %d cached tokens of %d held, want %d", got, held, want)
			}
			// Routing predicts the same (the engine answers an empty 200).
			resp, answer := chat(t, gw.url, body)
			if got := resp.Header.Get("X-Inferrail-Cached-Tokens"); got != strconv.Itoa(want) {
				t.Errorf("routed (%d %s): predicted %s cached tokens of %d held, want %d", resp.StatusCode, answer, got, held, want)
			}
		})
	}
}
