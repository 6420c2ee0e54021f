package auth

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferrail/inferrail/internal/filewatch"
)

// Source is a keys file in effect: the keys last read well from it, read
// again whenever the file changes. Safe for concurrent use.
type Source struct {
	opts     Options
	log      *slog.Logger
	onReload func(prev, next *Set, err error)
	set      atomic.Pointer[Set]

	mu      sync.Mutex // serializes Check
	file    *filewatch.File
	settle  time.Duration // how long an edit must stay as read; SettleTime unless a test sets it
	failing string        // the error of the last failed check, logged once; guarded by mu
	bad     error         // why the content last read did not parse, returned while it stays; guarded by mu
}

// Open reads the keys file at path, which must be good: at start a name no
// model or alias has (opts.Resolve) is an error. A later reread is not
// refused for one, since a config change may have taken the name away
// after the file was written, and refusing would keep every other edit,
// revocations included, from taking effect: the name grants nothing and
// is logged as a warning. onReload, if not nil, is called after every
// later reread that found the file changed or failed: with the keys now in
// effect and nil, or with the keys kept and the error (each distinct error
// once). A nil logger discards.
func Open(path string, opts Options, logger *slog.Logger, onReload func(prev, next *Set, err error)) (*Source, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.File == "" {
		opts.File = path
	}
	s := &Source{opts: opts, log: logger, onReload: onReload, file: filewatch.New(path, MaxFileBytes), settle: SettleTime}
	data, _, err := s.file.Poll()
	if err != nil {
		return nil, fmt.Errorf("read keys file: %w", err)
	}
	set, err := Parse(data, opts)
	if err != nil {
		return nil, err
	}
	s.set.Store(set)
	return s, nil
}

// Keys returns the keys in effect.
func (s *Source) Keys() *Set { return s.set.Load() }

// Path returns the file's path.
func (s *Source) Path() string { return s.file.Path() }

// SettleTime is how long an edit of a keys file must stay as it was read
// before it is put in effect: a file rewritten in place (truncated, then
// written) can be read halfway, and a list cut after a whole entry is a
// good file with fewer keys. The config file's reads settle alike.
const SettleTime = 100 * time.Millisecond

// maxSettles bounds the rereads of a file edited again at every one; the
// last read is then taken as it is.
const maxSettles = 10

// Check rereads the file if it changed and, once a second read SettleTime
// later finds the same bytes, puts its keys in effect. A file that is
// missing, unreadable or bad leaves the keys in effect as they are; the
// error is returned, and logged and reported the first time it is seen.
func (s *Source) Check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.set.Load()
	data, changed, err := s.file.Poll()
	if err == nil && !changed {
		return s.bad
	}
	for range maxSettles {
		if err != nil {
			break
		}
		time.Sleep(s.settle)
		again, edited, pollErr := s.file.Poll()
		if pollErr == nil && !edited {
			break // as it was read
		}
		data, err = again, pollErr // read again midway: settle on the newer bytes
	}
	var next *Set
	if err == nil {
		lenient := s.opts
		lenient.Resolve = nil
		next, err = Parse(data, lenient)
		s.bad = err
	}
	if err != nil {
		if msg := err.Error(); msg != s.failing {
			s.failing = msg
			s.log.Error("keys file not reloaded; the keys in effect stay", "file", s.file.Path(), "keys", prev.Len(), "error", err)
			if s.onReload != nil {
				s.onReload(prev, prev, err)
			}
		}
		return err
	}
	s.failing = ""
	s.set.Store(next)
	s.log.Info("keys file reloaded", "file", s.file.Path(), "keys", next.Len())
	if s.opts.Resolve != nil {
		for _, u := range next.Unknown(s.opts.Resolve) {
			s.log.Warn("a key names a model the config does not have; it grants nothing", "file", s.file.Path(), "key", u.Key, "model", u.Name)
		}
	}
	if s.onReload != nil {
		s.onReload(prev, next, nil)
	}
	return nil
}

// Run checks the file every interval until ctx ends.
func (s *Source) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = s.Check()
		}
	}
}
