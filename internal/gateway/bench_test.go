package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/openai"

	"github.com/inferrail/inferrail/internal/clock"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/policy"
	"github.com/inferrail/inferrail/internal/sim"
)

// BenchmarkProxyChat sends small non-streamed chats through the gateway to
// one zero-latency simulator in the same process, for profiling the request
// path (go test -bench ProxyChat -cpuprofile cpu.out ./internal/gateway).
func BenchmarkProxyChat(b *testing.B) { benchProxy(b, chatBody("hello there", "")) }

// BenchmarkProxyStream is BenchmarkProxyChat for streamed chats of 16
// tokens, one event each, which the gateway relays event by event.
func BenchmarkProxyStream(b *testing.B) {
	benchProxy(b, `{"model":"sim","messages":[{"role":"user","content":"hello there"}],"max_tokens":16,"ignore_eos":true,"stream":true}`)
}

// benchProxy sends body to a gateway in front of one zero-latency
// simulator, from as many goroutines as -cpu says, each reading every
// answer whole.
func benchProxy(b *testing.B, body string) {
	sims := fleetOf(b, 1, true)
	gw := startGateway(b, testConfig(b, sims))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, gw.url+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				b.Error(err)
			}
			resp.Body.Close()
		}
	})
}

// decisionPrompts are n completion requests of 8,000 tokens (500 blocks of
// 16), tokenized and hashed as the gateway does: four system prompts of
// 4,000 tokens, each followed by 4,000 tokens of its own, each request in a
// conversation of its own.
func decisionPrompts(b *testing.B, g *Gateway, n int) []*exchange {
	b.Helper()
	out := make([]*exchange, n)
	for j := range out {
		var body strings.Builder
		body.WriteString(`{"model":"` + testModel + `","max_tokens":1,"prompt":[`)
		for k := range 8000 {
			if k > 0 {
				body.WriteByte(',')
			}
			id := 100_000*(j%4) + k // the system prompt
			if k >= 4000 {
				id = 1_000_000 + 10_000*j + k
			}
			body.WriteString(strconv.Itoa(id))
		}
		body.WriteString("]}")
		r := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
		r.Header.Set(openai.HeaderSession, fmt.Sprint("conv-", j))
		ex := &exchange{r: r, id: fmt.Sprint("req-", j), model: testModel, body: []byte(body.String()), gen: g.current(), policy: g.testPolicy(testModel)}
		var result string
		ex.pred, result = tokenizeBody(g.tokenizers[testModel], testModel, ex.body, false, noContext, nil)
		if result != tokOK || ex.pred.tokens != 8000 || len(ex.pred.hashes) != 500 {
			b.Fatalf("prompt %d: %s, %d tokens", j, result, ex.pred.tokens)
		}
		ex.route = g.routeRequest(ex)
		out[j] = ex
	}
	return out
}

