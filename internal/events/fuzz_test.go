package events

import (
	"encoding/hex"
	"testing"
)

// FuzzDecodeBatch: no payload makes DecodeBatch panic or return anything
// but a batch or a *DecodeError wrapping a sentinel; a payload it accepts
// re-encodes (map form) to one that decodes to the same batch. Seeded with
// every golden payload.
func FuzzDecodeBatch(f *testing.F) {
	for _, c := range loadGoldens(f) {
		p, err := hex.DecodeString(c.Hex)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var b, again Batch
		err := DecodeBatch(payload, &b)
		if err != nil {
			checkDecodeError(t, err, len(payload))
			return
		}
		if err := DecodeBatch(AppendBatch(nil, &b, EncodingMap), &again); err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		b.Skipped = 0
		if d := batchDiff(&b, &again); d != "" {
			t.Fatalf("re-encoded batch decodes differently (-first +second):\n%s", d)
		}
	})
}
