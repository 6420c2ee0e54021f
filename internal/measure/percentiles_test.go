package measure

import (
	"testing"
	"time"
)

func TestPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 1000; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := Summarize(ds)
	want := Percentiles{N: 1000, Mean: 0.5005, P50: 0.5, P90: 0.9, P99: 0.99, P999: 0.999, Max: 1}
	if got != want {
		t.Errorf("Summarize = %+v, want %+v", got, want)
	}
	if got := Summarize(nil); got != (Percentiles{}) {
		t.Errorf("Summarize(nil) = %+v", got)
	}
}
