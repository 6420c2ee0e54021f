//go:build unix

package filewatch

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestNamedPipeIsRefused: a FIFO put at a watched path is refused at once.
// Opened for reading, it waited for a writer that never came, and the
// watcher's goroutine with it, then the gateway's shutdown (found by a
// review).
func TestNamedPipeIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := New(path, 1<<20).Poll()
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNamedPipe) {
			t.Errorf("Poll of a FIFO: %v, want ErrNamedPipe", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Poll of a FIFO still waits after 5 s")
	}
}
