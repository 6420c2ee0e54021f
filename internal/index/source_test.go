package index

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/events"
)

// eventsIndex is an index whose replica "e" is attached to events, with a
// clock the test moves.
func eventsIndex() (*Approx, *int64) {
	x := NewApprox(1000)
	clock := int64(1)
	x.now = func() int64 { return clock }
	x.Join("e")
	x.AttachEvents("e", EventsConfig{BlockSize: mirrorBS, Seed: mirrorSeed})
	return x, &clock
}

// attached is replica id's attachment now.
func attached(x *Approx, id string) Attachment {
	r := x.lockReplica(id)
	defer r.mu.Unlock()
	return Attachment{replica: id, ev: r.ev}
}

// depth is how many leading blocks of chain replica id holds, as Match says.
func depth(x *Approx, id string, chain []blockhash.Hash) int {
	return x.Match(nil, []string{id}, chain, len(chain)*mirrorBS+1, mirrorBS)[0]
}

func batchOf(evs ...events.Event) *events.Batch { return &events.Batch{Events: evs} }

// TestSourceSwitchesWhatMatchSees: a replica's holder bits follow the
// source in effect. A prompt routed within the speculative TTL before the
// switch to the events counts as speculation until its TTL ends (it may
// still be on its way to the engine); one routed earlier is left to the
// mirror at once.
func TestSourceSwitchesWhatMatchSees(t *testing.T) {
	x, clock := eventsIndex()
	old := ours("", seq(500, 8)...)
	x.Record("e", old)
	*clock += int64(DefaultSpeculativeTTL)
	routed := ours("", seq(1, 12)...)
	cached := ours("", seq(100, 8)...)
	x.Record("e", routed)
	x.ApplyEvents(attached(x, "e"), batchOf(stored(0, 1, seq(100, 8))))
	if depth(x, "e", routed) != 3 || depth(x, "e", cached) != 0 || depth(x, "e", old) != 2 {
		t.Fatalf("approximate source: routed %d, cached %d, old %d; want 3, 0, 2", depth(x, "e", routed), depth(x, "e", cached), depth(x, "e", old))
	}
	if got := x.SetSource("e", true); got != SourceEvents {
		t.Fatalf("SetSource gave %s", got)
	}
	if depth(x, "e", routed) != 3 || depth(x, "e", cached) != 2 || depth(x, "e", old) != 0 {
		t.Fatalf("events source: routed %d, cached %d, old %d; want 3 (speculated), 2, 0", depth(x, "e", routed), depth(x, "e", cached), depth(x, "e", old))
	}
	if st := x.Events("e"); st.Speculative != 3 {
		t.Errorf("%d speculative blocks after the switch, want routed's 3", st.Speculative)
	}
	*clock += int64(DefaultSpeculativeTTL)
	x.ExpireSpeculation()
	if depth(x, "e", routed) != 0 || depth(x, "e", cached) != 2 {
		t.Fatalf("events source after the TTL: routed %d, cached %d; want 0, 2", depth(x, "e", routed), depth(x, "e", cached))
	}
	x.SetSource("e", false)
	if depth(x, "e", routed) != 3 || depth(x, "e", cached) != 0 {
		t.Fatalf("back to approximate: routed %d, cached %d; want 3, 0", depth(x, "e", routed), depth(x, "e", cached))
	}
	if got := x.SetSource("nobody", true); got != SourceApproximate {
		t.Errorf("an unknown replica's source: %s", got)
	}
	x.Join("plain")
	x.Record("plain", routed)
	if got := x.SetSource("plain", true); got != SourceApproximate {
		t.Errorf("a replica without events switched to %s", got)
	}
}

func TestSpeculationUntilTheEngineConfirms(t *testing.T) {
	x, clock := eventsIndex()
	x.SetSource("e", true)
	a := ours("", seq(1, 8)...)
	b := ours("", seq(50, 8)...)
	x.Record("e", a)
	x.Record("e", b)
	if depth(x, "e", a) != 2 || depth(x, "e", b) != 2 {
		t.Fatal("routed prompts must count as held before the engine's events")
	}
	// The engine confirms a; b never shows up.
	x.ApplyEvents(attached(x, "e"), batchOf(stored(0, 1, seq(1, 8))))
	*clock += int64(DefaultSpeculativeTTL)
	x.ExpireSpeculation()
	if depth(x, "e", a) != 2 {
		t.Errorf("a confirmed prompt: %d blocks after the TTL, want 2", depth(x, "e", a))
	}
	if depth(x, "e", b) != 0 {
		t.Errorf("an unconfirmed prompt: %d blocks after the TTL, want 0", depth(x, "e", b))
	}
	if st := x.Events("e"); st.Speculative != 0 || st.Mirrored != 2 || st.Source != SourceEvents || st.Confirmed != 2 || st.Expired != 2 {
		t.Errorf("events stats %+v, want 2 blocks confirmed and 2 expired", st)
	}
}

