package gateway

import (
	"net/url"
	"testing"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/fleet"
)

// TestEventsSeedBaseModel: blocks an engine's events store for no adapter
// are seeded with the replica's base model, the first of its models whose
// card names no parent, wherever the operator listed it; before any card,
// with its first model. They were seeded with its first model always, so
// a replica listing an adapter first predicted no base prompt from its
// events (found by a review).
func TestEventsSeedBaseModel(t *testing.T) {
	cards := func(kv map[string]string) *fleet.ModelCards {
		c := &fleet.ModelCards{Cards: map[string][]byte{}}
		for m, card := range kv {
			c.Cards[m] = []byte(card)
		}
		return c
	}
	tests := []struct {
		name   string
		models []string
		cards  *fleet.ModelCards
		want   string
	}{
		{"no cards yet", []string{"base/lora", "base/model"}, nil, "base/lora"},
		{"adapter listed first", []string{"base/lora", "base/model"},
			cards(map[string]string{"base/lora": `{"id":"base/lora","parent":"base/model"}`, "base/model": `{"id":"base/model","parent":null}`}), "base/model"},
		{"base listed first", []string{"base/model", "base/lora"},
			cards(map[string]string{"base/lora": `{"parent":"base/model"}`, "base/model": `{}`}), "base/model"},
		{"cards without the models", []string{"a", "b"}, cards(map[string]string{"c": `{}`}), "a"},
		{"a card that is not JSON", []string{"a", "b"}, cards(map[string]string{"a": `{`, "b": `{"parent":null}`}), "b"},
	}
	u, _ := url.Parse("http://127.0.0.1:1")
	g := &Gateway{tokenizers: map[string]*modelTokenizer{}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := baseModel(tt.models, tt.cards); got != tt.want {
				t.Fatalf("baseModel = %q, want %q", got, tt.want)
			}
			r := fleet.NewReplica("r", u, tt.models, 4, 4)
			g.tokenizers[tt.models[0]] = &modelTokenizer{blockSize: 16}
			cfg, ok := g.eventsConfig(r)
			if !ok {
				t.Fatal("no events config")
			}
			r.SetCards(tt.cards)
			if got, want := cfg.Seed("", "salt"), blockhash.Seed(tt.want, "", "salt"); got != want {
				t.Errorf("seed of a block with no adapter is not %s's", tt.want)
			}
			if got, want := cfg.Seed("base/lora", ""), blockhash.Seed("base/lora", "", ""); got != want {
				t.Errorf("seed of an adapter's block is not the adapter's")
			}
		})
	}
}
