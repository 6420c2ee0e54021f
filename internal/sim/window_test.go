package sim

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/inferrail/inferrail/internal/enginehash"
	"github.com/inferrail/inferrail/internal/events"
)

// TestWindowGroupHits: a hybrid model's engine (blocks of 16, a window of
// 32 tokens: two blocks) runs prompt A (8 whole blocks, 20 tokens of
// output), then prompt B in a pool too small for both, then A again and A's
// first five blocks. While A decodes, its window moves past its first
// seven blocks, which the window group gives back: B's blocks come from the
// first six of them, as vLLM evicts first what it freed first. A again
// hits whole (both groups hold its blocks 6 and 7), its first five blocks
// nothing (the window group lost blocks 3 and 4). The events say so, group
// by group, numbered as vLLM numbers Gemma 3's and gpt-oss's: the window
// group 0, each step's window stores before the full-attention ones.
func TestWindowGroupHits(t *testing.T) {
	cfg := testConfig()
	cfg.BlockSize, cfg.SlidingWindow = 16, 32
	cfg.MaxModelLen = 160
	cfg.NumGPUBlocks = 1 + 2*10 // A's 149 tokens need 10 blocks a group
	s := newScheduler(&cfg)
	s.pool.log = newKVLog(enginehash.New(enginehash.SHA256, enginehash.PythonHashSeed("0")), true, 0, cfg.BlockSize, nil)
	s.pool.log.windowFirst = true // as the server sets it for a hybrid model
	v := &vrun{s: s}
	run := func(name string, p []int, output int) *request {
		r := testRequest(&cfg, name, p, output)
		s.pool.log.extend(r)
		v.run(t, []arrival{{v.now, r}})
		return r
	}
	a := prompt(1, 8*16+1)
	if r := run("a", a, 20); r.cached != 0 {
		t.Fatalf("A first: %d tokens cached", r.cached)
	}
	stores, removals := groupEvents(s.pool.log.events)
	if stores != [2]int{9, 9} || removals != [2]int{} {
		t.Fatalf("A stored %v blocks by group, removed %v; want 9 in each (8 of prompt, 1 of output), none", stores, removals)
	}
	s.pool.log.events = nil
	if r := run("b", prompt(2, 3*16+1), 1); r.cached != 0 {
		t.Fatalf("B: %d tokens cached", r.cached)
	}
	_, removals = groupEvents(s.pool.log.events)
	if removals != [2]int{6, 0} {
		t.Fatalf("B evicted %v blocks by group; want A's window blocks 0-5 alone (group 0)", removals)
	}
	for i, ev := range s.pool.log.events {
		window := ev.GroupIdx == 0
		if ev.Kind == events.BlockStored && (window != (ev.SpecKind == "sliding_window") ||
			window != (ev.SlidingWindow == 32 && ev.HasSlidingWindow)) {
			t.Errorf("a store of group %d says kind %q, window %d", ev.GroupIdx, ev.SpecKind, ev.SlidingWindow)
		}
		// vLLM caches a hybrid model's groups in order: the window's first.
		if ev.Kind == events.BlockStored && !window && (i == 0 || s.pool.log.events[i-1].GroupIdx != 0) {
			t.Errorf("event %d: a full-attention store not after the window group's", i)
		}
	}
	if r := run("a-again", a, 1); r.cached != 8*16 {
		t.Errorf("A again: %d tokens cached, want %d", r.cached, 8*16)
	}
	if r := run("a-5", a[:5*16+1], 1); r.cached != 0 {
		t.Errorf("A's first five blocks: %d tokens cached, want 0 (the window group lost blocks 3 and 4)", r.cached)
	}
}

// groupEvents counts the blocks evs store and remove, by group.
func groupEvents(evs []events.Event) (stores, removals [2]int) {
	for _, ev := range evs {
		switch ev.Kind {
		case events.BlockStored:
			stores[ev.GroupIdx] += len(ev.Hashes)
		case events.BlockRemoved:
			removals[ev.GroupIdx] += len(ev.Hashes)
		}
	}
	return stores, removals
}

// TestSlidingWindowFlags: --sliding-window is taken, shown in
// cache_config_info, doubles what one request of --max-model-len needs,
// and is refused negative or with SGLang's events.
func TestSlidingWindowFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // "" for valid
	}{
		{[]string{"--sliding-window", "128"}, ""},
		{[]string{"--sliding-window", "-1"}, "--sliding-window: must not be negative"},
		{[]string{"--sliding-window", "128", "--max-model-len", "1024", "--num-gpu-blocks-override", "100"}, "less than one request"},
		{[]string{"--sliding-window", "128", "--max-model-len", "1024", "--num-gpu-blocks-override", "129"}, ""},
		{[]string{"--sliding-window", "128", "--kv-events-encoding", "sglang"}, "SGLang's KV events name no KV-cache group"},
	} {
		t.Run(fmt.Sprint(c.args), func(t *testing.T) {
			o, err := ParseFlags(c.args, io.Discard)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("got %v, want an error saying %q", err, c.want)
			case c.want != "":
				return
			case o.SlidingWindow != 128:
				t.Fatalf("sliding window %d", o.SlidingWindow)
			case !slices.Contains(cacheConfigLabels(&o.Config), [2]string{"sliding_window", "128"}):
				t.Fatalf("cache_config_info labels %v", cacheConfigLabels(&o.Config))
			}
		})
	}
}

// TestCachedBlocksOfBothGroups: CachedBlocks lists a hybrid model's blocks
// once a group, each under the gateway's hash of its tokens, whatever key
// the pool files the window group's copy under.
func TestCachedBlocksOfBothGroups(t *testing.T) {
	cfg := testConfig()
	cfg.ZeroLatency, cfg.SlidingWindow = true, 32
	e := NewEngine(cfg, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = e.Run(ctx) }()
	p := prompt(3, 4*cfg.BlockSize+1)
	r := testRequest(&cfg, "a", p, 1)
	if err := e.submit(ctx, r); err != nil {
		t.Fatal(err)
	}
	for finished := false; !finished; {
		if err := e.inspect(ctx, func(*scheduler) { finished = r.state == stateFinished }); err != nil {
			t.Fatal(err)
		}
	}
	blocks, err := e.CachedBlocks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[CachedBlock]int{}
	for _, b := range blocks {
		b.Key = 0 // the engine publishes no events
		got[b]++
	}
	want := map[CachedBlock]int{}
	for _, h := range r.hashes[:4] {
		for g := range 2 {
			want[CachedBlock{Hash: h, Group: g}]++
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("cached blocks %v, want the prompt's four in each group: %v", got, want)
	}
}
