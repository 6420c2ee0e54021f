package policy

import (
	"cmp"
	"slices"
	"unsafe"
)

// ownerOrders remembers, for the hot roots seen last, every candidate in
// the order of its rendezvous weight on the root, so that choosing a hot
// prefix's owners reads the candidates in that order instead of ranking
// them all again: the order depends only on the root and the IDs, and a
// gateway offers the same replicas decision after decision.
//
// The candidates it ranks are its universe, in the order they were
// offered. A decision's candidates must be the universe or a part of it in
// the same order (the gateway leaves out replicas that are full or down,
// and keeps the order); a decision that offers one it has not seen grows
// the universe when it offers all of the universe too, and otherwise goes
// without the memo. IDs are told apart as idRefs.
type ownerOrders struct {
	ids     []idRef
	byRoot  map[uint64][]int32 // indices into ids, by weight (less its lowest bit) descending, then index
	whole   bool               // a decision's candidates are the universe itself: the candidate at ids[u] is u
	pos     []int32            // otherwise the candidate at ids[u], or -1
	rest    []int              // a decision's scratch: candidates not holding the root, in weight order
	weights []uint64           // rank's scratch
	misses  int                // decisions in a row that went without: past maxMisses the universe starts again
}

// idRef is a candidate's ID as the owner ranks and orders tell IDs apart:
// by their bytes' address and length. The gateway offers the same strings
// decision after decision, and comparing their bytes cost more than the
// rest of a rank; the same text in another string only costs a lookup
// again.
type idRef struct {
	data *byte
	n    int
}

func refOf(id string) idRef { return idRef{unsafe.StringData(id), len(id)} }

func (r idRef) String() string { return unsafe.String(r.data, r.n) }

const (
	maxOrderRoots = 64 // roots remembered; past it the memo starts afresh
	maxMisses     = 8  // decisions in a row the memo may not fit before it starts again from one
)

// choose returns the k candidates (0 < k < len(cands)) that hold at least
// held tokens first, then those of highest weight on root, the first on
// ties, as chooseOwners does, in owners' space (len(cands) of it); ok is
// false when the candidates do not fit the memo, and chooseOwners must
// rank them itself.
func (m *ownerOrders) choose(root uint64, held int, cands []Candidate, sl []slot, owners []int, k int) (_ []int, ok bool) {
	if !m.place(cands) {
		return nil, false
	}
	order, ok := m.byRoot[root]
	if !ok {
		order = m.rank(root)
	}
	// Holders first, in weight order, up to k; then the others in weight
	// order until there are k in all.
	top, rest := owners[:0], m.rest[:0]
	for _, u := range order {
		i := int32(u)
		if !m.whole {
			i = m.pos[u]
		}
		switch {
		case i < 0:
		case sl[i].cached >= held:
			if top = append(top, int(i)); len(top) == k {
				m.rest = rest
				return top, true
			}
		case len(rest) < k:
			rest = append(rest, int(i))
		}
	}
	m.rest = rest
	// More than k candidates and fewer than k holders: there are enough
	// others.
	return append(top, rest[:k-len(top)]...), true
}

// place sets pos for cands, growing the universe or starting it again when
// it must, and reports whether cands fit it.
func (m *ownerOrders) place(cands []Candidate) bool {
	if m.fits(cands) {
		m.misses = 0
		return true
	}
	// Every replica the universe knows, and more: the universe grows to
	// these candidates. A memo that has not fitted for a while starts
	// again from them too.
	if m.misses++; m.misses > maxMisses || m.within(cands) {
		m.reset(cands)
		return m.fits(cands)
	}
	return false
}

// fits reports whether cands are the universe or a part of it in order,
// setting whole and pos if so.
func (m *ownerOrders) fits(cands []Candidate) bool {
	if m.whole = len(cands) == len(m.ids); m.whole {
		// The usual case, every replica offered, without pos.
		for i := range cands {
			if refOf(cands[i].ID) != m.ids[i] {
				m.whole = false
				break
			}
		}
		if m.whole {
			return true
		}
	}
	m.pos = slices.Grow(m.pos[:0], len(m.ids))[:len(m.ids)]
	u := 0
	for i := range cands {
		ref := refOf(cands[i].ID)
		for u < len(m.ids) && m.ids[u] != ref {
			m.pos[u] = -1
			u++
		}
		if u == len(m.ids) {
			return false
		}
		m.pos[u] = int32(i)
		u++
	}
	for ; u < len(m.ids); u++ {
		m.pos[u] = -1
	}
	return true
}

// within reports whether the universe is a part of cands, in order.
func (m *ownerOrders) within(cands []Candidate) bool {
	u := 0
	for i := range cands {
		if u < len(m.ids) && m.ids[u] == refOf(cands[i].ID) {
			u++
		}
	}
	return u == len(m.ids)
}

