package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferrail/inferrail/internal/tokenize"
	"github.com/inferrail/inferrail/internal/tokenize/chattemplate"
)

// The tokenization self-check. Predictions are only as good as the
// gateway's token ids: a tokenizer or chat template that differs from the
// engine's gives block hashes that never match what the engine caches.
// Two checks catch it:
//   - at startup, each model's tokens for a few probe requests are compared
//     with those of the /tokenize endpoint of an engine serving it (vLLM and
//     the simulator offer it); a model that disagrees routes without
//     predictions rather than on wrong ones;
//   - while routing, with the exact index, speculation shows it: a prompt
//     routed to a replica counts as cached there until the engine stores
//     its blocks, and if the tokens differ it never does (see tokenSuspect
//     in kvEvents).

// tokenProbes are the requests compared, as a client would send them.
var tokenProbes = []struct {
	path, body string
}{
	{"/v1/chat/completions", `{"messages":[{"role":"system","content":"You are a careful assistant."},{"role":"user","content":"Count the words: the quick brown fox jumps over the lazy dog."}]}`},
	{"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hello!"},{"role":"assistant","content":"Hi, how can I help?"},{"role":"user","content":"Tell me a number, 3.14159, and a date, 2026-12-01."}]}`},
	{"/v1/completions", `{"prompt":"Once upon a time, in a land far away, there lived a tokenizer."}`},
}

// tokenCheck is a model's startup comparison.
type tokenCheck struct {
	Model   string `json:"model"`
	State   string `json:"state"` // pending, agrees, disagrees, unchecked (no engine offered /tokenize)
	Replica string `json:"replica,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

const (
	tokPending   = "pending"
	tokAgrees    = "agrees"
	tokDisagrees = "disagrees"
	tokUnchecked = "unchecked"
)

type tokenChecks struct {
	mu     sync.Mutex
	checks map[string]*tokenCheck // by model
}

func (c *tokenChecks) set(model string, tc tokenCheck) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tc.Model = model
	c.checks[model] = &tc
}

func (c *tokenChecks) list() []tokenCheck {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]tokenCheck, 0, len(c.checks))
	for _, tc := range c.checks {
		out = append(out, *tc)
	}
	slices.SortFunc(out, func(a, b tokenCheck) int { return strings.Compare(a.Model, b.Model) })
	return out
}

