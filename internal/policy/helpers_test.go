package policy

import (
	"fmt"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"

	"pgregory.net/rapid"
)

// fakeClock is a clock tests move by hand. Not safe for concurrent use.
type fakeClock struct{ t time.Time }

func newFakeClock() *fakeClock                   { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }
func (c *fakeClock) now() time.Time              { return c.t }
func (c *fakeClock) add(d time.Duration)         { c.t = c.t.Add(d) }
func (c *fakeClock) settings() Settings          { s := DefaultSettings(); s.Now = c.now; return s }
func (c *fakeClock) seeded(seed uint64) Settings { s := c.settings(); s.Seed = seed; return s }

// chain returns n block hashes: the first shared ones of root prefix root,
// the rest of tail (a conversation or a request of its own).
func chain(root, shared, tail uint64, n int) []blockhash.Hash {
	b := make([]blockhash.Hash, n)
	for k := range b {
		if uint64(k) < shared {
			b[k] = blockhash.Hash{Hi: root + 1, Lo: mix64(root<<32 | uint64(k))}
		} else {
			b[k] = blockhash.Hash{Hi: tail + 1<<40, Lo: mix64(tail<<32 ^ uint64(k))}
		}
	}
	return b
}

// world draws requests and candidates for property tests: a few root
// prefixes and conversations, so that hot prefixes and sessions come into
// play, and replicas whose loads and caches vary.
type world struct {
	replicas int
}

// request draws a request: one of four system prompts (the first far more
// often), some conversation or none, blocks of 16 tokens.
func (w world) request(t *rapid.T) *Request {
	root := uint64(rapid.SampledFrom([]int{0, 0, 0, 0, 1, 2, 3}).Draw(t, "root"))
	sysBlocks := 8 + 40*root // 8 to 128 blocks
	conv := rapid.IntRange(0, 12).Draw(t, "conversation")
	tail := rapid.IntRange(0, 60).Draw(t, "tail_blocks")
	n := int(sysBlocks) + tail
	req := &Request{
		ID:           fmt.Sprint(rapid.Uint32().Draw(t, "id")),
		PromptTokens: n*16 + rapid.IntRange(0, 15).Draw(t, "partial"),
		BlockSize:    16,
	}
	if rapid.IntRange(0, 9).Draw(t, "tokenized") > 0 {
		req.Blocks = chain(root, sysBlocks, uint64(1+conv), n)
	}
	if conv > 0 {
		req.Session = fmt.Sprint("conv-", conv)
	}
	return req
}

// candidates draws a candidate list over the world's replicas (a random
// subset, in random order) for req, with in-flight counts taken from
// inFlight (nil: drawn).
func (w world) candidates(t *rapid.T, req *Request, inFlight []int64) []Candidate {
	ids := rapid.Permutation(w.ids()).Draw(t, "order")
	ids = ids[:rapid.IntRange(1, len(ids)).Draw(t, "offered")]
	out := make([]Candidate, len(ids))
	for i, id := range ids {
		c := Candidate{ID: id, Cached: -1, Running: -1, KVUsage: -1}
		var r int
		fmt.Sscanf(id, "r%d", &r)
		if inFlight != nil {
			c.InFlight = inFlight[r]
		} else {
			c.InFlight = rapid.Int64Range(0, 20).Draw(t, "in_flight")
		}
		if req.Blocks != nil && rapid.Bool().Draw(t, "predicted") {
			c.Cached = rapid.IntRange(0, req.PromptTokens).Draw(t, "cached")
		}
		c.QueuedPrefill = rapid.SampledFrom([]float64{0, 0, 0.01, 0.2, 1.5}).Draw(t, "queued")
		if rapid.Bool().Draw(t, "fresh") {
			c.Running = rapid.Int64Range(0, 30).Draw(t, "running")
			c.KVUsage = rapid.SampledFrom([]float64{0, 0.5, 0.92, 0.95, 1}).Draw(t, "kv_usage")
			c.KVCapacityBlocks = rapid.SampledFrom([]int{0, 50, 4096}).Draw(t, "kv_capacity")
		}
		out[i] = c
	}
	return out
}

func (w world) ids() []string {
	ids := make([]string, w.replicas)
	for i := range ids {
		ids[i] = fmt.Sprint("r", i)
	}
	return ids
}

// settings draws policy settings that bring every mechanism into play:
// sessions, a short hot prefix window and a low utilization so that prefixes
// turn hot within a few requests.
func drawSettings(t *rapid.T, clk *fakeClock) Settings {
	s := clk.seeded(rapid.Uint64().Draw(t, "seed"))
	s.SessionAffinity = rapid.Bool().Draw(t, "session_affinity")
	s.HistoryAffinity = rapid.Bool().Draw(t, "history_affinity")
	s.Sessions = rapid.IntRange(1, 8).Draw(t, "sessions")
	s.Epsilon = float64(rapid.IntRange(0, 8).Draw(t, "epsilon_quarters")) / 4
	s.HotPrefix.Utilization = rapid.SampledFrom([]float64{0.01, 0.1, 0.5}).Draw(t, "utilization")
	s.HotPrefix.Window = time.Second
	s.HotPrefix.Demand = rapid.SampledFrom([]string{DemandPrefill, DemandPrompt, DemandShare}).Draw(t, "demand")
	s.HotPrefix.Copies = rapid.Bool().Draw(t, "copies")
	s.KVGuard = rapid.SampledFrom([]string{KVGuardUsage, KVGuardFreeBlocks}).Draw(t, "kv_guard")
	return s
}

// checkTiesByChance picks 3,000 times with a policy of the kind seeded 7,
// and checks that the picks spread evenly over tied and nothing else, that
// a twin of the same seed picks alike and that seed 8 picks otherwise.
func checkTiesByChance(t *testing.T, kind string, req *Request, cands []Candidate, tied []string) {
	t.Helper()
	const picks = 3000
	p, _ := New(kind, 7)
	twin, _ := New(kind, 7)
	other, _ := New(kind, 8)
	counts := map[string]int{}
	same := true
	for range picks {
		got := pickID(p, req, cands)
		counts[got]++
		if want := pickID(twin, req, cands); got != want {
			t.Fatalf("same seed picked %s then %s", got, want)
		}
		same = same && got == pickID(other, req, cands)
	}
	even, in := picks/len(tied), 0
	for _, id := range tied {
		c := counts[id]
		in += c
		if c < even*85/100 || c > even*115/100 {
			t.Errorf("%s picked %d of %d times, want about %d: %v", id, c, picks, even, counts)
		}
	}
	if in != picks {
		t.Errorf("picked outside %v: %v", tied, counts)
	}
	if same {
		t.Error("seeds 7 and 8 made the same choices")
	}
}
