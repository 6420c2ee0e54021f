package kvfeed

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"
	"go.uber.org/goleak"

	"github.com/inferrail/inferrail/internal/events"
	"github.com/inferrail/inferrail/internal/zmtp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// engine is a scripted publisher on real sockets: what it sends live and
// what its replay buffer holds are set by the test.
type engine struct {
	t      *testing.T
	pub    *zmtp.Pub
	router *zmtp.Router

	mu      sync.Mutex
	buffer  map[uint64][]byte // what replay can send
	replays []uint64          // start of each replay asked for
	epoch   int               // told in each batch's timestamp: a restarted engine's batches differ
	noTopic bool              // replay as vLLM did before #45177: no topic frame
}

func newEngine(t *testing.T, ctx context.Context) *engine {
	t.Helper()
	pub, err := zmtp.ListenPub(ctx, "tcp://127.0.0.1:0", zmtp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	router, err := zmtp.ListenRouter(ctx, "tcp://127.0.0.1:0", zmtp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := &engine{t: t, pub: pub, router: router, buffer: map[uint64][]byte{}}
	done := make(chan struct{})
	go func() { defer close(done); e.serveReplays(ctx) }()
	t.Cleanup(func() { pub.Close(); router.Close(); <-done })
	return e
}

func (e *engine) serveReplays(ctx context.Context) {
	for {
		req, err := e.router.Recv(ctx)
		if err != nil {
			return
		}
		if len(req) != 3 || len(req[2]) != 8 {
			continue
		}
		start := binary.BigEndian.Uint64(req[2])
		e.mu.Lock()
		e.replays = append(e.replays, start)
		seqs := make([]uint64, 0, len(e.buffer))
		for s := range e.buffer {
			if s >= start {
				seqs = append(seqs, s)
			}
		}
		slices.Sort(seqs)
		for _, s := range seqs {
			if e.noTopic {
				_ = e.router.Send([][]byte{req[0], {}, seqBytes(s), e.buffer[s]})
			} else {
				_ = e.router.Send([][]byte{req[0], {}, []byte("kv"), seqBytes(s), e.buffer[s]})
			}
		}
		noTopic := e.noTopic
		e.mu.Unlock()
		if noTopic {
			_ = e.router.Send([][]byte{req[0], {}, events.ReplayEnd, {}})
		} else {
			_ = e.router.Send([][]byte{req[0], {}, {}, events.ReplayEnd, {}})
		}
	}
}

func seqBytes(s uint64) []byte { return binary.BigEndian.AppendUint64(nil, s) }

// batch is a payload whose one event names seq, so the sink can tell
// batches apart.
func batch(seq uint64) []byte { return epochBatch(0, seq) }

// epochBatch is batch as the engine's epoch-th life sends it: the same
// event at another time.
func epochBatch(epoch int, seq uint64) []byte {
	b := events.Batch{TS: 1 + float64(epoch), HasDPRank: true, Events: []events.Event{{
		Kind: events.BlockRemoved, Hashes: []events.Hash{events.UintHash(seq)}, Medium: "GPU", HasMedium: true,
	}}}
	return events.AppendBatch(nil, &b, events.EncodingMap)
}

// keep puts batches in the replay buffer without sending them.
func (e *engine) keep(seqs ...uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range seqs {
		e.buffer[s] = epochBatch(e.epoch, s)
	}
}

// restart makes e a new engine: a new life, an empty replay buffer, and
// with relisten its PUB socket closed and opened again on its port.
func (e *engine) restart(ctx context.Context, relisten bool) {
	e.mu.Lock()
	e.epoch++
	clear(e.buffer)
	e.mu.Unlock()
	if relisten {
		e.relisten(ctx)
	}
}

// relisten closes the PUB socket and opens it again on the same port, as
// an engine process that went away and came back, or a cut connection.
func (e *engine) relisten(ctx context.Context) {
	endpoint := e.pub.Endpoint()
	e.pub.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		pub, err := zmtp.ListenPub(ctx, endpoint, zmtp.Options{})
		if err == nil {
			e.pub = pub
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatal(err)
		}
	}
	waitFor(e.t, "the feed to subscribe again", func() bool { return e.pub.Stats().Subscribers == 1 })
}

// replaysAsked is how many replays the engine was asked for.
func (e *engine) replaysAsked() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.replays)
}

