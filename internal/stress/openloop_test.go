package stress

import (
	"fmt"
	"testing"
	"time"
)

func TestSchedules(t *testing.T) {
	fixed := FixedSchedule(1000, 5)
	if want := []time.Duration{0, time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 4 * time.Millisecond}; fmt.Sprint(fixed) != fmt.Sprint(want) {
		t.Errorf("fixedSchedule(1000, 5) = %v, want %v", fixed, want)
	}
	p := PoissonSchedule(2000, 20000, 1)
	if len(p) != 20000 || p[0] != 0 {
		t.Fatalf("poissonSchedule: %d arrivals starting at %v", len(p), p[0])
	}
	for i := 1; i < len(p); i++ {
		if p[i] < p[i-1] {
			t.Fatalf("poissonSchedule not sorted at %d", i)
		}
	}
	// 20,000 arrivals at 2,000/s span about 10 s; the sd of the sum is 1%.
	if span := p[len(p)-1].Seconds(); span < 9.5 || span > 10.5 {
		t.Errorf("poissonSchedule(2000, 20000) spans %.2f s, want about 10", span)
	}
	if a, b := PoissonSchedule(100, 10, 7), PoissonSchedule(100, 10, 7); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Error("poissonSchedule is not reproducible from its seed")
	}
}
