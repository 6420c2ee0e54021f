package calibrate

import (
	"math"
	"testing"
)

// runProbes lays out probes as Run sends them for DefaultDesign, with TTFTs
// from truth: before each probe with a cached part, the part alone, whose
// first send computes it all and every later one finds it cached.
func runProbes(truth Params) []Probe {
	d := DefaultDesign()
	var probes []Probe
	add := func(kind string, pu, pc, prompt, cached int) {
		probes = append(probes, Probe{Kind: kind, PlannedUncached: pu, PlannedCached: pc, PromptTokens: prompt, Cached: cached,
			TTFT: truth.Prefill(float64(prompt-cached), float64(cached))})
	}
	add("warmup", 64, 0, 64, 0)
	for _, c := range d.Cached {
		first := true
		for _, u := range d.Uncached {
			for range d.Reps {
				if c > 0 {
					if first {
						add("prefix", c, 0, c, 0)
						first = false
					} else {
						add("prefix", c, 0, c, c-16)
					}
				}
				add("probe", u, c, u+c, c)
			}
		}
	}
	return probes
}

func TestFitProbesLeavesOutUnrepeatedShapes(t *testing.T) {
	truth := Params{TokenSecs: 50e-6, PairSecs: 8e-9, FixedSecs: 2e-3}
	tests := []struct {
		name           string
		reps           int
		wantUnrepeated int // probes left out as unrepeated
		wantExact      bool
	}{
		// The two uncached first sends (4,096 and 16,384 tokens) are each
		// measured once; the 16,384 one ran 45 ms late (as a loaded host
		// made it once), which the fit must not see.
		{name: "design_reps", reps: 3, wantUnrepeated: 2, wantExact: true},
		// With one repetition nothing is repeated and everything is fitted,
		// late wakeup included.
		{name: "one_rep", reps: 1, wantUnrepeated: 0, wantExact: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			probes := runProbes(truth)
			late := -1
			for i, p := range probes {
				if p.Kind == "prefix" && p.Cached == 0 && p.PlannedUncached == 16384 {
					probes[i].TTFT += 0.045
					late = i
				}
			}
			if late < 0 {
				t.Fatal("no uncached first send of the 16,384-token part")
			}
			got, err := fitProbes(probes, tt.reps)
			if err != nil {
				t.Fatal(err)
			}
			unrepeated := 0
			for _, p := range probes {
				if p.Unrepeated {
					unrepeated++
					if p.Kind != "prefix" || p.Cached != 0 {
						t.Errorf("probe %+v left out as unrepeated; only uncached first sends are measured once", p)
					}
				}
			}
			if unrepeated != tt.wantUnrepeated {
				t.Errorf("%d probes left out as unrepeated, want %d", unrepeated, tt.wantUnrepeated)
			}
			if want := 0.045; tt.wantExact && math.Abs(probes[late].Residual-want) > 1e-6 {
				t.Errorf("late probe's residual %g s, want its delay %g s", probes[late].Residual, want)
			}
			exact := math.Abs(got.TokenSecs-truth.TokenSecs) <= 1e-3*truth.TokenSecs &&
				math.Abs(got.PairSecs-truth.PairSecs) <= 1e-3*truth.PairSecs &&
				math.Abs(got.FixedSecs-truth.FixedSecs) <= 1e-3*truth.FixedSecs
			if exact != tt.wantExact {
				t.Errorf("fit %+v against truth %+v: within 0.1%% = %v, want %v", got, truth, exact, tt.wantExact)
			}
		})
	}
}
