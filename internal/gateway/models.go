package gateway

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/openai"
)

// serveModels lists the configured models and their aliases in config
// order, with the metadata engines published; it never calls an engine.
func (g *Gateway) serveModels(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(openai.HeaderRequestID, requestIDFor(r))
	now := time.Now().Unix()
	snap := g.fleet.Snapshot()
	b := []byte(`{"object":"list","data":[`)
	first := true
	gen := g.current()
	for _, m := range gen.cfg.Models { // aliases change live
		if !keyAllows(r, gen, m.Name) {
			continue
		}
		card := engineCard(snap.ForModel(m.Name), m.Name)
		for _, id := range append([]string{m.Name}, m.Aliases...) {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendCard(b, id, m.Name, now, card)
		}
	}
	b = append(b, "]}"...)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	_, _ = w.Write(b)
}

// engineCard returns the card an engine published for model, the same one
// from call to call while the fleet stands: of the replicas passing their
// probes if any published one, the card with the least max_model_len (a
// prompt that fits it fits every engine serving the model), the freshest
// among equals. The freshest alone flipped between engines of different
// context lengths, and a client sizing its prompts by it was sometimes
// told the longer one.
func engineCard(replicas []*fleet.Replica, model string) map[string]json.RawMessage {
	var best *fleet.ModelCards
	var raw []byte
	bestLen, bestUp := int64(math.MaxInt64), false
	for _, r := range replicas {
		c := r.Cards()
		if c == nil {
			continue
		}
		card, ok := c.Cards[model]
		if !ok {
			continue
		}
		n, up := cardContext(card), r.Healthy()
		switch {
		case best == nil, up && !bestUp,
			up == bestUp && n < bestLen,
			up == bestUp && n == bestLen && c.Fetched.After(best.Fetched):
			best, raw, bestLen, bestUp = c, card, n, up
		}
	}
	var fields map[string]json.RawMessage
	if raw != nil {
		_ = json.Unmarshal(raw, &fields)
	}
	return fields
}

// cardContext is a card's max_model_len, MaxInt64 when it gives none.
func cardContext(card []byte) int64 {
	var f struct {
		MaxModelLen int64 `json:"max_model_len"`
	}
	if json.Unmarshal(card, &f) != nil || f.MaxModelLen <= 0 {
		return math.MaxInt64
	}
	return f.MaxModelLen
}

// appendCard writes a model card in vLLM's field order, taking what the
// engine published where it did.
func appendCard(b []byte, id, model string, now int64, engine map[string]json.RawMessage) []byte {
	field := func(name, fallback string) string {
		if v, ok := engine[name]; ok && json.Valid(v) {
			return string(v)
		}
		return fallback
	}
	b = append(b, `{"id":`...)
	b = openai.AppendString(b, id)
	b = append(b, `,"object":"model","created":`...)
	b = strconv.AppendInt(b, now, 10)
	b = append(b, `,"owned_by":`...)
	b = append(b, field("owned_by", `"vllm"`)...)
	b = append(b, `,"root":`...)
	b = append(b, field("root", openai.Quote(model))...)
	b = append(b, `,"parent":`...)
	b = append(b, field("parent", "null")...)
	b = append(b, `,"max_model_len":`...)
	b = append(b, field("max_model_len", "null")...)
	b = append(b, `,"permission":`...)
	b = append(b, field("permission", "[]")...)
	return append(b, '}')
}
