package linelog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"
)

// Options configure a Writer. Zero sizes take the defaults given.
type Options struct {
	// Name says what the lines are in the writer's warnings ("decision
	// log"). Empty means "line log".
	Name string
	// Path is the log file; rotated files are kept beside it, named with
	// the time of their rotation. Required unless Sink is set.
	Path string
	// MaxSizeMB is the size, in megabytes, at which the file is rotated.
	// Default 100.
	MaxSizeMB int
	// MaxFiles is how many rotated files are kept; 0 keeps them all.
	MaxFiles int
	// Fresh starts a new file: one already at Path is rotated aside (kept
	// as the newest rotated file) at Open, rather than appended to. One
	// that cannot be appended to (read-only) is, even empty; the new file
	// gets its permissions plus the owner's write.
	Fresh bool
	// QueueSize is the most lines waiting for the disk; more are
	// dropped. Default 8192.
	QueueSize int
	// Sink, if not nil, receives the lines instead of Path: tests pass one
	// that blocks. It is not closed.
	Sink io.Writer
	// Logger is told when writing starts failing and when it recovers. Nil
	// discards.
	Logger *slog.Logger
}

// drainEvery is how often the writer takes what is queued: an item waits
// that long at most before it is written (a full queue of 8,192 items at
// 50 ms is 160,000 lines a second).
const drainEvery = 50 * time.Millisecond

// batchBytes is about the most the writer hands the file at once: whole
// lines only, so that rotation never cuts one.
const batchBytes = 64 << 10

// Writer writes items of type T as lines from a goroutine of its own,
// each encoded by the function given to Open. Build it with Open, which
// starts the goroutine, and stop it with Close. Safe for concurrent use.
type Writer[T any] struct {
	queue  chan T
	encode func(T, []byte) []byte // called by the goroutine only
	name   string
	out    io.Writer
	file   *lumberjack.Logger // nil with a Sink
	path   string             // the file's, "" with a Sink
	log    *slog.Logger
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once

	// mu makes a Log's check of closed and its send one step as Close
	// sees them: Log holds it shared, Close exclusively to set closed. A
	// Log that passed the check and sent after Close's last drain was
	// reported queued, yet neither written nor counted.
	mu     sync.RWMutex
	closed bool // guarded by mu

	written, dropped, failed atomic.Uint64
	failing                  bool // owned by the goroutine
	// midLine is set while the file ends inside a line: a write that
	// failed partway (a full disk), or a file a previous run left so.
	// The next write ends that line first, so that its own first line is
	// not glued onto the cut one. Set by Open, then owned by the goroutine.
	midLine bool

	// testHookQueued, when set, runs in Log between the check and the
	// send.
	testHookQueued func()
}

// CheckPath returns an error when path names something other than a
// regular file (a directory, a device, a pipe), following links: the
// rotation moves aside whatever the path names, a whole directory or
// /dev/null included, so such a path must be refused before a writer is
// opened on it. A path that does not exist yet is fine.
func CheckPath(path string) error {
	kind, err := NotRegular(path)
	if err == nil && kind != "" {
		return fmt.Errorf("%s is a %s, not a regular file: a log rotated there would move it aside", path, kind)
	}
	return err
}

// NotRegular returns what path names (KindOf) when, once links are
// followed, it exists and is not a regular file; "" for a regular file or
// none at all.
func NotRegular(path string) (kind string, err error) {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		return "", err
	case !st.Mode().IsRegular():
		return KindOf(st.Mode()), nil
	}
	return "", nil
}

// KindOf names what a file that is not a regular one is (a directory,
// a device, a named pipe, a socket), for messages that refuse it.
func KindOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	}
	return "special file"
}

