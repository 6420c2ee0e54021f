package policy

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// costModel picks the lowest estimated time to first token among the
// candidates its load guards allow. See the package documentation for the
// estimate; the steps of a decision are, in order:
//
//  1. Hot prefixes. When the prompt's root prefix (its first
//     HotPrefix.Blocks blocks) has more prefill demand than
//     HotPrefix.Utilization of one replica, it gets k = ceil(demand /
//     utilization) owners: the candidates holding the root first, then
//     those with the highest rendezvous weight on it. Owners are priced as
//     if they held the longest prefix of this prompt that an owner holds
//     and that is hot itself, so the cost model shares the prefix among
//     them by their queues, and a conversation's history, which no other
//     request shares, counts only where it is.
//  2. Guards. Bounded load sets aside every candidate whose in-flight
//     count, this request included, would exceed ceil((1+ε)·(total+1)/n);
//     the least loaded candidate always stays (its count is at most
//     ⌊total/n⌋ and ⌊total/n⌋+1 <= ceil((total+1)/n)). KV pressure then sets
//     aside candidates whose engine reports more than κ of its KV cache in
//     use when the prompt has more than ShortPromptTokens to compute there,
//     unless that would set aside all that are left (kv_waived).
//  3. Session affinity. A request whose conversation was routed before goes
//     back to that replica if it is a candidate the guards allow. History
//     affinity does the same for a request session affinity did not place
//     that extends an earlier prompt the index has forgotten on every
//     replica (see home).
//  4. Otherwise the lowest estimate wins; ties go to the candidate that
//     holds more of the prompt by the index (an owner priced by its credit
//     ties with the holder it is credited like, and an idle fleet gains
//     nothing from a copy), then to fewer requests in flight, then to
//     chance.
//
// Pick then counts the winner's estimated prefill as demand for the root
// prefix and for deeper prefixes of the prompt (at its marks, and where
// candidates' cached prefixes end), under DemandShare counts the request
// as an arrival (see countArrival), and remembers the conversation's
// replica.
type costModel struct {
	s Settings

	mu       sync.Mutex // guards the fields below
	src      *source
	hot      *sketch     // nil when hot prefix replication is off
	sessions *sessions   // nil without session affinity
	history  *histories  // nil without history affinity
	slots    []slot      // decide's scratch
	ranks    []ownerRank // decide's scratch for choosing owners, with IDs' keys kept across calls
	order    []int       // decide's scratch for choosing owners
	orders   ownerOrders // the hot roots' owner orders
}

// slot is a candidate's state during one decision: what the passes over
// every candidate read. Every decision writes one per candidate, so it is
// kept to half a cache line: of the estimate only the TTFT is kept
// (Explain works out the rest), and blocks, at most the prompt's, fits in
// an int32.
type slot struct {
	ttft   float64    // its estimate's TTFTSecs plus its backlog charge, less a copier's credit: what candidates are ranked by
	cached int        // its prediction, clamped to the prompt
	priced int        // the cached tokens it is priced with: cached, or an owner's credit
	blocks int32      // the prompt's blocks it holds, at most all; set only when the prompt has a root prefix
	owner  bool       // a hot prefix owner
	copier bool       // idle, and holds neither the root nor an owner's credit: ranked less the copy credit
	aside  setAsideBy // the guard that set it aside, if one did
}

// setAsideBy is the load guard that set a candidate aside; zero if none
// did.
type setAsideBy uint8

const (
	notAside setAsideBy = iota
	asideBoundedLoad
	asideKVPressure
)

// String is the guard's name, "" for notAside.
func (g setAsideBy) String() string {
	switch g {
	case asideBoundedLoad:
		return GuardBoundedLoad
	case asideKVPressure:
		return GuardKVPressure
	}
	return ""
}

// ownerRank is how a candidate ranks for owning a hot prefix: holding the
// root, then rendezvous weight. The key of the candidate's ID is kept
// across Pick's decisions (the gateway offers the same replicas in the same
// order), with the ID to check it by; idKey 0 means unknown.
type ownerRank struct {
	rank  uint64
	id    idRef
	idKey uint64
}

