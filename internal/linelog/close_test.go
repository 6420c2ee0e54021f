package linelog

import (
	"bytes"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/inferrail/inferrail/internal/syncbuf"
)

func encodeX(_ int, b []byte) []byte { return append(b, "x\n"...) }

// TestLogRacingClose: a line logged while Close runs is either written or
// counted as dropped, never lost. A Log that had checked closed before
// Close and sent after Close's last drain was reported queued, and was in
// none of written, dropped or failed (found by a review: 3 of 300 rounds
// of many loggers under -race).
func TestLogRacingClose(t *testing.T) {
	t.Run("close_between_check_and_send", func(t *testing.T) {
		var out syncbuf.Buffer
		w := Open(Options{Sink: &out}, encodeX)
		checked := make(chan struct{})
		w.testHookQueued = func() {
			close(checked)
			// Send only once Close has finished, or waits for this Log.
			for {
				select {
				case <-w.done:
					return
				default:
				}
				if !w.mu.TryRLock() {
					return // a writer waits for the lock
				}
				w.mu.RUnlock()
				runtime.Gosched()
			}
		}
		closed := make(chan error)
		go func() {
			<-checked
			closed <- w.Close()
		}()
		queued := w.Log(1)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		lines := strings.Count(out.String(), "\n")
		st := w.Stats()
		if queued && (lines != 1 || st.Written != 1) || !queued && st.Dropped != 1 {
			t.Errorf("Log reported queued %v; %d lines out, stats %+v", queued, lines, st)
		}
	})
	t.Run("many_loggers", func(t *testing.T) {
		for round := range 100 {
			out := &countingSink{}
			w := Open(Options{Sink: out, QueueSize: 1 << 16}, encodeX)
			var queued atomic.Uint64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 8 {
				wg.Go(func() {
					<-start
					for range 200 {
						if w.Log(1) {
							queued.Add(1)
						}
					}
				})
			}
			close(start)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			st := w.Stats()
			if got := out.count(); got != queued.Load() || st.Written != got || st.Written+st.Dropped != 8*200 {
				t.Fatalf("round %d: %d reported queued, %d lines out, stats %+v (of %d logged)", round, queued.Load(), got, st, 8*200)
			}
		}
	})
}

// countingSink counts the lines written to it.
type countingSink struct {
	mu    sync.Mutex
	lines uint64
}

func (s *countingSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.lines += uint64(bytes.Count(p, []byte("\n")))
	s.mu.Unlock()
	return len(p), nil
}

func (s *countingSink) count() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lines
}
