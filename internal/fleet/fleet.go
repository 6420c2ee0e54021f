package fleet

import (
	"cmp"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// Snapshot is an immutable view of the fleet's membership. Readers load it
// with one atomic read and keep it for a whole request.
type Snapshot struct {
	Replicas []*Replica // static replicas in config order, then DNS members by group and address
	byModel  map[string][]*Replica
	byID     map[string]*Replica
	departed map[string][]*Replica // by model; see Departed
}

// ForModel returns the replicas that serve model, in fleet order. The slice
// is shared: do not modify it.
func (s *Snapshot) ForModel(model string) []*Replica { return s.byModel[model] }

// Departed returns the replicas of model that left the fleet and that it
// remembers (see Fleet), which may still run requests. The slice is
// shared: do not modify it.
func (s *Snapshot) Departed(model string) []*Replica { return s.departed[model] }

// Get returns the replica with id, or nil.
func (s *Snapshot) Get(id string) *Replica { return s.byID[id] }

// Fleet is the set of replicas the gateway routes to. Membership changes
// (DNS joins and leaves) build a new Snapshot and swap it in; a replica that
// stays keeps its counters and health. Safe for concurrent use.
type Fleet struct {
	snap atomic.Pointer[Snapshot]

	log *slog.Logger

	mu       sync.Mutex // serializes membership changes
	static   []*Replica
	groups   map[string][]*Replica // DNS members by group; guarded by mu
	watchers []func(added, removed []*Replica)
	// shadowed holds, by group, the IDs of DNS members left out because
	// another replica has their ID, so that each is logged once; guarded
	// by mu.
	shadowed map[string]map[string]bool
	// departed holds, by group and oldest first, up to maxDeparted members
	// that left, so that one coming back (a flapping or truncated DNS
	// answer) is the same Replica: the leases it still holds count against
	// its caps, and its health and ejection carry on; guarded by mu.
	departed map[string][]*Replica
	// departedStatic holds, oldest first, up to maxDeparted static
	// replicas that were removed, so that one added again at the same
	// URL (the same engine) counts its load on the old one's counters:
	// the requests the old one still runs count against the new one's
	// caps; guarded by mu.
	departedStatic []*Replica
}

// maxDeparted bounds the members each group remembers after they left.
const maxDeparted = 64

// New returns a fleet of the static replicas. A nil logger discards.
func New(static []*Replica, logger *slog.Logger) *Fleet {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	f := &Fleet{static: slices.Clone(static), groups: map[string][]*Replica{}, shadowed: map[string]map[string]bool{},
		departed: map[string][]*Replica{}, log: logger.With("component", "fleet")}
	f.publish()
	return f
}

// Snapshot returns the membership in effect.
func (f *Fleet) Snapshot() *Snapshot { return f.snap.Load() }

// Watch registers fn to learn of every membership change. fn runs with the
// fleet's lock held and must not call back into the fleet.
func (f *Fleet) Watch(fn func(added, removed []*Replica)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watchers = append(f.watchers, fn)
}

// SetGroup replaces the members of a DNS group. Members whose id is already
// present are kept as they are (health and counters included); members that
// leave are marked removed and finish what they are doing, and one that
// comes back while remembered is the one that left, back in the fleet with
// the new member's caps. A member whose
// ID a static replica or another group's member has is left out with a
// warning: the fleet never holds two replicas with one ID, whose metric
// series would collide.
func (f *Fleet) SetGroup(group string, members []*Replica) (added, removed []*Replica) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := map[string]*Replica{}
	for _, r := range f.groups[group] {
		old[r.ID] = r
	}
	taken := f.idsBut(group)
	was := f.shadowed[group]
	f.shadowed[group] = map[string]bool{}
	next := make([]*Replica, 0, len(members))
	for _, m := range members {
		if taken[m.ID] {
			f.shadow(group, m.ID, was[m.ID])
			continue
		}
		if r, ok := old[m.ID]; ok {
			next = append(next, r)
			delete(old, m.ID)
			continue
		}
		if p := f.rejoin(group, m); p != nil {
			next = append(next, p)
			added = append(added, p)
			continue
		}
		m.Group = group
		next = append(next, m)
		added = append(added, m)
	}
	for _, r := range old {
		r.removed.Store(true)
		removed = append(removed, r)
	}
	slices.SortFunc(removed, func(a, b *Replica) int { return cmp.Compare(a.ID, b.ID) })
	f.departed[group] = append(f.departed[group], removed...)
	if n := len(f.departed[group]) - maxDeparted; n > 0 {
		f.departed[group] = slices.Delete(f.departed[group], 0, n)
	}
	slices.SortFunc(next, func(a, b *Replica) int { return cmp.Compare(a.ID, b.ID) })
	f.groups[group] = next
	return f.changed(added, removed)
}