// Demand is counted for the root prefix and for deeper prefixes of the
// prompt: at its marks (see markStep), and at up to maxDepths lengths that
// candidates hold (where prompts part ways, such as the end of a system
// prompt). A prefix is hot when its own demand is.
const (
	hotStride = 16
	maxDepths = 8
)

// markStep is the distance from the mark at d blocks to the next one. Marks
// are every hotStride blocks up to 4·hotStride, then four to each doubling
// (64, 80, 96, 112, 128, 160, ...): a prompt of n blocks has about
// 4·log2(n/hotStride) of them, so counting them costs little however long
// the prompt, and every depth past 4·hotStride blocks has a mark within a
// quarter of it.
func markStep(d int) int { return max(hotStride, 1<<(bits.Len(uint(d))-1)/4) }

// markAtOrBelow is the deepest mark at or below d blocks; 0 when there is
// none.
func markAtOrBelow(d int) int {
	if d < hotStride {
		return 0
	}
	step := markStep(d)
	return d / step * step
}

// hotView is what the hot prefix step saw.
type hotView struct {
	rooted  bool   // the prompt has a root prefix and replication is on
	root    uint64 // key of the root prefix
	depths  [maxDepths]int
	ndepths int     // depths[:ndepths]: distinct prefix lengths in blocks, past the root, that candidates hold, shortest first
	demand  float64 // the root's demand in replicas' worth (see heat)
	owners  int
	credit  int // tokens owners are priced as holding at least
	// copy is the credit, in seconds, of a candidate that would make a
	// copy of the root (see HotPrefixParams.Copies); 0 when none is given.
	copy float64
}

// addDepth records that some candidate holds d blocks, keeping the
// shortest maxDepths distinct ones.
func (h *hotView) addDepth(d int) {
	i, found := slices.BinarySearch(h.depths[:h.ndepths], d)
	if found || i == maxDepths {
		return
	}
	if h.ndepths < maxDepths {
		h.ndepths++
	}
	copy(h.depths[i+1:h.ndepths], h.depths[i:h.ndepths-1])
	h.depths[i] = d
}

func newCostModel(s Settings) *costModel {
	p := &costModel{s: s, src: newSource(s.Seed)}
	if s.HotPrefix.Blocks > 0 {
		start := s.Start
		if start.IsZero() {
			start = s.Now()
		}
		p.hot = newSketch(s.HotPrefix.Window, start)
	}
	if s.SessionAffinity {
		p.sessions = newSessions(s.Sessions)
	}
	if s.HistoryAffinity {
		p.history = newHistories(s.Sessions)
	}
	return p
}

func (*costModel) Name() string { return CostModel }

func (p *costModel) Pick(req *Request, cands []Candidate) Decision {
	now := p.now(req)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pick(req, cands, now)
}

// PickExplained explains the decision before making it, under the same
// hold of mu: Explain predicts the next Pick exactly with the same clock
// and nothing in between, and the lock keeps anything from coming in
// between (the sketch's demand, a session's replica, the generator).
func (p *costModel) PickExplained(req *Request, cands []Candidate) (Decision, Explanation) {
	now := p.now(req)
	ex := newExplanation(CostModel, req, cands, Decision{})
	p.mu.Lock()
	defer p.mu.Unlock()
	p.explain(req, cands, now, &ex)
	d := p.pick(req, cands, now)
	return d, ex
}

