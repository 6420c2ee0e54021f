package policy

import "container/list"

// sessions remembers the replica each conversation's last request went to,
// for at most limit conversations: when full, the least recently routed one
// is forgotten (LRU). Not safe for concurrent use.
type sessions struct {
	limit int
	byKey map[string]*list.Element // of *session
	order list.List                // most recently routed first
}

type session struct {
	key, replica string
}

func newSessions(limit int) *sessions {
	t := &sessions{limit: limit, byKey: make(map[string]*list.Element)}
	t.order.Init()
	return t
}

// peek returns the conversation's last replica without marking it used.
func (t *sessions) peek(key string) (string, bool) {
	if e, ok := t.byKey[key]; ok {
		return e.Value.(*session).replica, true
	}
	return "", false
}

// put records that the conversation's latest request went to replica.
func (t *sessions) put(key, replica string) {
	if e, ok := t.byKey[key]; ok {
		e.Value.(*session).replica = replica
		t.order.MoveToFront(e)
		return
	}
	t.byKey[key] = t.order.PushFront(&session{key: key, replica: replica})
	for t.order.Len() > t.limit {
		oldest := t.order.Back()
		t.order.Remove(oldest)
		delete(t.byKey, oldest.Value.(*session).key)
	}
}

// len is the number of conversations remembered.
func (t *sessions) len() int { return t.order.Len() }
