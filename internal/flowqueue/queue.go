package flowqueue

import (
	"container/heap"
	"errors"
	"time"
)

// Errors of Push: which bound refused the entry.
var (
	ErrFull      = errors.New("the queue is full")
	ErrClassFull = errors.New("the priority class's queue is full")
	ErrKeyFull   = errors.New("the key's queue is full")
)

// Limits bound a queue. Max must be > 0; a zero class or key limit means
// no bound below Max.
type Limits struct {
	// Max is the most entries queued in all classes.
	Max int
	// Class[c] is the most entries of class c; a class past the slice's
	// end has no bound of its own.
	Class []int
	// Key is the most entries of one key within one class.
	Key int
}

// Entry is one queued item. Set Value, Class, Key and Deadline before
// Push; the rest belongs to the queue.
type Entry[T any] struct {
	Value T
	// Class is the priority class, 0 the most important; it must be
	// below the class count the queue was made with.
	Class int
	// Key is who the entry is fair-shared as.
	Key string
	// Deadline is when Expire removes it; the zero time never.
	Deadline time.Time

	start, seq uint64
	owner      *keyQueue[T] // nil when not queued
	dlIndex    int          // place in the deadline heap; -1 when not in it
}

// Queued reports whether the entry is in a queue.
func (e *Entry[T]) Queued() bool { return e.owner != nil }

// Start returns the entry's start tag: its place in its class's fair
// order. Meaningful while it is queued, and after Pop.
func (e *Entry[T]) Start() uint64 { return e.start }

// keyQueue is one key's entries in one class, oldest first.
type keyQueue[T any] struct {
	key     string
	class   *class[T]
	entries []*Entry[T]
	finish  uint64 // finish tag of the key's last pushed entry
	heapIdx int
}

// class is one priority class: its keys in a heap by their oldest
// entry's start tag.
type class[T any] struct {
	v    uint64 // virtual time: start tag of the last entry popped
	n    int
	keys map[string]*keyQueue[T]
	heap keyHeap[T]
}

// Queue is a bounded priority queue with fair sharing between keys. The
// zero value is not usable; make one with New.
type Queue[T any] struct {
	lim       Limits
	classes   []class[T]
	n         int
	seq       uint64
	deadlines deadlineHeap[T]
}

// New returns an empty queue of classes priority classes.
func New[T any](classes int, lim Limits) *Queue[T] {
	q := &Queue[T]{lim: lim, classes: make([]class[T], classes)}
	for i := range q.classes {
		q.classes[i].keys = map[string]*keyQueue[T]{}
	}
	return q
}

// SetLimits changes the bounds. Entries already queued stay, even past
// the new bounds; only later pushes are refused.
func (q *Queue[T]) SetLimits(lim Limits) { q.lim = lim }

// Limits returns the bounds in effect.
func (q *Queue[T]) Limits() Limits { return q.lim }

// Len returns the entries queued.
func (q *Queue[T]) Len() int { return q.n }

// ClassLen returns the entries queued in class c.
func (q *Queue[T]) ClassLen(c int) int { return q.classes[c].n }

// KeyLen returns the entries key has queued in class c.
func (q *Queue[T]) KeyLen(c int, key string) int {
	if k := q.classes[c].keys[key]; k != nil {
		return len(k.entries)
	}
	return 0
}

// Keys returns the number of keys with entries queued, in all classes.
func (q *Queue[T]) Keys() int {
	n := 0
	for i := range q.classes {
		n += len(q.classes[i].keys)
	}
	return n
}

// Check says whether an entry of class c and key key would be pushed now,
// or which bound would refuse it.
func (q *Queue[T]) Check(c int, key string) error {
	switch {
	case q.n >= q.lim.Max:
		return ErrFull
	case c < len(q.lim.Class) && q.lim.Class[c] > 0 && q.classes[c].n >= q.lim.Class[c]:
		return ErrClassFull
	case q.lim.Key > 0 && q.KeyLen(c, key) >= q.lim.Key:
		return ErrKeyFull
	}
	return nil
}

// Push queues e, or says which bound refused it. e must not be queued.
func (q *Queue[T]) Push(e *Entry[T]) error {
	if e.owner != nil {
		panic("flowqueue: Push of a queued entry")
	}
	if err := q.Check(e.Class, e.Key); err != nil {
		return err
	}
	cl := &q.classes[e.Class]
	k := cl.keys[e.Key]
	if k == nil {
		k = &keyQueue[T]{key: e.Key, class: cl, heapIdx: -1}
		cl.keys[e.Key] = k
	}
	e.start = max(cl.v, k.finish)
	k.finish = e.start + 1
	q.seq++
	e.seq, e.owner, e.dlIndex = q.seq, k, -1
	k.entries = append(k.entries, e)
	if len(k.entries) == 1 {
		heap.Push(&cl.heap, k)
	}
	cl.n++
	q.n++
	if !e.Deadline.IsZero() {
		heap.Push(&q.deadlines, e)
	}
	return nil
}

// Peek returns the entry Pop would return, or nil when the queue is empty.
func (q *Queue[T]) Peek() *Entry[T] {
	for i := range q.classes {
		if cl := &q.classes[i]; len(cl.heap) > 0 {
			return cl.heap[0].entries[0]
		}
	}
	return nil
}

