package policy

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"
)

// This file is a discrete-event simulation of a fleet, to compare the
// policies on the same seeded traffic. Each replica prefills one prompt at
// a time, first come first served, taking P(u, c) with the default
// parameters (the simulator's own latency model), where c is the prompt's
// leading blocks found in its prefix cache: an LRU of block hashes with a
// fixed capacity. A request then decodes for a while and leaves. The
// gateway's side is exact: candidates carry the replica's true cached
// prefix (one block short of a whole prompt, as the index predicts), its
// true queued prefill, its in-flight and running counts; engines report no
// KV usage.

// simBlockSize is the simulated engines' KV block size in tokens.
const simBlockSize = 16

// simRequest is one request of a workload.
type simRequest struct {
	arrive  float64 // seconds since the start
	prompt  int     // tokens
	blocks  []blockhash.Hash
	decode  float64 // seconds from first token to the last
	session string
}

// workload generates requests.
type workload struct {
	name     string
	requests []simRequest
}

// fleetSpec is the simulated fleet.
type fleetSpec struct {
	replicas int
	capacity int // prefix cache blocks per replica
}

// trafficGen builds prompts from shared system prompts and unique tails.
type trafficGen struct {
	r      *rand.Rand
	nextID uint64
	sys    []int // system prompt lengths in tokens
}

func newTrafficGen(seed uint64, systemPrompts, minSys, maxSys int) *trafficGen {
	g := &trafficGen{r: rand.New(rand.NewPCG(seed, 7))}
	for range systemPrompts {
		g.sys = append(g.sys, minSys+g.r.IntN(maxSys-minSys+1))
	}
	return g
}

// prompt returns a prompt that starts with system prompt s (none when s <
// 0) and goes on with tail unique tokens: its length and block hashes.
// Blocks wholly inside the system prompt are shared; the rest are the
// request's own.
func (g *trafficGen) prompt(s, tail int) (int, []blockhash.Hash) {
	g.nextID++
	id := g.nextID
	sys := 0
	if s >= 0 {
		sys = g.sys[s]
	}
	n := sys + tail
	blocks := make([]blockhash.Hash, n/simBlockSize)
	for k := range blocks {
		if (k+1)*simBlockSize <= sys {
			blocks[k] = blockhash.Hash{Hi: uint64(s) + 1, Lo: mix64(uint64(s)<<32 | uint64(k))}
		} else {
			blocks[k] = blockhash.Hash{Hi: 1<<40 | id, Lo: mix64(id<<20 ^ uint64(k))}
		}
	}
	return n, blocks
}

// chatTurn returns the prompt of a conversation's turn: system prompt s
// then history tokens of conversation conv, the same tokens at every turn,
// so that each turn's prompt extends the last one's.
func (g *trafficGen) chatTurn(s int, conv uint64, history int) (int, []blockhash.Hash) {
	sys := g.sys[s]
	n := sys + history
	blocks := make([]blockhash.Hash, n/simBlockSize)
	for k := range blocks {
		if (k+1)*simBlockSize <= sys {
			blocks[k] = blockhash.Hash{Hi: uint64(s) + 1, Lo: mix64(uint64(s)<<32 | uint64(k))}
		} else {
			blocks[k] = blockhash.Hash{Hi: 1<<41 | conv, Lo: mix64(1<<62 | conv<<20 ^ uint64(k))}
		}
	}
	return n, blocks
}

// decode draws a decode time: 50 to 300 tokens at 20 ms.
func (g *trafficGen) decode() float64 { return float64(50+g.r.IntN(251)) * 0.02 }

// poisson returns n arrival times at rate per second.
func (g *trafficGen) poisson(n int, rate float64) []float64 {
	out := make([]float64, n)
	t := 0.0
	for i := range out {
		t += g.r.ExpFloat64() / rate
		out[i] = t
	}
	return out
}

// zipf draws an index in [0, n) with weight 1/(i+1)^s.
type zipf struct{ cum []float64 }

func newZipf(n int, s float64) zipf {
	z := zipf{cum: make([]float64, n)}
	sum := 0.0
	for i := range n {
		sum += 1 / math.Pow(float64(i+1), s)
		z.cum[i] = sum
	}
	for i := range z.cum {
		z.cum[i] /= sum
	}
	return z
}

