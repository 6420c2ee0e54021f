package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/inferrail/inferrail/internal/blockhash"
)

// chained returns the chain hashes of a prompt whose full blocks have the
// given contents: like the tokenizer's, each hash covers its block and every
// block before it, so prompts that differ in one block differ in every hash
// from there on.
func chained(contents ...uint64) []blockhash.Hash {
	out := make([]blockhash.Hash, len(contents))
	var parent blockhash.Hash
	for i, c := range contents {
		parent = blockhash.Hash{Hi: mix64(parent.Lo ^ c), Lo: mix64(parent.Hi + c + 1)}
		out[i] = parent
	}
	return out
}

// replicas returns n idle candidates r0 to r(n-1).
func replicas(n int) []Candidate {
	out := make([]Candidate, n)
	for i := range out {
		out[i] = Candidate{ID: fmt.Sprint("r", i), Cached: -1, Running: -1, KVUsage: -1}
	}
	return out
}

// pickID is the ID of the candidate p picks.
func pickID(p Policy, req *Request, cands []Candidate) string {
	return cands[p.Pick(req, cands).Index].ID
}

// TestPrefixHashRoutesOnFirstBlocks: prefix_hash sends a prompt where the
// hash of its first prefix_hash.blocks full blocks (all of them when it has
// fewer) says, whatever follows them, whatever the load and the order of
// the candidates. Each case routes pairs of prompts from many families: a
// shared start of `shared` blocks, then blocks of each prompt's own, and a
// partial last block of different length. Pairs whose hashed blocks are
// equal must land together; the others land together only by chance (1 in
// 5 here), and their first prompts spread over every replica.
func TestPrefixHashRoutesOnFirstBlocks(t *testing.T) {
	const families, n = 400, 5
	for _, tc := range []struct {
		name           string
		blocks         int // prefix_hash.blocks
		shared, la, lb int // blocks the pair shares, and each prompt's full blocks
		together       bool
	}{
		{"shares_the_hashed_blocks", 4, 4, 6, 9, true},
		{"differs_only_past_them", 4, 5, 5, 12, true},
		{"differs_only_in_the_partial_block", 4, 4, 4, 4, true},
		{"differs_in_the_first_block", 4, 0, 6, 6, false},
		{"differs_in_the_last_hashed_block", 4, 3, 6, 6, false},
		{"two_blocks_hashed", 2, 2, 6, 6, true},
		{"eight_blocks_hashed", 8, 4, 6, 6, false},
		{"short_prompt_hashes_all_its_blocks", 4, 2, 2, 2, true},
		{"short_prompt_and_a_longer_one", 4, 2, 2, 5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := DefaultSettings()
			s.PrefixHashBlocks = tc.blocks
			p, err := NewWith(PrefixHash, s)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(uint64(tc.blocks), uint64(tc.shared)))
			together := 0
			first := map[string]int{}
			for range families {
				content := func(l int, common []uint64) []uint64 {
					c := slices.Clone(common)
					for len(c) < l {
						c = append(c, r.Uint64())
					}
					return c[:l]
				}
				common := content(tc.shared, nil)
				a := &Request{PromptTokens: tc.la*16 + 3, Blocks: chained(content(tc.la, common)...), BlockSize: 16}
				b := &Request{PromptTokens: tc.lb*16 + 11, Blocks: chained(content(tc.lb, common)...), BlockSize: 16}
				ca := replicas(n)
				cb := replicas(n)
				r.Shuffle(n, func(i, j int) { cb[i], cb[j] = cb[j], cb[i] })
				for i := range cb {
					cb[i].InFlight = r.Int64N(50)
				}
				da, db := p.Pick(a, ca), p.Pick(b, cb)
				if da.Steered != "" || db.Steered != "" {
					t.Fatalf("steered %q and %q, want plain rendezvous choices", da.Steered, db.Steered)
				}
				ida, idb := ca[da.Index].ID, cb[db.Index].ID
				first[ida]++
				if ida == idb {
					together++
				} else if tc.together {
					t.Fatalf("prompts sharing their hashed blocks went to %s and %s", ida, idb)
				}
			}
			if tc.together {
				return
			}
			if share := float64(together) / families; share > 0.35 {
				t.Errorf("%.0f%% of pairs landed together, want about %.0f%% (chance)", 100*share, 100.0/n)
			}
			for _, c := range replicas(n) {
				if share := float64(first[c.ID]) / families; share < 0.1 || share > 0.3 {
					t.Errorf("%s took %.0f%% of distinct prefixes, want about %.0f%%: %v", c.ID, 100*share, 100.0/n, first)
				}
			}
		})
	}
}

