package policy

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestOwnerOrders checks owner selection through the memo of owner orders
// against sorting every candidate by (holds the root, weight, position),
// over sequences of decisions on one memo: parts of a fixed set of
// replicas in their order (which must go through the memo once it knows
// them all), among them its first and its last replicas, parts out of
// order, new replicas, and IDs of the same text in new strings.
func TestOwnerOrders(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		universe := make([]string, rapid.IntRange(2, 70).Draw(t, "replicas"))
		for i := range universe {
			universe[i] = fmt.Sprint("replica-", i)
		}
		if rapid.Bool().Draw(t, "a_repeated_id") {
			universe[len(universe)-1] = universe[0]
		}
		roots := []uint64{1, 2, rapid.Uint64().Draw(t, "root")}
		var m ownerOrders
		for call := range rapid.IntRange(1, 25).Draw(t, "calls") {
			var ids []string
			kind := rapid.IntRange(0, 5).Draw(t, "kind")
			if call == 0 {
				kind = 0
			}
			for _, id := range universe {
				if call == 0 || rapid.IntRange(0, 3).Draw(t, "skip") > 0 {
					ids = append(ids, id)
				}
			}
			switch kind {
			case 1: // out of order
				ids = rapid.Permutation(ids).Draw(t, "shuffled")
			case 2: // a replica never seen
				ids = slices.Insert(ids, rapid.IntRange(0, len(ids)).Draw(t, "at"), fmt.Sprint("new-", call))
			case 3: // the same IDs in strings of their own
				for i := range ids {
					ids[i] = string([]byte(ids[i]))
				}
			case 4: // the first replicas in order, the rest full
				ids = universe[:rapid.IntRange(0, len(universe)).Draw(t, "first")]
			case 5: // the last replicas in order
				ids = universe[rapid.IntRange(0, len(universe)).Draw(t, "from"):]
			}
			n := len(ids)
			if n < 2 {
				continue
			}
			cands := make([]Candidate, n)
			sl := make([]slot, n)
			for i := range cands {
				cands[i].ID = ids[i]
				sl[i].cached = rapid.SampledFrom([]int{0, 64, 128}).Draw(t, "cached")
			}
			root := rapid.SampledFrom(roots).Draw(t, "which_root")
			k := rapid.IntRange(1, n-1).Draw(t, "k")
			knowsAll := len(m.ids) == len(universe)
			for u := range m.ids {
				knowsAll = knowsAll && m.ids[u] == refOf(universe[u])
			}
			got, ok := m.choose(root, 64, cands, sl, make([]int, n), k)
			if !ok {
				if (kind == 0 || kind >= 4) && knowsAll {
					t.Fatalf("call %d: replicas in order did not fit a memo that knows them all", call)
				}
				got = chooseOwners(root, 64, cands, sl, make([]ownerRank, n), make([]int, n), k, nil)
			}
			got = slices.Clone(got)
			slices.Sort(got)
			if want := naiveOwners(root, 64, cands, sl, k); !slices.Equal(got, want) {
				t.Fatalf("call %d (kind %d, through the memo %v): owners %v, want %v", call, kind, ok, got, want)
			}
		}
	})
}