func (z zipf) draw(r *rand.Rand) int {
	i, _ := slices.BinarySearch(z.cum, r.Float64())
	return min(i, len(z.cum)-1)
}

// sharedWorkload is W1-like traffic: n requests at rate, each a system
// prompt drawn by pickSys (uniform when nil) and a 50 to 500 token
// question; with unique > 0, that share of the requests are instead prompts
// of uniqueMin to uniqueMax tokens that share nothing.
func sharedWorkload(name string, g *trafficGen, n int, rate float64, pickSys func() int, unique float64, uniqueMin, uniqueMax int) workload {
	w := workload{name: name}
	for _, t := range g.poisson(n, rate) {
		var req simRequest
		if unique > 0 && g.r.Float64() < unique {
			req.prompt, req.blocks = g.prompt(-1, uniqueMin+g.r.IntN(uniqueMax-uniqueMin+1))
		} else {
			s := g.r.IntN(len(g.sys))
			if pickSys != nil {
				s = pickSys()
			}
			req.prompt, req.blocks = g.prompt(s, 50+g.r.IntN(451))
		}
		req.arrive, req.decode = t, g.decode()
		w.requests = append(w.requests, req)
	}
	return w
}

// chatWorkload is W2-like traffic over one system prompt: conversations
// starting at rate per second, each of turns turns, every turn a 50 to 500
// token question after the whole history, the next one 10 to 20 s after
// the last answer (taken as 10 s of decoding), each naming its
// conversation.
func chatWorkload(g *trafficGen, conversations, turns int, rate float64) workload {
	w := workload{name: "chat"}
	for c, start := range g.poisson(conversations, rate) {
		t, history := start, 0
		for range turns {
			history += 50 + g.r.IntN(451)
			var req simRequest
			req.prompt, req.blocks = g.chatTurn(0, uint64(c), history)
			req.arrive, req.decode, req.session = t, g.decode(), fmt.Sprint("conv-", c)
			w.requests = append(w.requests, req)
			history += int(req.decode / 0.02) // the answer joins the history
			t += 10 + 10 + 10*g.r.Float64()
		}
	}
	slices.SortStableFunc(w.requests, func(a, b simRequest) int { return cmp.Compare(a.arrive, b.arrive) })
	return w
}

// risingWorkload is a system prompt coming into fashion: prompts of system
// prompt 0 and a 50 to 500 token question, answered in 5 to 30 tokens,
// whose rate rises linearly from `from` to `to` a second over secs seconds,
// beside chats at chatRate a second of 100 to 600 token prompts that share
// nothing.
func risingWorkload(g *trafficGen, secs, from, to, chatRate float64) workload {
	w := workload{name: "rise"}
	// A Poisson process at the top rate, thinned to the rate of the moment.
	top := max(from, to)
	for t := g.r.ExpFloat64() / top; t < secs; t += g.r.ExpFloat64() / top {
		if g.r.Float64()*top >= from+(to-from)*t/secs {
			continue
		}
		var req simRequest
		req.prompt, req.blocks = g.prompt(0, 50+g.r.IntN(451))
		req.arrive, req.decode = t, float64(5+g.r.IntN(26))*0.02
		w.requests = append(w.requests, req)
	}
	for _, t := range g.poisson(int(chatRate*secs), chatRate) {
		var req simRequest
		req.prompt, req.blocks = g.prompt(-1, 100+g.r.IntN(501))
		req.arrive, req.decode = t, g.decode()
		w.requests = append(w.requests, req)
	}
	slices.SortStableFunc(w.requests, func(a, b simRequest) int { return cmp.Compare(a.arrive, b.arrive) })
	return w
}

// blockLRU is a replica's prefix cache: block hashes (their low halves,
// unique in these workloads), least recently used evicted first.
type blockLRU struct {
	limit      int
	index      map[uint64]int32
	nodes      []lruNode
	head, tail int32 // most and least recently used; -1 when empty
}

type lruNode struct {
	h          uint64
	prev, next int32
}

func newBlockLRU(limit int) *blockLRU {
	return &blockLRU{limit: limit, index: make(map[uint64]int32, limit), head: -1, tail: -1}
}

// match is how many leading blocks it holds.
func (l *blockLRU) match(blocks []blockhash.Hash) int {
	for i, h := range blocks {
		if _, ok := l.index[h.Lo]; !ok {
			return i
		}
	}
	return len(blocks)
}

