package linelog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Writable returns an error, naming path, when a file at path could not
// be written now, so that a config check can refuse what would fail (or,
// for a Writer, which opens its file at the first write, lose every line).
// A file already there must open for appending; it is opened and closed,
// nothing written, and never waited on (a named pipe with no reader is an
// error). The directory the file is in must take new files, as a Writer's
// rotation makes one: it is probed by making an empty file there and
// removing it. When makesDirs (a Writer makes missing directories at its
// first write), the nearest directory that exists stands for the missing
// ones; otherwise a missing directory is an error.
func Writable(path string, makesDirs bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|syscall.O_NONBLOCK, 0)
	switch {
	case err == nil:
		f.Close()
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s cannot be written: %w", path, err)
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
