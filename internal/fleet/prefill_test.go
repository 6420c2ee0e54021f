package fleet

import (
	"math"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestPrefillQueue drives leases through Queue, FirstByte and Release at
// random moments and checks the queue against a naive model: the estimate
// drains one second per second, adds exactly what each request brings,
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
				l.Queue(now, secs, int(tokens))
				l.Queue(now, secs, int(tokens)) // only the first counts
				leases = append(leases, &held{l: l, tokens: tokens, waiting: true})
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
			got, gotWaiting, gotTokens := r.prefill.read(InstantOf(now))
			if math.Abs(got-want) > 1e-9 || got < 0 {
				t.Fatalf("queued prefill %v, want %v", got, want)
			}
			if pub := r.QueuedPrefill(now); pub != got {
				t.Fatalf("QueuedPrefill %v, read %v", pub, got)
			}
			if gotWaiting != waiting || gotTokens != waitingTokens {
				t.Fatalf("waiting %d requests with %d tokens, want %d with %d", gotWaiting, gotTokens, waiting, waitingTokens)
			}
			if inFlight, _ := r.PromptLoad(); inFlight != inFlightTokens {
				t.Fatalf("prompt tokens in flight %d, want %d", inFlight, inFlightTokens)
			}
		}
	})
}

// TestPrefillQueueReadsAreConsistent reads the queue while writers change
// it: every request brings 7 tokens and 1 s of prefill at a frozen clock,
// so a reading that mixed two writers' fields could show tokens other than
// 7 per waiting request, or seconds queued with no request waiting.
func TestPrefillQueueReadsAreConsistent(t *testing.T) {
	r := NewReplica("r", nil, []string{"m"}, 0, 0)
	now := time.Unix(1_000_000, 0)
	at := InstantOf(now)
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
				l.Queue(now, 1, 7)
				l.FirstByte(now)
				l.Release()
			}
		})
	}
	for range 200_000 {
		secs, waiting, tokens := r.prefill.read(at)
		if tokens != 7*waiting || (secs == 0) != (waiting == 0) {
			close(stop)
			wg.Wait()
			t.Fatalf("read %v s, %d waiting, %d tokens: fields of different writes", secs, waiting, tokens)
		}
	}
	close(stop)
	wg.Wait()
}