// send publishes batches live (and keeps them for replay).
func (e *engine) send(seqs ...uint64) {
	e.keep(seqs...)
	for _, s := range seqs {
		if err := e.pub.Send([][]byte{[]byte("kv"), seqBytes(s), epochBatch(e.epoch, s)}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// sink records what the feed hands on.
type sink struct {
	mu         sync.Mutex
	applied    []uint64 // the seq of each batch, checked against its content
	sincePurge []uint64 // those applied since the last purge: what the mirror holds
	purges     []string
	bad        int
}

func (s *sink) Apply(seq uint64, b *events.Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(b.Events) != 1 {
		s.bad++
	} else if n, _ := b.Events[0].Hashes[0].Uint(); n != seq {
		s.bad++
	}
	s.applied = append(s.applied, seq)
	s.sincePurge = append(s.sincePurge, seq)
}

func (s *sink) Purge(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purges = append(s.purges, reason)
	s.sincePurge = s.sincePurge[:0]
}

func (s *sink) snapshot() ([]uint64, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.applied), slices.Clone(s.purges)
}

// start runs a feed of e into a new sink and waits until the feed is
// subscribed.
func start(t *testing.T, ctx context.Context, e *engine, replay bool) (*Feed, *sink) {
	t.Helper()
	cfg := Config{Endpoint: e.pub.Endpoint(), Topic: "kv"}
	if replay {
		cfg.ReplayEndpoint = e.router.Endpoint()
	}
	s := &sink{}
	f := New(cfg, s)
	done := make(chan struct{})
	go func() { defer close(done); _ = f.Run(ctx) }()
	t.Cleanup(func() { <-done })
	waitFor(t, "the feed to subscribe", func() bool { return e.pub.Stats().Subscribers == 1 })
	if replay {
		waitFor(t, "the first replay", func() bool { return f.Stats().Replays == 1 })
	}
	return f, s
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func waitApplied(t *testing.T, s *sink, n int) {
	t.Helper()
	waitFor(t, "batches", func() bool { a, _ := s.snapshot(); return len(a) >= n })
}

func seqs(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func TestFeed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		replay bool
		before func(e *engine)                      // what the engine did before the feed started
		script func(ctx context.Context, e *engine) // what it does after
		want   []uint64
		purges []string
		check  func(t *testing.T, st Stats)
	}{
		{name: "in_order", replay: true,
			script: func(_ context.Context, e *engine) { e.send(seqs(0, 4)...) },
			want:   seqs(0, 4)},
		{name: "recovers_history_at_start", replay: true,
			before: func(e *engine) { e.keep(seqs(0, 9)...) },
			script: func(_ context.Context, e *engine) { e.send(10, 11) },
			want:   seqs(0, 11)},
		{name: "replay_without_topic_frames", replay: true,
			before: func(e *engine) { e.noTopic = true; e.keep(seqs(0, 9)...) },
			script: func(_ context.Context, e *engine) { e.send(10, 11) },
			want:   seqs(0, 11)},
		{name: "joined_late", replay: true,
			script: func(_ context.Context, e *engine) { e.keep(0, 1, 2); e.send(3, 4) }, // 0-2 went out before the feed listened
			want:   seqs(0, 4)},
		{name: "joined_late_without_replay",
			script: func(_ context.Context, e *engine) { e.keep(0, 1, 2); e.send(3, 4) },
			want:   []uint64{3, 4}},
		{name: "gap_filled_by_replay", replay: true,
			script: func(_ context.Context, e *engine) { e.send(0, 1); e.keep(2, 3); e.send(4, 5) },
			want:   seqs(0, 5),
			check: func(t *testing.T, st Stats) {
				if st.Gaps != 1 || st.Duplicates == 0 {
					t.Errorf("gaps %d duplicates %d, want 1 gap and the live copy of 4 a duplicate", st.Gaps, st.Duplicates)
				}
			}},
		{name: "gap_beyond_the_buffer", replay: true,
			script: func(_ context.Context, e *engine) { e.send(0, 1); e.send(4, 5) }, // 2 and 3 were never kept
			want:   []uint64{0, 1, 4, 5}, purges: []string{PurgeLost}},
		{name: "gap_without_replay",
			script: func(_ context.Context, e *engine) { e.send(0, 1); e.send(4) },
			want:   []uint64{0, 1, 4}, purges: []string{PurgeLost}},
		{name: "restart", replay: true,
			script: func(_ context.Context, e *engine) {
				e.send(0, 1, 2)
				e.mu.Lock()
				clear(e.buffer) // a new engine: a new buffer
				e.mu.Unlock()
				e.send(0, 1)
			},
			want: []uint64{0, 1, 2, 0, 1}, purges: []string{PurgeRestart}},
		{name: "restart_past_our_numbers", replay: true,
			script: func(ctx context.Context, e *engine) {
				e.send(0, 1, 2)
				e.restart(ctx, false)
				e.keep(0, 1, 2, 3, 4, 5) // sent while we were away
				e.send(6)
			},
			want: []uint64{0, 1, 2, 0, 1, 2, 3, 4, 5, 6}, purges: []string{PurgeRestart}},
		{name: "restart_at_our_next_number", replay: true,
			script: func(ctx context.Context, e *engine) {
				e.send(0, 1, 2)
				time.Sleep(20 * time.Millisecond) // delivered before the socket closes
				e.restart(ctx, true)
				e.keep(0, 1, 2)
				e.send(3)
			},
			want: []uint64{0, 1, 2, 0, 1, 2, 3}, purges: []string{PurgeRestart}},
		{name: "restart_after_reconnect_then_gap", replay: true,
			script: func(ctx context.Context, e *engine) {
				e.send(0, 1, 2)
				time.Sleep(20 * time.Millisecond)
				e.restart(ctx, true)
				e.send(0) // the new engine's first batch: a restart, caught up from 0
				waitFor(e.t, "the restart's replay", func() bool { return e.replaysAsked() == 2 })
				e.keep(1, 2)
				e.send(3) // a gap, to be counted as one
			},
			want: []uint64{0, 1, 2, 0, 1, 2, 3}, purges: []string{PurgeRestart},
			check: func(t *testing.T, st Stats) {
				if st.Gaps != 1 || st.Replays != 3 {
					t.Errorf("gaps %d replays %d, want the gap after the restart counted, and 3 replays (start, restart, gap)", st.Gaps, st.Replays)
				}
			}},
		{name: "restart_before_any_live_batch", replay: true, // history from replay alone
			before: func(e *engine) { e.keep(seqs(0, 9)...) },
			script: func(ctx context.Context, e *engine) {
				e.restart(ctx, true)
				e.send(0, 1)
			},
			want: append(seqs(0, 9), 0, 1), purges: []string{PurgeRestart}},
		{name: "restart_inside_a_replay_lead", replay: true,
			script: func(ctx context.Context, e *engine) {
				e.send(0)
				e.keep(1, 2, 4, 5)
				e.send(3) // a gap: the replay applies up to 5, ahead of the live 3
				// The replay is sent whole before restart can take e.mu.
				waitFor(e.t, "the gap's replay", func() bool { return e.replaysAsked() == 2 })
				e.restart(ctx, true)
				e.keep(0, 1, 2, 3)
				e.send(4) // inside (3, 5]: neither below the live 3 nor past our 5
			},
			want: append(seqs(0, 5), seqs(0, 4)...), purges: []string{PurgeRestart}},
		{name: "reconnected_after_history_from_replay", replay: true,
			before: func(e *engine) { e.keep(seqs(0, 9)...) },
			script: func(ctx context.Context, e *engine) {
				e.relisten(ctx)
				e.send(10)
			},
			want: seqs(0, 10)},
		{name: "reconnected_to_the_same_engine", replay: true,
			script: func(ctx context.Context, e *engine) {
				e.send(0, 1, 2)
				time.Sleep(20 * time.Millisecond)
				e.relisten(ctx)
				e.send(3)
			},
			want: seqs(0, 3)},
		{name: "the_last_batch_twice", replay: true,
			script: func(_ context.Context, e *engine) { e.send(0, 1, 1, 2) },
			want:   seqs(0, 2)},
		{name: "jump_by_2_63",
			script: func(_ context.Context, e *engine) { e.send(0, 1<<63, 1<<63+1) },
			want:   []uint64{0, 1 << 63, 1<<63 + 1}, purges: []string{PurgeLost}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			e := newEngine(t, ctx)
			if tc.before != nil {
				tc.before(e)
			}
			f, s := start(t, ctx, e, tc.replay)
			tc.script(ctx, e)
			waitApplied(t, s, len(tc.want))
			time.Sleep(20 * time.Millisecond) // anything more would be a bug
			applied, purges := s.snapshot()
			if !slices.Equal(applied, tc.want) {
				t.Errorf("applied %v, want %v", applied, tc.want)
			}
			if !slices.Equal(purges, tc.purges) {
				t.Errorf("purges %v, want %v", purges, tc.purges)
			}
			if s.bad != 0 {
				t.Errorf("%d batches handed on under the wrong sequence", s.bad)
			}
			if tc.check != nil {
				tc.check(t, f.Stats())
			}
		})
	}
}

func TestFeedSurvivesGarbage(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := newEngine(t, ctx)
	f, s := start(t, ctx, e, false)
	e.send(0)
	for _, msg := range [][][]byte{
		{[]byte("kv")},                                  // too few frames
		{[]byte("kv"), []byte("seq"), batch(1)},         // a short sequence
		{[]byte("kv"), seqBytes(1), []byte{0x93, 0xcb}}, // a truncated payload
		{[]byte("kv"), seqBytes(2), {0xc1, 0xff, 0x00}}, // not msgpack at all
		{[]byte("kv"), seqBytes(3), batch(3), batch(3)}, // too many frames
	} {
		if err := e.pub.Send(msg); err != nil {
			t.Fatal(err)
		}
	}
	e.send(3, 4)
	waitApplied(t, s, 3)
	time.Sleep(20 * time.Millisecond)
	applied, purges := s.snapshot()
	if !slices.Equal(applied, []uint64{0, 3, 4}) {
		t.Errorf("applied %v, want [0 3 4]", applied)
	}
	if st := f.Stats(); st.Malformed != 5 {
		t.Errorf("malformed %d, want 5", st.Malformed)
	}
	if len(purges) != 2 || purges[0] != PurgeMalformed {
		t.Errorf("purges %v, want two malformed", purges)
	}
}

// TestOutsizeDecodeNotKept: the decode buffer is kept for the next batch
// only while what it holds decoded is small, whatever the payload's size
// on the wire. (Found by a code review: a 1,048,559-byte payload of nil
// extra keys, under the old 1 MiB payload threshold, left 31.7 MiB held
// per feed.)
func TestOutsizeDecodeNotKept(t *testing.T) {
	keys := make([]events.RawValue, 1<<20-256)
	for i := range keys {
		keys[i] = events.RawValue{0xc0}
	}
	big := events.Batch{TS: 1, HasDPRank: true, Events: []events.Event{{Kind: events.BlockStored,
		Hashes: []events.Hash{events.UintHash(0)}, Tokens: make([]uint32, 16), BlockSize: 16, ExtraKeys: keys}}}
	for _, tc := range []struct {
		name     string
		payload  []byte
		wantKept bool
	}{
		{"small", batch(0), true},
		{"small_payload_large_decode", events.AppendBatch(nil, &big, events.EncodingMap), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &sink{}
			f := New(Config{Endpoint: "tcp://127.0.0.1:1"}, s)
			if len(tc.payload) > 1<<20 {
				t.Fatalf("payload of %d bytes: the case needs one under a MiB", len(tc.payload))
			}
			f.apply(context.Background(), 0, tc.payload)
			if applied, _ := s.snapshot(); len(applied) != 1 {
				t.Fatalf("applied %v, want the batch", applied)
			}
			held := f.batch.Footprint()
			if kept := held > 0; kept != tc.wantKept || held > keepDecodeBuffer {
				t.Errorf("the decode buffer holds %d bytes after a %d-byte payload; want kept %v, at most %d",
					held, len(tc.payload), tc.wantKept, keepDecodeBuffer)
			}
		})
	}
}

