// Package kvfeed reads one engine's KV event stream and hands it on in
// order, whole or not at all: it subscribes to the engine's PUB socket,
// checks every batch's sequence number, fills gaps from the engine's replay
// socket, recovers what the replay buffer still holds when it starts, and
// tells its consumer to forget everything when the history cannot be
// repaired (the engine restarted, batches were lost beyond the buffer, or a
// batch could not be decoded).
package kvfeed

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/inferrail/inferrail/internal/events"
	"github.com/inferrail/inferrail/internal/zmtp"
)

// Config says where an engine publishes.
type Config struct {
	Endpoint       string // the engine's PUB socket, tcp://host:port
	ReplayEndpoint string // its replay (ROUTER) socket; "" when it has none
	Topic          string // the topic prefix to subscribe to; "" for all
	// ReplayTimeout bounds one replay, from request to end marker.
	// Zero means 2 s.
	ReplayTimeout time.Duration
	// Socket tunes the SUB and DEALER sockets (queue lengths, maximum
	// message size, reconnect backoff). A zero MaxMessageSize means
	// DefaultMaxBatchBytes, and so does a zero MaxQueuedBytes with it.
	Socket zmtp.Options
	// Budget, shared by every feed of a gateway, bounds the payload bytes
	// they decode and apply at once. Nil: this feed's decoding is bounded
	// only by itself (one batch at a time).
	Budget *Budget
	Log    *slog.Logger // nil: discard
}

// Sink consumes the stream. Both methods run on the feed's goroutine.
type Sink interface {
	// Apply takes the batch with sequence number seq; batches arrive in
	// sequence order, each once, between purges. b is only valid during
	// the call.
	Apply(seq uint64, b *events.Batch)
	// Purge says that what was applied so far may no longer describe the
	// engine: forget it. reason is a short word for metrics.
	Purge(reason string)
}

// Purge reasons.
const (
	PurgeRestart   = "restart"   // the sequence started over: a new publisher
	PurgeLost      = "lost"      // batches missing that no replay could bring back
	PurgeMalformed = "malformed" // a batch that could not be decoded
)

// Stats counts what a Feed saw. LastSeq is meaningful once HasSeq.
type Stats struct {
	Received   uint64 // messages read from the PUB socket
	Applied    uint64 // batches handed to the sink, live or replayed
	Duplicates uint64 // batches skipped as already applied
	Gaps       uint64 // times a batch arrived out of sequence
	Replays    uint64 // replays done (ReplayErrs of them failed)
	ReplayErrs uint64 // replays that failed or timed out
	Purges     uint64
	Malformed  uint64 // messages with the wrong frames or an undecodable payload
	// UnknownEvents are events of a kind the decoder does not know, left
	// out of the batches that carried them (a newer engine's).
	UnknownEvents uint64
	// Disconnects are connections to the publisher lost after their
	// handshake (it closed, or broke the protocol: a cut or oversized
	// frame); Rejected are those whose handshake failed (not ZMTP).
	Disconnects uint64
	Rejected    uint64
	// Unconnected: the feed runs, and its SUB holds no connection to the
	// publisher past its handshake now. A feed whose replay answers while
	// its live stream never connects (a wrong port) applies batches all
	// the same.
	Unconnected bool
	LastSeq     uint64
	HasSeq      bool
	LastBatch   time.Time // when the last batch was applied

	// ReplayUntrusted: the replay socket answered, asked twice from the
	// start, with batches the live stream never sent (it is another
	// engine's, or broken). The feed no longer asks it, as if it had no
	// replay socket, until the feed is created again.
	ReplayUntrusted bool
}

