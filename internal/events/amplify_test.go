package events

import (
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
)

// hostileBatch is a batch of n copies of one event's bytes, the events list
// headed as array32, with dp rank 0.
func hostileBatch(ev []byte, n int) []byte {
	p := []byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd}
	p = binary.BigEndian.AppendUint32(p, uint32(n))
	for range n {
		p = append(p, ev...)
	}
	return append(p, 0)
}

// storedWithExtraKeys is a batch of one map BlockStored without blocks
// whose extra_keys lists n nils: one byte each.
func storedWithExtraKeys(n int) []byte {
	ev := []byte{0x84}
	for _, s := range []string{"type", "BlockStored", "block_hashes"} {
		ev = append(append(ev, 0xa0|byte(len(s))), s...)
	}
	ev = append(append(ev, 0x90, 0xa9), "token_ids"...)
	ev = append(append(ev, 0x90, 0xaa), "block_size"...)
	ev = append(append(ev, 16, 0xaa), "extra_keys"...)
	ev = binary.BigEndian.AppendUint32(append(ev, 0xdd), uint32(n))
	for range n {
		ev = append(ev, 0xc0)
	}
	ev[0] = 0x85
	return hostileBatch(ev, 1)
}

// TestDecodeAllocatesASmallMultiple: a payload made of the smallest values
// DecodeBatch keeps costs at most 36 bytes a byte to decode, counting every
// allocation (growth copies too); the worst is a one-byte hash, 32 bytes
// decoded. Past a bound a batch is refused early. (Found by a code review:
// 63 MiB of 18-byte events allocated 5.6 GB, 64 MiB of nil extra keys 9 GB.)
func TestDecodeAllocatesASmallMultiple(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	cleared := append([]byte{0x91, 0xb0}, "AllBlocksCleared"...)
	removed := append(append([]byte{0x92, 0xac}, "BlockRemoved"...), 0x90)
	hashes := func(n int) []byte { // one array BlockRemoved of n one-byte hashes
		ev := append(append([]byte{0x92, 0xac}, "BlockRemoved"...), 0xdd)
		ev = binary.BigEndian.AppendUint32(ev, uint32(n))
		for range n {
			ev = append(ev, 7)
		}
		return hostileBatch(ev, 1)
	}
	const perByte = 36
	for _, tc := range []struct {
		name    string
		payload []byte
		wantErr error
	}{
		{"cleared_events", hostileBatch(cleared, 100_000), nil},
		{"removed_events", hostileBatch(removed, MaxBatchEvents), nil},
		{"too_many_events", hostileBatch(removed, MaxBatchEvents+1), ErrTooMany},
		{"nil_extra_keys", storedWithExtraKeys(MaxBatchHashes), nil},
		{"too_many_extra_keys", storedWithExtraKeys(MaxBatchHashes + 1), ErrTooMany},
		{"one_byte_hashes", hashes(MaxBatchHashes), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b Batch
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := DecodeBatch(tc.payload, &b)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("DecodeBatch = %v, want %v", err, tc.wantErr)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			ratio := float64(alloc) / float64(len(tc.payload))
			t.Logf("%d bytes: %.1f allocated a byte", len(tc.payload), ratio)
			if ratio > perByte {
				t.Errorf("decoding %d bytes allocated %d: %.1f a byte, want at most %d", len(tc.payload), alloc, ratio, perByte)
			}
			runtime.KeepAlive(&b)
		})
	}
}