// decisionGateway is a gateway routing testModel with cost_model (and
// session affinity when sessions is set) over n replicas it never serves
// or contacts, with the prompts' blocks in its index (every prompt on
// every 16th replica, the system prompts on every 4th, 100 blocks of a
// prompt of its own on every other, as in a fleet that has served for a
// while) and varied loads: replica i holds (7i mod 13) leases and a queue
// of (i mod 5) minutes of prefill. Its engines never report, so candidates carry the gateway's own
// counts only.
func decisionGateway(b *testing.B, n int, sessions bool) (*Gateway, []*exchange) {
	b.Helper()
	// One simulator answers every replica's metrics scrape, so that every
	// candidate carries a fresh engine report, as in service.
	simCfg := sim.DefaultConfig()
	simCfg.ZeroLatency = true
	simCfg.NumGPUBlocks = 1 << 16 // the capacity the index learns: the benchmark's blocks fit
	engine, err := sim.StartLocal(simCfg, "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(engine.Close)
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: testModel, Tokenizer: "builtin:sim", Policy: policy.CostModel}}
	for i := range n {
		cfg.Replicas = append(cfg.Replicas, config.Replica{ID: fmt.Sprintf("replica-%03d", i), URL: engine.URL(),
			Models: []string{testModel}, MaxConcurrency: 256, MaxPending: 64})
	}
	cfg.Routing.SessionAffinity = sessions
	cfg.Routing.Seed = 1
	cfg.Index.DefaultCapacityBlocks = 1 << 15 // 64 prompts' own blocks and the system prompts fit
	// One round of scrapes, whose reports stay fresh for the whole run. A
	// scrape that timed out would not be retried for an hour, so the
	// timeout leaves room for a machine as slow as under cachegrind.
	cfg.Load.ScrapeInterval = config.Duration(time.Hour)
	cfg.Load.ScrapeTimeout = config.Duration(time.Minute)
	cfg.Load.MaxAge = config.Duration(2 * time.Hour)
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	g, err := New(&cfg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(g.Close)
	scraping, stopScraping := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = g.scraper.Run(scraping); close(done) }()
	deadline := time.Now().Add(2 * time.Minute)
	for _, r := range g.fleet.Snapshot().Replicas {
		for g.scraper.Last(r.ID) == nil {
			if time.Now().After(deadline) {
				b.Fatalf("no report from %s's engine", r.ID)
			}
			time.Sleep(time.Millisecond)
		}
	}
	stopScraping()
	<-done
	exs := decisionPrompts(b, g, 64)
	now := time.Now()
	var held []*fleet.Lease
	for i, r := range g.fleet.Snapshot().Replicas {
		for _, ex := range exs {
			switch {
			case i%16 == 0:
				g.index.Record(r.ID, ex.pred.hashes)
			case i%4 == 0:
				g.index.Record(r.ID, ex.pred.hashes[:250])
			}
		}
		if i%4 != 0 {
			own := make([]blockhash.Hash, 100)
			for k := range own {
				own[k] = blockhash.Hash{Hi: uint64(i) + 1, Lo: uint64(k)}
			}
			g.index.Record(r.ID, own)
		}
		for k := range (7 * i) % 13 {
			lease, ok := r.TryAcquire()
			if !ok {
				b.Fatal("no room for the load")
			}
			if k == 0 {
				lease.Queue(now, float64(i%5)*60, 0, 8000)
			}
			held = append(held, lease)
		}
	}
	b.Cleanup(func() {
		for _, l := range held {
			l.Release()
		}
	})
	ids := []string{"replica-000", "replica-004", "replica-001"}
	if got := g.cachedTokens(nil, ids, testModel, exs[0].pred); !slices.Equal(got, []int{7984, 4000, 0}) {
		b.Fatalf("predicted cached tokens %v on %v, want [7984 4000 0]", got, ids)
	}
	var c policy.Candidate
	g.candidate(&c, &g.routes(g.current()).model(testModel).routes[0], clock.Of(now))
	if c.Running < 0 || c.KVUsage < 0 || c.KVCapacityBlocks != simCfg.NumGPUBlocks-1 {
		b.Fatalf("candidate without its engine's report: %+v", c)
	}
	return g, exs
}

// BenchmarkGatewayDecision is the gateway's whole cost_model decision for
// a request's first attempt once its 8,000-token prompt is tokenized, at
// 8, 64 and 256 replicas: Gateway.choose, which reads the fleet, builds
// every candidate with its engine's fresh report (scraped from a simulator
// before timing), looks all of them up in the KV index (500 block hashes
// each, finding real prefixes on a quarter of them), runs the policy's Pick
// with hot prefixes in play, takes a lease, queues the prefill and records
// the decision's metrics. With sessions=true each prompt's conversation
// goes back to its replica, so after the first round the session decides
// and the policy skips pricing the hot prefix's owners; with
// sessions=false every decision prices every candidate. Releasing the
// lease is left out of the timing. mean-ns/op and p99-ns/op are over single
// decisions; ns/op also counts the release and the clock reads.
// full-speed-p99-ns/op is the p99 of the decisions made while the machine
// ran at full speed, and full-speed-share their share (see fullSpeed).
func BenchmarkGatewayDecision(b *testing.B) {
	for _, n := range []int{8, 64, 256} {
		for _, sessions := range []bool{true, false} {
			b.Run(fmt.Sprintf("replicas=%d/sessions=%v", n, sessions), func(b *testing.B) {
				benchmarkDecisions(b, n, sessions)
			})
		}
	}
}