// TestReplayAheadOfItsStream: a replay that answers with batches its
// engine never published (numbers past the live stream's, other bytes)
// shows as a restart once the live stream reaches those numbers with its
// own bytes: the mirror is purged and follows the live stream again. Every
// live batch up to the replay's numbers was dropped as a duplicate, and
// the mirror froze with nothing said (found by a review). A truthful
// replay ahead of the live stream still has its batches taken as
// duplicates.
func TestReplayAheadOfItsStream(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := newEngine(t, ctx)
	f, s := start(t, ctx, e, true)
	e.send(0, 1)
	waitApplied(t, s, 2)
	// A truthful replay ahead: 2 is lost live, the replay gives 2-5, and
	// the live 5 that follows is the replay's own.
	e.keep(seqs(2, 5)...)
	e.send(3)
	waitApplied(t, s, 6)
	e.send(4, 5)
	waitFor(t, "the live 4 and 5", func() bool { return f.Stats().Received == 5 })
	if applied, purges := s.snapshot(); len(purges) != 0 || !slices.Equal(applied, seqs(0, 5)) {
		t.Fatalf("a truthful replay ahead: applied %v, purges %v; want 0-5 once each and no purge", applied, purges)
	}
	// A lying one: 6 is lost live, the replay gives 6-99, which were never
	// published; the real 7-20 carry other bytes.
	e.keep(seqs(6, 99)...)
	e.send(7)
	waitApplied(t, s, 100)
	e.mu.Lock()
	for q := uint64(8); q <= 99; q++ {
		delete(e.buffer, q)
	}
	e.epoch++
	e.mu.Unlock()
	e.send(seqs(8, 20)...)
	waitFor(t, "the live stream applied again", func() bool { return f.Stats().LastSeq == 20 })
	applied, purges := s.snapshot()
	if !slices.Contains(purges, PurgeRestart) {
		t.Errorf("purges %v, want a restart", purges)
	}
	if got := applied[len(applied)-13:]; !slices.Equal(got, seqs(8, 20)) {
		t.Errorf("last applied %v, want the live 8-20", got)
	}
}