// pick is Pick at now. Guarded by mu.
func (p *costModel) pick(req *Request, cands []Candidate, now time.Time) Decision {
	sl, rk, order := p.scratch(len(cands))
	var h hotView
	d := p.decide(req, cands, sl, rk, order, p.src.r, now, &h, false)
	if h.rooted {
		demand := d.PrefillSecs
		if p.s.HotPrefix.Demand == DemandPrompt {
			demand = p.s.Cost.prefill(req, 0)
		}
		p.countDemand(req, &h, demand, now)
	}
	if p.hot != nil && p.s.HotPrefix.Demand == DemandShare {
		p.countArrival(req, &h, now)
	}
	if h.rooted && p.s.HotPrefix.Copies {
		p.countWait(req, cands, sl, d.Index, &h, now)
	}
	if p.sessions != nil && req.Session != "" {
		p.sessions.put(req.Session, cands[d.Index].ID)
	}
	// A prompt whose last marked block no replica held is where a
	// conversation now ends: its next turn will extend it.
	if p.history != nil && req.BlockSize > 0 {
		if m := lastMark(len(req.Blocks)); m >= 0 && knownTokens(sl) < (m+1)*req.BlockSize {
			p.history.put(req.Blocks[m], cands[d.Index].ID)
		}
	}
	return d
}

func (p *costModel) Explain(req *Request, cands []Candidate) Explanation {
	now := p.now(req)
	// Allocated before taking the lock; the decision is filled in below.
	ex := newExplanation(CostModel, req, cands, Decision{})
	p.mu.Lock()
	defer p.mu.Unlock()
	p.explain(req, cands, now, &ex)
	return ex
}

// explain fills ex, made by newExplanation, with what Pick would decide at
// now, changing nothing. Guarded by mu.
func (p *costModel) explain(req *Request, cands []Candidate, now time.Time, ex *Explanation) {
	var h hotView
	sl, rk, order := p.scratch(len(cands))
	d := p.decide(req, cands, sl, rk, order, p.src.peek(), now, &h, true)

	ex.Decision, ex.Winner = d, cands[d.Index].ID
	ex.HotDemand, ex.HotOwners, ex.HotCreditTokens = h.demand, h.owners, h.credit
	least := p.leastPrefill(req, sl)
	for i := range cands {
		r := &ex.Replicas[i]
		r.PricedCachedTokens, r.HotOwner, r.SetAside = sl[i].priced, sl[i].owner, sl[i].aside.String()
		r.Estimate = p.s.Cost.estimate(req, &cands[i], r.PricedCachedTokens) // price's, in full
		r.Estimate.BacklogSecs = backlog(&cands[i], r.Estimate.PrefillSecs, least)
		if sl[i].copier {
			r.Estimate.CopyCreditSecs = h.copy
		}
	}
	// A winner the session or the history steered may trail the
	// runner-up, and one that ties it won on the tie-break: no term put it
	// ahead.
	if ru := runnerUp(sl, d.Index); ru >= 0 && sl[d.Index].ttft < sl[ru].ttft {
		ex.DecidedBy = decidedBy(ex.Replicas[d.Index].Estimate, ex.Replicas[ru].Estimate)
	}
}

// now is the time req is routed at.
func (p *costModel) now(req *Request) time.Time {
	if req.At.IsZero() {
		return p.s.Now()
	}
	return req.At
}

// scratch returns the slots, ranks and order decide works in for n
// candidates, kept between calls. Guarded by mu.
func (p *costModel) scratch(n int) ([]slot, []ownerRank, []int) {
	if cap(p.slots) < n {
		p.slots = make([]slot, n)
		p.ranks = make([]ownerRank, n)
		p.order = make([]int, n)
	}
	return p.slots[:n], p.ranks[:n], p.order[:n]
}

