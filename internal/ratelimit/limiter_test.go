package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var (
	keyReq    = ID{ScopeKey, "team-a", Requests}
	keyPrompt = ID{ScopeKey, "team-a", PromptTokens}
	modelOut  = ID{ScopeModel, "llama", OutputTokens}
)

func TestIDNames(t *testing.T) {
	tests := []struct {
		id          ID
		str, metric string
	}{
		{keyReq, "key/team-a/requests", "key_requests"},
		{keyPrompt, "key/team-a/prompt_tokens", "key_prompt_tokens"},
		{modelOut, "model/llama/output_tokens", "model_output_tokens"},
	}
	for _, tc := range tests {
		if got := tc.id.String(); got != tc.str {
			t.Errorf("String() = %q, want %q", got, tc.str)
		}
		if got := tc.id.Limit(); got != tc.metric {
			t.Errorf("Limit() = %q, want %q", got, tc.metric)
		}
	}
}

func costs(req, prompt int64) []Cost {
	return []Cost{
		{ID: keyReq, Rate: PerMinute(10), N: req},
		{ID: keyPrompt, Rate: PerMinute(1000), N: prompt},
	}
}

func TestLocalAdmit(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		before    [][2]int64 // admitted first: requests, prompt tokens
		req, tok  int64
		ok, never bool
		denied    int
		wait      time.Duration
		remaining []int64 // of every cost after the call
	}{
		{name: "fits", req: 1, tok: 100, ok: true, denied: -1, remaining: []int64{9, 900}},
		{name: "prompt_refused_request_refunded", before: [][2]int64{{1, 950}}, req: 1, tok: 100,
			denied: 1, wait: 3 * time.Second, remaining: []int64{9, 50}},
		{name: "longest_wait_named", before: [][2]int64{{10, 990}}, req: 1, tok: 20,
			denied: 0, wait: 6 * time.Second, remaining: []int64{0, 10}},
		{name: "never", req: 1, tok: 1001, never: true, denied: 1, remaining: []int64{10, 1000}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLocal()
			for _, b := range tc.before {
				if v, _ := l.Admit(ctx, t0, costs(b[0], b[1])); !v.OK {
					t.Fatalf("setup admit %v refused: %+v", b, v)
				}
			}
			c := costs(tc.req, tc.tok)
			v, err := l.Admit(ctx, t0, c)
			if err != nil {
				t.Fatal(err)
			}
			if v.OK != tc.ok || v.Never != tc.never || v.Denied != tc.denied || (!tc.never && v.Wait != tc.wait) {
				t.Errorf("Admit = %+v, want ok %v never %v denied %d wait %v", v, tc.ok, tc.never, tc.denied, tc.wait)
			}
			for i, want := range tc.remaining {
				if c[i].Remaining != want {
					t.Errorf("costs[%d].Remaining = %d, want %d", i, c[i].Remaining, want)
				}
			}
		})
	}
}

// TestLocalRateChangeKeepsUsage: a limit changed by a reload keeps what
// was used, so lowering it does not hand out a fresh minute.
func TestLocalRateChangeKeepsUsage(t *testing.T) {
	ctx := context.Background()
	l := NewLocal()
	c := []Cost{{ID: keyPrompt, Rate: PerMinute(1000), N: 700}}
	if v, _ := l.Admit(ctx, t0, c); !v.OK {
		t.Fatal("first admit refused")
	}
	c = []Cost{{ID: keyPrompt, Rate: PerMinute(800), N: 200}}
	v, _ := l.Admit(ctx, t0, c)
	if v.OK {
		t.Fatalf("after the limit fell to 800 with 700 used, 200 more were admitted (remaining %d)", c[0].Remaining)
	}
	if c[0].Remaining != 100 {
		t.Errorf("remaining %d after the change, want 100", c[0].Remaining)
	}
	c = []Cost{{ID: keyPrompt, Rate: PerMinute(2000), N: 1300}}
	if v, _ := l.Admit(ctx, t0, c); !v.OK || c[0].Remaining != 0 {
		t.Errorf("after the limit rose to 2000 with 700 used, 1300 not admitted to exactly 0: %+v, remaining %d", v, c[0].Remaining)
	}
}

// TestLocalLoweredLimitOwesOneBucket: a limit lowered far below what its
// bucket used keeps the usage only down to one full bucket of debt at the
// new rate, as a charge does, so it admits again within two minutes.
func TestLocalLoweredLimitOwesOneBucket(t *testing.T) {
	ctx := context.Background()
	l := NewLocal()
	if v, _ := l.Admit(ctx, t0, []Cost{{ID: keyPrompt, Rate: PerMinute(1_000_000), N: 1_000_000}}); !v.OK {
		t.Fatal("first admit refused")
	}
	v, _ := l.Admit(ctx, t0, []Cost{{ID: keyPrompt, Rate: PerMinute(60), N: 1}})
	if v.OK || v.Wait != 61*time.Second {
		t.Errorf("a million used, the limit lowered to 60 a minute: Admit = %+v, want refused for 1m1s (60 owed and the token asked for)", v)
	}
}

