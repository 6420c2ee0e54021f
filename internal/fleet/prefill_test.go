package fleet

import (
	"math"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/inferrail/inferrail/internal/clock"
)

// TestPrefillQueue drives leases through Queue, FirstByte and Release at
// random moments and checks the queue against a naive model: the estimate
// drains one second per second, adds exactly what each request brings at
// its pace (an engine at pace 3 is busy three seconds per estimated one),
// never goes below zero, and is empty whenever no request waits for its
// first byte; prompt tokens add up over the leases that hold them.
func TestPrefillQueue(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := NewReplica("r", nil, []string{"m"}, 0, 0)
		now := time.Unix(1_000_000, 0)
		type held struct {
			l        *Lease
			tokens   int64
			waiting  bool
			released bool
		}
		var leases []*held
		want := 0.0 // the model's queue
		for range rapid.IntRange(1, 80).Draw(t, "steps") {
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0: // time passes
				d := time.Duration(rapid.Int64Range(0, int64(300*time.Millisecond)).Draw(t, "elapse"))
				now = now.Add(d)
				want = math.Max(0, want-d.Seconds())
			case 1: // a request is routed here
				l, _ := r.TryAcquire()
				secs := rapid.Float64Range(0, 2).Draw(t, "secs")
				tokens := rapid.Int64Range(0, 10_000).Draw(t, "tokens")
				// 0 and the rest that are not a pace price as 1.
				pace := rapid.SampledFrom([]float64{0, 1, 0.25, 3, -1, math.NaN(), math.Inf(1)}).Draw(t, "pace")
				l.Queue(now, secs, pace, int(tokens))
				l.Queue(now, secs, 2, int(tokens)) // only the first counts
				leases = append(leases, &held{l: l, tokens: tokens, waiting: true})
				if pace > 0 && pace < math.Inf(1) {
					secs *= pace
				}
				want += secs
			case 2, 3: // a first byte, or a release (which implies one)
				if len(leases) == 0 {
					continue
				}
				h := leases[rapid.IntRange(0, len(leases)-1).Draw(t, "lease")]
				if h.released {
					continue
				}
				if rapid.Bool().Draw(t, "release") {
					h.l.FirstByte(now)
					h.l.Release()
					h.released = true
				} else {
					h.l.FirstByte(now)
				}
				h.waiting = false
			}
			var waiting, waitingTokens, inFlightTokens int64
			for _, h := range leases {
				if h.waiting {
					waiting++
					waitingTokens += h.tokens
				}
				if !h.released {
					inFlightTokens += h.tokens
				}
			}
			if waiting == 0 {
				want = 0
			}
			// The queue counts whole nanoseconds: each request's are
			// rounded.
			got := r.QueuedPrefill(now)
			if math.Abs(got-want) > 1e-7 || got < 0 {
				t.Fatalf("queued prefill %v, want %v", got, want)
			}
			if at := r.QueuedPrefillAt(clock.Of(now)); at != got {
				t.Fatalf("QueuedPrefillAt %v, QueuedPrefill %v", at, got)
			}
			if gotWaiting, gotTokens := r.prefill.waiting.Load(), r.prefill.tokens.Load(); gotWaiting != waiting || gotTokens != waitingTokens {
				t.Fatalf("waiting %d requests with %d tokens, want %d with %d", gotWaiting, gotTokens, waiting, waitingTokens)
			}
			if inFlight, waitingTokens2 := r.PromptLoad(); inFlight != inFlightTokens || waitingTokens2 != waitingTokens {
				t.Fatalf("prompt tokens in flight %d, waiting %d; want %d, %d", inFlight, waitingTokens2, inFlightTokens, waitingTokens)
			}
		}
	})
}

// TestPrefillQueueUnderConcurrentWriters reads the queue without a lock
// while two writers change it: at a frozen clock every request brings
// exactly 1 s of prefill and 7 tokens, so every reading is a whole number
// of seconds and of 7-token prompts, and once all are released the queue
// is empty.
func TestPrefillQueueUnderConcurrentWriters(t *testing.T) {
	r := NewReplica("r", nil, []string{"m"}, 0, 0)
	now := time.Unix(1_000_000, 0)
	at := clock.Of(now)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, _ := r.TryAcquire()
				l.Queue(now, 1, 0, 7)
				l.FirstByte(now)
				l.Release()
			}
		})
	}
	for range 200_000 {
		secs := r.QueuedPrefillAt(at)
		_, tokens := r.PromptLoad()
		if secs < 0 || math.Abs(secs-math.Round(secs)) > 1e-6 || tokens < 0 || tokens%7 != 0 {
			close(stop)
			wg.Wait()
			t.Fatalf("read %v s queued and %d tokens waiting", secs, tokens)
		}
	}
	close(stop)
	wg.Wait()
	if secs, tokens := r.QueuedPrefillAt(at), r.prefill.tokens.Load(); secs != 0 || tokens != 0 || r.prefill.waiting.Load() != 0 {
		t.Fatalf("all released, yet %v s and %d tokens queued", secs, tokens)
	}
}

