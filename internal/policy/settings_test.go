package policy

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// TestSettingsForIgnoresUnread: two policies of one name whose settings
// differ only outside what For keeps pick alike, request after request, so
// a reload may keep one in place of the other.
func TestSettingsForIgnoresUnread(t *testing.T) {
	w := world{replicas: 5}
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				clk := newFakeClock()
				a := drawSettings(t, clk)
				b := drawSettings(t, clk)
				// b keeps what name reads of a and differs anywhere else.
				kept := a.For(name)
				if name == CostModel {
					// It reads everything but the other policies' own.
					b = a
					b.PrefixHashBlocks = rapid.IntRange(1, 8).Draw(t, "prefix_hash_blocks")
					b.KVAware.CacheWeight = float64(rapid.IntRange(0, 8).Draw(t, "cache_weight_quarters")) / 4
					b.KVAware.LoadWeight = float64(rapid.IntRange(0, 8).Draw(t, "load_weight_quarters")) / 4
				} else {
					b.Seed, b.Cost = kept.Seed, kept.Cost
					b.PrefixHashBlocks = a.PrefixHashBlocks
					b.KVAware = a.KVAware
				}
				if fa, fb := fmt.Sprint(a.For(name)), fmt.Sprint(b.For(name)); fa != fb {
					t.Fatalf("For differs: %s against %s", fa, fb)
				}
				pa, err := NewWith(name, a)
				if err != nil {
					t.Fatal(err)
				}
				pb, err := NewWith(name, b)
				if err != nil {
					t.Fatal(err)
				}
				for i := range 20 {
					req := w.request(t)
					cands := w.candidates(t, req, nil)
					if da, db := pa.Pick(req, cands), pb.Pick(req, cands); da.Index != db.Index {
						t.Fatalf("request %d: %s picked %d and %d with settings For deems equal", i, name, da.Index, db.Index)
					}
					clk.add(100 * 1e6)
				}
			})
		})
	}
}
