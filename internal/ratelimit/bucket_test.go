package ratelimit

import (
	"math/big"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var t0 = time.Unix(1_700_000_000, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestRateCheck(t *testing.T) {
	tests := []struct {
		name string
		r    Rate
		ok   bool
	}{
		{"per_minute", PerMinute(60), true},
		{"max_per_minute", PerMinute(MaxPerMinute), true},
		{"over_max", PerMinute(MaxPerMinute * 4), false},
		{"zero_limit", PerMinute(0), false},
		{"negative_limit", PerMinute(-1), false},
		{"sub_microsecond_period", Rate{Limit: 1, Period: time.Nanosecond}, false},
		{"period_over_an_hour", Rate{Limit: 1, Period: 2 * time.Hour}, false},
		{"hour", Rate{Limit: 1, Period: time.Hour}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.r.Check(); (err == nil) != tc.ok {
				t.Errorf("%+v.Check() = %v, want ok %v", tc.r, err, tc.ok)
			}
		})
	}
}

// TestBucket walks one bucket of 60 per minute (one a second) through the
// cases that matter, each step checked.
func TestBucket(t *testing.T) {
	type step struct {
		at       time.Duration
		op       string // admit, charge, refund
		n        int64
		ok       bool          // admit's answer
		wait     time.Duration // admit's wait
		left     int64         // State's remaining after the step
		untilFul time.Duration // State's reset after the step
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"full_then_drained", []step{
			{0, "admit", 60, true, 0, 0, time.Minute},
			{0, "admit", 1, false, time.Second, 0, time.Minute},
			{500 * time.Millisecond, "admit", 1, false, 500 * time.Millisecond, 0, 59500 * time.Millisecond},
			{time.Second, "admit", 1, true, 0, 0, time.Minute},
		}},
		{"zero_needs_one", []step{
			{0, "admit", 60, true, 0, 0, time.Minute},
			{0, "admit", 0, false, time.Second, 0, time.Minute},
			{time.Second, "admit", 0, true, 0, 1, 59 * time.Second},
		}},
		{"debt_bounded_at_one_bucket", []step{
			{0, "charge", 1000, false, 0, 0, 2 * time.Minute},
			{0, "admit", 0, false, 61 * time.Second, 0, 2 * time.Minute},
			{time.Minute, "charge", 1000, false, 0, 0, 2 * time.Minute},
		}},
		{"debt_blocks_until_repaid", []step{
			{0, "charge", 90, false, 0, 0, 90 * time.Second},
			{0, "admit", 0, false, 31 * time.Second, 0, 90 * time.Second},
			{30 * time.Second, "admit", 0, false, time.Second, 0, 60 * time.Second},
			{31 * time.Second, "admit", 1, true, 0, 0, 60 * time.Second},
		}},
		{"refund_caps_at_full", []step{
			{0, "admit", 10, true, 0, 50, 10 * time.Second},
			{0, "refund", 100, false, 0, 60, 0},
		}},
		{"never_fits", []step{
			{0, "admit", 61, false, 0, 60, 0},
			{0, "admit", 30, true, 0, 30, 30 * time.Second},
			{0, "admit", 61, false, 30 * time.Second, 30, 30 * time.Second},
		}},
		{"idle_refills_to_full_only", []step{
			{0, "admit", 60, true, 0, 0, time.Minute},
			{1000 * time.Hour, "admit", 0, true, 0, 60, 0},
		}},
		{"time_going_back_is_ignored", []step{
			{time.Minute, "admit", 30, true, 0, 30, 30 * time.Second},
			{0, "admit", 30, true, 0, 0, time.Minute},
			{0, "admit", 1, false, time.Second, 0, time.Minute},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBucket(PerMinute(60), t0)
			for i, s := range tc.steps {
				now := at(s.at)
				switch s.op {
				case "admit":
					ok, wait := b.Admit(now, s.n)
					if ok != s.ok || wait != s.wait {
						t.Errorf("step %d: Admit(%d) = %v, %v; want %v, %v", i, s.n, ok, wait, s.ok, s.wait)
					}
				case "charge":
					b.Charge(now, s.n)
				case "refund":
					b.Refund(now, s.n)
				}
				if left, reset := b.State(now); left != s.left || reset != s.untilFul {
					t.Errorf("step %d: State() = %d, %v; want %d, %v", i, left, reset, s.left, s.untilFul)
				}
			}
		})
	}
}

