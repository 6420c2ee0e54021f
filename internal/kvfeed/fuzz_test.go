package kvfeed

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/inferrail/inferrail/internal/events"
)

// FuzzReplayMessage: replayMessage never panics, and whatever it accepts
// it reads as the frames say: the end marker only when the sequence is
// all ones with an empty topic and payload, else the sequence and payload
// frames as they are.
func FuzzReplayMessage(f *testing.F) {
	f.Add([]byte{}, []byte("kv"), seqBytes(7), []byte{0x93}, true)
	f.Add([]byte{}, []byte{}, events.ReplayEnd, []byte{}, true)
	f.Add([]byte{}, seqBytes(3), []byte{0x93}, []byte(nil), false)
	f.Add([]byte{}, events.ReplayEnd, []byte{}, []byte(nil), false)
	f.Add([]byte{1}, []byte("kv"), []byte{1, 2}, []byte{}, true)
	f.Fuzz(func(t *testing.T, a, b, c, d []byte, withTopic bool) {
		msg := [][]byte{a, b, c}
		if withTopic {
			msg = append(msg, d)
		}
		seq, payload, end, err := replayMessage(msg)
		if err != nil {
			return
		}
		topic, seqFrame, body := []byte(nil), b, c
		if withTopic {
			topic, seqFrame, body = b, c, d
		}
		if len(a) != 0 || len(seqFrame) != 8 {
			t.Fatalf("accepted %q", msg)
		}
		wantEnd := bytes.Equal(seqFrame, events.ReplayEnd) && len(topic) == 0 && len(body) == 0
		if end != wantEnd {
			t.Fatalf("%q: end %v, want %v", msg, end, wantEnd)
		}
		if !end && (seq != binary.BigEndian.Uint64(seqFrame) || !bytes.Equal(payload, body)) {
			t.Fatalf("%q: seq %d payload %q", msg, seq, payload)
		}
	})
}