// Open starts a writer whose lines encode appends to a buffer, (*T).AppendJSON
// say: one whole line per item, newline included. encode is called by the writer's goroutine
// alone, one item at a time, so state it keeps needs no lock. The file is
// opened, and its directory made, at the first write.
func Open[T any](o Options, encode func(item T, buf []byte) []byte) *Writer[T] {
	if o.MaxSizeMB <= 0 {
		o.MaxSizeMB = 100
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 8192
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Name == "" {
		o.Name = "line log"
	}
	w := &Writer[T]{queue: make(chan T, o.QueueSize), encode: encode, name: o.Name, out: o.Sink, log: o.Logger,
		stop: make(chan struct{}), done: make(chan struct{})}
	if w.out == nil {
		w.file = &lumberjack.Logger{Filename: o.Path, MaxSize: o.MaxSizeMB, MaxBackups: o.MaxFiles}
		w.out = w.file
		w.path = o.Path
		if st, err := os.Stat(o.Path); o.Fresh && err == nil && st.Mode().IsRegular() {
			w.moveAside(st)
		}
		w.midLine = endsMidLine(o.Path)
	}
	go w.drain()
	return w
}

// moveAside moves the file a Fresh writer found at its path, st, aside as
// a rotated file, so that its lines go to a new one. An empty file that
// can be appended to stays, as moving it would keep nothing. One that
// cannot be appended to (read-only) is moved by moveAsideWritable:
// lumberjack's rotation gives the new file the old one's mode, so the new
// file could not be written either, and each failed write would rotate
// again, making an empty rotated file that counts against MaxFiles until
// the earlier capture was deleted.
func (w *Writer[T]) moveAside(st fs.FileInfo) {
	switch appendErr := Appendable(w.path); {
	case appendErr != nil:
		if err := moveAsideWritable(w.path, st.Mode().Perm(), time.Now()); err != nil {
			w.log.Warn(w.name+": the file already there can neither be appended to nor moved aside; lines are lost",
				"path", w.path, "error", errors.Join(appendErr, err))
		}
	case st.Size() > 0:
		if err := w.file.Rotate(); err != nil {
			w.log.Warn(w.name+": the file already there could not be moved aside; lines are appended to it", "path", w.path, "error", err)
		}
	}
}

// rotatedTime is how lumberjack names a rotated file's time (UTC), which
// it reads back to find the oldest to delete beyond MaxFiles.
const rotatedTime = "2006-01-02T15-04-05.000"

// moveAsideWritable renames the file at path as lumberjack would rotate it
// at now (name-TIME.ext beside it, so it counts among the rotated files),
// and makes the new file with the old one's permissions plus the owner's
// write, which the writer then appends to.
func moveAsideWritable(path string, perm fs.FileMode, now time.Time) error {
	ext := filepath.Ext(path)
	rotated := strings.TrimSuffix(path, ext) + "-" + now.UTC().Format(rotatedTime) + ext
	if err := os.Rename(path, rotated); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm|0o200)
	if err != nil {
		return err
	}
	return f.Close()
}

// endsMidLine reports whether the regular file at path ends inside a line
// (its last byte is not '\n'): a run that stopped while writing, or whose
// disk filled, left it so. It reads the file and changes nothing.
func endsMidLine(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
		return false
	}
	last := make([]byte, 1)
	_, err = f.ReadAt(last, st.Size()-1)
	return err == nil && last[0] != '\n'
}

// Log queues r for writing and reports whether it was queued; an item
// that finds the queue full, or the writer closed, is dropped and counted.
// It never waits. r must not be changed afterwards.
func (w *Writer[T]) Log(r T) bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		w.dropped.Add(1)
		return false
	}
	if w.testHookQueued != nil {
		w.testHookQueued()
	}
	select {
	case w.queue <- r:
		return true
	default:
		w.dropped.Add(1)
		return false
	}
}

// Close writes what is queued, stops the goroutine and closes the file.
// Items logged afterwards are dropped; an item logged while Close runs is
// either written or dropped, and counted either way. Calling it again does
// nothing.
func (w *Writer[T]) Close() error {
	var err error
	w.once.Do(func() {
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		close(w.stop)
		<-w.done
		if w.file != nil {
			err = w.file.Close()
		}
	})
	return err
}

