package policy

import (
	"slices"
	"sync"
	"testing"

	"pgregory.net/rapid"
)

func cands(load ...int64) []Candidate {
	out := make([]Candidate, len(load))
	for i, l := range load {
		out[i] = Candidate{ID: string(rune('a' + i)), InFlight: l}
	}
	return out
}

// TestConformance runs every policy through the rules all of them obey.
func TestConformance(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				seed := rapid.Uint64().Draw(t, "seed")
				loads := rapid.SliceOfN(rapid.Int64Range(0, 5), 1, 12).Draw(t, "loads")
				p, err := New(name, seed)
				if err != nil {
					t.Fatal(err)
				}
				q, _ := New(name, seed)
				for range 20 {
					i := p.Pick(&Request{}, cands(loads...)).Index
					if i < 0 || i >= len(loads) {
						t.Fatalf("picked %d of %d", i, len(loads))
					}
					if j := q.Pick(&Request{}, cands(loads...)).Index; j != i {
						t.Fatalf("same seed, same calls: %d then %d", i, j)
					}
				}
			})
		})
	}
	if _, err := New("nope", 0); err == nil {
		t.Error("New accepted an unknown policy")
	}
}

func TestLeastRequestPicksAMinimum(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		loads := rapid.SliceOfN(rapid.Int64Range(0, 4), 1, 10).Draw(t, "loads")
		p, _ := New(LeastRequest, rapid.Uint64().Draw(t, "seed"))
		i := p.Pick(&Request{}, cands(loads...)).Index
		if loads[i] != slices.Min(loads) {
			t.Fatalf("picked load %d, minimum is %d", loads[i], slices.Min(loads))
		}
	})
}

func TestP2CNeverPicksAUniqueMaximum(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		loads := rapid.SliceOfN(rapid.Int64Range(0, 4), 2, 10).Draw(t, "loads")
		top := slices.Max(loads)
		if count := len(slices.DeleteFunc(slices.Clone(loads), func(l int64) bool { return l != top })); count != 1 {
			return
		}
		p, _ := New(P2C, rapid.Uint64().Draw(t, "seed"))
		if i := p.Pick(&Request{}, cands(loads...)).Index; loads[i] == top {
			t.Fatalf("picked the unique maximum %d of %v", top, loads)
		}
	})
}

// TestUniformChoices checks that choices among equals spread evenly: a
// chi-squared test at a generous threshold, so it fails only on real bias.
func TestUniformChoices(t *testing.T) {
	const n, draws = 5, 20000
	for _, name := range Names() {
		p, _ := New(name, 42)
		counts := make([]int, n)
		for range draws {
			counts[p.Pick(&Request{}, cands(0, 0, 0, 0, 0)).Index]++
		}
		exp := float64(draws) / n
		chi := 0.0
		for _, c := range counts {
			chi += (float64(c) - exp) * (float64(c) - exp) / exp
		}
		if chi > 30 { // p < 1e-5 for 4 degrees of freedom
			t.Errorf("%s: counts %v far from uniform (chi² %.1f)", name, counts, chi)
		}
	}
}

func TestRoundRobinCycles(t *testing.T) {
	p, _ := New(RoundRobin, 0)
	var got []int
	for range 7 {
		got = append(got, p.Pick(&Request{}, cands(9, 0, 5)).Index)
	}
	if want := []int{0, 1, 2, 0, 1, 2, 0}; !slices.Equal(got, want) {
		t.Errorf("round robin picked %v, want %v", got, want)
	}
}

func TestConcurrentPicks(t *testing.T) {
	for _, name := range Names() {
		p, _ := New(name, 1)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for i := range 2000 {
					c := cands(int64(i%3), 1, 2)
					if k := p.Pick(&Request{}, c).Index; k < 0 || k >= len(c) {
						t.Errorf("%s picked %d", name, k)
						return
					}
				}
			})
		}
		wg.Wait()
	}
}