// decide makes the decision in sl's, rk's and order's space (one of each
// per candidate), drawing ties from r, and reports the hot prefix step in h.
// It reads the sketch and the session and history tables and changes
// nothing.
//
// When the session decides, the hot prefix's owners and the candidates'
// estimates do not change the decision, so they are worked out only to
// explain it: otherwise the slots' priced, owner and est and h's demand,
// owners and credit are left as they were.
func (p *costModel) decide(req *Request, cands []Candidate, sl []slot, rk []ownerRank, order []int, r *rand.Rand, now time.Time, h *hotView, explain bool) Decision {
	d := Decision{Index: -1, Guards: p.startSlots(req, cands, sl, h)}
	if p.sessions != nil && req.Session != "" {
		if id, ok := p.sessions.peek(req.Session); ok {
			for i := range cands {
				if cands[i].ID == id && sl[i].aside == notAside {
					d.Index, d.Steered = i, SteerSession
					break
				}
			}
		}
	}
	if d.Index < 0 && p.history != nil {
		if i := p.home(req, cands, sl); i >= 0 {
			d.Index, d.Steered = i, SteerHistory
		}
	}
	if d.Index < 0 || explain {
		if h.rooted {
			p.hotOwners(req, cands, sl, rk, order, now, h)
			if p.s.HotPrefix.Copies {
				p.copyCredit(req, cands, sl, now, h)
			}
		}
		if d.Index >= 0 {
			p.price(req, cands, sl, nil, h.copy)
		}
	}
	if d.Index < 0 {
		d.Index, _ = p.price(req, cands, sl, r, h.copy)
		// Did it win only through a credit: would another allowed
		// candidate rank ahead of it were nobody credited?
		switch w := &sl[d.Index]; {
		case w.priced > w.cached && p.plainRank(req, &cands[d.Index], w.cached, sl) > p.plainSecond(req, cands, sl, d.Index):
			d.Steered = SteerHotPrefix
		case w.copier && w.ttft+h.copy > p.plainSecond(req, cands, sl, d.Index):
			d.Steered = SteerCopy
		}
	}
	w := &cands[d.Index]
	e := p.s.Cost.estimate(req, w, sl[d.Index].cached)
	d.EstimatedTTFT, d.PrefillSecs = e.TTFTSecs, e.PrefillSecs
	return d
}

// price sets every slot's TTFT at its priced tokens, less credit for a
// copier, working out the prefill once for each run of candidates priced
// alike. Given r, it also returns, from the same pass, the allowed
// candidate with the lowest estimate (ties go to more cached tokens, then
// to fewer requests in flight, then to chance, by reservoir sampling) and
// the second lowest of the allowed candidates' estimates, the runner-up's:
// +Inf when only one is allowed. Without r it returns -1 and +Inf.
func (p *costModel) price(req *Request, cands []Candidate, sl []slot, r *rand.Rand, credit float64) (best int, second float64) {
	// A copy: the loop's stores cannot change it, so its fields stay in
	// registers.
	cost := p.s.Cost
	priced, prefill := -1, 0.0 // priced is never negative
	least := p.leastPrefill(req, sl)
	best, ties := -1, 0
	bestTTFT, second := math.Inf(1), math.Inf(1) // the best's and the second lowest estimate
	var bestInFlight int64
	bestCached := 0
	for i := range cands {
		s, c := &sl[i], &cands[i]
		if s.priced != priced {
			priced, prefill = s.priced, cost.prefill(req, s.priced)
		}
		a := cost.withPrefill(c, prefill).TTFTSecs + backlog(c, prefill, least)
		if s.copier {
			a -= credit
		}
		s.ttft = a
		if r == nil || s.aside != notAside {
			continue
		}
		switch {
		case best < 0 || a < bestTTFT || (a == bestTTFT && (s.cached > bestCached || s.cached == bestCached && c.InFlight < bestInFlight)):
			second = min(second, bestTTFT)
			best, ties, bestTTFT, bestInFlight, bestCached = i, 1, a, c.InFlight, s.cached
		case a == bestTTFT && s.cached == bestCached && c.InFlight == bestInFlight:
			second = bestTTFT
			ties++
			if r.IntN(ties) == 0 {
				best = i
			}
		default:
			second = min(second, a)
		}
	}
	return best, second
}

// plainRank is what price would rank the candidate at with the cached
// tokens it was offered with, a hot-prefix credit left out.
func (p *costModel) plainRank(req *Request, c *Candidate, cached int, sl []slot) float64 {
	prefill := p.s.Cost.prefill(req, cached)
	return p.s.Cost.withPrefill(c, prefill).TTFTSecs + backlog(c, prefill, p.leastPrefill(req, sl))
}

