package kvfeed

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/zeebo/xxh3"

	"github.com/inferrail/inferrail/internal/events"
	"github.com/inferrail/inferrail/internal/zmtp"
)

// catchUp asks the replay socket for every batch from start on and applies
// those the sink lacks. A replay whose first batch comes after what the
// sink needs means history is lost: the sink is purged first. Started at
// the last batch applied, it first checks that batch's bytes: other bytes
// under its number are a restarted engine's, so the sink is purged and the
// new engine's history replayed from its start. A replay that fails
// changes nothing; the live stream goes on. A replay from the last batch
// applied that answers with no batch at all is a restart too: the engine
// that published that batch still holds it or later ones, so one holding
// neither never published it. (Only this catches a new engine numbering
// below our last batch when that batch came from a replay: after a start
// recovered by replay alone, or a gap replay that ran ahead of the live
// stream, there is no live number for the new one to go back past.)
func (f *Feed) catchUp(ctx context.Context, start uint64) {
	verify := f.has && start == f.last
	restarted, heard := false, false
	err := f.replayWithin(ctx, start, func(seq uint64, payload []byte) {
		heard = true
		switch {
		case restarted:
			return // replayed again from the start below
		case verify && seq == start:
			if xxh3.Hash(payload) != f.lastSum {
				restarted = true
				f.purge(PurgeRestart)
				return
			}
			f.count(func(s *Stats) { s.Duplicates++ })
			return
		case f.has && seq <= f.last:
			f.count(func(s *Stats) { s.Duplicates++ })
			return
		case f.has && seq != f.last+1:
			f.purge(PurgeLost)
		}
		f.apply(ctx, seq, payload)
		f.noteReplayed(seq, f.lastSum)
	})
	if err != nil {
		f.log.Warn("kv events: replay failed", "replay_endpoint", f.cfg.ReplayEndpoint, "start", start, "err", err)
	}
	if verify && err == nil && !heard {
		restarted = true
		f.purge(PurgeRestart)
	}
	if restarted {
		f.catchUp(ctx, 0)
	}
}

// replayWithin is one replay bounded by the replay timeout, counted: a
// failed one in Replays and ReplayErrs at once, so that no reading sees
// it done and not yet failed (the ok series, Replays less ReplayErrs,
// would step back, which Prometheus reads as a counter reset).
func (f *Feed) replayWithin(ctx context.Context, start uint64, got func(seq uint64, payload []byte)) error {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.ReplayTimeout)
	defer cancel()
	err := f.replay(ctx, start, got)
	f.count(func(s *Stats) {
		s.Replays++
		if err != nil {
			s.ReplayErrs++
		}
	})
	return err
}

// replay runs one replay exchange on a DEALER of its own (so that a late
// answer to an abandoned replay can never mix into the next), calling got
// for each batch in order until the end marker.
func (f *Feed) replay(ctx context.Context, start uint64, got func(seq uint64, payload []byte)) error {
	d, err := zmtp.DialDealer(ctx, f.cfg.ReplayEndpoint, f.cfg.Socket)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Send(ctx, [][]byte{{}, binary.BigEndian.AppendUint64(nil, start)}); err != nil {
		return err
	}
	prev, first := uint64(0), true
	for {
		msg, err := d.Recv(ctx)
		if err != nil {
			return err
		}
		seq, payload, end, err := replayMessage(msg)
		switch {
		case err != nil:
			return err
		case end:
			return nil
		case seq < start || (!first && seq != prev+1):
			return errors.New("replayed batches out of order")
		}
		prev, first = seq, false
		got(seq, payload)
	}
}

// replayMessage reads one message a DEALER gets from an engine's replay
// socket: [empty delimiter, topic, seq, payload], or without the topic
// frame from engines before vLLM #45177 (July 2026). The end marker has an
// empty topic, the all-ones sequence and an empty payload.
func replayMessage(msg [][]byte) (seq uint64, payload []byte, end bool, err error) {
	if len(msg) == 3 {
		msg = [][]byte{msg[0], nil, msg[1], msg[2]}
	}
	if len(msg) != 4 || len(msg[0]) != 0 || len(msg[2]) != 8 {
		return 0, nil, false, fmt.Errorf("a replay message of %d frames", len(msg))
	}
	if bytes.Equal(msg[2], events.ReplayEnd) && len(msg[1]) == 0 && len(msg[3]) == 0 {
		return 0, nil, true, nil
	}
	return binary.BigEndian.Uint64(msg[2]), msg[3], false, nil
}
