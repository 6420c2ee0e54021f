package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/events"
)

// TestHybridEngineStream: a hybrid model's engine (vLLM with a
// full-attention group and a sliding-window group, a window of two blocks)
// stores a prompt in both groups over the wire, then evicts the window
// group's copies of all but the prompt's last two blocks, as vLLM evicts
// first what a window left behind. The gateway predicts what vLLM would
// hit: the whole prompt still (both groups hold its last window), and
// nothing of a shorter prompt that ends among the evicted blocks, which
// the gateway predicted whole before it told the groups apart.
func TestHybridEngineStream(t *testing.T) {
	r := newHostileRig(t, events.EncodingMap, 1024)
	body := chatBody(strings.Repeat("a prompt of a model with sliding-window layers. ", 12), "")
	tokens := r.tokens(body)
	k := len(tokens)/r.block - 1
	if k < 4 {
		t.Fatalf("a prompt of %d blocks: too short to test", k)
	}
	full := r.storeChain(tokens, k, 1<<40)
	full.GroupIdx, full.HasGroupIdx = 0, true
	full.SpecKind, full.HasSpecKind = "full_attention", true
	window := full
	window.GroupIdx = 1
	window.SpecKind = "sliding_window"
	window.SlidingWindow, window.HasSlidingWindow = int64(2*r.block), true
	seq := r.eng.publish(&events.Batch{TS: 1, Events: []events.Event{full, window}})
	r.waitStream("the prompt stored in both groups", 5*time.Second, func(s kvStatus) bool { return s.LastSeq != nil && *s.LastSeq >= seq })
	if got := r.held(tokens); got != k*r.block {
		t.Fatalf("stored in both groups: held %d tokens, want %d", got, k*r.block)
	}
	shorter := tokens[:(k-2)*r.block+1] // its last whole block is k-3
	if got := r.held(shorter); got != (k-2)*r.block {
		t.Fatalf("stored in both groups: a prompt of %d blocks held %d tokens, want all", k-2, got)
	}

	var evicted []events.Event
	for _, h := range window.Hashes[:k-2] {
		evicted = append(evicted, events.Event{Kind: events.BlockRemoved, Hashes: []events.Hash{h},
			Medium: "GPU", HasMedium: true, GroupIdx: 1, HasGroupIdx: true})
	}
	seq = r.eng.publish(&events.Batch{TS: 2, Events: evicted})
	st := r.waitStream("the window's evictions", 5*time.Second, func(s kvStatus) bool { return s.LastSeq != nil && *s.LastSeq >= seq })
	if st.Mirrored != k {
		t.Errorf("mirrored %d blocks, want %d: the full-attention group holds them all", st.Mirrored, k)
	}
	if got := r.held(shorter); got != 0 {
		t.Errorf("the window's group lost blocks 0-%d: a prompt of %d blocks held %d tokens, want 0", k-3, k-2, got)
	}
	if got := r.held(tokens); got != k*r.block {
		t.Errorf("the window's group lost blocks 0-%d: the whole prompt held %d tokens, want %d", k-3, got, k*r.block)
	}
	if got := r.predicted(body); got != k*r.block {
		t.Errorf("routed, the whole prompt was predicted %d cached tokens, want %d", got, k*r.block)
	}
	r.finish()
}
