package sim

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"

	"github.com/inferrail/inferrail/internal/tokenize/simtok"
	"pgregory.net/rapid"
)

// testRequest builds an engine request for a prompt, as the HTTP side does.
func testRequest(cfg *Config, id string, prompt []int, maxTokens int) *request {
	seed := blockhash.Seed(cfg.ModelName(), "", "")
	r := &request{
		id:        id,
		tokens:    slices.Clip(slices.Clone(prompt)),
		prompt:    len(prompt),
		seed:      seed,
		maxTokens: maxTokens,
		maxParam:  maxTokens,
		ignoreEOS: true,
		eosAt:     math.MaxInt,
		babble:    simtok.NewBabbler(uint64(len(id))),
		out:       newStream(),
	}
	if cfg.EnablePrefixCaching {
		r.hashes = blockhash.Extend(nil, seed, prompt, cfg.BlockSize)
	}
	return r
}

// fataler is what vrun needs of *testing.T and *rapid.T.
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// arrival is a request reaching the engine at a virtual time.
type arrival struct {
	at float64
	r  *request
}

// vrun drives a scheduler on virtual time alone, the way Engine.Run drives it
// on the real clock, and calls check after every planned step.
type vrun struct {
	s     *scheduler
	now   float64
	steps int
	check func(plan []work)
}

// run plays arrivals (sorted by time) until every request has left. It
// fails when the engine stalls with work left.
func (v *vrun) run(t fataler, arrivals []arrival) {
	t.Helper()
	i := 0
	for {
		for i < len(arrivals) && arrivals[i].at <= v.now {
			arrivals[i].r.arrival = arrivals[i].at
			v.s.add(arrivals[i].r)
			i++
		}
		if v.s.idle() {
			if i == len(arrivals) {
				return
			}
			v.now = arrivals[i].at
			continue
		}
		plan := v.s.schedule(v.now)
		if v.check != nil {
			v.check(plan)
		}
		if len(plan) == 0 {
			if i == len(arrivals) {
				t.Fatalf("engine stalled at %.6fs with %d waiting and %d running", v.now, v.s.waiting.n, len(v.s.running))
			}
			v.now = arrivals[i].at
			continue
		}
		end := v.now + v.s.cost(plan)
		v.s.complete(plan, end)
		v.now = end
		v.steps++
		if v.steps > 1_000_000 {
			t.Fatal("too many steps")
		}
	}
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.MaxModelLen = 4096
	return cfg
}

func prompt(prefix, n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = 1000 + prefix*100000 + i
	}
	return p
}

// TestChunksAddUpToP checks that an idle engine's prefill, cut into chunks by
// the token budget, costs exactly P(u, c) and so is its TTFT.
func TestChunksAddUpToP(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := testConfig()
		cfg.MaxNumBatchedTokens = rapid.IntRange(256, 2048).Draw(rt, "budget")
		cfg.MaxNumSeqs = 256
		cfg.BlockSize = rapid.SampledFrom([]int{1, 16, 32}).Draw(rt, "blockSize")
		cached := rapid.IntRange(0, 1500).Draw(rt, "cached")
		total := rapid.IntRange(cached+1, 4000).Draw(rt, "total")
		s := newScheduler(&cfg)
		p := prompt(0, total)
		v := &vrun{s: s}
		if cached > 0 { // warm the cache with the shared part first
			v.run(t, []arrival{{0, testRequest(&cfg, "warm", p[:cached], 1)}})
		}
		r := testRequest(&cfg, "probe", p, 1)
		start := v.now
		v.run(t, []arrival{{start, r}})
		c := r.cached
		if want := (min(cached, total-1) / cfg.BlockSize) * cfg.BlockSize; c != want {
			rt.Fatalf("cached %d tokens, want %d", c, want)
		}
		ttft := r.firstToken - start
		if want := cfg.Latency.Prefill(total-c, c); math.Abs(ttft-want) > 1e-6 {
			rt.Fatalf("TTFT %.9f, want P(%d, %d) = %.9f", ttft, total-c, c, want)
		}
	})
}