// SetStatic replaces the static replicas, in order. A replica whose ID is
// already static and that same reports true for the one it would replace
// is kept (health and counters included), with the new one's caps; the others are
// replaced: the old one is marked removed and finishes what it is doing,
// the new one starts fresh, but for one at the old one's URL: the same
// engine, whose requests still running count against the new one's caps
// (it counts its load on the old one's counters; its health starts fresh).
// So does one added again at the URL of a static replica of its ID that
// an earlier call removed.
func (f *Fleet) SetStatic(replicas []*Replica, same func(old, next *Replica) bool) (added, removed []*Replica) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := make(map[string]*Replica, len(f.static))
	for _, r := range f.static {
		old[r.ID] = r
	}
	next := make([]*Replica, 0, len(replicas))
	renamed := f.renamedStatic(replicas)
	for _, r := range replicas {
		o, ok := old[r.ID]
		if ok && same(o, r) {
			o.SetCaps(r.MaxConcurrency(), r.MaxPending())
			next = append(next, o)
			delete(old, r.ID)
			continue
		}
		if !ok || o.URL.String() != r.URL.String() {
			// Back at the URL of one removed earlier: the same engine.
			if d, found := f.takeDepartedStatic(r.ID, r.URL.String()); found {
				o, ok = d, true
			} else if d := renamed[r]; d != nil {
				o, ok = d, true
			}
		}
		if ok && o.URL.String() == r.URL.String() {
			r.carryLoad(o)
		}
		next = append(next, r)
		added = append(added, r)
	}
	for _, r := range f.static {
		if old[r.ID] == r {
			r.removed.Store(true)
			removed = append(removed, r)
			// Remembered unless its replacement counts its load (the
			// same ID at its URL).
			if !slices.ContainsFunc(next, func(n *Replica) bool { return n.ID == r.ID && n.URL.String() == r.URL.String() }) {
				f.departedStatic = append(f.departedStatic, r)
			}
		}
	}
	if n := len(f.departedStatic) - maxDeparted; n > 0 {
		f.departedStatic = slices.Delete(f.departedStatic, 0, n)
	}
	f.static = next
	removed = append(removed, f.dropShadowed()...)
	return f.changed(added, removed)
}

// renamedStatic pairs each replica of replicas under an ID the fleet does
// not have with a static replica this change removes at the same URL, if
// any (each with one at most, in order): the same engine renamed, whose
// running requests must count against the new one's caps as they would
// under its old ID. f.mu is held.
func (f *Fleet) renamedStatic(replicas []*Replica) map[*Replica]*Replica {
	ids := make(map[string]bool, len(replicas))
	for _, r := range replicas {
		ids[r.ID] = true
	}
	var gone []*Replica // static replicas whose ID is not in replicas
	known := make(map[string]bool, len(f.static))
	for _, o := range f.static {
		known[o.ID] = true
		if !ids[o.ID] {
			gone = append(gone, o)
		}
	}
	var pairs map[*Replica]*Replica
	for _, r := range replicas {
		if known[r.ID] {
			continue
		}
		i := slices.IndexFunc(gone, func(o *Replica) bool { return o.URL.String() == r.URL.String() })
		if i < 0 {
			continue
		}
		if pairs == nil {
			pairs = map[*Replica]*Replica{}
		}
		pairs[r] = gone[i]
		gone = slices.Delete(gone, i, i+1)
	}
	return pairs
}

// takeDepartedStatic takes the last removed static replica of ID id at
// URL u out of the remembered ones; one at another URL is another engine,
// left remembered for the requests it may still run. f.mu is held.
func (f *Fleet) takeDepartedStatic(id, u string) (*Replica, bool) {
	i := len(f.departedStatic) - 1
	for ; i >= 0; i-- {
		if r := f.departedStatic[i]; r.ID == id && r.URL.String() == u {
			break
		}
	}
	if i < 0 {
		return nil, false
	}
	r := f.departedStatic[i]
	f.departedStatic = slices.Delete(f.departedStatic, i, i+1)
	return r, true
}