// Feed follows one engine's stream. Create with New, then Run.
type Feed struct {
	cfg  Config
	sink Sink
	log  *slog.Logger

	batch events.Batch // decode buffer, reused

	// Owned by Run's goroutine.
	last uint64
	has  bool
	// lastSum is a hash of the last applied batch's payload: asked for
	// again by its number, an engine that answers with other bytes is a
	// new one, whose numbers merely reached past ours.
	lastSum uint64
	// verify is set when the connection to the publisher was lost: the
	// publisher heard next may be a restarted engine.
	verify bool
	// liveLast is the last sequence the SUB delivered (hasLive once one
	// did): the live stream's own order, apart from what replays applied.
	liveLast uint64
	hasLive  bool
	// ahead holds the payload hashes of the batches replays applied, from
	// number aheadFrom on, until the live stream passes them: a live batch
	// under a number a replay applied is compared with it. A replay that
	// answered with batches its engine never published (a buggy or
	// hostile one) then shows as a restart, where every live batch up to
	// its numbers was dropped as a duplicate and the mirror froze.
	ahead     []uint64
	aheadFrom uint64
	// untrusted is set once the replay socket showed it is not this
	// stream's (see restart): it is never asked again.
	untrusted bool

	sub atomic.Pointer[zmtp.Sub] // while Run subscribes, for Rejected

	mu    sync.Mutex
	stats Stats // guarded by mu
}