func (l *blockLRU) unlink(i int32) {
	n := &l.nodes[i]
	if n.prev >= 0 {
		l.nodes[n.prev].next = n.next
	} else {
		l.head = n.next
	}
	if n.next >= 0 {
		l.nodes[n.next].prev = n.prev
	} else {
		l.tail = n.prev
	}
}

func (l *blockLRU) pushFront(i int32) {
	n := &l.nodes[i]
	n.prev, n.next = -1, l.head
	if l.head >= 0 {
		l.nodes[l.head].prev = i
	}
	l.head = i
	if l.tail < 0 {
		l.tail = i
	}
}

// store marks the prompt's blocks used, adding those it lacks. The last
// block is stored first so that a prompt's head outlives its tail, as
// engines free a sequence's blocks from the end.
func (l *blockLRU) store(blocks []blockhash.Hash) {
	for k := len(blocks) - 1; k >= 0; k-- {
		h := blocks[k].Lo
		if i, ok := l.index[h]; ok {
			l.unlink(i)
			l.pushFront(i)
			continue
		}
		var i int32
		if len(l.nodes) < l.limit {
			l.nodes = append(l.nodes, lruNode{})
			i = int32(len(l.nodes) - 1)
		} else {
			i = l.tail
			l.unlink(i)
			delete(l.index, l.nodes[i].h)
		}
		l.nodes[i].h = h
		l.index[h] = i
		l.pushFront(i)
	}
}

// simReplica is one engine.
type simReplica struct {
	id       string
	cache    *blockLRU
	freeAt   float64 // when its prefill queue empties
	inFlight int64
	running  int64 // prefilling or decoding
}

// simEvent is a request starting its prefill (start) or leaving.
type simEvent struct {
	at    float64
	seq   int
	rep   int
	start bool
}

type eventQueue []simEvent

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || (q[i].at == q[j].at && q[i].seq < q[j].seq)
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// simResult is what one policy did with one workload.
type simResult struct {
	ttft          []float64 // seconds, in arrival order
	cached, total int64     // prompt tokens found cached, and all
	perReplica    []int     // requests routed to each replica
	steered       map[string]int
	guards        map[string]int
	// explain explains how the policy would route a request arriving
	// when the last one did, to the fleet as the run left it.
	explain func(simRequest) Explanation
}

func (r simResult) cachedShare() float64 { return float64(r.cached) / float64(r.total) }