func TestConfirmedSpeculationFollowsTheEngine(t *testing.T) {
	x, _ := eventsIndex()
	x.SetSource("e", true)
	a := ours("", seq(1, 4)...)
	x.Record("e", a)
	x.ApplyEvents(attached(x, "e"), batchOf(removed(99))) // news of another block
	if depth(x, "e", a) != 1 {
		t.Fatal("a removal of another block ended the speculation")
	}
	// The engine stores the routed block, then evicts it: from the store
	// on, its events alone decide, so the eviction counts at once, not
	// when the TTL would have ended.
	x.ApplyEvents(attached(x, "e"), batchOf(stored(0, 1, seq(1, 4))))
	if st := x.Events("e"); st.Speculative != 0 || st.Mirrored != 1 {
		t.Errorf("after the store: %+v", st)
	}
	x.ApplyEvents(attached(x, "e"), batchOf(removed(1)))
	if depth(x, "e", a) != 0 {
		t.Error("the engine evicted a confirmed block; it must not count")
	}
}

func TestTakeBackEndsSpeculation(t *testing.T) {
	x, _ := eventsIndex()
	x.SetSource("e", true)
	a := ours("", seq(1, 8)...)
	tok := x.Record("e", a)
	x.TakeBack(tok)
	if depth(x, "e", a) != 0 {
		t.Fatal("a taken-back record still counts")
	}
	// A later record renews an entry: taking back the earlier one leaves it.
	t1 := x.Record("e", a)
	x.Record("e", a)
	x.TakeBack(t1)
	if depth(x, "e", a) != 2 {
		t.Error("a renewed speculation was taken back by an older record")
	}
}

func TestResetAndForgetClearEvents(t *testing.T) {
	x, _ := eventsIndex()
	x.SetSource("e", true)
	a := ours("", seq(1, 8)...)
	x.ApplyEvents(attached(x, "e"), batchOf(stored(0, 1, seq(1, 8))))
	x.Reset("e")
	if depth(x, "e", a) != 0 || x.Events("e").Mirrored != 0 {
		t.Fatal("Reset must empty the mirror")
	}
	x.ApplyEvents(attached(x, "e"), batchOf(stored(0, 1, seq(1, 8))))
	x.PurgeEvents(attached(x, "e"))
	if depth(x, "e", a) != 0 {
		t.Fatal("PurgeEvents must empty the mirror")
	}
	x.ApplyEvents(attached(x, "e"), batchOf(stored(0, 1, seq(1, 8))))
	x.Forget("e")
	if st := x.Stats(); st.Entries != 0 {
		t.Errorf("after Forget: %d entries", st.Entries)
	}
	// Its handle goes to a newcomer, which must not inherit the bits.
	x.Join("other")
	x.Record("other", ours("", seq(500, 4)...))
	if depth(x, "other", a) != 0 {
		t.Error("a new replica inherited a forgotten one's blocks")
	}
}

// TestStaleAttachmentWritesNothing: a replica replaced by one of its ID
// (forgotten, or attached again) gets a new mirror, which the old stream,
// possibly still stopping, must not reach.
func TestStaleAttachmentWritesNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replace func(x *Approx)
	}{
		{"attached_again", func(*Approx) {}},
		{"forgotten_then_attached", func(x *Approx) { x.Forget("e"); x.Join("e") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, _ := eventsIndex()
			old := x.AttachEvents("e", EventsConfig{BlockSize: mirrorBS, Seed: mirrorSeed})
			x.ApplyEvents(old, batchOf(stored(0, 1, seq(1, 8))))
			tc.replace(x)
			x.AttachEvents("e", EventsConfig{BlockSize: mirrorBS, Seed: mirrorSeed}) // the replacement
			x.ApplyEvents(attached(x, "e"), batchOf(stored(0, 20, seq(101, 4*mirrorBS))))
			x.ApplyEvents(old, batchOf(stored(0, 30, seq(201, 2*mirrorBS))))
			x.PurgeEvents(old)
			if got := x.Events("e").Mirrored; got != 4 {
				t.Errorf("the new mirror holds %d blocks, want the 4 stored through its own attachment", got)
			}
		})
	}
}

