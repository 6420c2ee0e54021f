package gateway

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
)

// TestTwoExactGatewaysAgree puts two gateways in exact mode, with the same
// config, in front of the same simulators, sends multi-turn chats through
// both in turn (some at once), and checks that once both have applied every
// batch the engines published, their /admin/index agree replica by replica:
// mirrored blocks, last sequence, blocks stored and removed, and the digest
// of the mirrored gateway hashes. Asked about the same prompts, both then
// predict the same cached tokens on every replica.
func TestTwoExactGatewaysAgree(t *testing.T) {
	sims, cfg := eventFleet(t, 3, 72, config.IndexExact) // small caches: evictions
	// Speculation is each gateway's own; let it end soon after the traffic.
	cfg.Index.SpeculativeTTL = config.Duration(100 * time.Millisecond)
	gws := []*running{startGateway(t, cfg), startGateway(t, cfg)}
	for _, gw := range gws {
		waitFollowing(t, gw, len(sims))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	systems := make([]string, 4)
	for i := range systems {
		systems[i] = strings.Repeat(fmt.Sprintf("You are agent %d; keep answers short. ", i), 10+6*i)
	}
	convs := make([]*conversation, 10)
	for i := range convs {
		convs[i] = &conversation{system: systems[rng.IntN(len(systems))]}
	}
	// Rounds of three requests at once on three conversations, the request
	// of each going to the gateways in turn.
	n := 0
	for range 20 {
		var wg sync.WaitGroup
		for _, ci := range rng.Perm(len(convs))[:3] {
			c, gw := convs[ci], gws[n%len(gws)]
			n++
			c.turns = append(c.turns, fmt.Sprintf("question %d about item %d", n, rng.IntN(1000)))
			if len(c.turns) > 7 {
				c.turns = c.turns[len(c.turns)-3:]
			}
			body := c.body()
			wg.Go(func() {
				if resp, b := chat(t, gw.url, body); resp.StatusCode != http.StatusOK {
					t.Errorf("status %d: %s", resp.StatusCode, b)
				}
			})
			c.turns = append(c.turns, "an earlier answer")
		}
		wg.Wait()
	}
	for _, gw := range gws {
		catchUp(t, gw, sims)
	}
	a, b := adminIndex(t, gws[0].admin).KVEvents, adminIndex(t, gws[1].admin).KVEvents
	if len(a) != len(sims) || len(b) != len(sims) {
		t.Fatalf("streams: %d and %d, want %d", len(a), len(b), len(sims))
	}
	removed, mirrored := uint64(0), 0
	for i := range a {
		if x, y := agreeText(&a[i]), agreeText(&b[i]); x != y {
			t.Errorf("gateway 1 has %s, gateway 2 %s", x, y)
		}
		t.Log(agreeText(&a[i]))
		removed += a[i].Mirror.Removed
		mirrored += a[i].Mirrored
	}
	if mirrored == 0 {
		t.Error("nothing mirrored")
	}
	if removed == 0 {
		t.Error("no block evicted: the test does not exercise removals")
	}
	// Same mirrors, no speculation left: the same predictions.
	time.Sleep(3 * time.Duration(cfg.Index.SpeculativeTTL))
	for i, c := range convs {
		c.turns = append(c.turns, "one more question")
		pa, pb := explainCached(t, gws[0].admin, c.body()), explainCached(t, gws[1].admin, c.body())
		if pa != pb {
			t.Errorf("conversation %d: gateway 1 predicts cached tokens %s, gateway 2 %s", i, pa, pb)
		}
	}
}

// explainCached asks /admin/explain about a chat and returns the cached
// tokens it predicts on each replica, as text.
func explainCached(t *testing.T, admin, body string) string {
	t.Helper()
	var ans struct {
		Replicas []struct {
			ID     string `json:"replica"`
			Cached *int   `json:"cached_tokens"`
		} `json:"replicas"`
	}
	postExplain(t, admin+"/admin/explain/v1/chat/completions", body, &ans)
	var parts []string
	for _, r := range ans.Replicas {
		if r.Cached == nil {
			t.Fatalf("%s: no prediction", r.ID)
		}
		parts = append(parts, fmt.Sprintf("%s:%d", r.ID, *r.Cached))
	}
	return strings.Join(parts, " ")
}

// agreeText is what two gateways' streams of the same engine must agree
// on, as text.
func agreeText(s *kvStatus) string {
	seq := "none"
	if s.LastSeq != nil {
		seq = fmt.Sprint(*s.LastSeq)
	}
	return fmt.Sprintf("%s: %d blocks mirrored, last seq %s, %d stored, %d removed, digest %s",
		s.ID, s.Mirrored, seq, s.Mirror.Stored, s.Mirror.Removed, s.Digest)
}