// leastPrefill is the least prefill of the allowed candidates, as the
// slots price them, from which Settings.BacklogCost charges the rest; +Inf
// when it is off, so that nothing is charged.
func (p *costModel) leastPrefill(req *Request, sl []slot) float64 {
	if !p.s.BacklogCost {
		return math.Inf(1)
	}
	return p.s.Cost.prefill(req, mostPriced(sl))
}

// backlog is Settings.BacklogCost's charge on a candidate whose prefill
// would take prefill seconds where the least is least: each request its
// engine has waiting waits the difference longer, at its pace.
func backlog(c *Candidate, prefill, least float64) float64 {
	if prefill <= least || !(c.Waiting > 0) {
		return 0
	}
	return (prefill - least) * paceOf(c) * c.Waiting
}

// mostPriced is the most cached tokens an allowed candidate is priced
// with, 0 when none is allowed.
func mostPriced(sl []slot) int {
	most := 0
	for i := range sl {
		if sl[i].aside == notAside {
			most = max(most, sl[i].priced)
		}
	}
	return most
}

// startSlots starts a decision's slots from the candidates and applies
// the load guards, marking the slots they set aside, and names the guards
// that acted. With a root prefix it also sets h's root and the depths
// candidates hold, and the slots' blocks. One pass does it all, but for
// the candidates' total in flight first: at many candidates each pass over
// them costs as much as its work.
func (p *costModel) startSlots(req *Request, cands []Candidate, sl []slot, h *hotView) []string {
	var total int64
	for i := range cands {
		total += max(cands[i].InFlight, 0)
	}
	limit := boundedLoadCap(total, len(cands), p.s.Epsilon)
	*h = hotView{}
	root, bs := p.s.HotPrefix.Blocks, req.BlockSize
	h.rooted = p.hot != nil && bs > 0 && len(req.Blocks) >= root
	if h.rooted {
		h.root = blockKey(req.Blocks[root-1])
	}
	// A shift when the block size allows, as it usually does: cached is
	// never negative, so it divides exactly as / does.
	shift := -1
	if bs > 0 && bs&(bs-1) == 0 {
		shift = bits.TrailingZeros(uint(bs))
	}
	nb := min(len(req.Blocks), math.MaxInt32) // the most blocks a slot holds
	kappa, short, prompt := p.s.Kappa, p.s.ShortPromptTokens, max(req.PromptTokens, 0)
	bounded := false
	open, pressured := 0, 0
	added := -1 // the last depth added: candidates often hold the same
	for i := range cands {
		// Only the fields read before they are set; the others (rank, est,
		// the ID cache, and blocks without a root) are left as they are.
		c := cachedTokens(req, &cands[i])
		s := &sl[i]
		s.cached, s.priced, s.owner, s.copier, s.aside = c, c, false, false, notAside
		if h.rooted {
			if shift >= 0 {
				s.blocks = int32(min(c>>shift, nb))
			} else {
				s.blocks = int32(min(c/bs, nb))
			}
			if d := int(s.blocks); d > root && d != added {
				h.addDepth(d)
				added = d
			}
		}
		if max(cands[i].InFlight, 0)+1 > limit {
			s.aside, bounded = asideBoundedLoad, true
			continue
		}
		open++
		// underPressure's first test, on locals: its fields cannot stay
		// in registers across the loop's stores.
		if cands[i].KVUsage > kappa && prompt-c > short && p.underPressure(req, &cands[i], s) {
			pressured++
		}
	}
	var guards []string
	if bounded {
		guards = append(guards, GuardBoundedLoad)
	}
	switch {
	case pressured > 0 && pressured == open:
		guards = append(guards, GuardKVWaived)
	case pressured > 0:
		for i := range cands {
			if sl[i].aside == notAside && p.underPressure(req, &cands[i], &sl[i]) {
				sl[i].aside = asideKVPressure
			}
		}
		guards = append(guards, GuardKVPressure)
	}
	return guards
}