// TestReplayedHashesForgotten: the hashes kept of replayed batches go once
// the live stream passes their numbers, so many gaps over a long run do not
// pile them up to the bound, past which nothing would be compared.
func TestReplayedHashesForgotten(t *testing.T) {
	f := New(Config{}, &sink{})
	for seq := uint64(10); seq < 20; seq++ {
		f.noteReplayed(seq, seq)
	}
	f.forgetBelow(15)
	if f.aheadFrom != 15 || len(f.ahead) != 5 || f.ahead[0] != 15 {
		t.Fatalf("after forgetting below 15: from %d, %v", f.aheadFrom, f.ahead)
	}
	f.forgetBelow(20)
	if len(f.ahead) != 0 {
		t.Fatalf("after the live stream passed them all: %v", f.ahead)
	}
	f.noteReplayed(30, 30) // a later replay starts afresh
	if f.aheadFrom != 30 || len(f.ahead) != 1 {
		t.Fatalf("a later replay: from %d, %v", f.aheadFrom, f.ahead)
	}
	if !f.replayedAs(29, nil) || !f.replayedAs(31, nil) {
		t.Error("a number no replay recorded did not count as the same")
	}
}

// TestUnknownEventsCounted: events of a kind the decoder does not know (a
// newer engine's) are left out of their batch and counted, so an operator
// can see them; they were dropped without a word.
func TestUnknownEventsCounted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := newEngine(t, ctx)
	f, s := start(t, ctx, e, false)
	e.send(0)
	waitApplied(t, s, 1)
	payload := msgp.AppendArrayHeader(nil, 2)
	payload = msgp.AppendFloat64(payload, 1)
	payload = msgp.AppendArrayHeader(payload, 2)
	for range 2 {
		payload = msgp.AppendArrayHeader(payload, 2)
		payload = msgp.AppendString(payload, "BlockMoved")
		payload = msgp.AppendUint64(payload, 7)
	}
	if err := e.pub.Send([][]byte{[]byte("kv"), seqBytes(1), payload}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the batch of unknown events", func() bool { return f.Stats().Applied == 2 })
	if st := f.Stats(); st.UnknownEvents != 2 || st.Malformed != 0 {
		t.Errorf("unknown events %d, malformed %d; want 2 and 0", st.UnknownEvents, st.Malformed)
	}
}

