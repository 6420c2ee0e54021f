//go:build unix

// Package filewatchtest makes, for tests, what a user may put where a file
// is expected and the gateway must refuse at once rather than read: a
// named pipe, whose reader waits for a writer that never comes, and a link
// to /dev/zero, which never ends.
package filewatchtest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/filewatch"
)

// Special is one such thing: Make puts it at path, and filewatch.ReadFile
// refuses it with Want.
type Special struct {
	Name string
	Make func(path string) error
	Want error
}

// Specials returns those this machine can make, skipping t when it can
// make none.
func Specials(t testing.TB) []Special {
	t.Helper()
	var out []Special
	if err := syscall.Mkfifo(filepath.Join(t.TempDir(), "fifo"), 0o600); err == nil {
		out = append(out, Special{"fifo", func(path string) error { return syscall.Mkfifo(path, 0o600) }, filewatch.ErrNamedPipe})
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		out = append(out, Special{"dev_zero", func(path string) error { return os.Symlink("/dev/zero", path) }, filewatch.ErrNotRegular})
	}
	if len(out) == 0 {
		t.Skip("neither a named pipe nor /dev/zero here")
	}
	return out
}

// Within runs f and returns its error, failing t when f has not returned
// within d: the old readers waited on a pipe forever, and a test of them
// must fail rather than hang the suite. f keeps running after a failure.
func Within(t testing.TB, d time.Duration, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("still running after %v", d)
		return nil
	}
}
