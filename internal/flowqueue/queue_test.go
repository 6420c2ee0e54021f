package flowqueue

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var t0 = time.Unix(1_700_000_000, 0)

// push queues an entry of value v and fails the test if it is refused.
func push(t *testing.T, q *Queue[string], v string, class int, key string) *Entry[string] {
	t.Helper()
	e := &Entry[string]{Value: v, Class: class, Key: key}
	if err := q.Push(e); err != nil {
		t.Fatalf("Push(%s): %v", v, err)
	}
	return e
}

// drain pops everything and returns the values in order.
func drain(q *Queue[string]) []string {
	var out []string
	for e := q.Pop(); e != nil; e = q.Pop() {
		out = append(out, e.Value)
	}
	return out
}

func TestOrder(t *testing.T) {
	type in struct {
		v     string
		class int
		key   string
	}
	tests := []struct {
		name string
		ins  []in
		want []string
	}{
		{"fifo_one_key", []in{{"a1", 0, "a"}, {"a2", 0, "a"}, {"a3", 0, "a"}}, []string{"a1", "a2", "a3"}},
		{"class_first", []in{{"s1", 2, "a"}, {"n1", 1, "a"}, {"c1", 0, "b"}, {"n2", 1, "b"}}, []string{"c1", "n1", "n2", "s1"}},
		// A flood of a's, then one b: b goes second, not last.
		{"fair_turns", []in{{"a1", 1, "a"}, {"a2", 1, "a"}, {"a3", 1, "a"}, {"a4", 1, "a"}, {"b1", 1, "b"}},
			[]string{"a1", "b1", "a2", "a3", "a4"}},
		{"round_robin", []in{{"a1", 1, "a"}, {"a2", 1, "a"}, {"b1", 1, "b"}, {"b2", 1, "b"}, {"c1", 1, "c"}},
			[]string{"a1", "b1", "c1", "a2", "b2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := New[string](3, Limits{Max: 100})
			for _, e := range tc.ins {
				push(t, q, e.v, e.class, e.key)
			}
			if got := drain(q); !slices.Equal(got, tc.want) {
				t.Errorf("order %v, want %v", got, tc.want)
			}
		})
	}
}