// lockedBuffer is a log destination the feed's goroutine writes while the
// test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestForeignReplay: a replay socket that answers with another stream's
// batches (a replay_endpoint copied from another engine's) is found out by
// the first live batch under its numbers, its history dropped, and never
// asked again: the live stream is followed alone, the warning logged once,
// and Stats say the replay is not trusted. Every live batch at or below
// the replay's last number was taken for a restart, purged and replayed
// the foreign history again, then dropped as a duplicate: the mirror froze
// on the other engine's cache at the cost of a full replay a batch (a
// review's finding).
func TestForeignReplay(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := newEngine(t, ctx)
	other := newEngine(t, ctx)
	other.epoch = 7
	other.keep(seqs(0, 49)...)
	logs := &lockedBuffer{}
	s := &sink{}
	f := New(Config{Endpoint: e.pub.Endpoint(), ReplayEndpoint: other.router.Endpoint(), Topic: "kv",
		Log: slog.New(slog.NewTextHandler(logs, nil))}, s)
	done := make(chan struct{})
	go func() { defer close(done); _ = f.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "the feed to subscribe", func() bool { return e.pub.Stats().Subscribers == 1 })
	waitFor(t, "the first replay", func() bool { return f.Stats().Replays >= 1 })

	e.send(seqs(3, 8)...)
	waitFor(t, "the live 3-8 applied", func() bool { st := f.Stats(); return st.HasSeq && st.LastSeq == 8 })
	s.mu.Lock()
	held := slices.Clone(s.sincePurge)
	s.mu.Unlock()
	if !slices.Equal(held, seqs(3, 8)) {
		t.Errorf("applied since the last purge %v, want the live 3-8 alone", held)
	}
	if st := f.Stats(); !st.ReplayUntrusted {
		t.Error("Stats.ReplayUntrusted not set")
	}
	// The start's replay, and the one asked again at the first live batch:
	// none for each batch after.
	if n := other.replaysAsked(); n != 2 {
		t.Errorf("the foreign replay was asked %d times, want 2", n)
	}

	// A gap now empties the mirror, as without a replay socket: the
	// foreign one is not asked to fill it.
	e.send(10, 11)
	waitFor(t, "the live 10-11 applied", func() bool { return f.Stats().LastSeq == 11 })
	s.mu.Lock()
	held = slices.Clone(s.sincePurge)
	s.mu.Unlock()
	if !slices.Equal(held, []uint64{10, 11}) {
		t.Errorf("after a gap: applied since the last purge %v, want [10 11]", held)
	}
	if n := other.replaysAsked(); n != 2 {
		t.Errorf("after a gap the foreign replay was asked %d times, want still 2", n)
	}
	if n := strings.Count(logs.String(), "never sent"); n != 1 {
		t.Errorf("the warning was logged %d times, want once:\n%s", n, logs.String())
	}
}