// Stats counts what became of the items logged so far.
type Stats struct {
	// Written items reached the file whole; Failed ones did not, in
	// writes that failed (a write cut short counts the lines it wrote
	// whole as written); Dropped ones found the queue full and were never
	// written.
	Written, Failed, Dropped uint64
}

// Stats returns the writer's counts.
func (w *Writer[T]) Stats() Stats {
	return Stats{Written: w.written.Load(), Failed: w.failed.Load(), Dropped: w.dropped.Load()}
}

// drain is the writer's goroutine: every drainEvery it writes what is
// queued, in batches of whole lines, until Close, then what is still
// queued.
func (w *Writer[T]) drain() {
	defer close(w.done)
	var buf []byte
	n := 0 // items in buf
	add := func(r T) {
		buf = w.encode(r, buf)
		n++
		if len(buf) >= batchBytes {
			w.flush(&buf, &n)
		}
	}
	// The queue is read on a tick rather than as items come: a receiver
	// parked on the channel would be woken by every Log, which costs the
	// request that logs more than the item does.
	tick := time.NewTicker(drainEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			for more := true; more; {
				select {
				case r := <-w.queue:
					add(r)
				default:
					more = false
				}
			}
			w.flush(&buf, &n)
		case <-w.stop:
			for {
				select {
				case r := <-w.queue:
					add(r)
				default:
					w.flush(&buf, &n)
					return
				}
			}
		}
	}
}

// flush writes the n items in buf and counts them: those whose lines
// reached the file whole as written, the rest as failed.
func (w *Writer[T]) flush(buf *[]byte, n *int) {
	if *n == 0 {
		return
	}
	defer func() {
		*buf = (*buf)[:0]
		*n = 0
	}()
	if w.midLine {
		if err := w.endCutLine(); err != nil {
			w.failedWrite(uint64(*n), err)
			return
		}
	}
	k, err := w.out.Write(*buf)
	k = max(0, min(k, len(*buf)))
	if k > 0 {
		w.midLine = (*buf)[k-1] != '\n'
	}
	if err != nil {
		whole := min(uint64(bytes.Count((*buf)[:k], []byte{'\n'})), uint64(*n))
		w.written.Add(whole)
		w.failedWrite(uint64(*n)-whole, err)
		return
	}
	w.written.Add(uint64(*n))
	if w.failing {
		w.failing = false
		w.log.Info(w.name + " write recovered")
	}
}

// endCutLine ends the line the file was left inside. The newline goes
// straight onto the file at the path, not through the rotating writer: a
// file at its size limit would be rotated first and the newline would
// start the new file, leaving the cut line unended in the old one. A file
// gone from the path (moved aside by hand) has nothing left to end.
func (w *Writer[T]) endCutLine() error {
	if w.file == nil {
		k, err := w.out.Write([]byte{'\n'})
		if k == 1 {
			w.midLine = false
		}
		return err
	}
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_APPEND, 0)
	if errors.Is(err, fs.ErrNotExist) {
		w.midLine = false
		return nil
	}
	if err != nil {
		return err
	}
	_, err = f.Write([]byte{'\n'})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		w.midLine = false
		// lumberjack writes a file it created through a descriptor
		// without O_APPEND, at its own offset, which is where the
		// newline just went: closing it makes the next Write reopen the
		// file for appending, after the newline.
		err = w.file.Close()
	}
	return err
}

// failedWrite counts lines a failed write lost and warns when writing
// starts failing.
func (w *Writer[T]) failedWrite(lines uint64, err error) {
	w.failed.Add(lines)
	if !w.failing {
		w.failing = true
		w.log.Warn(w.name+" write failing; lines are lost until it recovers", "lines", lines, "error", err)
	}
}