// TestLateKeyJoinsAtVirtualTime checks that a key arriving after others
// were served joins at the class's current turn: it goes next, then takes
// turns, with no burst of turns for the time it was away.
func TestLateKeyJoinsAtVirtualTime(t *testing.T) {
	q := New[string](1, Limits{Max: 100})
	for i := range 6 {
		push(t, q, fmt.Sprintf("a%d", i), 0, "a")
	}
	for range 3 {
		q.Pop()
	}
	push(t, q, "b0", 0, "b")
	push(t, q, "b1", 0, "b")
	want := []string{"b0", "a3", "b1", "a4", "a5"}
	if got := drain(q); !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

func TestBounds(t *testing.T) {
	q := New[string](3, Limits{Max: 4, Class: []int{0, 2, 1}, Key: 2})
	push(t, q, "n1", 1, "a")
	push(t, q, "n2", 1, "b")
	tests := []struct {
		class int
		key   string
		want  error
	}{
		{1, "c", ErrClassFull},
		{2, "a", nil},
		{2, "b", ErrClassFull},
		{0, "a", nil},
		{0, "a", ErrFull},
	}
	for i, tc := range tests {
		err := q.Push(&Entry[string]{Value: fmt.Sprint(i), Class: tc.class, Key: tc.key})
		if !errors.Is(err, tc.want) && (err != nil || tc.want != nil) {
			t.Errorf("push %d (class %d key %s) = %v, want %v", i, tc.class, tc.key, err, tc.want)
		}
	}
	q2 := New[string](1, Limits{Max: 10, Key: 2})
	push(t, q2, "a1", 0, "a")
	push(t, q2, "a2", 0, "a")
	if err := q2.Push(&Entry[string]{Class: 0, Key: "a"}); !errors.Is(err, ErrKeyFull) {
		t.Errorf("third entry of a key limited to 2: %v, want ErrKeyFull", err)
	}
	push(t, q2, "b1", 0, "b")
}

func TestRemoveAndExpire(t *testing.T) {
	q := New[string](2, Limits{Max: 10})
	a := push(t, q, "a", 0, "k")
	b := &Entry[string]{Value: "b", Class: 1, Key: "k", Deadline: t0.Add(2 * time.Second)}
	c := &Entry[string]{Value: "c", Class: 1, Key: "j", Deadline: t0.Add(time.Second)}
	for _, e := range []*Entry[string]{b, c} {
		if err := q.Push(e); err != nil {
			t.Fatal(err)
		}
	}
	if !q.Remove(a) || q.Remove(a) || a.Queued() {
		t.Fatal("Remove of a queued entry must succeed once")
	}
	if d, ok := q.NextDeadline(); !ok || !d.Equal(c.Deadline) {
		t.Errorf("NextDeadline = %v %v, want %v", d, ok, c.Deadline)
	}
	if got := q.Expire(t0.Add(1500 * time.Millisecond)); len(got) != 1 || got[0] != c {
		t.Errorf("Expire at 1.5 s took %d entries, want c", len(got))
	}
	if got := q.Expire(t0.Add(3 * time.Second)); len(got) != 1 || got[0] != b {
		t.Errorf("Expire at 3 s took %d entries, want b", len(got))
	}
	if q.Len() != 0 || q.Keys() != 0 {
		t.Errorf("after all left: len %d keys %d, want 0 0", q.Len(), q.Keys())
	}
}

// TestManyKeysForgotten pushes and pops 10,000 distinct keys: once their
// entries leave, the queue holds nothing of them.
func TestManyKeysForgotten(t *testing.T) {
	q := New[string](1, Limits{Max: 16})
	for i := range 10_000 {
		push(t, q, "", 0, fmt.Sprintf("key-%d", i))
		if q.Len() == 16 {
			q.Pop()
		}
	}
	drain(q)
	if q.Keys() != 0 || len(q.classes[0].heap) != 0 {
		t.Errorf("keys left after every entry left: %d", q.Keys())
	}
}

// model is the naive reference: every queued entry in one slice, each
// rule computed by a scan.
type model struct {
	lim     Limits
	classes int
	entries []*modelEntry
	v       []uint64
	finish  map[string]uint64 // by class/key, while the key has entries in the class
	seq     uint64
}

type modelEntry struct {
	id         int
	class      int
	key        string
	deadline   time.Time
	start, seq uint64
}

func fk(class int, key string) string { return fmt.Sprintf("%d/%s", class, key) }

func (m *model) count(f func(*modelEntry) bool) int {
	n := 0
	for _, e := range m.entries {
		if f(e) {
			n++
		}
	}
	return n
}

func (m *model) push(id, class int, key string, dl time.Time) error {
	switch {
	case len(m.entries) >= m.lim.Max:
		return ErrFull
	case class < len(m.lim.Class) && m.lim.Class[class] > 0 && m.count(func(e *modelEntry) bool { return e.class == class }) >= m.lim.Class[class]:
		return ErrClassFull
	case m.lim.Key > 0 && m.count(func(e *modelEntry) bool { return e.class == class && e.key == key }) >= m.lim.Key:
		return ErrKeyFull
	}
	m.seq++
	start := m.v[class]
	if f, ok := m.finish[fk(class, key)]; ok && f > start {
		start = f
	}
	m.finish[fk(class, key)] = start + 1
	m.entries = append(m.entries, &modelEntry{id: id, class: class, key: key, deadline: dl, start: start, seq: m.seq})
	return nil
}

func (m *model) remove(i int) *modelEntry {
	e := m.entries[i]
	m.entries = slices.Delete(m.entries, i, i+1)
	if m.count(func(o *modelEntry) bool { return o.class == e.class && o.key == e.key }) == 0 {
		delete(m.finish, fk(e.class, e.key))
	}
	return e
}

func (m *model) pop() int { return m.popFunc(func(int, string) bool { return true }) }

// popFunc pops the first entry in order among the keys ok admits.
func (m *model) popFunc(ok func(int, string) bool) int {
	best := -1
	for i, e := range m.entries {
		if !ok(e.class, e.key) {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := m.entries[best]
		if e.class < b.class || (e.class == b.class && (e.start < b.start || (e.start == b.start && e.seq < b.seq))) {
			best = i
		}
	}
	if best < 0 {
		return -1
	}
	e := m.remove(best)
	m.v[e.class] = max(m.v[e.class], e.start)
	return e.id
}

func (m *model) expire(now time.Time) []int {
	var out []*modelEntry
	for i := 0; i < len(m.entries); {
		if e := m.entries[i]; !e.deadline.IsZero() && !e.deadline.After(now) {
			out = append(out, m.remove(i))
			continue
		}
		i++
	}
	slices.SortFunc(out, func(a, b *modelEntry) int {
		if c := a.deadline.Compare(b.deadline); c != 0 {
			return c
		}
		return int(a.seq) - int(b.seq)
	})
	ids := make([]int, len(out))
	for i, e := range out {
		ids[i] = e.id
	}
	return ids
}

// TestAgainstModel runs random pushes, pops, cancellations and expiries
// on the queue and on the reference model and checks they agree on every
// answer: what is refused, what leaves and in which order, and every
// count.
func TestAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		classes := rapid.IntRange(1, 3).Draw(t, "classes")
		lim := Limits{Max: rapid.IntRange(1, 12).Draw(t, "max"), Key: rapid.IntRange(0, 4).Draw(t, "key")}
		lim.Class = rapid.SliceOfN(rapid.IntRange(0, 6), 0, classes).Draw(t, "class")
		q := New[int](classes, lim)
		m := &model{lim: lim, classes: classes, v: make([]uint64, classes), finish: map[string]uint64{}}
		live := map[int]*Entry[int]{}
		now := t0
		keys := []string{"a", "b", "c", "d"}
		for id := range rapid.IntRange(1, 120).Draw(t, "steps") {
			switch rapid.IntRange(0, 10).Draw(t, "op") {
			case 0, 1, 2, 3, 4: // push
				class := rapid.IntRange(0, classes-1).Draw(t, "c")
				key := rapid.SampledFrom(keys).Draw(t, "k")
				var dl time.Time
				if rapid.Bool().Draw(t, "dl") {
					dl = now.Add(time.Duration(rapid.IntRange(0, 5).Draw(t, "in")) * time.Second)
				}
				e := &Entry[int]{Value: id, Class: class, Key: key, Deadline: dl}
				got, want := q.Push(e), m.push(id, class, key, dl)
				if !errors.Is(got, want) && (got != nil || want != nil) {
					t.Fatalf("push %d: %v, model %v", id, got, want)
				}
				if got == nil {
					live[id] = e
				}
			case 5, 6: // pop
				want := m.pop()
				e := q.Pop()
				got := -1
				if e != nil {
					got = e.Value
					delete(live, got)
				}
				if got != want {
					t.Fatalf("pop: %d, model %d", got, want)
				}
			case 7: // cancel one queued entry
				if len(m.entries) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(m.entries)-1).Draw(t, "i")
				me := m.remove(i)
				if !q.Remove(live[me.id]) {
					t.Fatalf("remove %d: not queued", me.id)
				}
				delete(live, me.id)
			case 8: // time passes
				now = now.Add(time.Duration(rapid.IntRange(0, 3).Draw(t, "dt")) * time.Second)
				want := m.expire(now)
				var got []int
				for _, e := range q.Expire(now) {
					got = append(got, e.Value)
					delete(live, e.Value)
				}
				if len(got) != len(want) || (len(got) > 0 && !slices.Equal(got, want)) {
					t.Fatalf("expire at %v: %v, model %v", now.Sub(t0), got, want)
				}
			case 10: // take the first of the keys not held back
				held := map[string]bool{}
				for _, k := range keys {
					held[fk(rapid.IntRange(0, classes-1).Draw(t, "hc"), k)] = rapid.Bool().Draw(t, "held")
				}
				ok := func(c int, k string) bool { return !held[fk(c, k)] }
				want := m.popFunc(ok)
				got := -1
				if e := q.PeekFunc(ok); e != nil {
					got = e.Value
					if !q.Take(e) || q.Take(e) {
						t.Fatalf("take %d: not taken exactly once", got)
					}
					delete(live, got)
				}
				if got != want {
					t.Fatalf("peek func: %d, model %d", got, want)
				}
			case 9: // peek agrees with the next pop without taking it
				if e := q.Peek(); (e == nil) != (len(m.entries) == 0) {
					t.Fatalf("peek %v with %d queued", e, len(m.entries))
				}
			}
			if q.Len() != len(m.entries) {
				t.Fatalf("len %d, model %d", q.Len(), len(m.entries))
			}
			for c := range classes {
				if n := m.count(func(e *modelEntry) bool { return e.class == c }); q.ClassLen(c) != n {
					t.Fatalf("class %d len %d, model %d", c, q.ClassLen(c), n)
				}
				for _, k := range keys {
					if n := m.count(func(e *modelEntry) bool { return e.class == c && e.key == k }); q.KeyLen(c, k) != n {
						t.Fatalf("class %d key %s len %d, model %d", c, k, q.KeyLen(c, k), n)
					}
				}
			}
		}
	})
}