// BenchmarkGatewayDecisionCold is BenchmarkGatewayDecision's priced case
// at 64 replicas with the processor's caches cold: before each decision it
// writes over a buffer larger than any core's private caches, as a gateway
// in service parses and tokenizes a request's body, and serves others,
// between decisions. What a decision then costs is mostly the memory it
// touches. The eviction counts in ns/op; mean-ns/op and p99-ns/op are the
// decisions' own.
func BenchmarkGatewayDecisionCold(b *testing.B) {
	g, exs := decisionGateway(b, 64, false)
	warmUp(b, g, exs)
	buf := make([]uint64, evictBytes/8)
	var lat []time.Duration
	i := 0
	for b.Loop() {
		for k := 0; k < len(buf); k += 8 { // a word of every cache line
			buf[k]++
		}
		lat = append(lat, timedDecision(b, g, exs, i))
		i++
	}
	reportMeanAndP99(b, lat)
}

// evictBytes is what BenchmarkGatewayDecisionCold writes over between
// decisions: twice the largest private (L2) cache of current server cores.
const evictBytes = 8 << 20

func benchmarkDecisions(b *testing.B, n int, sessions bool) {
	g, exs := decisionGateway(b, n, sessions)
	warmUp(b, g, exs)
	lat := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		took := timedDecision(b, g, exs, i)
		if len(lat) < cap(lat) {
			lat = append(lat, took)
		}
		i++
	}
	fast, share := fullSpeed(lat, 500)
	reportMeanAndP99(b, lat)
	if len(fast) > 0 {
		slices.Sort(fast)
		b.ReportMetric(float64(fast[len(fast)*99/100].Nanoseconds()), "full-speed-p99-ns/op")
		b.ReportMetric(share, "full-speed-share")
	}
}

// warmUp makes one decision for each prompt first, as a gateway in
// service has: every conversation has its replica and every prompt's
// demand is counted.
func warmUp(b *testing.B, g *Gateway, exs []*exchange) {
	for i, ex := range exs {
		lease, _, e := g.choose(ex, nil)
		if e != nil {
			b.Fatalf("warm-up decision %d: %v", i, e)
		}
		lease.Release()
	}
}

// timedDecision is the i-th decision of a run, on the prompts in turn,
// and how long it took; releasing its lease is left out.
func timedDecision(b *testing.B, g *Gateway, exs []*exchange, i int) time.Duration {
	start := time.Now()
	lease, _, e := g.choose(exs[i%len(exs)], nil)
	took := time.Since(start)
	if e != nil {
		b.Fatalf("decision %d: %v", i, e)
	}
	lease.Release()
	return took
}

// reportMeanAndP99 reports the mean and the p99 of single decisions'
// times, sorting lat.
func reportMeanAndP99(b *testing.B, lat []time.Duration) {
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	slices.Sort(lat)
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(lat)), "mean-ns/op")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns/op")
}

// fullSpeed returns the decisions of lat, in order, that ran while the
// machine ran at full speed, and their share of lat. On a shared machine a
// neighbour can slow every decision for milliseconds at a time, which puts
// a run's p99 at the neighbour's mercy. lat is cut into windows of n
// consecutive decisions, each cycling through every prompt several times;
// a window whose median is over 1.3 times the lower quartile of window
// medians ran slowed, whatever the code did, and is left out. Slow
// decisions within full-speed windows stay in.
func fullSpeed(lat []time.Duration, n int) ([]time.Duration, float64) {
	var medians []time.Duration
	for w := 0; w+n <= len(lat); w += n {
		window := slices.Clone(lat[w : w+n])
		slices.Sort(window)
		medians = append(medians, window[n/2])
	}
	if len(medians) == 0 {
		return nil, 0
	}
	ranked := slices.Clone(medians)
	slices.Sort(ranked)
	limit := ranked[len(ranked)/4] * 13 / 10
	var fast []time.Duration
	for w, m := range medians {
		if m <= limit {
			fast = append(fast, lat[w*n:(w+1)*n]...)
		}
	}
	return fast, float64(len(fast)) / float64(len(lat))
}
