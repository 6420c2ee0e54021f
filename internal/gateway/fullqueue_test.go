package gateway

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestFullQueueLetsQuietKeyStart: a flood that fills the queue (two
// waiting, flow.max_queued 2) beside a quiet key holding one of its two
// slots does not turn the quiet key away: its next request, under its
// share, starts at once as it would with room in the queue, where it was
// shed with 429 queue_full before it could reach fair sharing (the kept
// slots then sat idle while the quiet key's requests were shed). The
// flood's own next request is still shed, and so is the quiet key's with
// fair sharing off; /admin/explain for each key says so (it said shed for
// the quiet key too).
func TestFullQueueLetsQuietKeyStart(t *testing.T) {
	tests := []struct {
		name    string
		window  time.Duration
		floods  int    // flood requests sent: those that start, then two that wait
		sender  string // the key of the request sent once the queue is full
		want    int
		started bool // the engine receives it while the others are held
	}{
		{"quiet_key_under_its_share_starts", 5 * time.Second, 4, "quiet", http.StatusOK, true},
		{"flood_past_its_share_is_shed", 5 * time.Second, 4, "flood", http.StatusTooManyRequests, false},
		{"fair_sharing_off_sheds_the_quiet_key", 0, 5, "quiet", http.StatusTooManyRequests, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, gw, flood, quiet := floodAndQuiet(t, 2, tt.window)
			secrets := map[string]string{"flood": flood, "quiet": quiet}

			chs := []<-chan sent{async(gw, "q0", bearer(quiet)...)}
			waitFor(t, "the engine to hold q0", 10*time.Second, func() bool { return countPrefix(e.received(), "q") == 1 })
			for i := range tt.floods {
				chs = append(chs, async(gw, fmt.Sprintf("f%d", i), bearer(flood)...))
			}
			waitFor(t, "the flood to fill the queue", 10*time.Second, func() bool {
				return countPrefix(e.received(), "f") == tt.floods-2 && waiting(gw) == 2
			})
			// Explain answers for the sender's key what its request meets.
			v := explainAs(t, gw, tt.sender, `{"model":"sim","prompt":"hello","max_tokens":1}`)
			if want := (admissionVerdict{Verdict: verdictShed, Reason: shedQueueFull}); tt.started {
				if v.Verdict != verdictAdmit {
					t.Errorf("explain for %s: %s (%s), want admit", tt.sender, v.Verdict, v.Reason)
				}
			} else if v.Verdict != want.Verdict || v.Reason != want.Reason {
				t.Errorf("explain for %s: %s (%s), want shed (queue_full)", tt.sender, v.Verdict, v.Reason)
			}
			probe := async(gw, "p", bearer(secrets[tt.sender])...)
			if tt.started {
				waitFor(t, "the engine to receive p", 10*time.Second, func() bool { return countPrefix(e.received(), "p") == 1 })
				chs = append(chs, probe)
			} else {
				expectStatus(t, tt.want, probe)
			}
			e.open()
			expectStatus(t, http.StatusOK, chs...)
		})
	}
}
