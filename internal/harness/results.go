package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/inferrail/inferrail/internal/linelog"
)

// MaxJSONBytes bounds a result file ReadJSON reads: the largest a run
// writes is well under a megabyte, and a file past this is no result of
// ours (a symbolic link to /dev/zero once grew the reader to gigabytes).
const MaxJSONBytes = 64 << 20

// WriteJSON writes v as indented JSON, with a final newline, to path,
// making its directory if need be. It writes through a temporary file, so
// that a stopped run never leaves half a result behind.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	// The rename below would put a regular file in place of a FIFO or a
	// link to a device, and nobody reading them would learn of it.
	if err := RegularOrAbsent(path); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}

// errNotRegular marks a path that is not a regular file once symbolic
// links are followed: a FIFO would block the reader forever and a device
// may never end.
var errNotRegular = errors.New("not a regular file")

// RegularOrAbsent returns an error naming path and what it is when path,
// once symbolic links are followed, exists and is not a regular file (a
// directory, a FIFO, a device): a file the harness writes there would
// block on a FIFO with no reader, or replace what the path named. A path
// that does not exist is fine.
func RegularOrAbsent(path string) error {
	kind, err := linelog.NotRegular(path)
	if err == nil && kind != "" {
		return fmt.Errorf("%s: %w (a %s)", path, errNotRegular, kind)
	}
	return err
}

// ReadJSON reads the JSON file at path into a new T. A path that is not a
// regular file, or holds more than MaxJSONBytes, is refused with an error
// naming it, and so is a value that *T's Check method, when it has one
// (Checker), refuses.
func ReadJSON[T any](path string) (*T, error) {
	// Non-blocking, so that opening a FIFO does not wait for a writer; the
	// file is then refused for what it is.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (%s)", path, errNotRegular, "a "+linelog.KindOf(st.Mode()))
	}
	if st.Size() > MaxJSONBytes {
		return nil, fmt.Errorf("%s: %d bytes, more than a result file's %d MiB", path, st.Size(), MaxJSONBytes>>20)
	}
	// The size read is checked again: the file may grow while it is read.
	b, err := io.ReadAll(io.LimitReader(f, MaxJSONBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > MaxJSONBytes {
		return nil, fmt.Errorf("%s: more than a result file's %d MiB", path, MaxJSONBytes>>20)
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if c, ok := any(&v).(Checker); ok {
		if err := c.Check(); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return &v, nil
}

// Checker is a result that can tell a value no run writes, which readers
// would print as nonsense: ReadJSON refuses such a file.
type Checker interface {
	// Check reports each value out of range, naming its field.
	Check() error
}

// ReadDir reads every *.json file in dir, in name order. What is not a
// regular file once symbolic links are followed (a FIFO, a device, a
// directory, a link to nothing) is passed over, and skipped says so for
// each, naming it; a file ReadJSON refuses otherwise fails the read.
func ReadDir[T any](dir string) (out []T, skipped []string, err error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(paths)
	for _, p := range paths {
		st, err := os.Stat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			skipped = append(skipped, p+": a symbolic link to nothing; skipped")
			continue
		case err != nil:
			return nil, nil, err
		case !st.Mode().IsRegular():
			skipped = append(skipped, fmt.Sprintf("%s: %s (%s); skipped", p, errNotRegular, "a "+linelog.KindOf(st.Mode())))
			continue
		}
		v, err := ReadJSON[T](p)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, *v)
	}
	return out, skipped, nil
}
