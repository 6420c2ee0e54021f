package gateway

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/events"
	"github.com/inferrail/inferrail/internal/index"
	"github.com/inferrail/inferrail/internal/kvfeed"
)

// heapPeak samples HeapInuse (no GC: an upper bound of what is live)
// until stopped, and returns the highest.
func heapPeak() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

// floodBatch stores n new blocks as one chain from the sequence's start,
// tokens varied by i so that every chain is new to the gateway too.
func floodBatch(i, n, block int) []byte {
	ev := events.Event{Kind: events.BlockStored, BlockSize: block, Hashes: make([]events.Hash, n), Tokens: make([]uint32, n*block)}
	for j := range ev.Hashes {
		ev.Hashes[j] = events.UintHash(uint64(i)<<20 | uint64(j) + 1)
	}
	for j := range ev.Tokens {
		ev.Tokens[j] = uint32(j % 1000)
	}
	ev.Tokens[0] = uint32(i)
	return events.AppendBatch(nil, &events.Batch{TS: 1, Events: []events.Event{ev}}, events.EncodingMap)
}

// TestHostileStoredFlood: a publisher storing distinct blocks as fast as
// it can, far past anything a cache of 64 blocks could hold. The mirror
// stops at its bound (max(4 x capacity, 2^16) blocks) and counts the rest
// as overflow, the replica falls back (a stream that overflows is broken),
// and the heap stays bounded throughout.
// skipFloodUnderRace: the floods measure throughput and memory bounds,
// not data races; ten times slower under the detector, on a busy machine
// they starve the gateway's own requests past their timeouts. make norace
// runs them.
func skipFloodUnderRace(t *testing.T) {
	if raceEnabled {
		t.Skip("a flood: run without the race detector (make norace runs it)")
	}
}

func TestHostileStoredFlood(t *testing.T) {
	skipFloodUnderRace(t)
	total := 1 << 20
	if testing.Short() {
		total = 1 << 17 // still twice the mirror's bound
	}
	const perBatch = 512
	r := newHostileRig(t, events.EncodingMap, 256)
	before := heapInuse()
	peak := heapPeak()
	start := time.Now()
	var last uint64
	for i := range total / perBatch {
		last = r.eng.sendAt(^uint64(0), floodBatch(i, perBatch, r.block))
	}
	sent := time.Since(start)
	st := r.waitStream("the flood applied", 60*time.Second, func(s kvStatus) bool { return s.LastSeq != nil && *s.LastSeq >= last })
	highest := peak()
	t.Logf("%d blocks in %d batches sent in %v, applied after %v: %+v", total, total/perBatch, sent, time.Since(start), st)
	t.Logf("heap in use at most %.1f MiB during the flood", float64(highest)/(1<<20))
	const mirrorBound = 1 << 16
	if st.Mirror.Overflow == 0 || st.Mirrored > mirrorBound || st.Mirror.Stored+st.Mirror.Overflow > uint64(total) {
		t.Errorf("the mirror's bound: %+v", st)
	}
	r.waitSource(index.SourceApproximate, reasonOverflow, 5*time.Second)
	if highest > before+256<<20 {
		t.Errorf("the heap reached %d bytes during the flood (from %d)", highest, before)
	}
	r.heal()
	r.finish()
	checkHeap(t, before, hostileHeapBound)
	r.wantMetrics(map[string]float64{
		`inferrail_kv_events_dropped_total{kind="overflow",replica="sim-1"}`: float64(st.Mirror.Overflow),
	})
}

