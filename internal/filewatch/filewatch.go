// Package filewatch tells when a file's content has changed, for the
// files the gateway rereads while it runs (API keys, TLS certificates).
//
// A File is polled: each Poll stats the path and rereads it only when its
// size, modification time or inode differ from the last read, or when the
// last read came within a few seconds of the file's modification time (a
// second write within one tick of a coarse clock could leave all three
// alone). A reread whose SHA-256 equals the last one's is no change, so
// touching a file, or a directory of symlinks swapped to the same
// content, reloads nothing.
//
// ReadFile is how the gateway reads every file a config names, reread or
// not (tokenizers, chat templates): bounded, and never waiting on a named
// pipe or a device put where a file belongs.
package filewatch

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// recent is how long after a file's modification time its reads stay
// suspect: coarser than any filesystem's timestamp tick (FAT's is 2 s).
const recent = 3 * time.Second

// File is one watched path. Not safe for concurrent use.
type File struct {
	path    string
	maxSize int64

	read   bool // a read has succeeded
	size   int64
	mtime  time.Time
	inode  uint64
	sum    [sha256.Size]byte
	readAt time.Time
}

// New watches path, whose content may be at most maxSize bytes.
func New(path string, maxSize int64) *File { return &File{path: path, maxSize: maxSize} }

// Path returns the watched path.
func (f *File) Path() string { return f.path }

// ErrTooLarge is returned for a file over its maximum size.
var ErrTooLarge = errors.New("file too large")

// Poll returns the file's content and true when it differs from what the
// last successful Poll saw, which the first Poll always does; nil and
// false when it is unchanged. An error (the file is missing or
// unreadable) changes nothing: the next Poll compares with the last
// content read.
func (f *File) Poll() ([]byte, bool, error) {
	fi, err := os.Stat(f.path)
	if err != nil {
		return nil, false, err
	}
	size, mtime, inode := fi.Size(), fi.ModTime(), inodeOf(fi)
	if f.read && size == f.size && mtime.Equal(f.mtime) && inode == f.inode && f.readAt.Sub(mtime) > recent {
		return nil, false, nil
	}
	data, err := f.readAll()
	if err != nil {
		return nil, false, err
	}
	sum := sha256.Sum256(data)
	changed := !f.read || sum != f.sum
	f.read, f.size, f.mtime, f.inode, f.sum, f.readAt = true, size, mtime, inode, sum, time.Now()
	if !changed {
		return nil, false, nil
	}
	return data, true, nil
}

// readAll reads the file, refusing one over maxSize.
func (f *File) readAll() ([]byte, error) { return ReadFile(f.path, f.maxSize) }

// ErrNamedPipe is returned for a path that names a FIFO.
var ErrNamedPipe = errors.New("a named pipe, not a file")

// ErrNotRegular is returned for a path that names something other than a
// regular file or a named pipe: a device, a socket or a directory.
var ErrNotRegular = errors.New("not a regular file")

// ReadFile reads the file at path, refusing one over maxSize bytes
// (ErrTooLarge), a named pipe (ErrNamedPipe) and anything else that is not
// a regular file (ErrNotRegular). It never waits for a writer: opening a
// FIFO put at the path would block until one came, and with it the
// goroutine that rereads the file, a reload asked for meanwhile and the
// gateway's shutdown, which waits for that goroutine. A device is refused
// before it is read, since what it yields has no end (/dev/zero) or may
// never come (a terminal): the size bound alone would still read maxSize
// bytes of /dev/zero, up to hundreds of MiB for a tokenizer, to refuse it.
func ReadFile(path string, maxSize int64) ([]byte, error) {
	fh, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	switch mode := fi.Mode(); {
	case mode&os.ModeNamedPipe != 0:
		return nil, fmt.Errorf("%s: %w", path, ErrNamedPipe)
	case mode.IsDir():
		return nil, fmt.Errorf("%s: %w (a directory)", path, ErrNotRegular)
	case mode&os.ModeDevice != 0:
		return nil, fmt.Errorf("%s: %w (a device)", path, ErrNotRegular)
	case !mode.IsRegular():
		return nil, fmt.Errorf("%s: %w", path, ErrNotRegular)
	}
	data, err := io.ReadAll(io.LimitReader(fh, maxSize+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > maxSize {
		return nil, fmt.Errorf("%s: %w: more than %d bytes", path, ErrTooLarge, maxSize)
	}
	return data, nil
}