// TestPropertiesBoundedFair checks rules the model shares with the queue
// directly, so a mistake made in both would still show: bounds are never
// passed, no entry leaves while a more important class waits, and between
// two keys that stay backlogged in one class the pops differ by at most
// one.
func TestPropertiesBoundedFair(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		lim := Limits{Max: rapid.IntRange(2, 40).Draw(t, "max"), Class: []int{0, rapid.IntRange(0, 20).Draw(t, "c1")}, Key: rapid.IntRange(0, 10).Draw(t, "key")}
		q := New[string](2, lim)
		served := map[string]int{}
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			if rapid.IntRange(0, 2).Draw(t, "op") < 2 {
				c := rapid.IntRange(0, 1).Draw(t, "c")
				k := rapid.SampledFrom([]string{"x", "y", "z"}).Draw(t, "k")
				_ = q.Push(&Entry[string]{Value: k, Class: c, Key: k})
			} else if e := q.Pop(); e != nil {
				if e.Class == 1 && q.ClassLen(0) > 0 {
					t.Fatalf("class 1 left while class 0 holds %d", q.ClassLen(0))
				}
				if e.Class == 1 {
					served[e.Key]++
				}
			}
			if q.Len() > lim.Max || (lim.Class[1] > 0 && q.ClassLen(1) > lim.Class[1]) {
				t.Fatalf("bounds passed: len %d class1 %d, limits %+v", q.Len(), q.ClassLen(1), lim)
			}
			for _, k := range []string{"x", "y", "z"} {
				if lim.Key > 0 && q.KeyLen(1, k) > lim.Key {
					t.Fatalf("key %s holds %d, limit %d", k, q.KeyLen(1, k), lim.Key)
				}
			}
		}
	})
	// Two keys that stay backlogged take turns: a key with 50 queued and
	// one with 5 queued are served alternately until the second runs out.
	q := New[string](1, Limits{Max: 100})
	for range 50 {
		_ = q.Push(&Entry[string]{Value: "flood", Key: "flood"})
	}
	for range 5 {
		_ = q.Push(&Entry[string]{Value: "quiet", Key: "quiet"})
	}
	got := map[string]int{}
	for range 10 {
		got[q.Pop().Value]++
	}
	if got["flood"] != 5 || got["quiet"] != 5 {
		t.Errorf("first 10 pops %v, want 5 and 5", got)
	}
}

// TestPeekFuncVisitsFew checks PeekFunc's cost does not grow with the
// keys queued: it asks about the keys it passes over and the one it
// returns, nothing more.
func TestPeekFuncVisitsFew(t *testing.T) {
	q := New[string](1, Limits{Max: 10_000})
	for i := range 1000 {
		push(t, q, fmt.Sprintf("v%d", i), 0, fmt.Sprintf("k%d", i))
	}
	calls := 0
	e := q.PeekFunc(func(_ int, key string) bool {
		calls++
		return key != "k0" && key != "k1" && key != "k2"
	})
	if e == nil || e.Value != "v3" {
		t.Fatalf("PeekFunc = %v, want v3", e)
	}
	if calls != 4 {
		t.Errorf("PeekFunc asked about %d keys, want 4 (three passed over, one taken)", calls)
	}
	if e := q.PeekFunc(func(int, string) bool { return false }); e != nil {
		t.Errorf("PeekFunc with every key held back = %v, want nil", e.Value)
	}
}