// TestPrefixHashRendezvous: over many random prefixes, removing a replica
// moves only the prompts that were on it, and adding one moves prompts only
// to the new one (about 1 in n+1 of them).
func TestPrefixHashRendezvous(t *testing.T) {
	const prompts, n = 3000, 5
	p, _ := New(PrefixHash, 1)
	r := rand.New(rand.NewPCG(5, 5))
	reqs := make([]*Request, prompts)
	for i := range reqs {
		contents := make([]uint64, 1+r.IntN(8))
		for k := range contents {
			contents[k] = r.Uint64()
		}
		reqs[i] = &Request{PromptTokens: 16 * len(contents), Blocks: chained(contents...), BlockSize: 16}
	}
	all := replicas(n)
	before := make([]string, prompts)
	for i, req := range reqs {
		before[i] = pickID(p, req, all)
	}
	for gone := range n {
		t.Run(fmt.Sprint("remove_r", gone), func(t *testing.T) {
			rest := slices.Delete(replicas(n), gone, gone+1)
			slices.Reverse(rest)
			held := 0
			for i, req := range reqs {
				after := pickID(p, req, rest)
				if before[i] == all[gone].ID {
					held++
				} else if after != before[i] {
					t.Fatalf("prompt %d moved from %s to %s when %s left", i, before[i], after, all[gone].ID)
				}
			}
			if held < prompts/n/2 {
				t.Errorf("%s held only %d of %d prompts: the test is not testing", all[gone].ID, held, prompts)
			}
		})
	}
	t.Run("add_r5", func(t *testing.T) {
		more := replicas(n + 1)
		slices.Reverse(more)
		moved := 0
		for i, req := range reqs {
			switch after := pickID(p, req, more); after {
			case before[i]:
			case "r5":
				moved++
			default:
				t.Fatalf("prompt %d moved from %s to %s when r5 joined", i, before[i], after)
			}
		}
		if share := float64(moved) / prompts; share < 0.1 || share > 0.24 {
			t.Errorf("%.1f%% of prompts moved to the new replica, want about %.1f%%", 100*share, 100.0/(n+1))
		}
	})
}

// TestPrefixHashWithoutFullBlock: a prompt without a full block falls back
// to power of two choices, drawing exactly what p2c with the same seed
// draws, and its decision says so with Steered "no_prefix".
func TestPrefixHashWithoutFullBlock(t *testing.T) {
	for _, tc := range []struct {
		name    string
		req     *Request
		steered string
	}{
		{"not_tokenized", &Request{PromptTokens: 900}, "no_prefix"},
		{"shorter_than_a_block", &Request{PromptTokens: 15, Blocks: []blockhash.Hash{}, BlockSize: 16}, "no_prefix"},
		{"empty", &Request{}, "no_prefix"},
		{"one_full_block", &Request{PromptTokens: 17, Blocks: chained(1), BlockSize: 16}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := New(PrefixHash, 3)
			ref, _ := New(P2C, 3)
			r := rand.New(rand.NewPCG(3, 3))
			differs := false
			for i := range 200 {
				cands := replicas(6)
				for k := range cands {
					cands[k].InFlight = r.Int64N(4)
				}
				e := p.Explain(tc.req, cands)
				d := p.Pick(tc.req, cands)
				if d.Steered != tc.steered || e.Decision.Steered != tc.steered {
					t.Fatalf("pick %d: steered %q, explained %q, want %q", i, d.Steered, e.Decision.Steered, tc.steered)
				}
				if e.Decision.Index != d.Index {
					t.Fatalf("pick %d: explained %d, picked %d", i, e.Decision.Index, d.Index)
				}
				if want := ref.Pick(tc.req, cands).Index; d.Index != want {
					differs = true
					if tc.steered != "" {
						t.Fatalf("pick %d: chose %s, p2c with the same seed chose %s", i, cands[d.Index].ID, cands[want].ID)
					}
				}
			}
			if tc.steered == "" && !differs {
				t.Error("a prompt with a full block was routed as p2c routes")
			}
		})
	}
}