// TestSchedulerInvariants plays random traffic with shared prefixes, long
// generations and cancellations through a small pool, of a plain model or
// a hybrid one (a sliding-window group beside the full-attention one).
func TestSchedulerInvariants(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := testConfig()
		cfg.BlockSize = 16
		cfg.MaxModelLen = 512
		cfg.NumGPUBlocks = rapid.IntRange(33, 120).Draw(rt, "blocks")
		cfg.MaxNumSeqs = rapid.IntRange(1, 8).Draw(rt, "maxSeqs")
		cfg.MaxNumBatchedTokens = rapid.IntRange(max(cfg.MaxNumSeqs, 16), 300).Draw(rt, "budget")
		cfg.EnablePrefixCaching = rapid.Bool().Draw(rt, "caching")
		cfg.SlidingWindow = rapid.SampledFrom([]int{0, 0, 1, 17, 48, 100}).Draw(rt, "slidingWindow")
		if need := blocksFor(cfg.MaxModelLen, cfg.BlockSize) + cfg.windowReserve(cfg.MaxModelLen) + 1; cfg.NumGPUBlocks < need {
			cfg.NumGPUBlocks = need + rapid.IntRange(0, 90).Draw(rt, "moreBlocks")
		}
		s := newScheduler(&cfg)

		n := rapid.IntRange(1, 30).Draw(rt, "requests")
		var arrivals []arrival
		at := 0.0
		for i := range n {
			at += rapid.Float64Range(0, 0.05).Draw(rt, "gap")
			plen := rapid.IntRange(1, 300).Draw(rt, "promptLen")
			maxTok := rapid.IntRange(1, 512-plen).Draw(rt, "maxTokens")
			r := testRequest(&cfg, fmt.Sprint(i), prompt(rapid.IntRange(0, 2).Draw(rt, "prefix"), plen), min(maxTok, 150))
			arrivals = append(arrivals, arrival{at, r})
		}
		cancelAt := map[*request]int{}
		for _, a := range arrivals {
			if rapid.IntRange(0, 4).Draw(rt, "cancel?") == 0 {
				cancelAt[a.r] = rapid.IntRange(0, 40).Draw(rt, "cancelStep")
			}
		}

		var admitted []*request
		seen := map[*request]bool{}
		v := &vrun{s: s}
		v.check = func(plan []work) {
			if len(s.running) > cfg.MaxNumSeqs {
				rt.Fatalf("%d running, cap %d", len(s.running), cfg.MaxNumSeqs)
			}
			total := 0
			for _, w := range plan {
				total += w.tokens
				if !seen[w.r] {
					seen[w.r] = true
					admitted = append(admitted, w.r)
				}
			}
			if total > cfg.MaxNumBatchedTokens {
				rt.Fatalf("step computes %d tokens, budget %d", total, cfg.MaxNumBatchedTokens)
			}
			// Every block is either free or held: references add up.
			refs := map[int32]int{}
			for _, r := range s.running {
				if len(r.blocks) < s.blocksFor(r.computed) {
					rt.Fatalf("request %s computed %d tokens in %d blocks", r.id, r.computed, len(r.blocks))
				}
				for _, b := range r.blocks {
					refs[b]++
				}
				if cfg.SlidingWindow > 0 && len(r.window) != len(r.blocks) {
					rt.Fatalf("request %s holds %d blocks, %d window places", r.id, len(r.blocks), len(r.window))
				}
				held := 0
				for _, b := range r.window {
					if b != 0 {
						refs[b]++
						held++
					}
				}
				// The window group gives back what the window moved past:
				// it holds a window and a step's chunk at most.
				if most := blocksFor(cfg.SlidingWindow-1+cfg.MaxNumBatchedTokens, cfg.BlockSize) + 2; cfg.SlidingWindow > 0 && held > most {
					rt.Fatalf("request %s holds %d window blocks (computed %d), at most %d expected", r.id, held, r.computed, most)
				}
			}
			for id := 1; id < len(s.pool.blocks); id++ {
				if got := int(s.pool.blocks[id].ref); got != refs[int32(id)] {
					rt.Fatalf("block %d has ref %d, held %d times", id, got, refs[int32(id)])
				}
			}
			if held := len(refs); held+s.pool.numFree != s.pool.usable() {
				rt.Fatalf("%d held + %d free != %d usable", held, s.pool.numFree, s.pool.usable())
			}
			for r, step := range cancelAt {
				if step == v.steps {
					s.cancel(r, v.now)
				}
			}
		}
		v.run(rt, arrivals)

		// First admissions keep arrival order.
		for i := 1; i < len(admitted); i++ {
			if admitted[i].arrival < admitted[i-1].arrival {
				rt.Fatalf("request %s admitted before %s, which arrived earlier", admitted[i-1].id, admitted[i].id)
			}
		}
		if s.pool.numFree != s.pool.usable() {
			rt.Fatalf("%d blocks still held after drain", s.pool.usable()-s.pool.numFree)
		}
		for _, a := range arrivals {
			r := a.r
			_, total, finish := r.out.take(nil)
			switch finish {
			case "length":
				if total != r.maxTokens || r.output() != r.maxTokens {
					rt.Fatalf("request %s finished with %d of %d tokens", r.id, total, r.maxTokens)
				}
			case "abort":
				if _, ok := cancelAt[r]; !ok {
					rt.Fatalf("request %s aborted without a cancel", r.id)
				}
			default:
				rt.Fatalf("request %s finished with %q", r.id, finish)
			}
		}
	})
}

