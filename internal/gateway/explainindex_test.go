package gateway

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/policy"
)

// TestExplainDecisionIndexesItsReplicas: an explanation's decision.index
// is the winner's place in the replicas it lists, every replica serving
// the model, offered or not. It was the winner's place among the offered
// ones, so with the first replica full it named that one (found by a
// review).
func TestExplainDecisionIndexesItsReplicas(t *testing.T) {
	gate := make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	hold := promptEngine(t, nil, func(prompt string, _ http.ResponseWriter, r *http.Request) bool {
		return prompt == "hold" && holdUntil(gate, r)
	})
	cfg := flowConfig(hold, 0)
	cfg.Replicas = append(cfg.Replicas, config.Replica{ID: "two", URL: hold, Models: []string{testModel}, MaxConcurrency: 1, MaxPending: 1})
	cfg.Routing.DefaultPolicy = "round_robin"
	gw := startGateway(t, cfg)
	held := asyncBody(gw, "held", `{"model":"sim","prompt":"hold","max_tokens":1}`)
	waitFor(t, "replica one held", 5*time.Second, func() bool { return gw.g.fleet.Snapshot().Get("one").InFlight() == 1 })
	var ans struct {
		Winner   string `json:"winner"`
		Decision struct {
			Index int `json:"index"`
		} `json:"decision"`
		Replicas []struct {
			ID         string `json:"replica"`
			NotOffered string `json:"not_offered"`
		} `json:"replicas"`
	}
	postExplain(t, gw.admin+"/admin/explain/v1/completions", `{"model":"sim","prompt":"next","max_tokens":1}`, &ans)
	if len(ans.Replicas) != 2 || ans.Winner != "two" || ans.Replicas[0].NotOffered == "" {
		t.Fatalf("explained %+v; want two replicas, one full, two the winner", ans)
	}
	if i := ans.Decision.Index; i < 0 || i >= len(ans.Replicas) || ans.Replicas[i].ID != ans.Winner {
		t.Errorf("decision.index %d names %+v, not the winner %s", i, ans.Replicas, ans.Winner)
	}
	release()
	<-held
}

// TestExplainShowsZeroScores: under kv_aware every offered replica's score
// is shown, 0 included (an idle replica without the prompt); it was left
// out when 0 (found by a review). Under another policy there is none.
// decided_by is always there, "" when no term decided, as in the decision
// log and the spec's example; it was left out then.
func TestExplainShowsZeroScores(t *testing.T) {
	for _, name := range []string{policy.KVAware, policy.CostModel} {
		cfg := testConfig(t, fleetOf(t, 2, true))
		cfg.Routing.DefaultPolicy = name
		gw := startGateway(t, cfg)
		var ans struct {
			DecidedBy *string          `json:"decided_by"`
			Replicas  []map[string]any `json:"replicas"`
		}
		postExplain(t, gw.admin+"/admin/explain/v1/completions", `{"model":"sim","prompt":"a prompt no replica holds","max_tokens":1}`, &ans)
		if len(ans.Replicas) != 2 || ans.DecidedBy == nil {
			t.Fatalf("%s: %d replicas explained, decided_by %v", name, len(ans.Replicas), ans.DecidedBy)
		}
		for _, r := range ans.Replicas {
			score, shown := r["score"]
			if shown != (name == policy.KVAware) || shown && score != 0.0 {
				t.Errorf("%s: replica %v: score %v (shown %v)", name, r["replica"], score, shown)
			}
		}
	}
}
