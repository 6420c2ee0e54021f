package bench

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/inferrail/inferrail/internal/linelog"
)

// WritableDir reports whether dir is a directory this process can create
// files in, by creating one there and removing it: permission bits do not
// tell (root passes them, a read-only mount does not show in them).
func WritableDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".inferrail-write-check-*")
	if err != nil {
		return fmt.Errorf("%s: not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// PrepareCapture makes the directory of a capture file before a run, as
// the gateway's writer would at its first line, and refuses a capture the
// gateway could not write: the directory must take files, and the path, if
// it exists, must be a regular file. The gateway only warns in its log
// when it cannot write the capture, and the run went on without one.
func PrepareCapture(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("capture %s: %w", path, err)
	}
	if err := WritableDir(dir); err != nil {
		return fmt.Errorf("capture %s: %w", path, err)
	}
	if err := linelog.CheckPath(path); err != nil { // as the gateway checks it
		return fmt.Errorf("capture: %w", err)
	}
	return nil
}

// checkCaptured fails a run whose gateway wrote no capture to path: one
// that could not be written, or one of no request an engine answered
// with a 2xx (the only ones captured).
func checkCaptured(path string) error {
	st, err := os.Stat(path)
	if err == nil && st.Mode().IsRegular() && st.Size() > 0 {
		return nil
	}
	return fmt.Errorf("capture %s not written: the gateway captured no request (it captures those an engine answered with a 2xx; its log says why a write failed)", path)
}
