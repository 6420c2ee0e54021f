package load

import (
	"math"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/inferrail/inferrail/internal/clock"
)

// TestFeedRouting: what routing reads of a feed is the latest report's
// fields, fresh exactly as Fresh says, and nothing before the first sample.
// A capacity past what a feed keeps reads as the most it keeps, and the
// waiting and foreign counts as float32 keeps them: exact for counts and
// halves, the largest float32 for anything larger. Its age is how long
// before the instant the scrape was sent, never less than 0.
func TestFeedRouting(t *testing.T) {
	f := &Feed{maxAge: 250 * time.Millisecond}
	sent := time.Now()
	for _, at := range []time.Time{{}, sent, sent.Add(time.Hour)} {
		if r, ok := f.FreshRouting(clock.Of(at)); ok {
			t.Fatalf("an empty feed reads as %+v at %v", r, at)
		}
	}
	for i, c := range []struct {
		rep      *Report
		foreign  float64
		capacity int
	}{
		{&Report{Running: 3, Waiting: 7, KVUsage: 0.5, CapacityBlocks: 4096}, 2, 4096},
		{&Report{Running: 0, KVUsage: 0, CapacityBlocks: 0}, 0, 0},
		{&Report{Running: 2.5, Waiting: 1 << 20, KVUsage: 1, CapacityBlocks: 1 << 40}, 0.5, math.MaxInt32},
		{&Report{Running: 1, Waiting: 1e300, KVUsage: 1}, 1e39, 0},
	} {
		rep := c.rep
		at := sent.Add(time.Duration(i) * time.Second)
		f.publish(&Sample{Report: rep, At: at, Foreign: c.foreign, CapacityBlocks: rep.CapacityBlocks})
		for _, now := range []time.Time{at.Add(-time.Second), at, at.Add(f.maxAge), at.Add(f.maxAge + 1), at.Add(time.Hour)} {
			r, ok := f.FreshRouting(clock.Of(now))
			_, want := f.Fresh(now)
			if ok != want {
				t.Fatalf("report %d read %v after its scrape: fresh %v, Fresh says %v", i, now.Sub(at), ok, want)
			}
			fields := Routing{Running: rep.Running, KVUsage: rep.KVUsage, CapacityBlocks: c.capacity,
				Waiting: min(rep.Waiting, math.MaxFloat32), Foreign: min(c.foreign, math.MaxFloat32), Age: max(now.Sub(at), 0)}
			if r != fields {
				t.Fatalf("report %d reads as %+v", i, r)
			}
		}
	}
}

// TestFeedRoutingUnderScrapes: a reader never mixes two reports' fields
// while scrapes publish new ones (each report's fields are tied together).
func TestFeedRoutingUnderScrapes(t *testing.T) {
	f := &Feed{maxAge: time.Hour}
	at := time.Now()
	f.publish(&Sample{Report: &Report{}, At: at})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for k := 1; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			// Waiting and Foreign cycle through counts float32 keeps exact.
			c := float64(k % (1 << 20))
			f.publish(&Sample{Report: &Report{Running: float64(k), Waiting: c, KVUsage: float64(k) / 1e9}, At: at, Foreign: c / 2, CapacityBlocks: k})
		}
	})
	now := clock.Of(at)
	for range 200_000 {
		r, ok := f.FreshRouting(now)
		c := float64(r.CapacityBlocks % (1 << 20))
		if !ok || r.Running != float64(r.CapacityBlocks) || r.KVUsage != float64(r.CapacityBlocks)/1e9 || r.Waiting != c || r.Foreign != c/2 {
			close(stop)
			wg.Wait()
			t.Fatalf("read %+v (fresh %v): fields of different reports", r, ok)
		}
	}
	close(stop)
	wg.Wait()
}

// TestFeedLayout: a feed is one cache line and starts its replica's state,
// which is a whole number of lines, so that the heap's size class puts
// every feed on a line of its own and a decision reads one line per
// replica.
func TestFeedLayout(t *testing.T) {
	var st replicaState
	if n := unsafe.Sizeof(st.feed); n != 64 {
		t.Errorf("a feed is %d bytes, not one line", n)
	}
	if off := unsafe.Offsetof(st.feed); off != 0 {
		t.Errorf("the feed is at byte %d of its replica's state", off)
	}
	if n := unsafe.Sizeof(st); n%64 != 0 {
		t.Errorf("a replica's state is %d bytes, not a whole number of lines", n)
	}
	s := NewScraper(ScrapeConfig{Interval: time.Second, MaxAge: time.Second}, nil, func() []Target { return nil }, nil, nil, nil)
	for _, id := range []string{"a", "b", "c", "d"} {
		if addr := uintptr(unsafe.Pointer(s.Feed(id))); addr%64 != 0 {
			t.Errorf("%s's feed at %#x, not on a line", id, addr)
		}
	}
}