// TestDryPoolPreemptsButFinishes runs more long generations than the pool can
// hold at once.
func TestDryPoolPreemptsButFinishes(t *testing.T) {
	cfg := testConfig()
	cfg.NumGPUBlocks = 65 // 64 usable blocks of 16 tokens
	cfg.MaxModelLen = 1024
	cfg.MaxNumSeqs = 16
	s := newScheduler(&cfg)
	var arrivals []arrival
	for i := range 12 {
		arrivals = append(arrivals, arrival{0, testRequest(&cfg, fmt.Sprint(i), prompt(i, 100), 300)})
	}
	preemptions := 0
	v := &vrun{s: s, check: func([]work) { preemptions += s.stats.Preemptions; s.stats.Preemptions = 0 }}
	v.run(t, arrivals)
	if preemptions == 0 {
		t.Fatal("no preemption although 12 requests of 400 tokens share 1024 token slots")
	}
	for _, a := range arrivals {
		if _, total, finish := a.r.out.take(nil); finish != "length" || total != 300 {
			t.Errorf("request %s: %d tokens, finish %q; want 300, length", a.r.id, total, finish)
		}
	}
	t.Logf("%d preemptions over %d steps", preemptions, v.steps)
}

// TestTTFTBendsAtCapacity offers the same traffic at rising rates: mean TTFT
// never falls as load rises, and past the engine's capacity it climbs far
// above the idle prefill time.
func TestTTFTBendsAtCapacity(t *testing.T) {
	cfg := testConfig()
	idle := cfg.Latency.Prefill(1000, 0)
	var prev float64
	var ttfts []float64
	for _, rate := range []float64{1, 2, 4, 8, 12, 16, 24, 32} {
		s := newScheduler(&cfg)
		var arrivals []arrival
		for i := range 200 {
			arrivals = append(arrivals, arrival{float64(i) / rate, testRequest(&cfg, fmt.Sprint(i), prompt(i, 1000), 32)})
		}
		(&vrun{s: s}).run(t, arrivals)
		var sum float64
		for _, a := range arrivals {
			sum += a.r.firstToken - a.r.arrival
		}
		mean := sum / float64(len(arrivals))
		ttfts = append(ttfts, mean)
		if mean < prev*0.999 {
			t.Errorf("mean TTFT fell from %.4fs to %.4fs when the rate rose to %v/s", prev, mean, rate)
		}
		prev = mean
	}
	if ttfts[0] > 1.5*idle {
		t.Errorf("at 1 req/s mean TTFT %.4fs, want near the idle prefill %.4fs", ttfts[0], idle)
	}
	if last := ttfts[len(ttfts)-1]; last < 10*idle {
		t.Errorf("at 32 req/s mean TTFT %.4fs, want far above the idle prefill %.4fs", last, idle)
	}
	t.Logf("mean TTFT by rate: %.4f", ttfts)
}