// checkTokenizers compares every model's tokens with an engine's until
// each model is decided or ctx ends; it tries again every retry while no
// engine serving a model answers.
func (g *Gateway) checkTokenizers(ctx context.Context, retry time.Duration) {
	pending := map[string]*modelTokenizer{}
	for model, mt := range g.tokenizers {
		pending[model] = mt
		g.tokChecks.set(model, tokenCheck{State: tokPending})
	}
	client := g.engineClient(5 * time.Second)
	for attempt := 0; len(pending) > 0; attempt++ {
		for model, mt := range pending {
			if g.checkModelTokens(ctx, client, model, mt) {
				delete(pending, model)
			}
		}
		if len(pending) == 0 || attempt == 11 { // about a minute of engines not answering
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
	for model := range pending {
		g.tokChecks.set(model, tokenCheck{State: tokUnchecked, Detail: "no engine serving the model answered /tokenize"})
	}
}

// checkModelTokens compares model's tokens with the first replica serving
// it that answers; false when none did.
func (g *Gateway) checkModelTokens(ctx context.Context, client *http.Client, model string, mt *modelTokenizer) bool {
	for _, r := range g.fleet.Snapshot().ForModel(model) {
		detail, answered := compareTokens(ctx, client, r.URL.String(), model, mt)
		if !answered {
			continue
		}
		if detail == "" {
			g.tokChecks.set(model, tokenCheck{State: tokAgrees, Replica: r.ID})
			g.log.Info("tokenization agrees with the engine's", "model", model, "replica", r.ID)
			return true
		}
		mt.disagrees.Store(true)
		g.tokChecks.set(model, tokenCheck{State: tokDisagrees, Replica: r.ID, Detail: detail})
		g.log.Error("the gateway's tokens differ from the engine's: routing this model without cache predictions",
			"model", model, "replica", r.ID, "detail", detail)
		return true
	}
	return false
}

// compareTokens sends each probe to an engine's /tokenize and compares;
// it returns what differs ("" when nothing does), and false when the engine
// did not answer (down, or no /tokenize).
func compareTokens(ctx context.Context, client *http.Client, base, model string, mt *modelTokenizer) (string, bool) {
	for _, p := range tokenProbes {
		body := `{"model":` + jsonString(model) + `,` + p.body[1:]
		var prompt *tokenize.Prompt
		var err error
		if isChatPath(p.path) {
			prompt, err = tokenize.ParseChatRequest([]byte(body))
		} else {
			prompt, err = tokenize.ParseCompletionRequest([]byte(body))
		}
		if err != nil {
			return "", false // cannot happen: the probes are ours
		}
		ours, err := mt.tok.PromptIDs(prompt, nil)
		var te *chattemplate.Error
		if prompt.Chat != nil && (errors.As(err, &te) || errors.Is(err, chattemplate.ErrMissing)) {
			// A model without a chat template, or whose template does not
			// compile, has its chat requests go without predictions on
			// their own: the completion probe judges the tokenizer.
			if errors.Is(err, chattemplate.ErrMissing) || templateBroken(mt) {
				continue
			}
			// A template that compiles and refuses the probe: an engine
			// that renders it runs another template.
			if _, ok := engineTokens(ctx, client, base, body); ok {
				return "probe " + p.path + ": the gateway's chat template refuses it (" + err.Error() + "), the engine renders it", true
			}
			continue
		}
		if err != nil {
			return "the gateway cannot tokenize a probe: " + err.Error(), true
		}
		theirs, ok := engineTokens(ctx, client, base, body)
		if !ok {
			return "", false
		}
		if !slices.Equal(ours, theirs) {
			i := 0
			for i < len(ours) && i < len(theirs) && ours[i] == theirs[i] {
				i++
			}
			return "probe " + p.path + ": " + strconv.Itoa(len(ours)) + " tokens here, " + strconv.Itoa(len(theirs)) +
				" from the engine, first difference at token " + strconv.Itoa(i), true
		}
	}
	return "", true
}

// engineTokens asks an engine's /tokenize.
func engineTokens(ctx context.Context, client *http.Client, base, body string) ([]int, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+"/tokenize", bytes.NewReader([]byte(body)))
	if err != nil {
		return nil, false
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, false
	}
	var out struct {
		Tokens []int `json:"tokens"`
	}
	if json.Unmarshal(b, &out) != nil || out.Tokens == nil {
		return nil, false
	}
	return out.Tokens, true
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

var descTokenAgrees = prometheus.NewDesc("inferrail_tokenizer_agrees",
	"1 when a model's tokens for the startup probes equal an engine's /tokenize, 0 when they differ (the model then routes without predictions); absent until checked.",
	[]string{"model"}, nil)

// tokenCheckCollector exports the startup checks that concluded.
type tokenCheckCollector struct{ c *tokenChecks }

func (c *tokenCheckCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descTokenAgrees }

func (c *tokenCheckCollector) Collect(ch chan<- prometheus.Metric) {
	for _, tc := range c.c.list() {
		switch tc.State {
		case tokAgrees:
			ch <- prometheus.MustNewConstMetric(descTokenAgrees, prometheus.GaugeValue, 1, tc.Model)
		case tokDisagrees:
			ch <- prometheus.MustNewConstMetric(descTokenAgrees, prometheus.GaugeValue, 0, tc.Model)
		}
	}
}

// templateBroken reports whether a model's chat template does not compile.
func templateBroken(mt *modelTokenizer) bool {
	hft, ok := mt.tok.(hfTokenizer)
	return ok && len(hft.chat.Problems()) > 0
}