func (r simResult) quantile(q float64) float64 {
	s := slices.Clone(r.ttft)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// busiestShare is the largest share of requests one replica took.
func (r simResult) busiestShare() float64 {
	return float64(slices.Max(r.perReplica)) / float64(len(r.ttft))
}

// simulate routes w over the fleet with the named policy.
func simulate(t testing.TB, name string, s Settings, w workload, f fleetSpec) simResult {
	t.Helper()
	model := DefaultSettings().Cost
	start := time.Unix(1_700_000_000, 0)
	var now float64
	s.Now = func() time.Time { return start.Add(time.Duration(now * float64(time.Second))) }
	p, err := NewWith(name, s)
	if err != nil {
		t.Fatal(err)
	}
	reps := make([]*simReplica, f.replicas)
	for i := range reps {
		reps[i] = &simReplica{id: "r" + string(rune('0'+i%10)) + string(rune('a'+i/10)), cache: newBlockLRU(f.capacity)}
	}
	res := simResult{perReplica: make([]int, f.replicas), steered: map[string]int{}, guards: map[string]int{}}
	var events eventQueue
	seq := 0
	cands := make([]Candidate, f.replicas)
	// offer fills cands with the fleet as rq finds it now.
	offer := func(rq simRequest) *Request {
		for i, r := range reps {
			cands[i] = Candidate{
				ID:            r.id,
				InFlight:      r.inFlight,
				Cached:        min(r.cache.match(rq.blocks)*simBlockSize, rq.prompt-1),
				QueuedPrefill: max(r.freeAt-now, 0),
				Running:       r.running,
				KVUsage:       -1,
			}
		}
		return &Request{PromptTokens: rq.prompt, Blocks: rq.blocks, BlockSize: simBlockSize, Session: rq.session}
	}
	for _, rq := range w.requests {
		for len(events) > 0 && events[0].at <= rq.arrive {
			e := heap.Pop(&events).(simEvent)
			if e.start {
				reps[e.rep].running++
			} else {
				reps[e.rep].running--
				reps[e.rep].inFlight--
			}
		}
		now = rq.arrive
		req := offer(rq)
		d := p.Pick(req, cands)
		r := reps[d.Index]
		cached := cands[d.Index].Cached
		begin := max(now, r.freeAt)
		r.freeAt = begin + model.Prefill(rq.prompt-cached, cached)
		r.cache.store(rq.blocks)
		r.inFlight++
		heap.Push(&events, simEvent{at: begin, seq: seq, rep: d.Index, start: true})
		heap.Push(&events, simEvent{at: r.freeAt + rq.decode, seq: seq + 1, rep: d.Index})
		seq += 2
		res.ttft = append(res.ttft, r.freeAt-now)
		res.cached += int64(cached)
		res.total += int64(rq.prompt)
		res.perReplica[d.Index]++
		if d.Steered != "" {
			res.steered[d.Steered]++
		}
		for _, g := range d.Guards {
			res.guards[g]++
		}
	}
	res.explain = func(rq simRequest) Explanation {
		req := offer(rq)
		return p.Explain(req, cands)
	}
	return res
}

// simScale shrinks the simulations under the race detector and -short.
func simScale() float64 {
	switch {
	case raceEnabled:
		return 0.25
	case testing.Short():
		return 0.5
	}
	return 1
}

// runAll simulates every policy on w and logs what each did.
func runAll(t *testing.T, w workload, f fleetSpec) map[string]simResult {
	out := map[string]simResult{}
	for _, name := range Names() {
		s := DefaultSettings()
		s.Seed = 1
		r := simulate(t, name, s, w, f)
		out[name] = r
		logResult(t, w.name, name, r)
	}
	return out
}

func logResult(t *testing.T, workload, name string, r simResult) {
	t.Helper()
	t.Logf("%-5s %-19s cached %5.1f%%  TTFT p50 %7.3fs p99 %7.3fs  busiest replica %4.1f%%  steered %v  guards %v",
		workload, name, 100*r.cachedShare(), r.quantile(0.5), r.quantile(0.99), 100*r.busiestShare(), r.steered, r.guards)
}

// withoutReplication simulates cost_model with hot prefix replication off,
// for comparison.
func withoutReplication(t *testing.T, w workload, f fleetSpec) simResult {
	s := DefaultSettings()
	s.Seed = 1
	s.HotPrefix.Blocks = 0
	r := simulate(t, CostModel, s, w, f)
	logResult(t, w.name, "cost_model(no hot)", r)
	return r
}

func scaled(n int) int { return max(200, int(float64(n)*simScale())) }

// TestFleetSharedPrompts: on W1 (eight system prompts of 2k to 8k tokens,
// 50 to 500 token questions) over four replicas whose caches hold about
// three of them, the cache-aware policies keep each prompt on few replicas
// and find most of it cached, where round robin evicts.
func TestFleetSharedPrompts(t *testing.T) {
	g := newTrafficGen(11, 8, 2000, 8000)
	w := sharedWorkload("W1", g, scaled(3000), 8, nil, 0, 0, 0)
	res := runAll(t, w, fleetSpec{replicas: 4, capacity: 1100})
	for _, name := range []string{PrefixHash, KVAware, CostModel} {
		if got := res[name].cachedShare(); got < 0.8 {
			t.Errorf("%s kept %.1f%% of prompt tokens cached, want >= 80%%", name, 100*got)
		}
	}
	if got := res[RoundRobin].cachedShare(); got >= 0.4 {
		t.Errorf("round_robin kept %.1f%% of prompt tokens cached, want < 40%%", 100*got)
	}
}

// TestFleetMixedPrompts: half W1, half prompts that share nothing. kv_aware
// sends shared prompts to their holders whatever the prefill queued there;
// cost_model weighs the queue against the cache.
func TestFleetMixedPrompts(t *testing.T) {
	g := newTrafficGen(12, 8, 2000, 8000)
	w := sharedWorkload("mix", g, scaled(4000), 11, nil, 0.5, 1000, 6000)
	res := runAll(t, w, fleetSpec{replicas: 4, capacity: 2000})
	cm, kv := res[CostModel].quantile(0.99), res[KVAware].quantile(0.99)
	t.Logf("cost_model p99 %.3fs is %.0f%% below kv_aware's %.3fs", cm, 100*(1-cm/kv), kv)
	if cm >= 0.9*kv {
		t.Errorf("cost_model p99 TTFT %.3fs, want at least 10%% below kv_aware's %.3fs", cm, kv)
	}
}

// TestFleetZipf: sixteen system prompts drawn by Zipf weight (exponent
// 1.1, so the first takes a third of the traffic) over four replicas.
// prefix_hash gives the hottest prompt's replica at least its third;
// cost_model replicates it. At 50 requests a second the hottest prompt's
// warm prefill needs about 0.6 of a replica: replication is what keeps
// cost_model's busiest replica under 30% (35% without it).
func TestFleetZipf(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine simulating a fleet, where the race detector has nothing to find; make norace runs it")
	}
	g := newTrafficGen(13, 16, 2000, 8000)
	z := newZipf(16, 1.1)
	w := sharedWorkload("zipf", g, scaled(6000), 50, func() int { return z.draw(g.r) }, 0, 0, 0)
	f := fleetSpec{replicas: 4, capacity: 3000}
	res := runAll(t, w, f)
	withoutReplication(t, w, f)
	if got := res[CostModel].busiestShare(); got > 0.30 {
		t.Errorf("cost_model put %.1f%% of requests on one replica, want <= 30%%", 100*got)
	}
	if got := res[PrefixHash].busiestShare(); got <= 0.30 {
		t.Errorf("prefix_hash put only %.1f%% of requests on its busiest replica: the test is not testing", 100*got)
	}
}