// hotOwners finds, once startSlots has found the prompt's root prefix,
// whether it is hot and then its owners and their credit, raising their
// priced cached tokens.
func (p *costModel) hotOwners(req *Request, cands []Candidate, sl []slot, rk []ownerRank, order []int, now time.Time, h *hotView) {
	root, bs := p.s.HotPrefix.Blocks, req.BlockSize
	t := p.hot.ticks(now)
	arrivals := p.arrivals(t)
	heat := func(key uint64) float64 { return p.heat(key, t, arrivals, len(cands)) }
	h.demand = heat(h.root)
	u := p.s.HotPrefix.Utilization
	if h.demand <= u {
		return
	}
	h.owners = len(cands)
	if k := math.Ceil(h.demand / u); k < float64(h.owners) {
		h.owners = int(k)
	}
	owners := chooseOwners(h.root, root*bs, cands, sl, rk, order, h.owners, &p.orders)
	deepest := 0 // the most blocks of the prompt an owner holds
	for _, o := range owners {
		sl[o].owner = true
		deepest = max(deepest, int(sl[o].blocks))
	}
	// The longest prefix an owner holds that is hot itself, among those
	// counted.
	credit := 0
	if deepest >= root {
		credit = root // hot, as its demand says
	}
	hot := func(d int) bool { return heat(blockKey(req.Blocks[d-1])) > u }
	for j := h.ndepths - 1; j >= 0; j-- {
		if d := h.depths[j]; d <= deepest && d > credit && hot(d) {
			credit = d
			break
		}
	}
	for d := markAtOrBelow(deepest); d > credit; d = markAtOrBelow(d - 1) {
		if hot(d) {
			credit = d
			break
		}
	}
	h.credit = min(credit*bs, max(req.PromptTokens, 0))
	for _, o := range owners {
		sl[o].priced = max(sl[o].cached, h.credit)
	}
}

// waitSalt keys, xored with a root's key, the waiting its requests paid on
// the replicas holding it beyond the least queued candidate's queue
// (HotPrefixParams.Copies).
const waitSalt = 0x3c6ef372fe94f82b

// copyCredit gives the candidates that hold neither the root prefix nor an
// owner's credit the waiting a copy would have saved them: what the root's
// requests waited on its holders beyond the least queued candidate's queue
// over about the last window, as the sketch keeps it, shared among them.
// The next window is taken to be like the last. Only an idle candidate
// (nothing queued by the gateway, nothing its engine reports waiting) is
// credited: there the copy's miss delays no other request, where in a
// burst it would lengthen the very queues the copy is to relieve. No
// credit when no candidate holds the root (every one misses alike) or
// every one does.
func (p *costModel) copyCredit(req *Request, cands []Candidate, sl []slot, now time.Time, h *hotView) {
	held := p.s.HotPrefix.Blocks * req.BlockSize
	holders := 0
	for i := range sl {
		if sl[i].priced >= held {
			holders++
		}
	}
	if holders == 0 || holders == len(sl) {
		return
	}
	waited := float64(p.hot.countAt(h.root^waitSalt, p.hot.ticks(now))) / 1e9
	if !(waited > 0) {
		return
	}
	h.copy = waited / float64(len(sl)-holders)
	for i := range sl {
		sl[i].copier = sl[i].priced < held && !(cands[i].QueuedPrefill > 0) && !(cands[i].Waiting > 0)
	}
}

// countWait counts, when the winner holds the root prefix (or an owner's
// credit for it), how much longer its queue is than the least queued
// allowed candidate's, at their paces: the waiting a copy on that
// candidate would have spared the request.
func (p *costModel) countWait(req *Request, cands []Candidate, sl []slot, win int, h *hotView, now time.Time) {
	if sl[win].priced < p.s.HotPrefix.Blocks*req.BlockSize {
		return
	}
	cost := p.s.Cost
	waits := func(c *Candidate) float64 { return cost.queue(c) * paceOf(c) }
	own := waits(&cands[win])
	least := own
	for i := range cands {
		if sl[i].aside == notAside {
			least = min(least, waits(&cands[i]))
		}
	}
	if q := nanos(own - least); q > 0 {
		p.hot.addAt(h.root^waitSalt, q, p.hot.ticks(now))
	}
}