// TestBucketSubMicrosecondCalls: calls closer together than a microsecond
// lose no refill, as the bucket only accounts for whole microseconds and
// carries the rest.
func TestBucketSubMicrosecondCalls(t *testing.T) {
	const rate = 60_000_000 // one token a microsecond
	b := NewBucket(PerMinute(rate), t0)
	b.Charge(t0, rate) // empty
	for i := range 10_000 {
		b.State(t0.Add(time.Duration(i) * 300 * time.Nanosecond))
	}
	end := t0.Add(10_000 * 300 * time.Nanosecond) // 3 ms: 3,000 tokens
	if left, _ := b.State(end); left != 3000 {
		t.Errorf("after 3 ms in 300 ns steps the bucket holds %d, want 3000", left)
	}
}

// refBucket is the naive model of a bucket: rational tokens, time in whole
// microseconds, every rule written as the documentation states it.
type refBucket struct {
	limit, unit int64 // unit: microseconds per period
	tokens      *big.Rat
	last        int64
}

func newRef(r Rate) *refBucket {
	return &refBucket{limit: r.Limit, unit: int64(r.Period / time.Microsecond), tokens: big.NewRat(r.Limit, 1)}
}

func (m *refBucket) refill(now int64) {
	if now <= m.last {
		return
	}
	add := new(big.Rat).SetFrac64((now-m.last)*1, m.unit)
	add.Mul(add, big.NewRat(m.limit, 1))
	m.tokens.Add(m.tokens, add)
	if m.tokens.Cmp(big.NewRat(m.limit, 1)) > 0 {
		m.tokens.SetInt64(m.limit)
	}
	m.last = now
}

func (m *refBucket) clamp(n int64) int64 { return max(0, min(n, maxUnits/m.unit)) }

// until is the whole microseconds until tokens reach target, rounded up.
func (m *refBucket) until(target *big.Rat) time.Duration {
	d := new(big.Rat).Sub(target, m.tokens)
	if d.Sign() <= 0 {
		return 0
	}
	d.Mul(d, big.NewRat(m.unit, m.limit)) // microseconds
	q := new(big.Int).Quo(d.Num(), d.Denom())
	if new(big.Rat).SetInt(q).Cmp(d) < 0 {
		q.Add(q, big.NewInt(1))
	}
	return time.Duration(q.Int64()) * time.Microsecond
}

func (m *refBucket) admit(now, n int64) (bool, time.Duration) {
	n = m.clamp(n)
	m.refill(now)
	need := big.NewRat(max(n, 1), 1)
	if n <= m.limit && m.tokens.Cmp(need) >= 0 {
		m.tokens.Sub(m.tokens, big.NewRat(n, 1))
		return true, 0
	}
	if n > m.limit {
		need = big.NewRat(m.limit, 1)
	}
	return false, m.until(need)
}

func (m *refBucket) charge(now, n int64) {
	m.refill(now)
	m.tokens.Sub(m.tokens, big.NewRat(m.clamp(n), 1))
	if floor := big.NewRat(-m.limit, 1); m.tokens.Cmp(floor) < 0 {
		m.tokens = floor
	}
}

func (m *refBucket) refund(now, n int64) {
	m.refill(now)
	m.tokens.Add(m.tokens, big.NewRat(m.clamp(n), 1))
	if full := big.NewRat(m.limit, 1); m.tokens.Cmp(full) > 0 {
		m.tokens = full
	}
}

