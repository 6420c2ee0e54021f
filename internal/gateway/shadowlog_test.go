package gateway

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/policy"
)

// TestAppendDecisionDecodes: the hand-written decision line is JSON that
// decodes to exactly the record the replay expects, for any strings and
// numbers a decision can hold.
func TestAppendDecisionDecodes(t *testing.T) {
	anyFloat := rapid.OneOf(rapid.Float64(), rapid.SampledFrom([]float64{0, -1, 1e-7, 1e21, 5e-324, 1.7976931348623157e308, -0.5}))
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 5).Draw(t, "candidates")
		job := &shadowJob{gen: &generation{n: rapid.Uint64().Draw(t, "generation")}, model: rapid.String().Draw(t, "model"),
			policy: rapid.String().Draw(t, "policy")}
		job.req = policy.Request{ID: rapid.String().Draw(t, "id"), PromptTokens: rapid.Int().Draw(t, "tokens"),
			Session: rapid.String().Draw(t, "session"), At: time.Unix(0, rapid.Int64().Draw(t, "at"))}
		if rapid.Bool().Draw(t, "tokenized") {
			job.req.BlockSize = rapid.IntRange(1, 64).Draw(t, "block_size")
			for range rapid.IntRange(0, 4).Draw(t, "blocks") {
				job.req.Blocks = append(job.req.Blocks, blockhash.Hash{Hi: rapid.Uint64().Draw(t, "hi"), Lo: rapid.Uint64().Draw(t, "lo")})
			}
		}
		for range n {
			job.cands = append(job.cands, policy.Candidate{ID: rapid.String().Draw(t, "replica"), InFlight: rapid.Int64().Draw(t, "in_flight"),
				Cached: rapid.Int().Draw(t, "cached"), QueuedPrefill: anyFloat.Draw(t, "queued"), Running: rapid.Int64().Draw(t, "running"),
				KVUsage: anyFloat.Draw(t, "kv"), KVCapacityBlocks: rapid.Int().Draw(t, "capacity"), Pace: anyFloat.Draw(t, "pace"),
				Waiting: anyFloat.Draw(t, "waiting")})
		}
		job.routed = policy.Decision{Index: rapid.IntRange(0, n-1).Draw(t, "routed"), EstimatedTTFT: anyFloat.Draw(t, "estimate")}
		var picks []shadowPick
		for range rapid.IntRange(0, 3).Draw(t, "picks") {
			i := rapid.IntRange(0, n-1).Draw(t, "pick")
			picks = append(picks, shadowPick{Policy: rapid.String().Draw(t, "shadow"), Index: i, Replica: job.cands[i].ID, Estimate: anyFloat.Draw(t, "pick_estimate")})
		}
		routed := shadowPick{Policy: job.policy, Index: job.routed.Index, Replica: job.cands[job.routed.Index].ID, Estimate: job.routed.EstimatedTTFT}

		line := appendDecision(nil, job, &routed, picks)
		var got shadowRecord
		if err := json.Unmarshal(line, &got); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, line)
		}
		want := shadowRecord{Kind: recordDecision, Generation: job.gen.n, Model: job.model, Routed: &routed, Picks: picks,
			Request: &loggedRequest{ID: job.req.ID, PromptTokens: job.req.PromptTokens, BlockSize: job.req.BlockSize, Session: job.req.Session, At: job.req.At.UnixNano()}}
		for _, h := range job.req.Blocks {
			want.Request.Blocks = append(want.Request.Blocks, h.String())
		}
		for _, c := range job.cands {
			want.Candidates = append(want.Candidates, loggedCandidate(c))
		}
		// Strings decode as valid UTF-8 (invalid bytes become U+FFFD), as
		// encoding/json also writes them; compare with what it decodes.
		wantJSON, _ := json.Marshal(want)
		var wantBack shadowRecord
		if err := json.Unmarshal(wantJSON, &wantBack); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantBack, got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("decoded record differs (-want +got):\n%s\n%s", diff, line)
		}
	})
}
