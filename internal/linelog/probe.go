package linelog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Use says what a writer does with a file already at its path, which
// decides what Writable asks of that file and of its directory.
type Use int

const (
	// Appends: a file there is appended to, and rotated by size into new
	// files beside it (the decision log). The file must open for
	// appending and the directory take new files.
	Appends Use = iota
	// MovesAside: a file there is moved aside and a new one made (a
	// Writer with Options.Fresh, the capture). Only the directory
	// matters: a file there that cannot be written, read-only say, is
	// moved aside like any other.
	MovesAside
	// AppendsInPlace: a file there is read and appended to, and never
	// rotated (the shadow log). It must open for reading and appending;
	// the directory matters only when there is no file yet.
	AppendsInPlace
)

// Writable returns an error, naming path, when a writer that uses a file
// at path as use says could not write it now, so that a config check can
// refuse what would fail (or, for a Writer, which opens its file at the
// first write, lose every line). A file already there is opened and
// closed, nothing written, and never waited on (a named pipe with no
// reader is an error); a directory is probed by making an empty file
// there and removing it. When makesDirs (a Writer makes missing
// directories at its first write), the nearest directory that exists
// stands for the missing ones; otherwise a missing directory is an error.
func Writable(path string, use Use, makesDirs bool) error {
	switch use {
	case Appends:
		if err := Appendable(path); err != nil {
			return err
		}
	case AppendsInPlace:
		f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|syscall.O_NONBLOCK, 0)
		switch {
		case err == nil:
			// Never rotated: the file is all it writes, whatever its
			// directory takes.
			return f.Close()
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("%s cannot be written: %w", path, err)
		}
	}
	dir, err := existingDir(filepath.Dir(path), makesDirs)
	if err != nil {
		return fmt.Errorf("%s cannot be written: %w", path, err)
	}
	probe, err := os.CreateTemp(dir, ".inferrail-probe-*")
	if err != nil {
		// The probe's own name says nothing to the reader: the cause does.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("%s cannot be written: no file can be made in %s: %w", path, dir, err)
	}
	probe.Close()
	return os.Remove(probe.Name())
}

// Appendable returns an error, naming path, when a file is at path and
// does not open for appending (read-only, say): a Writer without Fresh
// would lose every line to it. No file at all is fine. It opens and
// closes the file, writes nothing and never waits (a named pipe with no
// reader is an error), so a start can ask it before anything runs.
func Appendable(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|syscall.O_NONBLOCK, 0)
	switch {
	case err == nil:
		return f.Close()
	case errors.Is(err, fs.ErrNotExist):
		return nil
	}
	return fmt.Errorf("%s cannot be written: %w", path, err)
}

// existingDir is dir when it is a directory that exists or, when
// makesDirs, the nearest of its parents that does.
func existingDir(dir string, makesDirs bool) (string, error) {
	for {
		st, err := os.Stat(dir)
		switch {
		case err == nil && st.IsDir():
			return dir, nil
		case err == nil:
			return "", fmt.Errorf("%s is a %s, not a directory", dir, fileKind(st.Mode()))
		case !errors.Is(err, fs.ErrNotExist) || !makesDirs:
			return "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", err
		}
		dir = parent
	}
}

// fileKind is KindOf, with a regular file named too.
func fileKind(m fs.FileMode) string {
	if m.IsRegular() {
		return "regular file"
	}
	return KindOf(m)
}
