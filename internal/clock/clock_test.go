package clock

import (
	"math"
	"testing"
	"time"
)

func TestOf(t *testing.T) {
	now := time.Now()
	cases := []struct {
		name string
		t    time.Time
		want func(Instant) bool
	}{
		{"now", now, func(i Instant) bool { return i >= 0 && time.Duration(i) < time.Hour }},
		{"a second later", now.Add(time.Second), func(i Instant) bool { return i-Of(now) == Instant(time.Second) }},
		{"without a monotonic reading", now.Round(0).Add(time.Second), func(i Instant) bool {
			return (i - Of(now)).abs() < Instant(time.Second+time.Millisecond)
		}},
		{"the zero time", time.Time{}, func(i Instant) bool { return i == -Limit }},
		{"year 9999", time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), func(i Instant) bool { return i == Limit }},
	}
	for _, c := range cases {
		if got := Of(c.t); !c.want(got) {
			t.Errorf("%s: Of = %d", c.name, got)
		}
	}
}

func (i Instant) abs() Instant { return max(i, -i) }

func TestAddStaysInRange(t *testing.T) {
	for _, i := range []Instant{-Limit, -1, 0, 1, Limit} {
		for _, d := range []time.Duration{math.MinInt64, -Limit - 1, -time.Second, 0, time.Second, Limit + 1, math.MaxInt64} {
			got := i.Add(d)
			if got < -2*Limit || got > 2*Limit {
				t.Errorf("%d.Add(%d) = %d, outside ±2^62", i, d, got)
			}
			if d > -Limit && d < Limit && got != i+Instant(d) {
				t.Errorf("%d.Add(%d) = %d", i, d, got)
			}
		}
	}
}
