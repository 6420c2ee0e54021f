package gateway

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/events"
	"github.com/inferrail/inferrail/internal/index"
	"github.com/inferrail/inferrail/internal/kvfeed"
)

// hostileHeapBound is how much more heap a gateway may hold after a
// hostile stream than before it (after GC): the mirror's own blocks, the
// connections' buffers, the logs the test keeps.
const hostileHeapBound = 32 << 20

// TestHostilePublisherGarbage: a publisher that is not ZMTP at all, then
// one that shakes hands and sends random frames. The gateway keeps
// routing, counts the messages it had to drop, falls back while the
// stream is useless and follows it again once it is sound.
func TestHostilePublisherGarbage(t *testing.T) {
	r := newHostileRig(t, events.EncodingMap, 1024)
	before := heapInuse()
	prev := r.stream()
	r.eng.setHostile(func(nc net.Conn) {
		nc.Write(randBytes(connRNG(), 64<<10))
	})
	waitFor(t, "the gateway to meet the garbage publisher 3 times", 10*time.Second, func() bool { return r.eng.hostiles.Load() >= 3 })
	st := r.waitSource(index.SourceApproximate, reasonNoStream, 5*time.Second)
	// The one connection setHostile cut is all that was lost: the
	// garbage never made a connection, nor a message.
	if st.Malformed != 0 || st.Disconnects != prev.Disconnects+1 {
		t.Errorf("bytes that are not ZMTP never make a message nor a connection: %+v", st)
	}
	if st.Rejected == 0 {
		t.Errorf("the refused connections are not counted: %+v", st)
	}
	r.heal()

	r.eng.setHostile(func(nc net.Conn) {
		rng := connRNG()
		out := zmtpGreeting()
		for range 200 {
			frames := 1 + rng.IntN(5)
			for i := range frames {
				out = append(out, zmtpFrame(randBytes(rng, rng.IntN(300)), i < frames-1)...)
			}
		}
		nc.Write(out)
	})
	st = r.waitStream("random frames counted as malformed", 10*time.Second, func(s kvStatus) bool { return s.Malformed >= 200 })
	r.waitSource(index.SourceApproximate, "", 5*time.Second)
	if st.Disconnects == 0 {
		t.Errorf("the dropped connections are not counted: %+v", st)
	}
	r.heal()
	r.finish()
	checkHeap(t, before, hostileHeapBound)
	st = r.stream()
	r.wantMetrics(map[string]float64{
		`inferrail_kv_events_malformed_total{replica="sim-1"}`:                      float64(st.Malformed),
		`inferrail_kv_events_disconnects_total{replica="sim-1"}`:                    float64(st.Disconnects),
		`inferrail_kv_events_rejected_total{replica="sim-1"}`:                       float64(st.Rejected),
		`inferrail_index_source{replica="sim-1",source="events"}`:                   1,
		`inferrail_kv_events_purges_total{reason="malformed",replica="sim-1"}`:      float64(st.Purges[kvfeed.PurgeMalformed]),
		`inferrail_kv_events_purges_total{reason="restart",replica="sim-1"}`:        float64(st.Purges[kvfeed.PurgeRestart]),
		`inferrail_kv_events_replays_total{replica="sim-1",result="error"}`:         float64(st.ReplayErrors),
		`inferrail_kv_events_dropped_total{kind="unknown_removal",replica="sim-1"}`: 0,
	})
}

// connRNG is a generator for one hostile connection.
func connRNG() *rand.Rand {
	return rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
}

// TestHostileFrames: a frame cut short, and a frame header claiming 2^62
// bytes. Neither allocates what it claims; both cost the connection.
func TestHostileFrames(t *testing.T) {
	r := newHostileRig(t, events.EncodingMap, 1024)
	before := heapInuse()
	for _, tc := range []struct {
		name string
		send []byte
	}{
		{"truncated frame", append(zmtpGreeting(), zmtpFrame(make([]byte, 1000), false)[:100]...)},
		{"truncated message", append(append(zmtpGreeting(), zmtpFrame([]byte("kv"), true)...), zmtpFrame(make([]byte, 8), true)...)},
		{"2^62-byte frame", append(append(zmtpGreeting(), 0x03), binary.BigEndian.AppendUint64(nil, 1<<62)...)},
	} {
		disconnects := r.stream().Disconnects
		r.eng.setHostile(func(nc net.Conn) {
			nc.Write(tc.send)
			time.Sleep(50 * time.Millisecond) // let the reader see a cut, not a closed stream
		})
		st := r.waitStream(tc.name+": connections dropped", 10*time.Second, func(s kvStatus) bool { return s.Disconnects >= disconnects+3 })
		st = r.waitSource(index.SourceApproximate, reasonNoStream, 5*time.Second)
		if st.Malformed != 0 || st.Received == 0 {
			t.Errorf("%s: %+v", tc.name, st)
		}
		r.heal()
	}
	r.finish()
	checkHeap(t, before, hostileHeapBound)
}