// Under DemandShare the sketch also counts arrivals, a second a request:
// each prefix's under its key xor arrivalSalt, and every request's under
// arrivalsKey, the fleet's total that shares are taken of. Keys are block
// hashes, so neither meets a prefix's own key but by chance.
const (
	arrivalSalt = 0x6a09e667f3bcc909
	arrivalsKey = 0xbb67ae8584caa73b
)

// shareEvidence is how many arrivals a prefix must have drawn in the
// window before its share counts. A share read from a handful is mostly
// chance: a fleet's first request is all of its arrivals. A prefix
// drawing a sixteenth of the traffic reaches eight within the first 48
// arrivals, where eight would read as a sixth (utilization 0.5 on three
// replicas), about one time in a hundred.
const shareEvidence = 8 * uint64(time.Second)

// arrivals is the fleet's arrivals at tick t that shares are taken of,
// in nanoseconds (a second an arrival); 0 unless Demand is DemandShare.
func (p *costModel) arrivals(t int64) uint64 {
	if p.s.HotPrefix.Demand != DemandShare {
		return 0
	}
	return p.hot.countAt(arrivalsKey, t)
}

// heat is how hot the prefix of the given key is at tick t among n
// candidates, in replicas' worth: its prefill demand and, given the
// fleet's arrivals (under DemandShare), the more of that and its share of
// them times n, so that a prefix bringing one replica more arrivals than
// HotPrefix.Utilization of its share counts as hot however little its
// holder computes.
func (p *costModel) heat(key uint64, t int64, arrivals uint64, n int) float64 {
	d := p.hot.rateAt(key, t)
	if arrivals == 0 {
		return d
	}
	if c := p.hot.countAt(key^arrivalSalt, t); c >= shareEvidence {
		d = max(d, float64(c)/float64(arrivals)*float64(n))
	}
	return d
}

// countDemand counts secs of prefill for the prompt's root prefix and the
// deeper prefixes hotOwners looks up.
func (p *costModel) countDemand(req *Request, h *hotView, secs float64, now time.Time) {
	q := nanos(secs)
	if q == 0 {
		return
	}
	root, t := p.s.HotPrefix.Blocks, p.hot.ticks(now)
	p.hot.addAt(h.root, q, t)
	for d := hotStride; d <= len(req.Blocks); d += markStep(d) {
		if d != root {
			p.hot.addAt(blockKey(req.Blocks[d-1]), q, t)
		}
	}
	for _, d := range h.depths[:h.ndepths] {
		if markAtOrBelow(d) != d {
			p.hot.addAt(blockKey(req.Blocks[d-1]), q, t)
		}
	}
}

// countArrival counts the request as one arrival for the fleet and, when
// it has a root prefix, for the root and the depths candidates hold, where
// prompts part ways (a few-shot block's end, a system prompt's): the
// lengths an owner's credit can reach by share. Not at the marks, which
// would double a decision's counting for prefixes that a shared prefix's
// held end already stands for.
func (p *costModel) countArrival(req *Request, h *hotView, now time.Time) {
	const second = uint64(time.Second)
	t := p.hot.ticks(now)
	p.hot.addAt(arrivalsKey, second, t)
	if !h.rooted {
		return
	}
	p.hot.addAt(h.root^arrivalSalt, second, t)
	for _, d := range h.depths[:h.ndepths] {
		p.hot.addAt(blockKey(req.Blocks[d-1])^arrivalSalt, second, t)
	}
}