func TestLocalChargeRefund(t *testing.T) {
	ctx := context.Background()
	l := NewLocal()
	c := []Cost{{ID: modelOut, Rate: PerMinute(100), N: 250}}
	_ = l.Charge(ctx, t0, c)
	v, _ := l.Admit(ctx, t0, []Cost{{ID: modelOut, Rate: PerMinute(100)}})
	if v.OK || v.Wait != 60600*time.Millisecond {
		t.Errorf("charged 250 at 100/min: Admit = %+v, want refused for 60.6s (in debt of 100, a full bucket, the rest forgiven: 101 tokens at 0.6 s each)", v)
	}
	_ = l.Refund(ctx, t0, c)
	if c[0].Remaining != 100 {
		t.Errorf("after the refund remaining %d, want 100", c[0].Remaining)
	}
}

// TestLocalSettleKeepsTheRate: a request admitted before a reload lowered
// a limit settles with the old rate; its charge or refund must not put
// that rate back, which would hand the bucket a fresh budget over its
// debt at the lowered one.
func TestLocalSettleKeepsTheRate(t *testing.T) {
	ctx := context.Background()
	for _, settle := range []struct {
		name string
		op   func(*Local, context.Context, time.Time, []Cost) error
	}{{"charge", (*Local).Charge}, {"refund", (*Local).Refund}} {
		t.Run(settle.name, func(t *testing.T) {
			l := NewLocal()
			old := []Cost{{ID: modelOut, Rate: PerMinute(1_000_000)}}
			if v, _ := l.Admit(ctx, t0, old); !v.OK {
				t.Fatal("admit at the old rate refused")
			}
			if v, _ := l.Admit(ctx, t0, []Cost{{ID: modelOut, Rate: PerMinute(60)}}); !v.OK {
				t.Fatal("admit at the lowered rate refused")
			}
			_ = l.Charge(ctx, t0, []Cost{{ID: modelOut, Rate: PerMinute(60), N: 120}}) // 60 in debt
			old[0].N = 1
			_ = settle.op(l, ctx, t0, old)
			// A second refills a token at 60 a minute, the whole debt at
			// the old rate.
			v, _ := l.Admit(ctx, at(time.Second), []Cost{{ID: modelOut, Rate: PerMinute(60)}})
			if v.OK {
				t.Errorf("admitted at 60 a minute a second after 60 tokens of debt and a %s at the old rate", settle.name)
			}
		})
	}
}

// TestLocalOnlyAdmitSetsTheRate: whatever the order of admissions,
// charges and refunds at two rates, a bucket's rate is the last
// admission's (the first call's when none admitted yet).
func TestLocalOnlyAdmitSetsTheRate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rates := []Rate{PerMinute(60), PerMinute(1_000_000), {Limit: 10, Period: time.Second}}
		l := NewLocal()
		var want Rate
		now := t0
		for i := range rapid.IntRange(1, 30).Draw(t, "steps") {
			r := rapid.SampledFrom(rates).Draw(t, "rate")
			c := []Cost{{ID: modelOut, Rate: r, N: rapid.Int64Range(0, 200).Draw(t, "n")}}
			now = now.Add(time.Duration(rapid.Int64Range(0, int64(time.Second)).Draw(t, "advance")))
			switch rapid.IntRange(0, 2).Draw(t, "op") {
			case 0:
				_, _ = l.Admit(context.Background(), now, c)
				want = r
			case 1:
				_ = l.Charge(context.Background(), now, c)
			case 2:
				_ = l.Refund(context.Background(), now, c)
			}
			if i == 0 {
				want = r
			}
			if got := l.buckets[modelOut].Rate(); got != want {
				t.Fatalf("step %d: rate %v, want %v", i, got, want)
			}
		}
	})
}

// TestLocalSweepBounded: buckets of 10,000 names used once and left to
// refill are swept, so the map stays near the working set.
func TestLocalSweepBounded(t *testing.T) {
	ctx := context.Background()
	l := NewLocal()
	now := t0
	for i := range 10_000 {
		now = now.Add(10 * time.Millisecond) // each bucket refills within a second
		c := []Cost{{ID: ID{ScopeKey, fmt.Sprint("k", i), Requests}, Rate: Rate{Limit: 10, Period: time.Second}, N: 1}}
		if v, _ := l.Admit(ctx, now, c); !v.OK {
			t.Fatalf("key %d refused", i)
		}
	}
	if n := l.Len(); n > 2*minSweep+200 {
		t.Errorf("%d buckets held after 10,000 one-off keys; want at most %d", n, 2*minSweep+200)
	}
}

// TestLocalConcurrentNeverOveradmits: many goroutines against one bucket
// admit exactly its capacity when time stands still.
func TestLocalConcurrentNeverOveradmits(t *testing.T) {
	ctx := context.Background()
	l := NewLocal()
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				v, _ := l.Admit(ctx, t0, costs(1, 10))
				if v.OK {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if admitted != 10 {
		t.Errorf("admitted %d of 4,000 at 10 requests a minute with the clock stopped, want 10", admitted)
	}
}

func BenchmarkLocalAdmit(b *testing.B) {
	ctx := context.Background()
	l := NewLocal()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c := []Cost{
			{ID: keyReq, Rate: PerMinute(MaxPerMinute), N: 1},
			{ID: keyPrompt, Rate: PerMinute(MaxPerMinute), N: 100},
			{ID: modelOut, Rate: PerMinute(MaxPerMinute)},
		}
		for pb.Next() {
			_, _ = l.Admit(ctx, time.Now(), c)
		}
	})
}