// TestEventsSourceAgainstModel drives an events-sourced replica with
// random stores, removals, clears, records, take-backs and clock moves,
// and checks every block's membership (single-block matches, which need no
// prefix closure) against a naive model: held while the engine holds a
// copy or an unexpired, untaken speculation names it.
func TestEventsSourceAgainstModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		x, clock := eventsIndex()
		x.SetSource("e", true)
		const nBlocks = 6
		// Block j is the one-block prompt of tokens j*4..j*4+3, engine hash j+1.
		hash := func(j int) blockhash.Hash { return ours("", seq(j*4, 4)...)[0] }
		copies := map[int]int{}
		type spec struct {
			expires int64
			stamp   int
		}
		specs := map[int]spec{}
		type rec struct {
			tok   Token
			j     int
			stamp int
		}
		var recs []rec
		stamp := 0
		ttl := int64(DefaultSpeculativeTTL)
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			j := rapid.IntRange(0, nBlocks-1).Draw(rt, "block")
			switch rapid.IntRange(0, 5).Draw(rt, "op") {
			case 0:
				x.ApplyEvents(attached(x, "e"), batchOf(stored(0, uint64(j+1), seq(j*4, 4))))
				if copies[j] == 0 {
					delete(specs, j) // the engine confirms a speculation
				}
				copies[j]++
			case 1:
				x.ApplyEvents(attached(x, "e"), batchOf(removed(uint64(j+1))))
				if copies[j] > 0 {
					copies[j]--
				}
			case 2:
				x.ApplyEvents(attached(x, "e"), batchOf(events.Event{Kind: events.AllBlocksCleared}))
				clear(copies)
			case 3:
				stamp++
				tok := x.Record("e", []blockhash.Hash{hash(j)})
				if copies[j] == 0 {
					specs[j] = spec{*clock + ttl, stamp}
				}
				recs = append(recs, rec{tok, j, stamp})
			case 4:
				if len(recs) > 0 {
					i := rapid.IntRange(0, len(recs)-1).Draw(rt, "record")
					r := recs[i]
					x.TakeBack(r.tok)
					if s, ok := specs[r.j]; ok && s.stamp == r.stamp {
						delete(specs, r.j)
					}
				}
			case 5:
				*clock += rapid.Int64Range(1, ttl).Draw(rt, "tick")
				x.ExpireSpeculation()
				for k, s := range specs {
					if s.expires <= *clock {
						delete(specs, k)
					}
				}
			}
			for k := range nBlocks {
				_, speculated := specs[k]
				want := copies[k] > 0 || speculated
				if got := depth(x, "e", []blockhash.Hash{hash(k)}) == 1; got != want {
					rt.Fatalf("block %d: held %v, model %v (copies %d, speculated %v)", k, got, want, copies[k], speculated)
				}
			}
		}
	})
}

// TestNoteRecordKeepsTheLive: the records an events source remembers
// while inactive are, at every note, exactly those a naive list keeps: the
// ones made less than the TTL before, oldest first.
func TestNoteRecordKeepsTheLive(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ttl := time.Duration(rapid.Int64Range(1, 100).Draw(t, "ttl"))
		var ev eventSource
		var naive []recordTime
		now := int64(0)
		for i := range rapid.IntRange(1, 200).Draw(t, "records") {
			now += rapid.Int64Range(0, 30).Draw(t, "gap")
			ev.noteRecord(uint64(i+1), now, ttl)
			naive = append(naive, recordTime{uint64(i + 1), now})
			var live []recordTime
			for _, r := range naive {
				if r.at+int64(ttl) > now {
					live = append(live, r)
				}
			}
			if got := ev.recent[firstLive(ev.recent, now, ttl):]; !slices.Equal(got, live) {
				t.Fatalf("after record %d at %d: live %v, want %v", i+1, now, got, live)
			}
		}
	})
}