// TestKVAwareScore: kv_aware scores CacheWeight·cached/prompt −
// LoadWeight·in_flight/busiest and picks the best, so the winner changes
// with the weights. The prompt has 1,000 tokens; unless a case says
// otherwise a holds 800 of them with 4 in flight (the busiest), b none
// with none in flight, c 600 with 2.
func TestKVAwareScore(t *testing.T) {
	cand := func(id string, cached int, inFlight int64) Candidate {
		return Candidate{ID: id, Cached: cached, InFlight: inFlight, Running: -1, KVUsage: -1}
	}
	abc := []Candidate{cand("a", 800, 4), cand("b", 0, 0), cand("c", 600, 2)}
	for _, tc := range []struct {
		name        string
		cache, load float64
		prompt      int
		cands       []Candidate
		scores      []float64
		winner      string
	}{
		{"defaults_favour_c", 1, 1, 1000, abc, []float64{0.8 - 1, 0, 0.6 - 0.5}, "c"},
		{"load_weight_2_favours_the_idle_b", 1, 2, 1000, abc, []float64{0.8 - 2, 0, 0.6 - 1}, "b"},
		{"cache_weight_3_favours_a", 3, 1, 1000, abc, []float64{2.4 - 1, 0, 1.8 - 0.5}, "a"},
		{"cache_weight_0_is_least_load", 0, 1, 1000, abc, []float64{-1, 0, -0.5}, "b"},
		{"load_weight_0_is_most_cache", 1, 0, 1000, abc, []float64{0.8, 0, 0.6}, "a"},
		{
			name: "idle_fleet_has_no_load_term", cache: 1, load: 5, prompt: 1000,
			cands:  []Candidate{cand("a", 200, 0), cand("b", 300, 0)},
			scores: []float64{0.2, 0.3}, winner: "b",
		},
		{
			name: "no_prediction_counts_as_nothing_cached", cache: 1, load: 1, prompt: 1000,
			cands:  []Candidate{cand("a", -1, 0), cand("b", 400, 2)},
			scores: []float64{0, 0.4 - 1}, winner: "a",
		},
		{
			name: "prediction_clamped_to_the_prompt", cache: 2, load: 1, prompt: 1000,
			cands:  []Candidate{cand("a", 5000, 2), cand("b", 900, 1)},
			scores: []float64{2 - 1, 1.8 - 0.5}, winner: "b",
		},
		{
			name: "unknown_prompt_length_has_no_cache_term", cache: 1, load: 1, prompt: 0,
			cands:  []Candidate{cand("a", 900, 3), cand("b", 0, 1)},
			scores: []float64{-1, -1.0 / 3}, winner: "b",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := DefaultSettings()
			s.KVAware = KVWeights{CacheWeight: tc.cache, LoadWeight: tc.load}
			p, err := NewWith(KVAware, s)
			if err != nil {
				t.Fatal(err)
			}
			req := &Request{PromptTokens: tc.prompt}
			e := p.Explain(req, tc.cands)
			for i, want := range tc.scores {
				if got := e.Replicas[i].Score; math.Abs(got-want) > 1e-12 {
					t.Errorf("%s scored %v, want %v", tc.cands[i].ID, got, want)
				}
			}
			if got := pickID(p, req, tc.cands); got != tc.winner || e.Winner != tc.winner {
				t.Errorf("picked %s, explained %s, want %s", got, e.Winner, tc.winner)
			}
		})
	}
}

// TestKVAwareTies: equal scores go to fewer requests in flight, in any
// order; equal scores and loads go to chance, uniformly, the same way for
// the same seed. With a prompt of 1,000 tokens and the default weights,
// x (500 cached, 2 of a busiest 4 in flight) and y (nothing cached, idle)
// both score 0; z (the busiest, nothing cached) scores −1.
func TestKVAwareTies(t *testing.T) {
	req := &Request{PromptTokens: 1000}
	x := Candidate{ID: "x", Cached: 500, InFlight: 2, Running: -1, KVUsage: -1}
	y := Candidate{ID: "y", Cached: 0, InFlight: 0, Running: -1, KVUsage: -1}
	z := Candidate{ID: "z", Cached: 0, InFlight: 4, Running: -1, KVUsage: -1}
	for _, order := range [][]Candidate{{x, y, z}, {y, x, z}, {z, x, y}, {z, y, x}} {
		var ids string
		for _, c := range order {
			ids += c.ID
		}
		t.Run("fewer_in_flight_"+ids, func(t *testing.T) {
			for seed := range uint64(20) {
				p, _ := New(KVAware, seed)
				if got := pickID(p, req, order); got != "y" {
					t.Fatalf("seed %d: picked %s, want y (score 0 with 0 in flight, x scores 0 with 2)", seed, got)
				}
			}
		})
	}

	t.Run("then_chance", func(t *testing.T) {
		// p, q and r tie on score (0.5 − 0.5) and load; z scores −1.
		cands := []Candidate{x, x, z, x}
		cands[0].ID, cands[1].ID, cands[3].ID = "p", "q", "r"
		checkTiesByChance(t, KVAware, req, cands, []string{"p", "q", "r"})
	})
}