// underPressure reports whether the candidate's KV cache is too full for the
// tokens the prompt would compute there: above κ for a prompt that is not
// short there and, under KVGuardFreeBlocks, with fewer free blocks than the
// prompt would fill (a replica of unknown size counts as too full).
func (p *costModel) underPressure(req *Request, c *Candidate, s *slot) bool {
	compute := max(req.PromptTokens, 0) - s.cached
	if c.KVUsage <= p.s.Kappa || compute <= p.s.ShortPromptTokens {
		return false
	}
	if p.s.KVGuard != KVGuardFreeBlocks || c.KVCapacityBlocks <= 0 || req.BlockSize <= 0 {
		return true
	}
	free := int((1 - c.KVUsage) * float64(c.KVCapacityBlocks))
	return (compute+req.BlockSize-1)/req.BlockSize > free
}

// boundedLoadCap is the most requests in flight, the new one included, that
// bounded load lets a replica hold: ceil((1+ε)·(total+1)/n), where total is
// the candidates' in-flight count. It is never below ceil((total+1)/n), so
// the least loaded candidate (at most ⌊total/n⌋ in flight) always fits.
func boundedLoadCap(total int64, n int, epsilon float64) int64 {
	fair := (total + int64(n)) / int64(n) // ceil((total+1)/n)
	c := math.Ceil((1 + epsilon) * float64(total+1) / float64(n))
	if c >= math.MaxInt64 {
		return math.MaxInt64
	}
	return max(int64(c), fair)
}

// runnerUp returns the allowed candidate other than win with the lowest
// estimate, the first on ties; -1 when there is none.
func runnerUp(sl []slot, win int) int {
	ru := -1
	for i := range sl {
		if i != win && sl[i].aside == notAside && (ru < 0 || sl[i].ttft < sl[ru].ttft) {
			ru = i
		}
	}
	return ru
}

// History affinity remembers a prompt by its last marked block, every
// historyStride-th, so that finding the earlier prompt a request extends
// looks up one block in historyStride; and it looks back at most
// historyWalk blocks: a conversation's next turn adds its answer and a new
// message, rarely 4,096 tokens, and a prompt that extends nothing costs no
// more than historyWalk/historyStride look-ups.
const (
	historyStride = 8
	historyWalk   = 256
)

// lastMark is the index of the last marked block of a prompt of n blocks,
// or -1 when it has none.
func lastMark(n int) int { return n/historyStride*historyStride - 1 }

// home returns the candidate that served the latest earlier prompt req
// extends, when the index has forgotten on every candidate the part of that
// prompt beyond what they still hold: a conversation whose history no
// replica is known to hold goes back where it was, which is where the
// engine is likeliest to keep some of it, instead of being recomputed and
// duplicated elsewhere. It returns -1 when there is no such prompt, when the
// index still knows where the history is (pricing then decides), or when
// that replica is not a candidate the guards allow.
func (p *costModel) home(req *Request, cands []Candidate, sl []slot) int {
	if req.BlockSize <= 0 {
		return -1
	}
	known := knownTokens(sl)
	for j := lastMark(len(req.Blocks)); j >= len(req.Blocks)-historyWalk && j >= 0 && (j+1)*req.BlockSize > known; j -= historyStride {
		id, ok := p.history.peek(req.Blocks[j])
		if !ok {
			continue
		}
		for i := range cands {
			if cands[i].ID == id && sl[i].aside == notAside {
				return i
			}
		}
		return -1
	}
	return -1
}

// knownTokens is the longest cached prefix the index knows on any
// candidate.
func knownTokens(sl []slot) int {
	known := 0
	for i := range sl {
		known = max(known, sl[i].cached)
	}
	return known
}

// plainSecond is the lowest rank among the allowed candidates other than
// win with no credit given to any (neither an owner's nor a copier's):
// what win had to beat had nobody been credited. +Inf when there is none.
func (p *costModel) plainSecond(req *Request, cands []Candidate, sl []slot, win int) float64 {
	least := math.Inf(1)
	for i := range sl {
		if i != win && sl[i].aside == notAside {
			least = min(least, p.plainRank(req, &cands[i], sl[i].cached, sl))
		}
	}
	return least
}
