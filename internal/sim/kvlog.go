package sim

import (
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/inferrail/inferrail/internal/enginehash"
	"github.com/inferrail/inferrail/internal/events"
)

// kvLog gathers what one engine step did to the prefix cache, as vLLM's
// block pool queues it: a BlockStored per run of blocks a request filled,
// a BlockRemoved per evicted block, AllBlocksCleared on a reset. The engine
// hands each step's events on as one batch. Owned by the engine goroutine.
type kvLog struct {
	hasher   *enginehash.Hasher
	intForm  bool // send hashes as their low 64 bits, vLLM's default
	rank     int64
	events   []events.Event
	sink     KVEventSink
	blockLen int
	// windowFirst numbers a hybrid model's window group 0 and its
	// full-attention group 1 in the events (see reportedGroup).
	windowFirst bool
}

// KVEventSink receives every batch of KV events an engine emits, in order,
// on the engine goroutine: Publish must not block and must not keep b after
// it returns.
type KVEventSink interface {
	Publish(b *events.Batch)
}

// vLLM's fixed fields for blocks on GPU, of a full-attention group.
const (
	kvMedium   = "GPU"
	kvSpecKind = "full_attention"
	// kvSpecWindow is the kind of a hybrid model's sliding-window group.
	kvSpecWindow = "sliding_window"
)

func newKVLog(h *enginehash.Hasher, intForm bool, rank, blockSize int, sink KVEventSink) *kvLog {
	return &kvLog{hasher: h, intForm: intForm, rank: int64(rank), sink: sink, blockLen: blockSize}
}

// wire is a digest as the events carry it.
func (l *kvLog) wire(digest []byte) events.Hash {
	if l.intForm {
		return events.UintHash(enginehash.EventInt(digest))
	}
	return events.BytesHash(digest)
}

// extend appends to r's engine hashes those of its full blocks not hashed
// yet: the prompt's when it is built, then each block its output fills.
func (l *kvLog) extend(r *request) {
	bs := l.blockLen
	for i := len(r.ext); (i+1)*bs <= len(r.tokens); i++ {
		var extra enginehash.ExtraKeys
		if i == 0 && r.salt != "" {
			extra = enginehash.ExtraKeys{r.salt}
		}
		// A fresh slice each time: Block must not write over its parent.
		r.extLast = l.hasher.Block(nil, r.extLast, toUint32(r.tokens[i*bs:(i+1)*bs]), extra)
		r.ext = append(r.ext, l.wire(r.extLast))
	}
}

func toUint32(ids []int) []uint32 {
	out := make([]uint32, len(ids))
	for i, t := range ids {
		out[i] = uint32(t)
	}
	return out
}

// stored logs that r's blocks first..end-1 entered the cache, in the
// full-attention group.
func (l *kvLog) stored(r *request, first, end int) { l.storedIn(r, first, end, 0, 0) }

// storedIn is stored for a block of group, a sliding-window group's of
// window tokens when window is positive.
func (l *kvLog) storedIn(r *request, first, end, group, window int) {
	if first >= end {
		return
	}
	bs := l.blockLen
	ev := events.Event{
		Kind:        events.BlockStored,
		Hashes:      append([]events.Hash(nil), r.ext[first:end]...),
		Tokens:      toUint32(r.tokens[first*bs : end*bs]),
		BlockSize:   bs,
		Medium:      kvMedium,
		HasMedium:   true,
		ExtraKeys:   make([]events.RawValue, end-first),
		GroupIdx:    int64(reportedGroup(group, l.windowFirst)),
		HasGroupIdx: true,
		SpecKind:    kvSpecKind,
		HasSpecKind: true,
	}
	if window > 0 {
		ev.SpecKind = kvSpecWindow
		ev.SlidingWindow, ev.HasSlidingWindow = int64(window), true
	}
	if first > 0 {
		ev.Parent, ev.HasParent = r.ext[first-1], true
	}
	for i := range ev.ExtraKeys {
		ev.ExtraKeys[i] = nilValue
		if first+i == 0 && r.salt != "" {
			ev.ExtraKeys[i] = saltKey(r.salt)
		}
	}
	l.events = append(l.events, ev)
}

// nilValue is msgpack's nil: a block hashed with no extra keys.
var nilValue = events.RawValue{0xc0}

// saltKey is the msgpack encoding of the one-string tuple (cache_salt,).
func saltKey(salt string) events.RawValue {
	return msgp.AppendString(msgp.AppendArrayHeader(nil, 1), salt)
}

// removed logs that the block of group carrying h left the cache.
func (l *kvLog) removed(h events.Hash, group int) {
	l.events = append(l.events, events.Event{
		Kind:        events.BlockRemoved,
		Hashes:      []events.Hash{h},
		Medium:      kvMedium,
		HasMedium:   true,
		GroupIdx:    int64(reportedGroup(group, l.windowFirst)),
		HasGroupIdx: true,
	})
}

// cleared logs a reset of the whole cache.
func (l *kvLog) cleared() {
	l.events = append(l.events, events.Event{Kind: events.AllBlocksCleared})
}

// flush hands the step's events on as one batch, if there were any.
func (l *kvLog) flush() {
	if len(l.events) == 0 {
		return
	}
	b := events.Batch{
		TS:        float64(time.Now().UnixNano()) / 1e9,
		Events:    l.events,
		DPRank:    l.rank,
		HasDPRank: true,
	}
	l.sink.Publish(&b)
	clear(l.events)
	l.events = l.events[:0]
}