// TestFleetHotPrompt: one system prompt for every request, at a rate whose
// prefill one replica cannot keep up with. prefix_hash queues it all on
// one replica; cost_model spreads it.
func TestFleetHotPrompt(t *testing.T) {
	g := newTrafficGen(14, 1, 4000, 4000)
	n := scaled(2000)
	w := sharedWorkload("hot", g, n, 50, nil, 0, 0, 0)
	f := fleetSpec{replicas: 4, capacity: 2000}
	res := runAll(t, w, f)
	withoutReplication(t, w, f)
	ph, cm := res[PrefixHash].quantile(0.99), res[CostModel].quantile(0.99)
	// The queue grows for as long as traffic lasts; a shorter run grows a
	// shorter one.
	want := 20 * float64(n) / 2000
	if ph <= want {
		t.Errorf("prefix_hash p99 TTFT %.2fs, want > %.0fs: the test is not testing", ph, want)
	}
	if cm >= 0.5 {
		t.Errorf("cost_model p99 TTFT %.3fs, want < 0.5s", cm)
	}
	// Replication is at work here too: the prompt's demand of about 1.7 s
	// of prefill a second makes every replica an owner. But it changes
	// nothing, as every replica takes one of the first requests cold and
	// holds the prompt from then on; TestFleetRisingHotPrompt is where it
	// matters.
	e := res[CostModel].explain(w.requests[len(w.requests)-1])
	u := DefaultSettings().HotPrefix.Utilization
	if want := min(f.replicas, int(math.Ceil(e.HotDemand/u))); e.HotDemand <= u || e.HotOwners != want {
		t.Errorf("hot prompt's demand %.3f s/s with %d owners, want > %v with %d", e.HotDemand, e.HotOwners, u, want)
	}
}

