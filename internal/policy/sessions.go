package policy

import (
	"container/list"

	"github.com/inferrail/inferrail/internal/blockhash"
)

// lastReplicas remembers the replica the last request of each key went to,
// for at most limit keys: when full, the least recently routed key is
// forgotten (LRU). Session affinity keys it by conversation name, history
// affinity by a prompt's last block. Not safe for concurrent use.
type lastReplicas[K comparable] struct {
	limit int
	byKey map[K]*list.Element // of *lastReplica[K]
	order list.List           // most recently routed first
}

type lastReplica[K comparable] struct {
	key     K
	replica string
}

// sessions is keyed by the conversation a request names.
type sessions = lastReplicas[string]

// histories is keyed by the last full block of a prompt that was new to
// every replica when it was routed.
type histories = lastReplicas[blockhash.Hash]

func newLastReplicas[K comparable](limit int) *lastReplicas[K] {
	t := &lastReplicas[K]{limit: limit, byKey: make(map[K]*list.Element)}
	t.order.Init()
	return t
}

func newSessions(limit int) *sessions { return newLastReplicas[string](limit) }

func newHistories(limit int) *histories { return newLastReplicas[blockhash.Hash](limit) }

// peek returns the key's last replica without marking it used.
func (t *lastReplicas[K]) peek(key K) (string, bool) {
	if e, ok := t.byKey[key]; ok {
		return e.Value.(*lastReplica[K]).replica, true
	}
	return "", false
}

// put records that the key's latest request went to replica.
func (t *lastReplicas[K]) put(key K, replica string) {
	if e, ok := t.byKey[key]; ok {
		e.Value.(*lastReplica[K]).replica = replica
		t.order.MoveToFront(e)
		return
	}
	if t.order.Len() >= t.limit {
		// Full: the least recently routed key's element takes the new one,
		// so a full table routes without allocating.
		oldest := t.order.Back()
		e := oldest.Value.(*lastReplica[K])
		delete(t.byKey, e.key)
		e.key, e.replica = key, replica
		t.order.MoveToFront(oldest)
		t.byKey[key] = oldest
		return
	}
	t.byKey[key] = t.order.PushFront(&lastReplica[K]{key: key, replica: replica})
}

// len is the number of keys remembered.
func (t *lastReplicas[K]) len() int { return t.order.Len() }