// TestMirrorBoundFollowsTheCapacity: a replica attached before its engine
// reported a capacity gets the default bound, which grows when a larger
// capacity is learned; stores up to four caches' worth are then kept.
func TestMirrorBoundFollowsTheCapacity(t *testing.T) {
	x := NewApprox(1000)
	x.Join("e")
	x.AttachEvents("e", EventsConfig{BlockSize: mirrorBS, Seed: mirrorSeed})
	x.SetCapacity("e", 70_000) // a cache larger than the default bound's 1<<16 blocks
	const n = 80_000
	tokens := make([]uint32, n)
	for i := range tokens {
		tokens[i] = uint32(i)
	}
	hashes := make([]events.Hash, 0, n/mirrorBS)
	for i := range n / mirrorBS {
		hashes = append(hashes, events.UintHash(uint64(i+1)))
	}
	for i := 0; i < len(hashes); i += 1000 {
		ev := events.Event{Kind: events.BlockStored, BlockSize: mirrorBS, Hashes: hashes[i:min(i+1000, len(hashes))]}
		if i > 0 {
			ev.Parent, ev.HasParent = hashes[i-1], true
		}
		ev.Tokens = tokens[i*mirrorBS : (i+len(ev.Hashes))*mirrorBS]
		x.ApplyEvents(attached(x, "e"), batchOf(ev))
	}
	if st := x.Events("e"); st.Mirror.Overflow != 0 || st.Mirrored != n/mirrorBS {
		t.Errorf("mirrored %d blocks with %d refused; want %d and none", st.Mirrored, st.Mirror.Overflow, n/mirrorBS)
	}
}

// TestMirrorBoundHasACeiling: the bound that follows a replica's capacity
// stops at MaxMirrorBlocks, however large a capacity its engine claims
// (found by a review: an engine that claimed num_gpu_blocks 536,870,913
// raised its own mirror's bound to 2^31 blocks); one set in EventsConfig
// is taken as set.
func TestMirrorBoundHasACeiling(t *testing.T) {
	for _, tc := range []struct {
		name      string
		set       int // EventsConfig.MaxBlocks
		capacity  int
		wantBound int
	}{
		{"small", 0, 1000, 1 << 16},
		{"four_caches", 0, 70_000, 280_000},
		{"at_the_ceiling", 0, MaxMirrorBlocks / 4, MaxMirrorBlocks},
		{"past_the_ceiling", 0, MaxMirrorBlocks/4 + 1, MaxMirrorBlocks},
		{"claimed_2^29+1", 0, 1<<29 + 1, MaxMirrorBlocks},
		{"claimed_maxint", 0, math.MaxInt, MaxMirrorBlocks},
		{"set_past_the_ceiling", 4 * MaxMirrorBlocks, 1 << 29, 4 * MaxMirrorBlocks},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := NewApprox(1000)
			x.Join("e")
			x.AttachEvents("e", EventsConfig{BlockSize: mirrorBS, Seed: mirrorSeed, MaxBlocks: tc.set})
			x.SetCapacity("e", tc.capacity) // learned after the stream started
			if got := x.Events("e").Bound; got != tc.wantBound {
				t.Errorf("capacity %d learned after attaching: bound %d, want %d", tc.capacity, got, tc.wantBound)
			}
			y := NewApprox(1000)
			y.Join("e")
			y.SetCapacity("e", tc.capacity) // known before
			y.AttachEvents("e", EventsConfig{BlockSize: mirrorBS, Seed: mirrorSeed, MaxBlocks: tc.set})
			if got := y.Events("e").Bound; got != tc.wantBound {
				t.Errorf("capacity %d known when attaching: bound %d, want %d", tc.capacity, got, tc.wantBound)
			}
			r := y.lockReplica("e")
			maxOrphans := r.ev.mirror.maxOrphans
			r.mu.Unlock()
			if maxOrphans != tc.wantBound/4 {
				t.Errorf("orphan bound %d, want %d", maxOrphans, tc.wantBound/4)
			}
		})
	}
}

// TestEventsHoleInTheMiddle: a block removed from the middle of a mirrored
// chain ends what Match predicts there, as the engine's lookup stops at
// the first block it lacks; the blocks after it stay mirrored. Match
// bisected, taking a replica holding the first and the last block to hold
// them all, and predicted the whole chain (a review's finding). Stored
// again, the block joins them up; a clear ends the checks. Over 64
// replicas, Match works on several holder words.
func TestEventsHoleInTheMiddle(t *testing.T) {
	for _, others := range []int{0, 70} {
		t.Run(fmt.Sprintf("others_%d", others), func(t *testing.T) {
			x := NewApprox(1000)
			for i := range others {
				x.Join(fmt.Sprintf("r%d", i))
			}
			x.Join("e")
			at := x.AttachEvents("e", EventsConfig{BlockSize: mirrorBS, Seed: mirrorSeed})
			x.SetSource("e", true)
			tokens := seq(1, 6*mirrorBS)
			chain := ours("", tokens...)
			x.ApplyEvents(at, batchOf(stored(0, 100, tokens)))
			if d := depth(x, "e", chain); d != 6 {
				t.Fatalf("stored: Match says %d blocks, want 6", d)
			}
			x.ApplyEvents(at, batchOf(removed(102)))
			if ev := x.Events("e"); ev.Mirrored != 5 {
				t.Fatalf("mirrored %d, want 5", ev.Mirrored)
			}
			if d := depth(x, "e", chain); d != 2 {
				t.Fatalf("block 2 removed: Match says %d leading blocks held, the engine would hit 2", d)
			}
			if d := depth(x, "e", chain[:4]); d != 2 {
				t.Fatalf("block 2 removed, a 4-block prompt: Match says %d, want 2", d)
			}
			x.ApplyEvents(at, batchOf(stored(101, 102, tokens[2*mirrorBS:3*mirrorBS])))
			if d := depth(x, "e", chain); d != 6 {
				t.Fatalf("block 2 stored again: Match says %d, want 6", d)
			}
			x.ApplyEvents(at, batchOf(events.Event{Kind: events.AllBlocksCleared}))
			if holes := x.holes.Load(); holes != nil {
				t.Errorf("after a clear, replicas still checked for holes: %x", *holes)
			}
		})
	}
}