// New returns a feed of cfg's stream into sink.
func New(cfg Config, sink Sink) *Feed {
	if cfg.ReplayTimeout <= 0 {
		cfg.ReplayTimeout = 2 * time.Second
	}
	if cfg.Socket.MaxMessageSize <= 0 {
		cfg.Socket.MaxMessageSize = DefaultMaxBatchBytes
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Feed{cfg: cfg, sink: sink, log: log.With("endpoint", cfg.Endpoint)}
}

// Budget is the budget the feed shares (Config.Budget), nil when none.
func (f *Feed) Budget() *Budget { return f.cfg.Budget }

// Stats returns the feed's counters now; safe to call from any goroutine.
func (f *Feed) Stats() Stats {
	f.mu.Lock()
	st := f.stats
	f.mu.Unlock()
	if s := f.sub.Load(); s != nil {
		ss := s.Stats()
		st.Rejected, st.Unconnected = ss.Rejected, ss.Connects <= ss.Disconnects
	}
	return st
}

func (f *Feed) count(fn func(*Stats)) {
	f.mu.Lock()
	fn(&f.stats)
	f.mu.Unlock()
}

// Run follows the stream until ctx ends; it returns ctx's error, or the
// error that kept it from subscribing at all.
func (f *Feed) Run(ctx context.Context) error {
	sub, err := zmtp.DialSub(ctx, f.cfg.Endpoint, f.cfg.Socket, f.cfg.Topic)
	if err != nil {
		return fmt.Errorf("kvfeed: %w", err)
	}
	defer sub.Close()
	f.sub.Store(sub)
	if f.replays() {
		// Whatever the engine cached before we listened, as far back as its
		// buffer reaches.
		f.catchUp(ctx, 0)
	}
	for {
		msg, err := sub.Recv(ctx)
		switch {
		case errors.Is(err, zmtp.ErrDisconnected):
			f.disconnected(err)
			f.verify = true // the numbers alone cannot tell a restarted engine from ours
			continue
		case err != nil:
			return ctx.Err()
		}
		f.count(func(s *Stats) { s.Received++ })
		f.handle(ctx, msg)
	}
}

// handle takes one live message.
//
// A publisher sends its batches in sequence order and the SUB delivers
// them in order, so the live stream going back means a new publisher (the
// engine restarted). A live batch at or below what is applied but past
// the live watermark is one a replay already applied: the replay reads
// ahead of what the SUB still queues. A restarted engine whose numbers
// went past ours while we reconnected is told apart by replaying our last
// batch: its bytes differ; one still below it, by the replay bringing
// nothing back (see catchUp).
func (f *Feed) handle(ctx context.Context, msg [][]byte) {
	seq, payload, ok := split(msg)
	if !ok {
		f.malformed("a message without topic, 8-byte sequence and payload", nil)
		return
	}
	if f.has && seq == f.last && xxh3.Hash(payload) == f.lastSum {
		f.count(func(s *Stats) { s.Duplicates++ }) // the same batch twice
		return
	}
	if f.hasLive && seq <= f.liveLast {
		f.liveLast = seq
		f.restart(ctx, seq, payload)
		return
	}
	f.liveLast, f.hasLive = seq, true
	f.forgetBelow(seq) // the live stream will not go back under it
	if f.verify && f.has && f.replays() {
		f.verify = false
		f.catchUp(ctx, f.last)
		f.retryChecked(ctx, seq, payload)
		return
	}
	f.verify = false
	switch {
	case !f.has && seq > 0 && f.replays():
		// The first batch we hear of is not the stream's first: what came
		// before may still be in the engine's buffer. (Not a gap: nothing
		// was lost that we had followed.)
		f.catchUp(ctx, 0)
		f.retryChecked(ctx, seq, payload)
	case !f.has || seq == f.last+1:
		f.apply(ctx, seq, payload)
	case seq <= f.last:
		f.retryChecked(ctx, seq, payload) // a replay applied it: the same bytes?
	default:
		f.count(func(s *Stats) { s.Gaps++ })
		if f.replays() {
			f.catchUp(ctx, f.last)
		}
		f.retryChecked(ctx, seq, payload)
	}
}

// restart takes a live message from an engine that restarted: the mirror
// is purged and caught up from the new engine's start. Nothing is left to
// verify.
//
// A replay asked from the start that still answers, under the live
// batch's number, with other bytes is not this stream's history (a
// replay_endpoint naming another engine's socket, or a broken replay):
// taken for a restart again and again, it cost a full replay per live
// batch and kept the mirror on its history, every live batch under its
// numbers dropped as a duplicate. Its history is purged, the live stream
// followed alone, and the replay never asked again (see replays).
func (f *Feed) restart(ctx context.Context, seq uint64, payload []byte) {
	f.verify = false
	f.purge(PurgeRestart)
	if f.replays() {
		f.catchUp(ctx, 0)
		if f.has && seq <= f.last && !f.replayedAs(seq, payload) {
			f.distrustReplay(seq)
		}
	}
	f.retry(ctx, seq, payload)
}

// replays reports whether the feed asks a replay socket: one is set and
// has not shown it answers for another stream.
func (f *Feed) replays() bool { return f.cfg.ReplayEndpoint != "" && !f.untrusted }

// distrustReplay stops asking the replay socket, whose answer under
// number seq differs from the live batch's, and forgets what it applied.
// Once per feed, so the warning is logged once.
func (f *Feed) distrustReplay(seq uint64) {
	f.untrusted = true
	f.log.Warn("kv events: the replay socket answers with batches the live stream never sent (another engine's, or broken); "+
		"its history is dropped and it is no longer asked (as if unset: a gap now empties the mirror)",
		"replay_endpoint", f.cfg.ReplayEndpoint, "seq", seq)
	f.count(func(s *Stats) { s.ReplayUntrusted = true })
	f.purge(PurgeLost)
}

// retryChecked is retry of a live message after a replay, which first
// checks that one under a number a replay applied has the bytes the replay
// gave: other bytes mean the replay was not this stream's, and the engine
// is taken as restarted.
func (f *Feed) retryChecked(ctx context.Context, seq uint64, payload []byte) {
	if f.has && seq <= f.last && !f.replayedAs(seq, payload) {
		f.restart(ctx, seq, payload)
		return
	}
	f.retry(ctx, seq, payload)
}

// maxAhead bounds the replayed batches' hashes kept (512 KiB): an engine's
// replay buffer holds thousands of batches. Past it a live batch is not
// compared.
const maxAhead = 1 << 16

// noteReplayed records the hash of a batch a replay applied.
func (f *Feed) noteReplayed(seq, sum uint64) {
	if len(f.ahead) == 0 || seq != f.aheadFrom+uint64(len(f.ahead)) {
		f.ahead, f.aheadFrom = f.ahead[:0], seq
	}
	if len(f.ahead) < maxAhead {
		f.ahead = append(f.ahead, sum)
	}
}

// forgetBelow forgets the replayed hashes under number seq.
func (f *Feed) forgetBelow(seq uint64) {
	switch {
	case seq <= f.aheadFrom:
	case seq-f.aheadFrom >= uint64(len(f.ahead)):
		f.ahead = nil
	default:
		f.ahead, f.aheadFrom = f.ahead[seq-f.aheadFrom:], seq
	}
}

// replayedAs reports whether a live batch numbered seq has the bytes a
// replay applied under that number, and forgets the replayed hashes up to
// it. A number no replay recorded counts as the same.
func (f *Feed) replayedAs(seq uint64, payload []byte) bool {
	if seq < f.aheadFrom || seq-f.aheadFrom >= uint64(len(f.ahead)) {
		return true
	}
	same := f.ahead[seq-f.aheadFrom] == xxh3.Hash(payload)
	f.forgetBelow(seq + 1)
	return same
}

// retry takes a live message again after a replay: it may now be the next
// one, a duplicate, or still beyond a gap nothing could fill.
func (f *Feed) retry(ctx context.Context, seq uint64, payload []byte) {
	switch {
	case !f.has || seq == f.last+1:
		f.apply(ctx, seq, payload)
	case seq <= f.last:
		f.count(func(s *Stats) { s.Duplicates++ })
	default:
		f.purge(PurgeLost)
		f.apply(ctx, seq, payload)
	}
}

// keepDecodeBuffer is the most memory a decoded batch may hold and still
// be kept for the next decode: engines' batches decode into kilobytes.
// Measured decoded, not on the wire: a payload under a MiB may decode into
// 25 (a list of one-byte extra keys).
const keepDecodeBuffer = 1 << 20

// split checks a message's frames: [topic, seq (8 bytes), payload].
func split(msg [][]byte) (seq uint64, payload []byte, ok bool) {
	if len(msg) != 3 || len(msg[1]) != 8 {
		return 0, nil, false
	}
	return binary.BigEndian.Uint64(msg[1]), msg[2], true
}

// apply decodes and hands on one batch, the stream's next, once the
// budget has room for it (nothing when ctx ends first: the feed stops).
func (f *Feed) apply(ctx context.Context, seq uint64, payload []byte) {
	if b := f.cfg.Budget; b != nil {
		took, err := b.take(ctx, int64(len(payload)))
		if err != nil {
			return
		}
		defer b.give(took)
	}
	defer func() {
		if f.batch.Footprint() > keepDecodeBuffer {
			// Reused, the buffer would keep an outsize batch's memory
			// for good. (Let go before the budget is given back.)
			f.batch = events.Batch{}
		}
	}()
	if err := events.DecodeBatch(payload, &f.batch); err != nil {
		// The batch's changes are lost: nothing applied since can be
		// trusted to be whole.
		f.malformed("an undecodable batch", err)
		f.purge(PurgeMalformed)
		f.last, f.has, f.lastSum = seq, true, xxh3.Hash(payload)
		return
	}
	f.sink.Apply(seq, &f.batch)
	f.last, f.has, f.lastSum = seq, true, xxh3.Hash(payload)
	now, unknown := time.Now(), uint64(f.batch.Skipped)
	f.count(func(s *Stats) {
		s.Applied++
		s.UnknownEvents += unknown
		s.LastSeq, s.HasSeq, s.LastBatch = seq, true, now
	})
}

func (f *Feed) purge(reason string) {
	f.sink.Purge(reason)
	f.has, f.ahead = false, nil
	f.count(func(s *Stats) { s.Purges++; s.HasSeq = false })
}

// disconnected counts a lost connection and says why, sampled as
// malformed batches are: an engine whose batches outgrow the message
// bound loses its connection at each one, and only the log says so.
func (f *Feed) disconnected(err error) {
	var n uint64
	f.count(func(s *Stats) { s.Disconnects++; n = s.Disconnects })
	if n&(n-1) != 0 {
		return
	}
	if errors.Is(err, zmtp.ErrTooLarge) {
		f.log.Warn("kv events: a batch larger than the bound broke the connection; its events are lost",
			"max_message_bytes", f.cfg.Socket.MaxMessageSize, "disconnects_so_far", n)
		return
	}
	f.log.Warn("kv events: the connection to the publisher was lost", "err", err, "disconnects_so_far", n)
}

func (f *Feed) malformed(what string, err error) {
	var n uint64
	f.count(func(s *Stats) { s.Malformed++; n = s.Malformed })
	if n&(n-1) == 0 { // the 1st, 2nd, 4th, 8th...: a sample, not a flood
		f.log.Warn("kv events: dropped "+what, "err", err, "malformed_so_far", n)
	}
}
