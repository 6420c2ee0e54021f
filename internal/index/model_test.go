package index

import (
	"fmt"
	"slices"
	"testing"

	"github.com/inferrail/inferrail/internal/blockhash"

	"pgregory.net/rapid"
)

// refIndex is the naive reference for Approx: per replica an ordered list
// (most recent first) and a map from block to the record that last touched
// it.
type refIndex struct {
	defaultCapacity int
	records         int
	reps            map[string]*refReplica
}

type refReplica struct {
	capacity int
	order    []blockhash.Hash
	touched  map[blockhash.Hash]int // record that last touched the block
}

type refToken struct {
	rep    *refReplica
	record int
	added  []blockhash.Hash
}

func newRefIndex(defaultCapacity int) *refIndex {
	return &refIndex{defaultCapacity: max(defaultCapacity, 0), reps: map[string]*refReplica{}}
}

// join adds replica id, unless known, and returns it.
func (m *refIndex) join(id string) *refReplica {
	r := m.reps[id]
	if r == nil {
		r = &refReplica{capacity: m.defaultCapacity, touched: map[blockhash.Hash]int{}}
		m.reps[id] = r
	}
	return r
}

func (r *refReplica) drop(h blockhash.Hash) {
	r.order = slices.DeleteFunc(r.order, func(x blockhash.Hash) bool { return x == h })
	delete(r.touched, h)
}

func (r *refReplica) trim() {
	for len(r.order) > r.capacity {
		r.drop(r.order[len(r.order)-1])
	}
}

// record touches the first min(n, capacity) blocks, the deepest first,
// then trims to capacity; an unknown replica records nothing.
func (m *refIndex) record(id string, hashes []blockhash.Hash) refToken {
	r := m.reps[id]
	if r == nil {
		return refToken{}
	}
	k := min(len(hashes), r.capacity)
	if k == 0 {
		return refToken{}
	}
	m.records++
	tok := refToken{rep: r, record: m.records}
	for i := k - 1; i >= 0; i-- {
		h := hashes[i]
		if _, ok := r.touched[h]; ok {
			r.drop(h)
		} else {
			tok.added = append(tok.added, h)
		}
		r.order = slices.Insert(r.order, 0, h)
		r.touched[h] = tok.record
	}
	r.trim()
	return tok
}

func (m *refIndex) takeBack(tok refToken) {
	if tok.rep == nil {
		return
	}
	for _, h := range tok.added {
		if rec, ok := tok.rep.touched[h]; ok && rec == tok.record {
			tok.rep.drop(h)
		}
	}
}

func (m *refIndex) holds(id string, h blockhash.Hash) bool {
	r := m.reps[id]
	if r == nil {
		return false
	}
	_, ok := r.touched[h]
	return ok
}

func (m *refIndex) match(cands []string, hashes []blockhash.Hash, toks, bsize int) []int {
	limit := hitLimit(len(hashes), toks, bsize)
	out := make([]int, len(cands))
	for i, id := range cands {
		for out[i] < limit && m.holds(id, hashes[out[i]]) {
			out[i]++
		}
	}
	return out
}

func TestApproxAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		defCap := rapid.IntRange(0, 12).Draw(t, "defaultCapacity")
		idx := NewApprox(defCap)
		ref := newRefIndex(defCap)
		ids := []string{"a", "b", "c", "d", "e", "f"}
		cands := append(slices.Clone(ids), "unknown")
		for _, id := range ids {
			if rapid.Bool().Draw(t, "joined_"+id) {
				idx.Join(id)
				ref.join(id)
			}
		}
		if rapid.Bool().Draw(t, "wide") {
			// 64 replicas first, so that the ones under test get handles
			// past the first holder word.
			for i := range 64 {
				id := fmt.Sprintf("filler-%d", i)
				idx.Join(id)
				idx.SetCapacity(id, 1)
				ref.join(id).capacity = 1
			}
		}

		// Prompts grow as a tree of chains: a prompt is a prefix of an
		// earlier one, maybe extended by fresh blocks.
		prompts := [][]blockhash.Hash{nil}
		prompt := func(label string) []blockhash.Hash {
			p := rapid.SampledFrom(prompts).Draw(t, label+"Base")
			p = p[:rapid.IntRange(0, len(p)).Draw(t, label+"Cut")]
			if rapid.Bool().Draw(t, label+"New") {
				p = extend(p, rapid.IntRange(1, 8).Draw(t, label+"Extra"))
				prompts = append(prompts, p)
			}
			return p
		}
		type tokens struct {
			got  Token
			want refToken
		}
		var toks []tokens

		// Handles resolved now and again; replicas join and leave in
		// between, so MatchHandles often has stale ones to deal with.
		hd := idx.Resolve(cands)

		steps := rapid.IntRange(1, 80).Draw(t, "steps")
		for step := range steps {
			var op string
			switch rapid.IntRange(0, 11).Draw(t, "op") {
			case 11:
				id := rapid.SampledFrom(ids).Draw(t, "replica")
				op = fmt.Sprintf("Join(%s)", id)
				idx.Join(id)
				ref.join(id)
			case 10:
				op = "Resolve"
				hd = idx.Resolve(cands)
			case 0, 1, 2, 3:
				id := rapid.SampledFrom(ids).Draw(t, "replica")
				p := prompt("record")
				op = fmt.Sprintf("Record(%s, %d blocks)", id, len(p))
				toks = append(toks, tokens{idx.Record(id, p), ref.record(id, p)})
			case 4, 5:
				if len(toks) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(toks)-1).Draw(t, "token")
				op = fmt.Sprintf("TakeBack(token %d)", i)
				idx.TakeBack(toks[i].got)
				ref.takeBack(toks[i].want)
			case 6:
				id := rapid.SampledFrom(ids).Draw(t, "replica")
				c := rapid.IntRange(-1, 14).Draw(t, "capacity")
				op = fmt.Sprintf("SetCapacity(%s, %d)", id, c)
				idx.SetCapacity(id, c)
				if r := ref.reps[id]; r != nil {
					r.capacity = max(c, 0)
					r.trim()
				}
			case 7:
				id := rapid.SampledFrom(ids).Draw(t, "replica")
				op = fmt.Sprintf("Forget(%s)", id)
				idx.Forget(id)
				delete(ref.reps, id)
			case 8:
				id := rapid.SampledFrom(ids).Draw(t, "replica")
				op = fmt.Sprintf("Reset(%s)", id)
				idx.Reset(id)
				if r := ref.reps[id]; r != nil {
					r.order, r.touched = nil, map[blockhash.Hash]int{}
				}
			case 9:
				op = "Match"
			}

			if err := idx.check(); err != nil {
				t.Fatalf("step %d, after %s: %v", step, op, err)
			}
			st := idx.Stats()
			if got, want := len(st.Replicas), len(ref.reps); got != want {
				t.Fatalf("step %d, after %s: %d replicas, model has %d", step, op, got, want)
			}
			entries := 0
			for _, rs := range st.Replicas {
				r := ref.reps[rs.ID]
				if r == nil || rs.Held != len(r.order) || rs.Capacity != r.capacity {
					t.Fatalf("step %d, after %s: %+v, model has %+v", step, op, rs, r)
				}
				if rs.Held > rs.Capacity {
					t.Fatalf("step %d, after %s: %s holds %d, capacity %d", step, op, rs.ID, rs.Held, rs.Capacity)
				}
				entries += rs.Held
			}
			if st.Entries != entries {
				t.Fatalf("step %d, after %s: Entries %d, replicas sum to %d", step, op, st.Entries, entries)
			}

			// Every known prompt, whole, agrees with the model.
			for _, p := range prompts {
				got := idx.Match(nil, cands, p, len(p)+1, 1)
				if want := ref.match(cands, p, len(p)+1, 1); !slices.Equal(got, want) {
					t.Fatalf("step %d, after %s: Match(%d blocks) = %v, model says %v", step, op, len(p), got, want)
				}
			}
			p := prompt("match")
			bsize := rapid.SampledFrom([]int{1, 2, 16}).Draw(t, "blockSize")
			ntok := len(p)*bsize + rapid.IntRange(-bsize, bsize-1).Draw(t, "tokenSlack")
			got := idx.Match(nil, cands, p, ntok, bsize)
			want := ref.match(cands, p, ntok, bsize)
			if !slices.Equal(got, want) {
				t.Fatalf("step %d, after %s: Match(%d blocks, %d tokens, bs %d) = %v, model says %v", step, op, len(p), ntok, bsize, got, want)
			}
			positions := rapid.SliceOfN(rapid.IntRange(0, len(cands)-1), 0, 10).Draw(t, "positions")
			some := make([]string, len(positions))
			for i, at := range positions {
				some[i] = cands[at]
			}
			if got, want := idx.MatchHandles(nil, hd, positions, p, ntok, bsize), ref.match(some, p, ntok, bsize); !slices.Equal(got, want) {
				t.Fatalf("step %d, after %s: MatchHandles(%v, current %v) = %v, model says %v", step, op, some, idx.Current(hd), got, want)
			}
			limit := hitLimit(len(p), ntok, bsize)
			for i, d := range got {
				for j := range d {
					if !ref.holds(cands[i], p[j]) {
						t.Fatalf("step %d: %s reported %d blocks but lacks block %d", step, cands[i], d, j)
					}
				}
				if d < limit && ref.holds(cands[i], p[d]) {
					t.Fatalf("step %d: %s reported %d blocks but holds block %d (limit %d)", step, cands[i], d, d, limit)
				}
			}
		}
	})
}
