package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"

	"github.com/inferrail/inferrail/internal/tokenize/simtok"
)

// The engine-step benchmarks time what the engine goroutine does per step
// (Engine.Run without its clock and inbox): plan, price, apply the outputs,
// record the metrics. They report steps/s.

const (
	benchSeqs      = 256  // running sequences, DefaultConfig's MaxNumSeqs
	benchPromptLen = 512  // prompt tokens per sequence
	benchEpoch     = 1024 // decode steps before BenchmarkEngineStep256 starts over
)

// BenchmarkEngineStep256 times one decode step of 256 running sequences with
// 512-token prompts that never finish: no prefill, no admission, no
// preemption. Sequences grow one token per step, so every benchEpoch steps
// the engine is rebuilt with the timer stopped; the KV cache is sized to hold
// a whole epoch (DefaultConfig's 4,096 blocks hold only 65,536 tokens).
func BenchmarkEngineStep256(b *testing.B) {
	b.ReportAllocs()
	prompts := benchPrompts(benchSeqs, 0, 1)
	blocks := benchSeqs*(benchPromptLen+benchEpoch+1)/16 + benchSeqs + 1
	e, now := benchDecodeEngine(b, prompts, blocks)
	var ids []int
	steps := 0
	for b.Loop() {
		now = benchStep(e, now)
		steps++
		if steps%64 == 0 {
			// The HTTP handlers take the tokens as they come; here
			// nobody does, so drain them every few steps.
			for _, r := range e.sched.running {
				ids, _, _ = r.out.take(ids[:0])
			}
		}
		if steps%benchEpoch == 0 {
			b.StopTimer()
			e, now = benchDecodeEngine(b, prompts, blocks)
			b.StartTimer()
		}
	}
	b.ReportMetric(float64(steps)/b.Elapsed().Seconds(), "steps/s")
	if plan := e.sched.schedule(now); len(plan) != benchSeqs || slices.ContainsFunc(plan, func(w work) bool { return w.prefill }) {
		b.Fatalf("last step planned %d works, some prefill; want %d decodes", len(plan), benchSeqs)
	}
}

// BenchmarkEngineStepMixed keeps about 256 sequences running while they
// finish (at EOS or max_tokens 256, as newRequest sets them up) and new
// 512-token requests take their place, so steps mix chunked prefill with
// decode, prefix-cache hits on eight shared 256-token system prompts, and
// eviction. Arrivals top the engine up to 264 requests after each step.
func BenchmarkEngineStepMixed(b *testing.B) {
	b.ReportAllocs()
	cfg := DefaultConfig()
	cfg.NumGPUBlocks = 16384
	prompts := benchPrompts(1024, 8, 2)
	hashes := make([][]blockhash.Hash, len(prompts))
	seed := blockhash.Seed(cfg.ModelName(), "", "")
	for i, p := range prompts {
		hashes[i] = slices.Clip(blockhash.Extend(nil, seed, p, cfg.BlockSize))
	}
	e := NewEngine(cfg, benchMetrics(&cfg))
	next := 0
	topUp := func(now float64) {
		for len(e.sched.running)+e.sched.waiting.n < benchSeqs+8 {
			i := next % len(prompts)
			r := benchRequest(&cfg, prompts[i], hashes[i], 256, false)
			r.arrival = now
			e.sched.add(r)
			next++
		}
	}
	var now float64
	for range 2000 { // reach a steady state: a full cache, evicting
		topUp(now)
		now = benchStep(e, now)
	}
	steps, added := 0, next
	for b.Loop() {
		topUp(now)
		now = benchStep(e, now)
		steps++
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(steps)/sec, "steps/s")
	b.ReportMetric(float64(next-added)/sec, "requests/s")
}

// benchStep runs one engine step at virtual time now, as Engine.Run does
// once the step's time is up, and returns the step's end.
func benchStep(e *Engine, now float64) float64 {
	plan := e.sched.schedule(now)
	end := now + e.sched.cost(plan)
	e.sched.complete(plan, end)
	e.record()
	return end
}

// benchDecodeEngine returns an engine whose 256 sequences (one per prompt)
// have all finished their prefill and are decoding, and the virtual time.
func benchDecodeEngine(b *testing.B, prompts [][]int, blocks int) (*Engine, float64) {
	b.Helper()
	cfg := DefaultConfig()
	cfg.NumGPUBlocks = blocks
	e := NewEngine(cfg, benchMetrics(&cfg))
	seed := blockhash.Seed(cfg.ModelName(), "", "")
	for _, p := range prompts {
		r := benchRequest(&cfg, p, blockhash.Extend(nil, seed, p, cfg.BlockSize), 1<<30, true)
		e.sched.add(r)
	}
	var now float64
	for range 1000 {
		plan := e.sched.schedule(now)
		decoding := len(plan) == len(prompts) && !slices.ContainsFunc(plan, func(w work) bool { return w.prefill })
		end := now + e.sched.cost(plan)
		e.sched.complete(plan, end)
		e.record()
		now = end
		if decoding {
			return e, now
		}
	}
	b.Fatalf("%d sequences never all reached decode (running %d, waiting %d)", len(prompts), len(e.sched.running), e.sched.waiting.n)
	return nil, 0
}

// benchRequest builds an engine request the way Server.newRequest does.
// hashes must have no spare capacity, since requests append to them.
func benchRequest(cfg *Config, prompt []int, hashes []blockhash.Hash, maxTokens int, ignoreEOS bool) *request {
	seed := blockhash.Seed(cfg.ModelName(), "", "")
	r := &request{
		id:        "bench",
		tokens:    prompt[:len(prompt):len(prompt)],
		prompt:    len(prompt),
		seed:      seed,
		hashes:    hashes[:len(hashes):len(hashes)],
		maxTokens: maxTokens,
		maxParam:  maxTokens,
		ignoreEOS: ignoreEOS,
		out:       newStream(),
	}
	h := seed.Lo
	for _, t := range prompt {
		h = (h ^ uint64(t)) * 0x100000001b3
	}
	r.babble = simtok.NewBabbler(h)
	r.eosAt = naturalLength(h)
	return r
}

// benchPrompts returns n distinct prompts of benchPromptLen token ids. With
// shared > 0 the first half of each is one of that many common prefixes.
func benchPrompts(n, shared int, seed uint64) [][]int {
	rng := rand.New(rand.NewPCG(seed, 0))
	tok := simtok.New()
	word := func() int { return 8 + rng.IntN(tok.VocabSize()-8) } // no special tokens
	prefixes := make([][]int, shared)
	for i := range prefixes {
		for range benchPromptLen / 2 {
			prefixes[i] = append(prefixes[i], word())
		}
	}
	out := make([][]int, n)
	for i := range out {
		p := make([]int, 0, benchPromptLen)
		if shared > 0 {
			p = append(p, prefixes[i%shared]...)
		}
		for len(p) < benchPromptLen {
			p = append(p, word())
		}
		out[i] = p
	}
	return out
}

func benchMetrics(cfg *Config) *Metrics {
	return NewMetrics(MetricsConfig{
		ModelName:   cfg.ModelName(),
		Engine:      "0",
		MaxModelLen: cfg.MaxModelLen,
		CacheConfig: cacheConfigLabels(cfg),
		Start:       time.Unix(1755000000, 0),
	})
}