// TestPrefillQueueExtremes: absurd estimates and clocks far from now
// neither wrap the queue around nor make it negative.
func TestPrefillQueueExtremes(t *testing.T) {
	far := []time.Time{{}, time.Unix(0, 0), time.Now(), time.Now().AddDate(200, 0, 0), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}
	for _, secs := range []float64{0, -1, math.NaN(), math.Inf(-1), 1e-12, 1, 1e9, 1e300, math.Inf(1)} {
		for _, when := range far {
			r := NewReplica("r", nil, []string{"m"}, 0, 0)
			for _, read := range far {
				if q := r.QueuedPrefill(read); q != 0 {
					t.Fatalf("a new queue read at %v holds %v s", read, q)
				}
			}
			for range 3 {
				l, _ := r.TryAcquire()
				l.Queue(when, secs, 0, 1)
			}
			for _, read := range far {
				q := r.QueuedPrefill(read)
				if q < 0 || math.IsNaN(q) || q > (queueLimit+clock.Limit)*1e-9*(1+1e-12) {
					t.Fatalf("%v s queued three times at %v, read at %v: %v s", secs, when, read, q)
				}
				if !read.Equal(when) || !(secs > 0) {
					continue
				}
				// Exact to the rounded nanosecond, up to a cap of 73 years each.
				want := min(3*secs, clock.Limit*1e-9)
				if q < want*(1-1e-9)-2e-9 || (3*secs < 1e6 && math.Abs(q-3*secs) > 1e-8) {
					t.Fatalf("%v s queued three times at %v reads as %v s", secs, when, q)
				}
			}
		}
	}
}

// TestUnansweredAndMeanPrefill: Unanswered counts the queued requests
// still waiting for a first byte and every request ever queued; the mean
// prefill starts at the first request's and then moves a sixteenth of the
// way to each new one, against a plain recomputation.
func TestUnansweredAndMeanPrefill(t *testing.T) {
	r := &Replica{}
	r.SetCaps(100, 100)
	if w, n := r.Unanswered(); w != 0 || n != 0 || r.MeanPrefill() != 0 {
		t.Fatalf("a new replica: unanswered %d of %d, mean %v", w, n, r.MeanPrefill())
	}
	now := time.Now()
	var leases []*Lease
	want := 0.0
	for i, secs := range []float64{0.4, 0.1, 0, -3, 2, 0.05} {
		l, ok := r.TryAcquire()
		if !ok {
			t.Fatal("no lease")
		}
		l.Queue(now, secs, 0, 10)
		leases = append(leases, l)
		if i == 0 {
			want = secs
		} else {
			want += (max(secs, 0) - want) / 16
		}
		if got := r.MeanPrefill(); math.Abs(got-want) > 1e-12 {
			t.Fatalf("after %d requests: mean %v, want %v", i+1, got, want)
		}
	}
	if w, n := r.Unanswered(); w != 6 || n != 6 {
		t.Fatalf("six queued: unanswered %d of %d", w, n)
	}
	leases[0].FirstByte(now)
	leases[1].Release() // ended without a first byte
	if w, n := r.Unanswered(); w != 4 || n != 6 {
		t.Fatalf("two answered: unanswered %d of %d, want 4 of 6", w, n)
	}
}

// TestWaitingMeanPrefill drives leases through Queue, FirstByte and
// Release in a random order and checks WaitingMeanPrefill against a naive
// model: the mean estimated prefill (to the nanosecond, an hour at most,
// none for a negative or NaN estimate) of the leases queued and not yet
// answered, and MeanPrefill while there are none. Infinite and NaN
// estimates leave both means finite.
func TestWaitingMeanPrefill(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := &Replica{}
		r.SetCaps(1000, 1000)
		now := time.Unix(1_000_000, 0)
		type held struct {
			l        *Lease
			secs     float64
			waiting  bool
			released bool
		}
		var leases []*held
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			switch op := rapid.IntRange(0, 2).Draw(t, "op"); {
			case op == 0 || len(leases) == 0:
				l, ok := r.TryAcquire()
				if !ok {
					t.Fatal("no lease")
				}
				secs := rapid.SampledFrom([]float64{math.Inf(1), math.NaN(), -1, 0, 1e-10, 0.25, 7200}).Draw(t, "secs")
				if rapid.Bool().Draw(t, "plain") {
					secs = rapid.Float64Range(-1, 5).Draw(t, "secs")
				}
				l.Queue(now, secs, 0, 10)
				leases = append(leases, &held{l: l, secs: secs, waiting: true})
			default:
				h := leases[rapid.IntRange(0, len(leases)-1).Draw(t, "which")]
				if op == 1 {
					h.l.FirstByte(now)
				} else {
					h.l.Release()
					h.released = true
				}
				h.waiting = false
			}
			sum, n := 0.0, 0
			for _, h := range leases {
				if h.waiting {
					// Nothing, NaN or below zero counts as none; an hour at most.
					if h.secs > 0 {
						sum += math.Round(min(h.secs, 3600)*1e9) / 1e9
					}
					n++
				}
			}
			want := r.MeanPrefill()
			if n > 0 {
				want = sum / float64(n)
			}
			if m := r.MeanPrefill(); math.IsNaN(m) || m < 0 || m > 3600 {
				t.Fatalf("MeanPrefill %v: an estimate made it more than an hour, negative or NaN", m)
			}
			if got := r.WaitingMeanPrefill(); math.Abs(got-want) > 1e-9 {
				t.Fatalf("%d waiting: WaitingMeanPrefill %v, want %v", n, got, want)
			}
		}
		for _, h := range leases {
			if !h.released {
				h.l.Release()
			}
		}
		if w, _ := r.Unanswered(); w != 0 || r.WaitingMeanPrefill() != r.MeanPrefill() {
			t.Fatalf("all released: %d waiting, WaitingMeanPrefill %v against MeanPrefill %v", w, r.WaitingMeanPrefill(), r.MeanPrefill())
		}
	})
}
