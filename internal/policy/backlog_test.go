package policy

import (
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestBacklogCost: a conversation's context is cached on "warm", whose
// queue is longer; "cold" would compute the whole prompt. Without the
// backlog charge the queue decides; with it, cold is charged its extra
// prefill once per request its engine has waiting.
func TestBacklogCost(t *testing.T) {
	req := &Request{ID: "turn", PromptTokens: 8192}
	cost := DefaultSettings().Cost
	extra := cost.Prefill(8192, 0) - cost.Prefill(192, 8000)
	tests := []struct {
		name        string
		backlog     bool
		coldWaiting float64
		warmFlight  int64   // in flight on warm; 10 with Epsilon 0 sets it aside
		winner      string  // Pick's and Explain's
		decidedBy   string  // Explain's
		coldCharge  float64 // cold's Estimate.BacklogSecs
	}{
		{name: "off", backlog: false, coldWaiting: 2, winner: "cold", decidedBy: TermQueue},
		{name: "nothing_waiting", backlog: true, coldWaiting: 0, winner: "cold", decidedBy: TermQueue},
		{name: "one_waiting", backlog: true, coldWaiting: 1, winner: "cold", decidedBy: TermQueue, coldCharge: extra},
		{name: "two_waiting", backlog: true, coldWaiting: 2, winner: "warm", decidedBy: TermBacklog, coldCharge: 2 * extra},
		// Charged against the least prefill of the allowed candidates only:
		// with warm set aside, cold needs the least and pays nothing.
		{name: "warm_set_aside", backlog: true, coldWaiting: 2, warmFlight: 10, winner: "cold"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := DefaultSettings()
			s.BacklogCost, s.Epsilon = tt.backlog, 0
			p, err := NewWith(CostModel, s)
			if err != nil {
				t.Fatal(err)
			}
			cands := []Candidate{
				{ID: "warm", Cached: 8000, QueuedPrefill: 2.5, Waiting: 3, InFlight: tt.warmFlight, Running: 0, KVUsage: 0.5},
				{ID: "cold", Cached: 0, QueuedPrefill: 0.2, Waiting: tt.coldWaiting, Running: 0, KVUsage: 0.5},
			}
			d := p.Pick(req, cands)
			if cands[d.Index].ID != tt.winner {
				t.Errorf("picked %s, want %s", cands[d.Index].ID, tt.winner)
			}
			if want := cost.Estimate(req, &cands[d.Index]).TTFTSecs; math.Abs(d.EstimatedTTFT-want) > 1e-12 {
				t.Errorf("decision's estimated TTFT %v s, want the winner's estimate %v s (no charge in it)", d.EstimatedTTFT, want)
			}
			ex := p.Explain(req, cands)
			if ex.Winner != tt.winner || ex.DecidedBy != tt.decidedBy {
				t.Errorf("explained %s decided by %q, want %s by %q", ex.Winner, ex.DecidedBy, tt.winner, tt.decidedBy)
			}
			warm, cold := ex.Replicas[0].Estimate, ex.Replicas[1].Estimate
			if warm.BacklogSecs != 0 || math.Abs(cold.BacklogSecs-tt.coldCharge) > 1e-12 {
				t.Errorf("charged warm %v s and cold %v s, want 0 and %v", warm.BacklogSecs, cold.BacklogSecs, tt.coldCharge)
			}
			if want := cost.Estimate(req, &cands[1]).TTFTSecs; cold.TTFTSecs != want {
				t.Errorf("cold's TTFT estimate %v s, want %v: the charge is not part of it", cold.TTFTSecs, want)
			}
		})
	}
}

// TestBacklogCostNothingWaiting: where no engine has anything waiting,
// the charge changes no pick, through any sequence of requests.
func TestBacklogCostNothingWaiting(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		clk := newFakeClock()
		s := drawSettings(t, clk)
		plain, err := NewWith(CostModel, s)
		if err != nil {
			t.Fatal(err)
		}
		s.BacklogCost = true
		charged, _ := NewWith(CostModel, s)
		w := world{replicas: rapid.IntRange(1, 6).Draw(t, "replicas")}
		for range rapid.IntRange(1, 30).Draw(t, "requests") {
			req := w.request(t)
			cands := w.candidates(t, req, nil)
			a, b := plain.Pick(req, cands), charged.Pick(req, slices.Clone(cands))
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("nothing waiting anywhere: with the charge %+v, without %+v", b, a)
			}
			clk.add(time.Duration(rapid.IntRange(0, 200).Draw(t, "gap_ms")) * time.Millisecond)
		}
	})
}

// TestBacklogCostRanksByCharge checks cost_model against a naive model of
// the charge: with no hot prefix, session or history to steer, the winner
// has the least estimate plus charge of the allowed candidates, the charge
// being (P − least allowed P) · pace · waiting, and never negative (a
// candidate set aside may need less).
func TestBacklogCostRanksByCharge(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := DefaultSettings()
		s.BacklogCost = true
		s.Epsilon = float64(rapid.IntRange(0, 8).Draw(t, "epsilon_quarters")) / 4
		p, err := NewWith(CostModel, s)
		if err != nil {
			t.Fatal(err)
		}
		w := world{replicas: rapid.IntRange(1, 6).Draw(t, "replicas")}
		req := w.request(t)
		req.Blocks, req.Session = nil, "" // nothing but the estimates steers
		cands := w.candidates(t, req, nil)
		for i := range cands {
			cands[i].Cached = rapid.IntRange(-1, req.PromptTokens).Draw(t, "cached")
			cands[i].Waiting = float64(rapid.IntRange(0, 12).Draw(t, "waiting"))
			cands[i].Pace = rapid.SampledFrom([]float64{0, 0.5, 1, 3}).Draw(t, "pace")
		}
		ex := p.Explain(req, cands)
		least := math.Inf(1)
		for i, r := range ex.Replicas {
			if r.SetAside == "" {
				least = min(least, s.Cost.Estimate(req, &cands[i]).PrefillSecs)
			}
		}
		rank := func(i int) float64 {
			e := s.Cost.Estimate(req, &cands[i])
			return e.TTFTSecs + max(e.PrefillSecs-least, 0)*paceOf(&cands[i])*cands[i].Waiting
		}
		win := slices.IndexFunc(cands, func(c Candidate) bool { return c.ID == ex.Winner })
		for i, r := range ex.Replicas {
			if want := rank(i) - r.Estimate.TTFTSecs; math.Abs(r.Estimate.BacklogSecs-want) > 1e-9 {
				t.Fatalf("%s charged %v s, the naive model %v s", r.ID, r.Estimate.BacklogSecs, want)
			}
			if r.SetAside == "" && rank(i) < rank(win)-1e-9 {
				t.Fatalf("picked %s ranked %v, but %s ranks %v", ex.Winner, rank(win), r.ID, rank(i))
			}
		}
		if d := p.Pick(req, cands); cands[d.Index].ID != ex.Winner && math.Abs(rank(d.Index)-rank(win)) > 1e-9 {
			t.Fatalf("Pick chose %s, Explain %s", cands[d.Index].ID, ex.Winner)
		}
	})
}
