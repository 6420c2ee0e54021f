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
	failing string // the error of the last failed check, logged once; guarded by mu
	// refused is the content last read when it did not parse; guarded by
	// mu. It is parsed again at every check, unchanged: the models it
	// names may come with a change of the config.
	refused []byte
}

// Open reads the keys file at path, which must be good. onReload, if not
// nil, is called after every later reread that found the file changed or
// failed: with the keys now in effect and nil, or with the keys kept and
// the error (each distinct error once). A nil logger discards.
func Open(path string, opts Options, logger *slog.Logger, onReload func(prev, next *Set, err error)) (*Source, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.File == "" {
		opts.File = path
	}
	s := &Source{opts: opts, log: logger, onReload: onReload, file: filewatch.New(path, MaxFileBytes)}
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

// Check rereads the file if it changed and puts its keys in effect. A file
// that is missing, unreadable or bad leaves the keys in effect as they
// are; the error is returned, and logged and reported the first time it
// is seen.
func (s *Source) Check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.set.Load()
	data, changed, err := s.file.Poll()
	if err == nil && !changed {
		if s.refused == nil {
			return nil
		}
		data = s.refused
	}
	var next *Set
	if err == nil {
		s.refused = nil
		if next, err = Parse(data, s.opts); err != nil {
			s.refused = data
		}
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