// reset makes cands the universe, forgetting every root's order.
func (m *ownerOrders) reset(cands []Candidate) {
	m.ids = m.ids[:0]
	for i := range cands {
		m.ids = append(m.ids, refOf(cands[i].ID))
	}
	clear(m.byRoot)
	m.misses = 0
}

// rank orders the universe by weight on root and remembers it.
func (m *ownerOrders) rank(root uint64) []int32 {
	if m.byRoot == nil || len(m.byRoot) >= maxOrderRoots {
		m.byRoot = make(map[uint64][]int32)
	}
	weights := slices.Grow(m.weights[:0], len(m.ids))[:len(m.ids)]
	m.weights = weights
	order := make([]int32, len(m.ids))
	for u, ref := range m.ids {
		weights[u] = rendezvous(root, ref.String()) >> 1
		order[u] = int32(u)
	}
	slices.SortFunc(order, func(a, b int32) int {
		if c := cmp.Compare(weights[b], weights[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	m.byRoot[root] = order
	return order
}

// chooseOwners returns the k candidates that hold at least held tokens
// (the root prefix) first, then those with the highest rendezvous weight on
// root, the first on ties: as indices into cands, in order's space, in no
// particular order. It reads them in the order memo keeps for root when
// they fit it (memo may be nil), and otherwise ranks them in rk.
func chooseOwners(root uint64, held int, cands []Candidate, sl []slot, rk []ownerRank, order []int, k int, memo *ownerOrders) []int {
	if k >= len(cands) { // every candidate owns it: nothing to rank
		owners := order[:len(cands)]
		for i := range owners {
			owners[i] = i
		}
		return owners
	}
	if memo != nil {
		if owners, ok := memo.choose(root, held, cands, sl, order, k); ok {
			return owners
		}
	}
	// Few owners are kept by insertion as the candidates are ranked; for
	// many, the ranks are counted by their top bits. Holding the root comes
	// first, then the weight, rendezvous(root, ID), less its lowest bit.
	few := k <= 16
	top := order[:0]
	var buckets rankBuckets
	for i := range cands {
		o, id := &rk[i], cands[i].ID
		if o.idKey == 0 || o.id != refOf(id) {
			o.id, o.idKey = refOf(id), idKey(id)
		}
		r := mix64(root^o.idKey) >> 1
		if sl[i].cached >= held {
			r |= 1 << 63
		}
		o.rank = r
		if few {
			top = insertTop(rk, top, i, r, k)
		} else {
			buckets[r>>rankBucketShift]++
		}
	}
	if few {
		return top
	}
	// Many owners: the k-th highest rank splits owners from the rest in
	// one pass; among candidates of exactly that rank the first ones win.
	cut, atCut := kthRank(rk, &buckets, order, k)
	owners := order[:len(rk)]
	n := 0
	for i := range rk {
		r := rk[i].rank
		owner := r > cut
		if r == cut && atCut > 0 {
			owner = true
			atCut--
		}
		owners[n] = i // kept only if an owner: no branch to mispredict
		if owner {
			n++
		}
	}
	return owners[:n]
}

// rankBuckets counts ranks by their top bits: rank>>rankBucketShift.
type rankBuckets [64]int32

const rankBucketShift = 64 - 6

// kthRank returns the k-th highest rank in rk (0 < k <= len(rk)) and how
// many candidates of exactly that rank are among the k highest, given the
// ranks' buckets and using order as scratch. It sorts only the bucket the
// k-th falls in, usually a rank or two, where sorting them all took most
// of chooseOwners' time.
func kthRank(rk []ownerRank, buckets *rankBuckets, order []int, k int) (cut uint64, atCut int) {
	b, above := len(buckets)-1, 0 // above: ranks in buckets above b
	for above+int(buckets[b]) < k {
		above += int(buckets[b])
		b--
	}
	in := order[:0]
	for i := range rk {
		if rk[i].rank>>rankBucketShift == uint64(b) {
			in = append(in, i)
		}
	}
	// The cut is the want-th highest rank in the bucket.
	slices.SortFunc(in, func(x, y int) int { return cmp.Compare(rk[y].rank, rk[x].rank) })
	want := k - above
	cut = rk[in[want-1]].rank
	atCut = 1
	for j := want - 2; j >= 0 && rk[in[j]].rank == cut; j-- {
		atCut++
	}
	return cut, atCut
}

// insertTop adds candidate i, of rank r, to top, the best of those before
// it by rank in rk (the first on ties), if it is among the k best: n·k
// steps in all, fewer than sorting for the few owners a prefix usually
// has.
func insertTop(rk []ownerRank, top []int, i int, r uint64, k int) []int {
	// Candidates come in order, so i loses every tie with those in top.
	if len(top) == k {
		if r <= rk[top[k-1]].rank {
			return top
		}
	} else {
		top = append(top, i)
	}
	j := len(top) - 1
	for ; j > 0 && r > rk[top[j-1]].rank; j-- {
		top[j] = top[j-1]
	}
	top[j] = i
	return top
}