// TestFleetRisingHotPrompt: a system prompt of 8,000 tokens comes into
// fashion, its rate rising from 1 to 30 requests a second over a minute,
// beside 20 chats a second. Warm it takes about 0.04 s of prefill (1.2
// replicas' worth at 30 a second), cold 0.95 s; its answers are short, so
// bounded load, which counts requests, leaves its spread to the estimates.
// It starts on one replica. Without replication cost_model keeps it there
// until that replica's queue costs as much as a cold prefill elsewhere, so
// p99 TTFT nears 0.9 s. With replication, once its demand passes half a
// replica it gets ceil(demand/0.5) owners priced as if they held it; each
// pays one cold prefill, then they share it by their queues, and p99 stays
// under 0.5 s. Not scaled: it takes milliseconds, and a shorter rise ends
// before the sketch sees the prompt hot. Demand is counted as prefill
// alone: by share, the prompt's 60% of the arrivals would make every
// replica an owner, and the owners counted from its prefill are what this
// checks. The copy credit is off for the same reason: it makes the first
// copies itself, before the owners' credit would (checked last, with it
// on as by default).
func TestFleetRisingHotPrompt(t *testing.T) {
	g := newTrafficGen(14, 1, 8000, 8000)
	w := risingWorkload(g, 60, 1, 30, 20)
	f := fleetSpec{replicas: 4, capacity: 2000}
	s := DefaultSettings()
	s.Seed = 1
	s.HotPrefix.Demand = DemandPrefill
	copies := s
	s.HotPrefix.Copies = false
	on := simulate(t, CostModel, s, w, f)
	logResult(t, w.name, CostModel, on)
	off := withoutReplication(t, w, f)
	if got := on.quantile(0.99); got >= 0.5 {
		t.Errorf("cost_model p99 TTFT %.3fs, want < 0.5s", got)
	}
	withCopies := simulate(t, CostModel, copies, w, f)
	logResult(t, w.name, "cost_model(copies)", withCopies)
	if got := withCopies.quantile(0.99); got >= 0.5 || withCopies.steered[SteerCopy] == 0 {
		t.Errorf("cost_model with the copy credit: p99 TTFT %.3fs, steered %v; want < 0.5s with copies made", got, withCopies.steered)
	}
	if got := off.quantile(0.99); got < 0.5 {
		t.Errorf("cost_model without replication p99 TTFT %.3fs, want >= 0.5s: the test is not testing", got)
	}
	if on.steered[SteerHotPrefix] == 0 {
		t.Errorf("no decision steered by %s: %v", SteerHotPrefix, on.steered)
	}
	// At the end the prompt has ceil(demand/utilization) owners, fewer
	// than the replicas, and every owner holds it.
	var hot simRequest
	hot.prompt, hot.blocks = g.prompt(0, 200)
	e := on.explain(hot)
	u := s.HotPrefix.Utilization
	if want := int(math.Ceil(e.HotDemand / u)); e.HotDemand <= u || e.HotOwners != want || want >= f.replicas {
		t.Errorf("demand %.3f s/s with %d owners, want > %v with ceil(demand/%v) < %d", e.HotDemand, e.HotOwners, u, u, f.replicas)
	}
	for _, r := range e.Replicas {
		if r.HotOwner && r.CachedTokens < 8000 {
			t.Errorf("owner %s holds %d tokens of the 8,000 token system prompt", r.ID, r.CachedTokens)
		}
	}
}

// TestFleetChats: multi-turn chats over one hot system prompt, with
// session affinity. Replicating the system prompt must not cost the
// conversations their histories (owners are credited with the system
// prompt, not with a history they lack): hit rate and p99 stay as with
// replication off.
func TestFleetChats(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine simulating a fleet, where the race detector has nothing to find; make norace runs it")
	}
	g := newTrafficGen(15, 1, 2000, 2000)
	w := chatWorkload(g, scaled(600), 8, 0.5)
	f := fleetSpec{replicas: 4, capacity: 8000}
	for _, name := range Names() {
		s := DefaultSettings()
		s.Seed, s.SessionAffinity = 1, true
		logResult(t, w.name, name, simulate(t, name, s, w, f))
	}
	// At about 4 requests a second the system prompt's demand is about
	// 0.25 s/s: a utilization of 0.1 makes it hot, with three owners.
	s := DefaultSettings()
	s.Seed, s.SessionAffinity = 1, true
	s.HotPrefix.Utilization = 0.1
	on := simulate(t, CostModel, s, w, f)
	logResult(t, w.name, "cost_model(hot 0.1)", on)
	s.HotPrefix.Blocks = 0
	off := simulate(t, CostModel, s, w, f)
	logResult(t, w.name, "cost_model(no hot)", off)
	if on.cachedShare() < off.cachedShare()-0.02 {
		t.Errorf("hit rate %.1f%% with replication, %.1f%% without", 100*on.cachedShare(), 100*off.cachedShare())
	}
	if a, b := on.quantile(0.99), off.quantile(0.99); a > 1.2*b+0.05 {
		t.Errorf("p99 TTFT %.3fs with replication, %.3fs without", a, b)
	}
}
