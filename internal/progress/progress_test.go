package progress

import (
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/inferrail/inferrail/internal/syncbuf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLine(t *testing.T) {
	tests := []struct {
		name    string
		label   string
		s       Snapshot
		elapsed time.Duration
		want    string
	}{
		{"start", "w1 round_robin", Snapshot{Total: 400}, 0, "w1 round_robin: 0/400 sent, 0 done, 0 errors, 0:00"},
		{"eta", "run", Snapshot{Total: 400, Sent: 120, Done: 100, Errors: 2}, 25 * time.Second, "run: 120/400 sent, 100 done, 2 errors, 0:25, ETA 1:15"},
		{"done", "run", Snapshot{Total: 10, Sent: 10, Done: 10}, 61500 * time.Millisecond, "run: 10/10 sent, 10 done, 0 errors, 1:02"},
		{"hours", "", Snapshot{Total: 3, Sent: 2, Done: 1}, 2 * time.Hour, "2/3 sent, 1 done, 0 errors, 2:00:00, ETA 4:00:00"},
		{"negative", "x", Snapshot{Total: 1}, -time.Second, "x: 0/1 sent, 0 done, 0 errors, 0:00"},
		{"scheduled", "run", Snapshot{Total: 400, Sent: 120, Done: 100, Schedule: 100 * time.Second}, 25 * time.Second, "run: 120/400 sent, 100 done, 0 errors, 0:25, ETA 1:15"},
		{"scheduled_none_done", "run", Snapshot{Total: 400, Sent: 20, Schedule: 100 * time.Second}, 5 * time.Second, "run: 20/400 sent, 0 done, 0 errors, 0:05, ETA 1:35"},
		{"schedule_over", "run", Snapshot{Total: 10, Sent: 10, Done: 5, Schedule: time.Second}, 10 * time.Second, "run: 10/10 sent, 5 done, 0 errors, 0:10, ETA 0:10"},
		{"late", "run", Snapshot{Total: 10, Sent: 9, Done: 5, Schedule: time.Second}, 10 * time.Second, "run: 9/10 sent, 5 done, 0 errors, 0:10, ETA 0:00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Line(tt.label, tt.s, tt.elapsed); got != tt.want {
				t.Errorf("Line(%q, %+v, %v) = %q, want %q", tt.label, tt.s, tt.elapsed, got, tt.want)
			}
		})
	}
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestThrottle: on a terminal, updates closer than Every to the last
// redraw draw nothing; the others redraw the line in place, every run
// under way on it; a run's end writes its last line and a newline.
func TestThrottle(t *testing.T) {
	clk := &fakeClock{t: time.Unix(0, 0)}
	var out syncbuf.Buffer
	// Every is an hour, so the display's own ticker never fires while the
	// test moves the clock by hand.
	d := &Display{W: &out, TTY: true, Every: time.Hour, Now: clk.now}
	a := d.Start("a", 10, 0)
	b := d.Start("b", 2, 0)
	redraws := func() int { return strings.Count(out.String(), "\r") }
	steps := []struct {
		advance time.Duration
		want    int // redraws so far
	}{{0, 1}, {time.Minute, 1}, {59 * time.Minute, 2}, {time.Second, 2}, {2 * time.Hour, 3}}
	for i, s := range steps {
		clk.add(s.advance)
		a.Sent.Add(1)
		d.Update()
		if got := redraws(); got != s.want {
			t.Fatalf("step %d: %d redraws, want %d:\n%q", i, got, s.want, out.String())
		}
	}
	if !strings.HasSuffix(out.String(), "\r\x1b[Ka: 5/10 sent, 0 done, 0 errors, 3:00:01 | b: 0/2 sent, 0 done, 0 errors, 3:00:01") {
		t.Errorf("last redraw %q", out.String())
	}
	a.Done.Add(4)
	a.Finish()
	a.Finish()
	d.Update() // b alone, drawn at once after a's last line
	want := "\r\x1b[Ka: 5/10 sent, 4 done, 0 errors, 3:00:01\n\r\x1b[Kb: 0/2 sent, 0 done, 0 errors, 3:00:01"
	if !strings.HasSuffix(out.String(), want) {
		t.Errorf("after a finished: %q, want the end %q", out.String(), want)
	}
	b.Finish()
	if n := strings.Count(out.String(), "\n"); n != 2 {
		t.Errorf("%d lines ended, want 2", n)
	}
}

// TestNotATerminal: off a terminal each run writes one line, when it
// ends, and updates write nothing.
func TestNotATerminal(t *testing.T) {
	clk := &fakeClock{t: time.Unix(0, 0)}
	var out syncbuf.Buffer
	d := &Display{W: &out, Now: clk.now}
	for i, label := range []string{"w1 cost_model", "w1 round_robin"} {
		task := d.Start(label, 10, 0)
		for range 10 {
			task.Sent.Add(1)
			task.Done.Add(1)
			clk.add(time.Second)
			d.Update()
		}
		task.Errors.Add(int64(i))
		if out.String() != "" && i == 0 {
			t.Fatalf("wrote before the run ended: %q", out.String())
		}
		task.Finish()
	}
	want := "w1 cost_model: 10/10 sent, 10 done, 0 errors, 0:10\nw1 round_robin: 10/10 sent, 10 done, 1 errors, 0:10\n"
	if out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}
}

// TestNilDisplay: a nil Display's tasks count and show nothing.
func TestNilDisplay(t *testing.T) {
	var d *Display
	task := d.Start("x", 3, 0)
	task.Sent.Add(1)
	task.Finish()
	if task.Sent.Load() != 1 {
		t.Error("a nil display's task does not count")
	}
}

// TestTicks: on a terminal the display redraws by itself while a run is
// under way, and its goroutine ends with the last run.
func TestTicks(t *testing.T) {
	var out syncbuf.Buffer
	d := &Display{W: &out, TTY: true, Every: time.Millisecond}
	task := d.Start("x", 1, 0)
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(out.String(), "\r") < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("no redraws by itself: %q", out.String())
		}
		time.Sleep(time.Millisecond)
	}
	task.Finish() // goleak checks its goroutine ended
}