// rejoin takes the remembered member of group that m comes back as (same
// ID, URL, models and KV capacity) out of the remembered and returns it,
// in the fleet again with m's caps; nil when there is none. f.mu is held.
func (f *Fleet) rejoin(group string, m *Replica) *Replica {
	d := f.departed[group]
	i := slices.IndexFunc(d, func(r *Replica) bool { return r.ID == m.ID })
	if i < 0 {
		return nil
	}
	p := d[i]
	f.departed[group] = slices.Delete(d, i, i+1)
	if p.URL.String() != m.URL.String() || !slices.Equal(p.Models, m.Models) || p.KVCapacityBlocks != m.KVCapacityBlocks {
		return nil // the group's settings changed: start afresh
	}
	p.SetCaps(m.MaxConcurrency(), m.MaxPending())
	p.removed.Store(false)
	return p
}

// idsBut returns the IDs of the static replicas and of the members of
// every group but group. f.mu is held.
func (f *Fleet) idsBut(group string) map[string]bool {
	ids := make(map[string]bool, len(f.static))
	for _, r := range f.static {
		ids[r.ID] = true
	}
	for g, members := range f.groups {
		if g != group {
			for _, r := range members {
				ids[r.ID] = true
			}
		}
	}
	return ids
}

// dropShadowed removes the DNS members that a static replica now has the ID
// of, marks them removed and returns them. f.mu is held.
func (f *Fleet) dropShadowed() []*Replica {
	static := make(map[string]bool, len(f.static))
	for _, r := range f.static {
		static[r.ID] = true
	}
	var dropped []*Replica
	for g, members := range f.groups {
		kept := members[:0:0]
		for _, r := range members {
			if !static[r.ID] {
				kept = append(kept, r)
				continue
			}
			f.shadow(g, r.ID, false)
			r.removed.Store(true)
			dropped = append(dropped, r)
		}
		if len(kept) < len(members) {
			f.groups[g] = kept
		}
	}
	return dropped
}

// shadow notes that a member of group is left out for its ID, and logs it
// unless it was left out already. f.mu is held.
func (f *Fleet) shadow(group, id string, already bool) {
	if f.shadowed[group] == nil {
		f.shadowed[group] = map[string]bool{}
	}
	f.shadowed[group][id] = true
	if !already {
		f.log.Warn("dns member left out: another replica has its id", "group", group, "replica", id)
	}
}

// changed publishes a new snapshot and tells the watchers when a change
// added or removed replicas, and returns them; nils when it did neither.
// f.mu is held.
func (f *Fleet) changed(added, removed []*Replica) ([]*Replica, []*Replica) {
	if len(added) == 0 && len(removed) == 0 {
		return nil, nil
	}
	f.publish()
	for _, w := range f.watchers {
		w(added, removed)
	}
	return added, removed
}

// publish builds and swaps in a snapshot; f.mu is held or f is new.
func (f *Fleet) publish() {
	s := &Snapshot{byModel: map[string][]*Replica{}, byID: map[string]*Replica{}, departed: map[string][]*Replica{}}
	s.Replicas = append(s.Replicas, f.static...)
	names := make([]string, 0, len(f.groups))
	for g := range f.groups {
		names = append(names, g)
	}
	slices.Sort(names)
	for _, g := range names {
		s.Replicas = append(s.Replicas, f.groups[g]...)
	}
	all := s.Replicas
	s.Replicas = s.Replicas[:0:0]
	for _, r := range all {
		if s.byID[r.ID] != nil {
			continue // SetGroup and SetStatic keep IDs apart; the first, static, wins
		}
		s.Replicas = append(s.Replicas, r)
		s.byID[r.ID] = r
		for _, m := range r.Models {
			s.byModel[m] = append(s.byModel[m], r)
		}
	}
	departed := slices.Clone(f.departedStatic)
	for _, g := range slices.Sorted(maps.Keys(f.departed)) {
		departed = append(departed, f.departed[g]...)
	}
	for _, r := range departed {
		for _, m := range r.Models {
			s.departed[m] = append(s.departed[m], r)
		}
	}
	f.snap.Store(s)
}