// TestHostilePayloads: well-formed ZMTP whose payloads do not decode. Each
// is counted malformed and purges the mirror, which then must see a
// cache's worth of blocks stored before predictions follow it again.
func TestHostilePayloads(t *testing.T) {
	r := newHostileRig(t, events.EncodingMap, 1024)
	before := heapInuse()
	rng := rand.New(rand.NewPCG(1, 1))
	good := events.AppendBatch(nil, &events.Batch{TS: 1, Events: []events.Event{r.storeChain(make([]int, 4*r.block), 4, 1000)}}, events.EncodingMap)
	for i, payload := range [][]byte{randBytes(rng, 500), good[:len(good)/2], {0xc1}, {}} {
		r.eng.sendAt(^uint64(0), payload)
		st := r.waitStream("a malformed purge", 5*time.Second, func(s kvStatus) bool { return s.Purges[kvfeed.PurgeMalformed] == uint64(i+1) })
		if st.Malformed != uint64(i+1) {
			t.Errorf("payload %d: %+v", i, st)
		}
		// The heartbeats go on: the stream is back, but its history is not.
		r.waitSource(index.SourceApproximate, reasonCatchingUp, 5*time.Second)
	}
	tokens := make([]int, hostileCapacity*r.block)
	for i := range tokens {
		tokens[i] = 7 + i%100
	}
	r.eng.publish(&events.Batch{TS: 3, Events: []events.Event{r.storeChain(tokens, hostileCapacity, 5000)}})
	st := r.waitSource(index.SourceEvents, "", 5*time.Second)
	if st.Mirrored != hostileCapacity || st.Purges[kvfeed.PurgeRestart] != 0 {
		t.Errorf("after a cache's worth of blocks: %+v", st)
	}
	r.finish()
	checkHeap(t, before, hostileHeapBound)
	r.wantMetrics(map[string]float64{
		`inferrail_kv_events_malformed_total{replica="sim-1"}`:                 4,
		`inferrail_kv_events_purges_total{reason="malformed",replica="sim-1"}`: 4,
		`inferrail_kv_events_blocks{replica="sim-1",state="mirrored"}`:         hostileCapacity,
	})
}

// TestHostileSequenceJump: the sequence jumps by 2^63 and comes back.
// The jump is a gap, the way back a restart; nothing wedges and the
// stream goes on from where it came back.
func TestHostileSequenceJump(t *testing.T) {
	r := newHostileRig(t, events.EncodingMap, 1024)
	before := heapInuse()
	r.eng.heartbeat.Store(false)
	last := r.eng.publish(&events.Batch{TS: 1})
	prev := r.waitStream("the last heartbeat", 5*time.Second, func(s kvStatus) bool { return s.LastSeq != nil && *s.LastSeq == last })
	tokens := make([]int, 4*r.block)
	for i := range tokens {
		tokens[i] = 11 + i
	}
	jump := r.eng.sendAt(last+1<<63, events.AppendBatch(nil, &events.Batch{TS: 1, Events: []events.Event{r.storeChain(tokens, 4, 100)}}, events.EncodingMap))
	st := r.waitStream("the jump applied", 5*time.Second, func(s kvStatus) bool { return s.LastSeq != nil && *s.LastSeq == jump })
	if st.Gaps != prev.Gaps+1 || st.Purges[kvfeed.PurgeLost] != prev.Purges[kvfeed.PurgeLost]+1 || st.Mirrored != 4 {
		t.Errorf("after the jump: %+v", st)
	}
	r.eng.sendAt(last+1, events.AppendBatch(nil, &events.Batch{TS: 1}, events.EncodingMap))
	st = r.waitStream("the way back applied", 5*time.Second, func(s kvStatus) bool { return s.LastSeq != nil && *s.LastSeq == last+1 })
	if st.Purges[kvfeed.PurgeRestart] == 0 || st.Mirrored != 0 {
		t.Errorf("after coming back: %+v", st)
	}
	r.eng.heartbeat.Store(true)
	r.waitStream("the stream going on", 5*time.Second, func(s kvStatus) bool { return *s.LastSeq > last+3 })
	r.heal()
	r.finish()
	checkHeap(t, before, hostileHeapBound)
}

