package decisionlog

import (
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"
)

// Options configure a Writer. Zero sizes take the defaults given.
type Options struct {
	// Path is the log file; rotated files are kept beside it, named with
	// the time of their rotation. Required unless Sink is set.
	Path string
	// MaxSizeMB is the size, in megabytes, at which the file is rotated.
	// Default 100.
	MaxSizeMB int
	// MaxFiles is how many rotated files are kept; 0 keeps them all.
	MaxFiles int
	// QueueSize is the most records waiting for the disk; more are
	// dropped. Default 8192.
	QueueSize int
	// Sink, if not nil, receives the lines instead of Path: tests pass one
	// that blocks. It is not closed.
	Sink io.Writer
	// Logger is told when writing starts failing and when it recovers. Nil
	// discards.
	Logger *slog.Logger
}

// drainEvery is how often the writer takes what is queued: a record waits
// that long at most before it is written (a full queue of 8,192 records at
// 50 ms is 160,000 decisions a second).
const drainEvery = 50 * time.Millisecond

// batchBytes is about the most the writer hands the file at once: whole
// lines only, so that rotation never cuts one.
const batchBytes = 64 << 10

// Writer writes records as JSON lines from a goroutine of its own. Build
// it with Open, which starts the goroutine, and stop it with Close. Safe
// for concurrent use.
type Writer struct {
	queue chan *Record
	out   io.Writer
	file  *lumberjack.Logger // nil with a Sink
	log   *slog.Logger
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once

	closed                   atomic.Bool
	written, dropped, failed atomic.Uint64
	failing                  bool // owned by the goroutine
}

// Open starts a writer. The file is opened, and its directory made, at the
// first write.
func Open(o Options) *Writer {
	if o.MaxSizeMB <= 0 {
		o.MaxSizeMB = 100
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 8192
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Writer{queue: make(chan *Record, o.QueueSize), out: o.Sink, log: o.Logger,
		stop: make(chan struct{}), done: make(chan struct{})}
	if w.out == nil {
		w.file = &lumberjack.Logger{Filename: o.Path, MaxSize: o.MaxSizeMB, MaxBackups: o.MaxFiles}
		w.out = w.file
	}
	go w.drain()
	return w
}

// Log queues r for writing and reports whether it was queued; a record
// that finds the queue full, or the writer closed, is dropped and counted.
// It never waits. r must not be changed afterwards.
func (w *Writer) Log(r *Record) bool {
	if w.closed.Load() {
		w.dropped.Add(1)
		return false
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
// Records logged afterwards are dropped. Calling it again does nothing.
func (w *Writer) Close() error {
	var err error
	w.once.Do(func() {
		w.closed.Store(true)
		close(w.stop)
		<-w.done
		if w.file != nil {
			err = w.file.Close()
		}
	})
	return err
}

// Stats counts what became of the records logged so far.
type Stats struct {
	// Written records reached the file; Failed ones were in writes that
	// failed; Dropped ones found the queue full and were never written.
	Written, Failed, Dropped uint64
}

// Stats returns the writer's counts.
func (w *Writer) Stats() Stats {
	return Stats{Written: w.written.Load(), Failed: w.failed.Load(), Dropped: w.dropped.Load()}
}

// drain is the writer's goroutine: every drainEvery it writes what is
// queued, in batches of whole lines, until Close, then what is still
// queued.
func (w *Writer) drain() {
	defer close(w.done)
	var buf []byte
	n := 0 // records in buf
	add := func(r *Record) {
		buf = r.AppendJSON(buf)
		n++
		if len(buf) >= batchBytes {
			w.flush(&buf, &n)
		}
	}
	// The queue is read on a tick rather than as records come: a receiver
	// parked on the channel would be woken by every Log, which costs the
	// request that logs more than the record does.
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

// flush writes the n records in buf and counts them.
func (w *Writer) flush(buf *[]byte, n *int) {
	if *n == 0 {
		return
	}
	_, err := w.out.Write(*buf)
	switch {
	case err != nil:
		w.failed.Add(uint64(*n))
		if !w.failing {
			w.failing = true
			w.log.Warn("decision log write failing; records are lost until it recovers", "records", *n, "error", err)
		}
	default:
		w.written.Add(uint64(*n))
		if w.failing {
			w.failing = false
			w.log.Info("decision log write recovered")
		}
	}
	*buf = (*buf)[:0]
	*n = 0
}