// TestDecodeStepsStretch checks that a decode step grows with its batch and
// with a prefill sharing it.
func TestDecodeStepsStretch(t *testing.T) {
	cfg := testConfig()
	s := newScheduler(&cfg)
	var arrivals []arrival
	for i := range 8 {
		arrivals = append(arrivals, arrival{0, testRequest(&cfg, fmt.Sprint(i), prompt(i, 20), 1000)})
	}
	v := &vrun{s: s}
	// Admit all eight and let them prefill.
	for _, a := range arrivals {
		s.add(a.r)
	}
	plan := s.schedule(0)
	s.complete(plan, s.cost(plan))
	decode8 := s.cost(s.schedule(1))
	if want := cfg.Latency.Decode(8); math.Abs(decode8-want) > 1e-12 {
		t.Errorf("8-sequence decode step costs %v, want %v", decode8, want)
	}
	if one := cfg.Latency.Decode(1); decode8 <= one {
		t.Errorf("8-sequence step %v not longer than 1-sequence %v", decode8, one)
	}
	s.complete(s.plan, 2)
	s.add(testRequest(&cfg, "long", prompt(99, 1500), 10))
	mixed := s.cost(s.schedule(3))
	if mixed <= decode8 {
		t.Errorf("decode step with a prefill costs %v, no more than %v without", mixed, decode8)
	}
	want := cfg.Latency.Decode(8) + cfg.Latency.Prefill(min(1500, cfg.MaxNumBatchedTokens-8), 0)
	if math.Abs(mixed-want) > 1e-9 {
		t.Errorf("mixed step costs %v, want decode + prefill chunk %v", mixed, want)
	}
	_ = v
}

// TestFullyCachedPromptRecomputesLastBlock follows vLLM's hit cap: a prompt
// whose every block is cached still computes its last block.
func TestFullyCachedPromptRecomputesLastBlock(t *testing.T) {
	cfg := testConfig()
	for _, tt := range []struct{ len, wantHit int }{{32, 16}, {33, 32}, {15, 0}, {16, 0}, {17, 16}} {
		s := newScheduler(&cfg)
		v := &vrun{s: s}
		p := prompt(0, tt.len)
		v.run(t, []arrival{{0, testRequest(&cfg, "a", p, 1)}})
		r := testRequest(&cfg, "b", p, 1)
		v.run(t, []arrival{{v.now, r}})
		if r.cached != tt.wantHit {
			t.Errorf("prompt of %d tokens seen before: %d cached, want %d", tt.len, r.cached, tt.wantHit)
		}
	}
}

// TestGeneratedBlocksServeLaterTurns checks that blocks filled by generated
// tokens are cached, so a follow-up prompt that resends the reply hits them.
func TestGeneratedBlocksServeLaterTurns(t *testing.T) {
	cfg := testConfig()
	s := newScheduler(&cfg)
	v := &vrun{s: s}
	first := testRequest(&cfg, "t1", prompt(0, 40), 60)
	v.run(t, []arrival{{0, first}})
	next := append(slices.Clone(first.tokens), prompt(1, 30)...)
	second := testRequest(&cfg, "t2", next, 1)
	v.run(t, []arrival{{v.now, second}})
	// 40 prompt + 60 generated = 100 tokens; the last generated token was
	// never computed, so 99 are cached: 6 full blocks.
	if want := 96; second.cached != want {
		t.Errorf("second turn found %d tokens cached, want %d", second.cached, want)
	}
}

