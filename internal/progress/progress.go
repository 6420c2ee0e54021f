// Package progress shows how far long runs have got: requests sent, done
// and failed, the time elapsed and an estimate of the time left. On a
// terminal one line is redrawn in place, at most every Display.Every, for
// all the runs under way; elsewhere (a file, a pipe, CI) nothing is
// written until a run ends, and then one line.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"
)

// Counts are a run's requests so far. Safe for concurrent use.
type Counts struct {
	Sent, Done, Errors atomic.Int64
}

// Snapshot is Counts read at one moment, with the run's total and, for a
// run that sends on a schedule, how long after its start the last request
// is due (0: no schedule).
type Snapshot struct {
	Total, Sent, Done, Errors int64
	Schedule                  time.Duration
}

func (c *Counts) snapshot(total int64, schedule time.Duration) Snapshot {
	return Snapshot{Total: total, Sent: c.Sent.Load(), Done: c.Done.Load(), Errors: c.Errors.Load(), Schedule: schedule}
}

// Line formats a run's progress: its label, the requests sent, done and
// failed of the total, the time elapsed and the time left: while a
// schedule has requests to send, until its last is due; otherwise, once a
// request is done and some remain, at the pace so far.
func Line(label string, s Snapshot, elapsed time.Duration) string {
	return line(label, s, elapsed, true)
}

// line is Line, with an ETA or not (a run's last line has none).
func line(label string, s Snapshot, elapsed time.Duration, eta bool) string {
	var b strings.Builder
	if label != "" {
		b.WriteString(label)
		b.WriteString(": ")
	}
	fmt.Fprintf(&b, "%d/%d sent, %d done, %d errors, %s", s.Sent, s.Total, s.Done, s.Errors, clock(elapsed))
	switch {
	case !eta || s.Done >= s.Total:
	case s.Schedule > 0 && s.Sent < s.Total:
		b.WriteString(", ETA ")
		b.WriteString(clock(s.Schedule - elapsed))
	case s.Done > 0:
		b.WriteString(", ETA ")
		b.WriteString(clock(time.Duration(float64(elapsed) * float64(s.Total-s.Done) / float64(s.Done))))
	}
	return b.String()
}

// clock writes a duration as m:ss, or h:mm:ss from an hour.
func clock(d time.Duration) string {
	s := int64(max(d, 0).Round(time.Second) / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

// Display is where progress goes. Build it with For, or set its fields
// before the first Start. Safe for concurrent use.
type Display struct {
	// W receives the progress.
	W io.Writer
	// TTY redraws one line in place; false writes a line per run as it
	// ends.
	TTY bool
	// Every is the least time between two redraws. Zero means 250 ms.
	Every time.Duration
	// Now is the clock. Nil means time.Now.
	Now func() time.Time

	mu    sync.Mutex
	tasks []*Task   // under way, in the order started
	last  time.Time // the last redraw
	drawn bool      // a progress line is on the terminal, not ended
	stop  chan struct{}
	done  chan struct{}
}

// For is a display on f, redrawn in place when f is a terminal.
func For(f *os.File) *Display {
	return &Display{W: f, TTY: term.IsTerminal(int(f.Fd()))}
}

// Task is one run shown by a Display: its counts go up as the run goes,
// and Finish ends it.
type Task struct {
	Counts
	d        *Display
	label    string
	total    int64
	schedule time.Duration
	start    time.Time
	ended    atomic.Bool
}

func (d *Display) now() time.Time {
	if d.Now == nil {
		return time.Now()
	}
	return d.Now()
}

func (d *Display) every() time.Duration {
	if d.Every <= 0 {
		return 250 * time.Millisecond
	}
	return d.Every
}

// Start begins showing a run of total requests under label; schedule,
// when above 0, is how long after the start its last request is due (the
// ETA while requests remain to be sent). A nil Display shows nothing, and
// returns a Task that counts and shows nothing.
func (d *Display) Start(label string, total int, schedule time.Duration) *Task {
	t := &Task{d: d, label: label, total: int64(total), schedule: schedule}
	if d == nil {
		return t
	}
	t.start = d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tasks = append(d.tasks, t)
	if d.TTY && d.stop == nil {
		d.stop, d.done = make(chan struct{}), make(chan struct{})
		go d.redraw(d.stop, d.done)
	}
	return t
}

// redraw is the display's goroutine while runs are under way on a
// terminal: it ticks at Every and calls Update.
func (d *Display) redraw(stop, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(d.every())
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			d.Update()
		case <-stop:
			return
		}
	}
}

// Update redraws the terminal's line, unless it was drawn less than Every
// ago; it does nothing off a terminal.
func (d *Display) Update() {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	if !d.TTY || len(d.tasks) == 0 || d.drawn && now.Sub(d.last) < d.every() {
		return
	}
	parts := make([]string, len(d.tasks))
	for i, t := range d.tasks {
		parts[i] = Line(t.label, t.snapshot(t.total, t.schedule), now.Sub(t.start))
	}
	fmt.Fprintf(d.W, "\r\x1b[K%s", strings.Join(parts, " | "))
	d.last, d.drawn = now, true
}

// Finish ends the task: its last line, without an ETA, is written, on a terminal in place
// of the progress line, which goes on below with the other runs. Calling
// it again does nothing.
func (t *Task) Finish() {
	d := t.d
	if d == nil || t.ended.Swap(true) {
		return
	}
	var stop, done chan struct{}
	d.mu.Lock()
	now := d.now()
	last := line(t.label, t.snapshot(t.total, t.schedule), now.Sub(t.start), false)
	if d.TTY {
		fmt.Fprintf(d.W, "\r\x1b[K%s\n", last)
	} else {
		fmt.Fprintln(d.W, last)
	}
	d.drawn = false
	for i, u := range d.tasks {
		if u == t {
			d.tasks = append(d.tasks[:i], d.tasks[i+1:]...)
			break
		}
	}
	if len(d.tasks) == 0 && d.stop != nil {
		stop, done = d.stop, d.done
		d.stop, d.done = nil, nil
	}
	d.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}