// TestOversizedBatchLogged: a batch past the message bound breaks the
// connection, and the log says so with the bound, once for the first of
// a run of them; an operator saw only disconnects and gaps (a review's
// finding).
func TestOversizedBatchLogged(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := newEngine(t, ctx)
	logs := &lockedBuffer{}
	s := &sink{}
	f := New(Config{Endpoint: e.pub.Endpoint(), Topic: "kv", Log: slog.New(slog.NewTextHandler(logs, nil)),
		Socket: zmtp.Options{MaxMessageSize: 4096, ReconnectInterval: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond}}, s)
	done := make(chan struct{})
	go func() { defer close(done); _ = f.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for i := range 3 {
		waitFor(t, "the feed to subscribe", func() bool { return e.pub.Stats().Subscribers == 1 })
		if err := e.pub.Send([][]byte{[]byte("kv"), seqBytes(uint64(i)), make([]byte, 8192)}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the disconnect", func() bool { return f.Stats().Disconnects == uint64(i+1) })
	}
	out := logs.String()
	if n := strings.Count(out, "larger than the bound"); n != 2 { // the 1st and the 2nd; the 4th would be next
		t.Errorf("the oversized batch was logged %d times, want 2:\n%s", n, out)
	}
	if !strings.Contains(out, "max_message_bytes=4096") {
		t.Errorf("the log does not name the bound:\n%s", out)
	}
}

// TestFailedReplayCountedAtOnce: a failed replay counts in Replays and
// ReplayErrs in one step. Counted in two, a scrape between them saw the
// ok series (Replays less ReplayErrs) rise and fall back, which
// Prometheus reads as a counter reset (a review's finding).
func TestFailedReplayCountedAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := New(Config{Endpoint: "tcp://127.0.0.1:1", ReplayEndpoint: "tcp://127.0.0.1:1", Topic: "kv",
		ReplayTimeout: 20 * time.Millisecond}, &sink{})
	for i := range 3 {
		if err := f.replayWithin(ctx, 0, func(uint64, []byte) {}); err == nil {
			t.Fatal("a replay from a closed port succeeded")
		}
		if st := f.Stats(); st.Replays != uint64(i+1) || st.ReplayErrs != uint64(i+1) {
			t.Fatalf("after %d failed replays: Replays %d, ReplayErrs %d", i+1, st.Replays, st.ReplayErrs)
		}
	}
}