func (m *refBucket) state(now int64) (int64, time.Duration) {
	m.refill(now)
	left := int64(0)
	if m.tokens.Sign() > 0 {
		left = new(big.Int).Quo(m.tokens.Num(), m.tokens.Denom()).Int64()
	}
	return left, m.until(big.NewRat(m.limit, 1))
}

// TestDebtIsBounded: a bucket charged far past its limit (a huge usage
// on a small per-minute limit, or many requests settling at once) owes one
// full bucket at most, so it admits again within two periods; its wait
// and reset are positive, never wrapped negative (an earlier review found
// -2562047h when debt had no bound; a later one, lock-outs of minutes).
func TestDebtIsBounded(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	b := NewBucket(PerMinute(10), now)
	for range 200 {
		b.Charge(now, 200_000_000)
	}
	ok, wait := b.Admit(now, 1)
	_, reset := b.State(now)
	// One token needs the ten owed and one more, at six seconds each; full
	// is twenty away.
	if ok || wait != 66*time.Second || reset != 2*time.Minute {
		t.Errorf("admitted %v, wait %v, reset %v; want refused, 1m6s and 2m0s", ok, wait, reset)
	}
}

// TestBucketMatchesReference: a bucket and the naive model agree on every
// answer over random sequences of waits, admits, charges, refunds and
// state reads, at rates from one a period to the largest allowed.
func TestBucketMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		period := rapid.SampledFrom([]time.Duration{7 * time.Microsecond, time.Millisecond, time.Second, time.Minute, time.Hour}).Draw(t, "period")
		maxLimit := maxUnits / int64(period/time.Microsecond)
		limit := rapid.OneOf(rapid.Int64Range(1, 10), rapid.Int64Range(1, 100_000), rapid.Int64Range(maxLimit-10, maxLimit)).Draw(t, "limit")
		r := Rate{Limit: limit, Period: period}
		b, m := NewBucket(r, t0), newRef(r)
		var now int64 // microseconds since t0
		count := rapid.OneOf(rapid.Int64Range(0, 3), rapid.Int64Range(0, 2*limit), rapid.Int64Range(-5, 1<<62))
		for i := range rapid.IntRange(1, 60).Draw(t, "steps") {
			now += rapid.OneOf(rapid.Int64Range(0, 3), rapid.Int64Range(0, 2*int64(period/time.Microsecond))).Draw(t, "advance")
			tm := t0.Add(time.Duration(now) * time.Microsecond)
			n := count.Draw(t, "n")
			switch op := rapid.IntRange(0, 4).Draw(t, "op"); op {
			case 0:
				ok, wait := b.Admit(tm, n)
				wok, wwait := m.admit(now, n)
				if ok != wok || wait != wwait {
					t.Fatalf("step %d: Admit(%d) = %v, %v; reference %v, %v", i, n, ok, wait, wok, wwait)
				}
			case 1:
				b.Charge(tm, n)
				m.charge(now, n)
			case 2:
				b.Refund(tm, n)
				m.refund(now, n)
			case 3:
				got := b.Wait(tm, n)
				_, want := m.admitPeek(now, n)
				if got != want {
					t.Fatalf("step %d: Wait(%d) = %v; reference %v", i, n, got, want)
				}
			}
			left, reset := b.State(tm)
			wleft, wreset := m.state(now)
			if left != wleft || reset != wreset {
				t.Fatalf("step %d: State() = %d, %v; reference %d, %v", i, left, reset, wleft, wreset)
			}
		}
	})
}

// admitPeek is admit without taking.
func (m *refBucket) admitPeek(now, n int64) (bool, time.Duration) {
	m.refill(now)
	saved := new(big.Rat).Set(m.tokens)
	ok, wait := m.admit(now, n)
	m.tokens = saved
	return ok, wait
}

func BenchmarkBucketAdmit(b *testing.B) {
	bk := NewBucket(PerMinute(MaxPerMinute), time.Now())
	b.ReportAllocs()
	for b.Loop() {
		bk.Admit(time.Now(), 1)
	}
}