// Pop removes and returns the next entry: the most important class's
// smallest start tag. Nil when the queue is empty.
func (q *Queue[T]) Pop() *Entry[T] {
	e := q.Peek()
	if e != nil {
		q.Take(e)
	}
	return e
}

// PeekFunc returns the entry Pop would return if the keys for which ok is
// false had nothing queued: the most important class's smallest start tag
// among the oldest entries of keys ok admits. Nil when there is none. It
// calls ok once per key it passes over, in the order Pop would reach them,
// and visits about twice as many keys as ok refuses, whatever the number
// of keys queued.
func (q *Queue[T]) PeekFunc(ok func(class int, key string) bool) *Entry[T] {
	for c := range q.classes {
		h := q.classes[c].heap
		if len(h) == 0 {
			continue
		}
		// Best first through the heap: a key's children in it start no
		// earlier than it, so the frontier's smallest is the next in order.
		front := idxHeap[T]{h: h, idx: []int{0}}
		for len(front.idx) > 0 {
			i := heap.Pop(&front).(int)
			if k := h[i]; ok(c, k.key) {
				return k.entries[0]
			}
			for _, j := range [2]int{2*i + 1, 2*i + 2} {
				if j < len(h) {
					heap.Push(&front, j)
				}
			}
		}
	}
	return nil
}

// Take removes e, a queued entry, as if Pop had returned it: its class's
// virtual time moves to its start tag. False when it was not queued.
func (q *Queue[T]) Take(e *Entry[T]) bool {
	if e.owner == nil {
		return false
	}
	cl := e.owner.class
	cl.v = max(cl.v, e.start)
	return q.Remove(e)
}

// Remove takes e out of the queue wherever it is; false when it was not
// queued. A removed entry's key keeps its turn: the entries behind it
// keep their tags.
func (q *Queue[T]) Remove(e *Entry[T]) bool {
	k := e.owner
	if k == nil {
		return false
	}
	cl := k.class
	i := 0
	for k.entries[i] != e {
		i++
	}
	copy(k.entries[i:], k.entries[i+1:])
	k.entries[len(k.entries)-1] = nil
	k.entries = k.entries[:len(k.entries)-1]
	switch {
	case len(k.entries) == 0:
		heap.Remove(&cl.heap, k.heapIdx)
		delete(cl.keys, k.key)
	case i == 0:
		heap.Fix(&cl.heap, k.heapIdx)
	}
	if e.dlIndex >= 0 {
		heap.Remove(&q.deadlines, e.dlIndex)
	}
	e.owner = nil
	cl.n--
	q.n--
	return true
}

// Expire removes every entry whose deadline is at or before now and
// returns them, earliest deadline first.
func (q *Queue[T]) Expire(now time.Time) []*Entry[T] {
	var out []*Entry[T]
	for len(q.deadlines) > 0 && !q.deadlines[0].Deadline.After(now) {
		e := q.deadlines[0]
		q.Remove(e)
		out = append(out, e)
	}
	return out
}

// NextDeadline returns the earliest deadline of a queued entry; false
// when none has one.
func (q *Queue[T]) NextDeadline() (time.Time, bool) {
	if len(q.deadlines) == 0 {
		return time.Time{}, false
	}
	return q.deadlines[0].Deadline, true
}

// keyHeap orders a class's keys by their oldest entry: start tag, then
// arrival.
type keyHeap[T any] []*keyQueue[T]

func (h keyHeap[T]) Len() int { return len(h) }
func (h keyHeap[T]) Less(i, j int) bool {
	a, b := h[i].entries[0], h[j].entries[0]
	return a.start < b.start || (a.start == b.start && a.seq < b.seq)
}
func (h keyHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}
func (h *keyHeap[T]) Push(x any) {
	k := x.(*keyQueue[T])
	k.heapIdx = len(*h)
	*h = append(*h, k)
}
func (h *keyHeap[T]) Pop() any {
	old := *h
	k := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	k.heapIdx = -1
	return k
}

// idxHeap orders places in a keyHeap as the keyHeap orders what is there.
type idxHeap[T any] struct {
	h   keyHeap[T]
	idx []int
}

func (f *idxHeap[T]) Len() int           { return len(f.idx) }
func (f *idxHeap[T]) Less(i, j int) bool { return f.h.Less(f.idx[i], f.idx[j]) }
func (f *idxHeap[T]) Swap(i, j int)      { f.idx[i], f.idx[j] = f.idx[j], f.idx[i] }
func (f *idxHeap[T]) Push(x any)         { f.idx = append(f.idx, x.(int)) }
func (f *idxHeap[T]) Pop() any {
	i := f.idx[len(f.idx)-1]
	f.idx = f.idx[:len(f.idx)-1]
	return i
}

// deadlineHeap orders entries by deadline, then arrival.
type deadlineHeap[T any] []*Entry[T]

func (h deadlineHeap[T]) Len() int { return len(h) }
func (h deadlineHeap[T]) Less(i, j int) bool {
	a, b := h[i], h[j]
	return a.Deadline.Before(b.Deadline) || (a.Deadline.Equal(b.Deadline) && a.seq < b.seq)
}
func (h deadlineHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].dlIndex, h[j].dlIndex = i, j
}
func (h *deadlineHeap[T]) Push(x any) {
	e := x.(*Entry[T])
	e.dlIndex = len(*h)
	*h = append(*h, e)
}
func (h *deadlineHeap[T]) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.dlIndex = -1
	return e
}