// TestHostileFastFlood: a publisher sending faster than the gateway reads.
// Its PUB drops what the gateway's connection cannot take (as vLLM's
// does past its high-water mark); the gateway counts the gaps, asks for
// replays, and queues nothing without bound.
func TestHostileFastFlood(t *testing.T) {
	skipFloodUnderRace(t)
	r := newHostileRig(t, events.EncodingMap, 16)
	before := heapInuse()
	peak := heapPeak()
	payloads := make([][]byte, 64)
	for i := range payloads {
		payloads[i] = floodBatch(i, 16, r.block)
	}
	r.eng.heartbeat.Store(false)
	var last uint64
	n := 20000
	if testing.Short() {
		n = 5000
	}
	for i := range n {
		last = r.eng.sendAt(^uint64(0), payloads[i%len(payloads)])
	}
	dropped := r.eng.pub.Stats().Dropped
	r.eng.heartbeat.Store(true)
	r.waitStream("the stream past the flood", 30*time.Second, func(s kvStatus) bool { return s.LastSeq != nil && *s.LastSeq > last })
	st := r.settle()
	highest := peak()
	t.Logf("%d batches sent, %d dropped by the PUB: %+v; heap at most %.1f MiB", n, dropped, st, float64(highest)/(1<<20))
	if dropped == 0 {
		t.Skip("the PUB dropped nothing: the gateway kept up, nothing to test")
	}
	if st.Gaps == 0 || st.Replays < 2 || st.Received >= uint64(n) {
		t.Errorf("gaps and replays: %+v", st)
	}
	if highest > before+128<<20 {
		t.Errorf("the heap reached %d bytes during the flood (from %d)", highest, before)
	}
	r.heal()
	r.finish()
	checkHeap(t, before, hostileHeapBound)
	st = r.stream() // healed: no more gaps
	r.wantMetrics(map[string]float64{
		`inferrail_kv_events_gaps_total{replica="sim-1"}`:                 float64(st.Gaps),
		`inferrail_kv_events_purges_total{reason="lost",replica="sim-1"}`: float64(st.Purges[kvfeed.PurgeLost]),
	})
}

// settle waits (at most 10 s) until the stream has had no gap for 300 ms:
// whatever the gateway had queued is read.
func (r *hostileRig) settle() kvStatus {
	r.t.Helper()
	st := r.stream()
	deadline := time.Now().Add(10 * time.Second)
	for quiet := time.Now(); time.Since(quiet) < 300*time.Millisecond; time.Sleep(20 * time.Millisecond) {
		now := r.stream()
		if now.Gaps != st.Gaps {
			quiet = time.Now()
		}
		st = now
		if time.Now().After(deadline) {
			r.t.Fatalf("after 10 s the stream still has gaps: %+v", st)
		}
	}
	return st
}

// TestHostileReplay: the replay socket never answers, answers out of
// order, or answers garbage. Each replay fails and is counted, the live
// stream goes on past the gap (the lost history purged), and the replica
// follows its events again once they are whole.
func TestHostileReplay(t *testing.T) {
	r := newHostileRig(t, events.EncodingMap, 1024)
	before := heapInuse()
	for _, mode := range []int32{replaySilent, replayDisorder, replayGarbage} {
		prev := r.stream()
		r.eng.replay.Store(mode)
		r.eng.skip(3) // three lost batches: the next heartbeat comes after a gap
		st := r.waitStream("the replay failed", 10*time.Second, func(s kvStatus) bool { return s.ReplayErrors > prev.ReplayErrors })
		// One gap, one replay, one failure; a connection the machine's
		// load dropped meanwhile (seen once with every core busy) brings a
		// restart and a replay of its own, so then only at least.
		exact := st.Disconnects == prev.Disconnects
		if st.Replays < prev.Replays+1 || st.ReplayErrors < prev.ReplayErrors+1 || st.Gaps < prev.Gaps+1 ||
			(exact && (st.Replays != prev.Replays+1 || st.ReplayErrors != prev.ReplayErrors+1 || st.Gaps != prev.Gaps+1)) {
			t.Errorf("replay mode %d: %+v", mode, st)
		}
		// The live stream carries on, without the history it lost.
		st = r.waitStream("the stream going on", 5*time.Second, func(s kvStatus) bool { return *s.LastSeq > *prev.LastSeq+5 })
		if st.Purges[kvfeed.PurgeLost] <= prev.Purges[kvfeed.PurgeLost] {
			t.Errorf("replay mode %d: the lost batches are not purged: %+v", mode, st)
		}
		r.waitSource(index.SourceApproximate, reasonCatchingUp, 5*time.Second)
		r.heal()
	}
	r.finish()
	checkHeap(t, before, hostileHeapBound)
	st := r.stream()
	if st.ReplayErrors < 3 {
		t.Errorf("three hostile replays, %d counted as failed", st.ReplayErrors)
	}
	r.wantMetrics(map[string]float64{
		`inferrail_kv_events_replays_total{replica="sim-1",result="error"}`: float64(st.ReplayErrors),
		`inferrail_kv_events_replays_total{replica="sim-1",result="ok"}`:    float64(st.Replays - st.ReplayErrors),
	})
}
