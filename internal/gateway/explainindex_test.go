package gateway

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
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