// TestIterationTokensCountAPromptOnce: vllm:iteration_tokens_total
// observes a step's computed prompt tokens and generated tokens, a prompt
// counted once, in the step of its first output: not chunk by chunk, and
// not again when a preempted request computes it anew (found by a review
// of the simulator against the spec).
func TestIterationTokensCountAPromptOnce(t *testing.T) {
	stepOnce := func(s *scheduler, now float64) int {
		s.complete(s.schedule(now), now+1)
		n := s.stats.IterationTokens
		s.resetStats()
		return n
	}
	t.Run("chunked", func(t *testing.T) {
		cfg := testConfig()
		cfg.NumGPUBlocks, cfg.BlockSize, cfg.MaxNumBatchedTokens = 4096, 16, 2048
		s := newScheduler(&cfg)
		s.add(testRequest(&cfg, "a", prompt(0, 5000), 2))
		var got []int
		for i := range 3 {
			got = append(got, stepOnce(s, float64(i)))
		}
		if want := []int{0, 0, 5001}; !slices.Equal(got, want) {
			t.Errorf("observations %v, want %v: the prompt and the first token in the step of the first token", got, want)
		}
	})
	t.Run("preempted", func(t *testing.T) {
		cfg := testConfig()
		cfg.NumGPUBlocks, cfg.BlockSize, cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs = 13, 4, 64, 16
		cfg.EnablePrefixCaching = false // a preempted request computes all it had again
		s := newScheduler(&cfg)
		for _, id := range []string{"A", "B", "C"} {
			s.add(testRequest(&cfg, id, prompt(int(id[0]), 4), 20))
		}
		var total, want, preemptions int
		for i := 0; i < 200 && !s.idle(); i++ {
			s.complete(s.schedule(float64(i)), float64(i+1))
			total += s.stats.IterationTokens
			want += s.stats.GenerationTokens + s.stats.PromptComputed
			preemptions += s.stats.Preemptions
			s.resetStats()
		}
		if preemptions == 0 {
			t.Fatal("no preemption: the case is not reached")
		}
		if total != want {
			t.Errorf("iteration tokens %d after %d preemptions, want %d: generated tokens and each prompt once", total, preemptions, want)
		}
	})
}

// TestStepNeverBeforeArrival: an idle engine's step starts when the
// request that woke it arrived; requests that came while it woke join that
// step, which then starts at the last of their arrivals. Started at the
// first one's, it computed later requests before they arrived (6 of 1,600
// requests, up to 358 µs early; found by a review). Eight requests sent at
// once to an idle engine, 50 times; the first step after each wake is
// checked, whether the engine was waiting for work or had just finished
// its last request. (An engine with requests running starts its next step
// where the last one ended, so one that arrives in the microseconds
// between that end and the next plan is computed from the step's start:
// what keeps timer overshoot from adding up.)
func TestStepNeverBeforeArrival(t *testing.T) {
	cfg := testConfig()
	cfg.Latency.PrefillFixed = 2 * time.Millisecond
	e := NewEngine(cfg, nil)
	var mu sync.Mutex
	var early []float64 // how long before their arrival requests were computed
	woke := false       // the next step is the first after a wake
	e.afterStep = func(plan []work) {
		mu.Lock()
		first := woke
		woke = false
		mu.Unlock()
		if !first {
			return
		}
		start := -1.0
		for _, w := range plan {
			if w.prefill && w.start == 0 && (start < 0 || w.r.firstScheduled < start) {
				start = w.r.firstScheduled
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, w := range plan {
			if start >= 0 && w.r.arrival > start {
				early = append(early, w.r.arrival-start)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	id := 0
	for range 50 {
		for idle := false; !idle; {
			time.Sleep(2 * time.Millisecond)
			_ = e.inspect(ctx, func(s *scheduler) { idle = s.idle() })
		}
		mu.Lock()
		woke = true
		mu.Unlock()
		var wg sync.WaitGroup
		for range 8 {
			id++
			r := testRequest(&cfg, fmt.Sprint("r", id), prompt(id, 32), 1)
			wg.Go(func() { _ = e.submit(ctx, r) })
		}
		wg.Wait()
	}
	for idle := false; !idle; {
		time.Sleep(2 * time.Millisecond)
		_ = e.inspect(ctx, func(s *scheduler) { idle = s.idle() })
	}
	mu.Lock()
	defer mu.Unlock()
	if len(early) > 0 {
		t.Errorf("%d requests computed in a step that started before they arrived, up to %v s", len(early), slices.Max(early))
	}
}