// TestLastSequenceGaugeNear2To63: a publisher whose sequence runs near
// 2^63 moves inferrail_kv_events_last_sequence by one with each batch,
// showing the sequence modulo 2^53; /admin/index keeps the whole number.
// As float64(seq) the gauge stood still: 2^63+5 and 2^63+6 are one float
// (a review's finding).
func TestLastSequenceGaugeNear2To63(t *testing.T) {
	r := newHostileRig(t, events.EncodingMap, 1024)
	r.eng.heartbeat.Store(false)
	const gauge = `inferrail_kv_events_last_sequence{replica="sim-1"}`
	for _, seq := range []uint64{1<<63 + 5, 1<<63 + 6, 1<<63 + 7} {
		r.eng.sendAt(seq, events.AppendBatch(nil, &events.Batch{TS: 1}, events.EncodingMap))
		r.waitStream(fmt.Sprintf("batch %d applied", seq), 5*time.Second, func(s kvStatus) bool { return s.LastSeq != nil && *s.LastSeq == seq })
		if got, want := r.metric(gauge), float64(seq-1<<63); got != want {
			t.Errorf("after batch %d: %s = %v, want %v (the sequence modulo 2^53)", seq, gauge, got, want)
		}
	}
	r.heal()
	r.finish()
}

// TestHostileUnknownRemovals: removals of blocks never stored are counted
// and change nothing else.
func TestHostileUnknownRemovals(t *testing.T) {
	r := newHostileRig(t, events.EncodingMap, 1024)
	before := heapInuse()
	body := chatBody(strings.Repeat("a prompt the engine has cached in part. ", 12), "")
	tokens := r.tokens(body)
	k := len(tokens)/r.block - 1
	r.eng.publish(&events.Batch{TS: 1, Events: []events.Event{r.storeChain(tokens, k, 1<<40)}})
	r.waitStream("the chain mirrored", 5*time.Second, func(s kvStatus) bool { return s.Mirrored == k })
	if got := r.held(tokens); got != k*r.block {
		t.Fatalf("held %d tokens, want %d", got, k*r.block)
	}
	prev := r.stream()
	rm := events.Event{Kind: events.BlockRemoved}
	for i := range 1000 {
		rm.Hashes = append(rm.Hashes, events.UintHash(uint64(i)*7919+3))
	}
	rm2 := events.Event{Kind: events.BlockRemoved, Hashes: []events.Hash{events.BytesHash([]byte("not a hash we know"))}}
	seq := r.eng.publish(&events.Batch{TS: 1, Events: []events.Event{rm, rm2}})
	st := r.waitStream("the removals applied", 5*time.Second, func(s kvStatus) bool { return s.LastSeq != nil && *s.LastSeq >= seq })
	// Gaps are counted from prev: on a busy machine the chain's batch can
	// reach the publisher before the subscription does, and the replay
	// that fills that gap is no work of the removals.
	if st.Mirror.UnknownRemovals != 1001 || st.Mirror.Removed != 0 || st.Mirrored != prev.Mirrored ||
		st.Malformed != 0 || st.Gaps != prev.Gaps || len(st.Purges) != 0 || st.Source != index.SourceEvents {
		t.Errorf("after unknown removals: %+v", st)
	}
	if got := r.held(tokens); got != k*r.block {
		t.Errorf("held %d tokens after unknown removals, want %d", got, k*r.block)
	}
	r.finish()
	checkHeap(t, before, hostileHeapBound)
	r.wantMetrics(map[string]float64{
		`inferrail_kv_events_dropped_total{kind="unknown_removal",replica="sim-1"}`: 1001,
		`inferrail_index_source{replica="sim-1",source="events"}`:                   1,
	})
}