// TestEventsDepthAgainstModel drives an events-sourced replica with random
// stores (after parents held, gone or never seen), removals anywhere in a
// chain, and clears, and checks Match's depth for every chain against a
// naive model: the leading blocks the mirror holds under the gateway's
// hash, up to the first it does not.
func TestEventsDepthAgainstModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		const chains, blocks = 3, 6
		key := func(c, d int) uint64 { return uint64(100*c + d + 1) }
		tokens := func(c, d int) []int { return seq(1000*c+10*d, mirrorBS) }
		var whole [chains][]blockhash.Hash
		for c := range chains {
			var all []int
			for d := range blocks {
				all = append(all, tokens(c, d)...)
			}
			whole[c] = ours("", all...)
		}
		x, at := revealIndex(0)
		model := newNaiveMirror()
		for range rapid.IntRange(1, 50).Draw(rt, "steps") {
			c := rapid.IntRange(0, chains-1).Draw(rt, "chain")
			switch rapid.IntRange(0, 6).Draw(rt, "op") {
			case 0, 1, 2:
				from := rapid.IntRange(0, blocks-1).Draw(rt, "from")
				to := rapid.IntRange(from+1, blocks).Draw(rt, "to")
				var toks []int
				var keys []uint64
				for d := from; d < to; d++ {
					toks = append(toks, tokens(c, d)...)
					keys = append(keys, key(c, d))
				}
				parent := uint64(0)
				if from > 0 {
					parent = key(c, from-1)
				}
				x.ApplyEvents(at, batchOf(stored(parent, key(c, from), toks)))
				model.store(keys, parent, from > 0)
			case 3, 4, 5:
				d := rapid.IntRange(0, blocks-1).Draw(rt, "block")
				x.ApplyEvents(at, batchOf(removed(key(c, d))))
				model.remove(key(c, d))
			case 6:
				x.ApplyEvents(at, batchOf(events.Event{Kind: events.AllBlocksCleared}))
				model.clear()
			}
			for c := range chains {
				want := 0
				for want < blocks && model.keyed[key(c, want)] {
					want++
				}
				if got := depth(x, "e", whole[c]); got != want {
					rt.Fatalf("chain %d: Match says %d leading blocks, the model %d", c, got, want)
				}
			}
		}
	})
}

// TestSpeculationQueueBounded: a prompt the engine has not stored, routed
// again and again within the speculative TTL, renews the same entries;
// their queue of expiries stays near the entries (it grew by the prompt's
// blocks at every record), and what Match says does not change.
func TestSpeculationQueueBounded(t *testing.T) {
	x, clock := eventsIndex()
	x.SetSource("e", true)
	chain := ours("", seq(1, 256*mirrorBS)...)
	for range 500 {
		*clock += 1e6 // a record a millisecond, all within the TTL
		x.Record("e", chain)
	}
	if d := depth(x, "e", chain); d != 256 {
		t.Errorf("routed: depth %d, want 256", d)
	}
	r := x.lockReplica("e")
	queued, entries := len(r.ev.queue), len(r.ev.spec)
	r.mu.Unlock()
	if queued > 2*entries+64 {
		t.Errorf("500 records of one prompt: %d items queued for %d entries", queued, entries)
	}
	*clock += int64(DefaultSpeculativeTTL)
	x.ExpireSpeculation()
	if d := depth(x, "e", chain); d != 0 {
		t.Errorf("after the TTL: depth %d, want 0", d)
	}
}
