package policy

import (
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// TestExplainPredictsPick: for every policy, under any sequence of
// requests with sessions and hot prefixes in play, explaining never
// changes the next choice (a twin that is never asked to explain picks the
// same), and the explanation names the replica, guards and steering that
// routing then picks; PickExplained picks as Pick does and explains as
// Explain did just before.
func TestExplainPredictsPick(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				clk := newFakeClock()
				s := drawSettings(t, clk)
				p, err := NewWith(name, s)
				if err != nil {
					t.Fatal(err)
				}
				twin, _ := NewWith(name, s)
				w := world{replicas: rapid.IntRange(1, 6).Draw(t, "replicas")}
				for range rapid.IntRange(1, 40).Draw(t, "steps") {
					req := w.request(t)
					cands := w.candidates(t, req, nil)
					explained := rapid.Bool().Draw(t, "explain")
					var e Explanation
					if explained {
						e = p.Explain(req, cands)
						if again := p.Explain(req, cands); !cmp.Equal(e, again) {
							t.Fatalf("two explanations differ:\n%s", cmp.Diff(e, again))
						}
					}
					var d Decision
					if explained && rapid.Bool().Draw(t, "pick_explained") {
						var own Explanation
						d, own = p.PickExplained(req, cands)
						if !cmp.Equal(e, own) {
							t.Fatalf("PickExplained explains otherwise than Explain:\n%s", cmp.Diff(e, own))
						}
					} else {
						d = p.Pick(req, cands)
					}
					if dt := twin.Pick(req, cands); !cmp.Equal(d, dt) {
						t.Fatalf("explaining changed the choice:\n%s", cmp.Diff(dt, d))
					}
					if d.Index < 0 || d.Index >= len(cands) {
						t.Fatalf("picked %d of %d", d.Index, len(cands))
					}
					if explained {
						if diff := cmp.Diff(e.Decision, d); diff != "" {
							t.Fatalf("explanation and pick differ (-explained +picked):\n%s", diff)
						}
						if e.Winner != cands[d.Index].ID {
							t.Fatalf("explanation names %s, pick chose %s", e.Winner, cands[d.Index].ID)
						}
						checkExplanation(t, name, req, cands, e)
					}
					clk.add(time.Duration(rapid.IntRange(0, 300).Draw(t, "ms")) * time.Millisecond)
				}
			})
		})
	}
}

// checkExplanation checks what every explanation promises.
func checkExplanation(t *rapid.T, name string, req *Request, cands []Candidate, e Explanation) {
	if e.Policy != name || len(e.Replicas) != len(cands) || e.PromptTokens != req.PromptTokens {
		t.Fatalf("explanation header %+v for %d candidates", e, len(cands))
	}
	if e.Replicas[e.Decision.Index].SetAside != "" {
		t.Fatalf("winner was set aside by %s", e.Replicas[e.Decision.Index].SetAside)
	}
	for i, r := range e.Replicas {
		if r.ID != cands[i].ID || r.CachedTokens != cands[i].Cached {
			t.Fatalf("replica %d explained as %+v, offered as %+v", i, r, cands[i])
		}
		est := r.Estimate
		if math.Abs(est.QueueSecs+est.PrefillSecs+est.TierSecs-est.TTFTSecs) > 1e-12 {
			t.Fatalf("replica %d: terms %+v do not add up", i, est)
		}
	}
	if name != CostModel {
		return
	}
	// The winner ranks lowest (its estimate less a copier's credit) among
	// the allowed candidates unless the session or the history steered it.
	// A credit steered it exactly when, with nobody credited, it would
	// have lost to another allowed candidate: the hot prefix's for an
	// owner, the copy's for a copier.
	if e.Decision.Steered != SteerSession && e.Decision.Steered != SteerHistory {
		rank := func(r CandidateExplanation) float64 { return r.Estimate.TTFTSecs - r.Estimate.CopyCreditSecs }
		w := e.Replicas[e.Decision.Index]
		beaten := false
		for i, r := range e.Replicas {
			if r.SetAside == "" && rank(r) < rank(w) {
				t.Fatalf("replica %d ranks lower (%v) than the winner (%v)", i, rank(r), rank(w))
			}
			// Priced without any credit, its own or another's (drawSettings
			// leaves the cost model and backlog at their defaults).
			plain := DefaultSettings().Cost.Estimate(req, &cands[i]).TTFTSecs
			beaten = beaten || (i != e.Decision.Index && r.SetAside == "" && plain < e.Decision.EstimatedTTFT)
		}
		want := ""
		switch {
		case beaten && w.Estimate.CopyCreditSecs > 0:
			want = SteerCopy
		case beaten:
			want = SteerHotPrefix
		}
		if e.Decision.Steered != want {
			t.Fatalf("steered %q, want %q (beaten without its credit: %v)", e.Decision.Steered, want, beaten)
		}
	}
	if _, err := json.Marshal(e); err != nil {
		t.Fatal(err)
	}
}

// TestExplainChangesNothing: a thousand explanations leave every policy's
// next pick where it was.
func TestExplainChangesNothing(t *testing.T) {
	clk := newFakeClock()
	for _, name := range Names() {
		s := clk.seeded(9)
		s.SessionAffinity = true
		p, _ := NewWith(name, s)
		twin, _ := NewWith(name, s)
		req := &Request{ID: "x", PromptTokens: 1000, Blocks: chain(0, 40, 1, 62), BlockSize: 16, Session: "s"}
		cands := []Candidate{
			{ID: "a", InFlight: 1, Cached: 640, Running: -1, KVUsage: -1},
			{ID: "b", InFlight: 1, Cached: 0, Running: -1, KVUsage: -1},
			{ID: "c", InFlight: 1, Cached: 0, Running: -1, KVUsage: -1},
		}
		for range 1000 {
			p.Explain(req, cands)
		}
		for i := range 50 {
			if a, b := p.Pick(req, cands), twin.Pick(req, cands); !cmp.Equal(a, b) {
				t.Fatalf("%s: pick %d after explanations %+v, without %+v", name, i, a, b)
			}
		}
	}
}

// TestPickExplainedConcurrent: however many requests decide at once, the
// explanation PickExplained returns is of the decision it returns (found
// by a review: the gateway's Explain then Pick let another request's Pick
// come in between). The requests share a conversation and a hot root
// prefix, so each Pick changes what the next one decides.
func TestPickExplainedConcurrent(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			s := DefaultSettings()
			s.Seed, s.SessionAffinity = 5, true
			p, err := NewWith(name, s)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					for i := range 500 {
						req := &Request{ID: "r", PromptTokens: 1000, Blocks: chain(0, 40, uint64(g*1000+i), 62), BlockSize: 16, Session: fmt.Sprint("s", i%3)}
						cands := []Candidate{
							{ID: "a", InFlight: int64(i % 2), Cached: 640, Running: -1, KVUsage: -1},
							{ID: "b", InFlight: 1, Cached: 0, Running: -1, KVUsage: -1},
							{ID: "c", InFlight: int64(i % 3), Cached: 0, Running: -1, KVUsage: -1},
						}
						d, x := p.PickExplained(req, cands)
						if !cmp.Equal(d, x.Decision) || x.Winner != cands[d.Index].ID {
							t.Errorf("picked %+v (%s), explained %+v (%s)", d, cands[d.Index].ID, x.Decision, x.Winner)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}
