package index

import (
	"testing"
)

// TestUnknownReplicaStaysUnknown: the index knows a replica from Join to
// Forget. A record, a capacity or events for one it does not know, never
// joined or forgotten, change nothing. A request still running on a
// replica that left recorded its prompt after the fleet watcher's Forget,
// which made the replica anew: it stayed on /admin/index and /metrics for
// good (found by a review).
func TestUnknownReplicaStaysUnknown(t *testing.T) {
	p := ours("", seq(1, 8)...)
	cfg := EventsConfig{BlockSize: mirrorBS, Seed: mirrorSeed}
	for _, tc := range []struct {
		name string
		op   func(x *Approx, stale Attachment)
	}{
		{"record", func(x *Approx, _ Attachment) { x.Record("gone", p) }},
		{"record_prompt", func(x *Approx, _ Attachment) { x.RecordPrompt("gone", p, 1) }},
		{"set_capacity", func(x *Approx, _ Attachment) { x.SetCapacity("gone", 5000) }},
		{"attach_and_apply", func(x *Approx, _ Attachment) {
			at := x.AttachEvents("gone", cfg)
			x.ApplyEvents(at, batchOf(stored(0, 1, seq(1, 8))))
			x.SetSource("gone", true)
		}},
		{"apply_through_a_stale_attachment", func(x *Approx, stale Attachment) {
			x.ApplyEvents(stale, batchOf(stored(0, 1, seq(1, 8))))
			x.PurgeEvents(stale)
		}},
		{"reset", func(x *Approx, _ Attachment) { x.Reset("gone") }},
	} {
		for _, forgotten := range []bool{false, true} {
			name := tc.name + "/never_joined"
			if forgotten {
				name = tc.name + "/forgotten"
			}
			t.Run(name, func(t *testing.T) {
				x := NewApprox(1000)
				x.Join("live")
				var stale Attachment
				if forgotten {
					x.Join("gone")
					stale = x.AttachEvents("gone", cfg)
					x.Record("gone", p)
					x.Forget("gone")
				}
				tc.op(x, stale)
				for _, rs := range x.Stats().Replicas {
					if rs.ID == "gone" {
						t.Errorf("the index holds %+v", rs)
					}
				}
				if got := depth(x, "gone", p); got != 0 {
					t.Errorf("Match says it holds %d blocks", got)
				}
				if ev := x.Events("gone"); ev.Attached || ev.Mirrored != 0 {
					t.Errorf("events %+v", ev)
				}
				checkIndex(t, x)
			})
		}
	}
	// Once it joins (again), it is known, empty, at the default capacity.
	x := NewApprox(1000)
	x.Join("r")
	x.SetCapacity("r", 50)
	x.Record("r", p)
	x.Forget("r")
	x.Record("r", p)
	x.Join("r")
	if held, capacity, ok := held(x.Stats(), "r"); !ok || held != 0 || capacity != 1000 {
		t.Errorf("joined again: held %d, capacity %d (known %v); want 0 of 1000", held, capacity, ok)
	}
}
