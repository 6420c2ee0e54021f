package index

import (
	"math"
	"unsafe"
)

// registry is an immutable snapshot of the live replicas by ID.
//
// A Match resolves every candidate, 64 of them for a prompt over 64
// replicas, and a map lookup of a string costs about 11 ns: a third of the
// budget. The gateway passes the same ID strings request after request
// (each replica's ID, allocated once), so the registry also files each
// replica under the address of the ID string that introduced it: comparing
// an address and a length costs about 3 ns. The replica keeps that string,
// so its memory cannot be reused, and an equal address and length mean an
// equal string. Any other string with the same contents takes the map.
type registry struct {
	byID   map[string]*replica
	byAddr []addrEntry // open addressing on the ID's address; nil r is empty
}

type addrEntry struct {
	p      *byte
	n      int32 // length of the ID
	handle int32 // r.handle, at hand without loading r
	r      *replica
}

func newRegistry(byID map[string]*replica) *registry {
	size := 16
	for size < 2*len(byID) {
		size *= 2
	}
	g := &registry{byID: byID, byAddr: make([]addrEntry, size)}
	mask := uint64(size - 1)
	for id, r := range byID {
		if len(id) == 0 || len(id) > math.MaxInt32 {
			continue // the map finds those
		}
		p := unsafe.StringData(r.id)
		s := addrHome(p, mask)
		for g.byAddr[s].r != nil {
			s = (s + 1) & mask
		}
		g.byAddr[s] = addrEntry{p, int32(len(id)), int32(r.handle), r}
	}
	return g
}

func addrHome(p *byte, mask uint64) uint64 {
	return (uint64(uintptr(unsafe.Pointer(p))) * 0x9e3779b97f4a7c15) >> 32 & mask
}

// lookup returns the replica named id, or nil.
func (g *registry) lookup(id string) *replica {
	if e := g.byAddress(id); e != nil {
		return e.r
	}
	return g.byID[id]
}

// resolve appends to handles the handle of each candidate, -1 for those it
// does not know, and returns handles, the largest handle and the set of
// those below 64.
func (g *registry) resolve(handles []int32, candidates []string) ([]int32, int32, uint64) {
	mask := uint64(len(g.byAddr) - 1)
	top, all := int32(-1), uint64(0)
next:
	for _, id := range candidates {
		if n := len(id); n > 0 && n <= math.MaxInt32 {
			p := unsafe.StringData(id)
			for s := addrHome(p, mask); g.byAddr[s].r != nil; s = (s + 1) & mask {
				if e := &g.byAddr[s]; e.p == p && e.n == int32(n) {
					handles = append(handles, e.handle)
					top, all = max(top, e.handle), all|lowBit(e.handle)
					continue next
				}
			}
		}
		h := int32(-1)
		if r := g.byID[id]; r != nil {
			h = int32(r.handle)
		}
		handles = append(handles, h)
		top, all = max(top, h), all|lowBit(h)
	}
	return handles, top, all
}

// handleOf is the handle of replica id, -1 when it does not know it.
func (g *registry) handleOf(id string) int32 {
	if r := g.lookup(id); r != nil {
		return int32(r.handle)
	}
	return -1
}

// byAddress returns the entry of the replica that id's memory names, or
// nil.
func (g *registry) byAddress(id string) *addrEntry {
	if len(id) == 0 || len(id) > math.MaxInt32 {
		return nil
	}
	p := unsafe.StringData(id)
	mask := uint64(len(g.byAddr) - 1)
	for s := addrHome(p, mask); g.byAddr[s].r != nil; s = (s + 1) & mask {
		if e := &g.byAddr[s]; e.p == p && e.n == int32(len(id)) {
			return e
		}
	}
	return nil
}

// bytes approximates the registry's memory.
func (g *registry) bytes() int64 {
	const mapEntry = 48 // string header, pointer, control byte, slack
	return int64(len(g.byAddr))*int64(unsafe.Sizeof(addrEntry{})) + int64(len(g.byID))*mapEntry
}

// lowBit is handle h's bit in a one-word set of handles: 0 for a handle
// outside it (negative, or 64 and up), as Go shifts past a word's width
// to 0.
func lowBit(h int32) uint64 { return 1 << uint32(h) }