// held is how many of tokens' leading tokens the index says the replica
// holds (routing nothing, so speculating nothing).
func (r *hostileRig) held(tokens []int) int {
	hs := blockhash.Extend(nil, blockhash.Seed(testModel, "", ""), tokens, r.block)
	return r.gw.g.index.Match(nil, []string{hostileID}, hs, len(tokens), r.block)[0] * r.block
}

// TestHostileEncodings: SGLang's array-form batches and vLLM's legacy
// array form are mirrored like the current map form: predictions follow.
func TestHostileEncodings(t *testing.T) {
	for _, enc := range []events.Encoding{events.EncodingSGLang, events.EncodingArray} {
		t.Run(enc.String(), func(t *testing.T) {
			r := newHostileRig(t, enc, 1024)
			body := chatBody(fmt.Sprintf("a prompt sent as %s events: %s", enc, strings.Repeat("more words. ", 30)), "")
			tokens := r.tokens(body)
			k := len(tokens)/r.block - 1
			ev := r.storeChain(tokens, k, -1<<50) // SGLang's hashes may be negative
			seq := r.eng.publish(&events.Batch{TS: 1, Events: []events.Event{ev}, DPRank: 0, HasDPRank: true})
			r.waitStream("the chain applied", 5*time.Second, func(s kvStatus) bool { return s.LastSeq != nil && *s.LastSeq >= seq })
			if got := r.held(tokens); got != k*r.block {
				t.Fatalf("held %d tokens, want %d", got, k*r.block)
			}
			rm := events.Event{Kind: events.BlockRemoved, Hashes: ev.Hashes[k-1:]}
			seq = r.eng.publish(&events.Batch{TS: 2, Events: []events.Event{rm}})
			st := r.waitStream("the removal applied", 5*time.Second, func(s kvStatus) bool { return s.LastSeq != nil && *s.LastSeq >= seq })
			if got := r.held(tokens); got != (k-1)*r.block {
				t.Errorf("held %d tokens after removing the last block, want %d", got, (k-1)*r.block)
			}
			if got := r.predicted(body); got != (k-1)*r.block {
				t.Errorf("predicted %d cached tokens, want %d", got, (k-1)*r.block)
			}
			if st.Malformed != 0 || st.Mirror.Skipped != 0 || st.Mirrored != k-1 || st.Source != index.SourceEvents {
				t.Errorf("stream %+v", st)
			}
			r.finish()
		})
	}
}

// TestReplayWithoutLiveStreamIsNoStream: a replica whose live endpoint
// nothing listens on (a wrong port) while its replay socket answers gets
// its mirror filled by the replay, and no stream after it: its
// predictions fall back (no_stream, connected false) rather than follow a
// mirror nothing updates. It was judged a sound stream for good, and
// predicted hits on a cache its engine had since cleared (found by a
// review). Pointed at the right endpoint, it follows the events again.
func TestReplayWithoutLiveStreamIsNoStream(t *testing.T) {
	eng := newScriptedPublisher(t, events.EncodingMap, 1024)
	eng.publish(&events.Batch{TS: 1})
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadEndpoint := "tcp://" + dead.Addr().String()
	dead.Close()
	cfg := testConfig(t, fleetOf(t, 1, true))
	cfg.Index.Mode = config.IndexExact
	cfg.Replicas[0].KVEvents = config.ReplicaKVEvents{Endpoint: deadEndpoint, ReplayEndpoint: eng.router.Endpoint()}
	gw := startGateway(t, cfg)
	r := &hostileRig{t: t, gw: gw, eng: eng}
	st := r.waitStream("the replay applied", 5*time.Second, func(s kvStatus) bool { return s.Applied > 0 })
	time.Sleep(time.Second) // judged since, at every 250 ms tick
	if st = r.stream(); st.Source != index.SourceApproximate || st.Reason != reasonNoStream || st.Connected {
		t.Errorf("replayed, never connected: source %s (%s), connected %v; want approximate (no_stream), not connected", st.Source, st.Reason, st.Connected)
	}
	next := *gw.g.current().cfg
	next.Replicas = slices.Clone(next.Replicas)
	next.Replicas[0].KVEvents.Endpoint = eng.endpoint()
	if result, _, err := gw.g.apply(&next, "test"); result != reloadApplied {
		t.Fatalf("pointing it at its publisher: %s, %v", result, err)
	}
	if st = r.waitSource(index.SourceEvents, "", 5*time.Second); !st.Connected {
		t.Errorf("following the events, not connected: %+v", st)
	}
}
