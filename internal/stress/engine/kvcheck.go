package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/events"
	"github.com/inferrail/inferrail/internal/index"
	"github.com/inferrail/inferrail/internal/zmtp"
)

// mirrorSink applies a feed's batches to an index.Mirror. It outlives
// the feeds of a subscriber-restart run: a new feed replays what the
// engine still buffers, and the sink skips the batches it already has, as
// a gateway that keeps its mirror across a reconnect would.
type mirrorSink struct {
	m       *index.Mirror
	last    uint64
	has     bool
	skipped uint64         // batches already applied
	lost    uint64         // times a batch came after one the sink never had
	purges  map[string]int // by reason
}

func (s *mirrorSink) Apply(seq uint64, b *events.Batch) {
	switch {
	case s.has && seq <= s.last:
		s.skipped++
		return
	case s.has && seq != s.last+1:
		s.lost++
	}
	s.m.Apply(b)
	s.last, s.has = seq, true
}

func (s *mirrorSink) Purge(reason string) {
	s.m.Clear()
	s.has = false
	if s.purges == nil {
		s.purges = map[string]int{}
	}
	s.purges[reason]++
}

// tap keeps the payloads of the last batches published live, raw, to
// compare with what the replay socket sends for them afterwards.
type tap struct {
	sub  *zmtp.Sub
	keep int
	done chan struct{}

	mu   sync.Mutex
	live map[uint64][]byte // guarded by mu
	last uint64            // guarded by mu
	has  bool              // guarded by mu
}

func startTap(ctx context.Context, endpoint string, keep int) (*tap, error) {
	sub, err := zmtp.DialSub(ctx, endpoint, zmtp.Options{}, "kv")
	if err != nil {
		return nil, err
	}
	t := &tap{sub: sub, keep: keep, done: make(chan struct{}), live: map[uint64][]byte{}}
	go t.run(ctx)
	return t, nil
}

func (t *tap) run(ctx context.Context) {
	defer close(t.done)
	for {
		msg, err := t.sub.Recv(ctx)
		switch {
		case errors.Is(err, zmtp.ErrDisconnected):
			continue
		case err != nil:
			return
		case len(msg) != 3 || len(msg[1]) != 8:
			continue
		}
		seq := binary.BigEndian.Uint64(msg[1])
		t.mu.Lock()
		if t.has && seq <= t.last {
			clear(t.live) // the engine restarted: a new stream
		}
		t.live[seq], t.last, t.has = msg[2], seq, true
		if len(t.live) > 2*t.keep {
			for s := range t.live {
				if s+uint64(t.keep) <= seq {
					delete(t.live, s)
				}
			}
		}
		t.mu.Unlock()
	}
}

func (t *tap) stop() {
	t.sub.Close()
	<-t.done
}

// lastSeq is the last sequence number the tap saw.
func (t *tap) lastSeq() (uint64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last, t.has
}

// settle waits until the feed has applied the last batch the engine
// published: the tap saw nothing after it and the replay buffer holds
// nothing after it, twice in a row.
func (k *kvRun) settle(ctx context.Context) error {
	var prev uint64
	calm := 0
	deadline := time.Now().Add(60 * time.Second)
	for calm < 2 {
		if time.Now().After(deadline) {
			s, _ := k.feedStats()
			last, _ := k.tap.lastSeq()
			return fmt.Errorf("the feed did not catch up within 60 s: it applied up to %d (has %v), the tap saw %d", s.LastSeq, s.HasSeq, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		s, ok := k.feedStats()
		last, has := k.tap.lastSeq()
		if !ok || !s.HasSeq || !has || s.LastSeq != last {
			calm = 0
			continue
		}
		newer, err := replayFrom(ctx, k.fcfg.ReplayEndpoint, last+1)
		if err != nil || len(newer) != 0 || (calm > 0 && last != prev) {
			calm = 0
			continue
		}
		prev = last
		calm++
	}
	return nil
}

// checkReplay asks for the last ReplayCheck batches again and compares
// them with the live ones.
func (k *kvRun) checkReplay(ctx context.Context, f *KVMirrorFigures) {
	last, ok := k.tap.lastSeq()
	n := uint64(k.l.ReplayCheck)
	if !ok {
		return
	}
	start := uint64(0)
	if last+1 > n {
		start = last + 1 - n
	}
	got, err := replayFrom(ctx, k.fcfg.ReplayEndpoint, start)
	if err != nil {
		f.Problems = append(f.Problems, "replay for the byte check: "+err.Error())
		return
	}
	f.ReplayWindow = int(last + 1 - start)
	k.tap.mu.Lock()
	defer k.tap.mu.Unlock()
	for _, b := range got {
		if b.seq > last {
			continue
		}
		live, ok := k.tap.live[b.seq]
		if !ok {
			f.ReplayUnseen++
			continue
		}
		f.ReplayChecked++
		if bytes.Equal(live, b.payload) {
			f.ReplayEqual++
		}
	}
}

// replayed is one batch a replay sent.
type replayed struct {
	seq     uint64
	payload []byte
}

// replayFrom asks the replay socket at endpoint for every batch from start
// on, in vLLM's framing, and returns them in order.
func replayFrom(ctx context.Context, endpoint string, start uint64) ([]replayed, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	d, err := zmtp.DialDealer(ctx, endpoint, zmtp.Options{})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if err := d.Send(ctx, [][]byte{{}, binary.BigEndian.AppendUint64(nil, start)}); err != nil {
		return nil, err
	}
	var out []replayed
	for {
		msg, err := d.Recv(ctx)
		if err != nil {
			return nil, fmt.Errorf("after %d batches: %w", len(out), err)
		}
		if len(msg) != 4 || len(msg[0]) != 0 || len(msg[2]) != 8 {
			return nil, fmt.Errorf("a replay message of %d frames", len(msg))
		}
		if len(msg[1]) == 0 && bytes.Equal(msg[2], events.ReplayEnd) && len(msg[3]) == 0 {
			return out, nil
		}
		seq := binary.BigEndian.Uint64(msg[2])
		if n := len(out); seq < start || (n > 0 && seq != out[n-1].seq+1) {
			return nil, fmt.Errorf("replayed batch %d out of order (from %d, %d batches so far)", seq, start, n)
		}
		out = append(out, replayed{seq: seq, payload: msg[3]})
	}
}
