//go:build unix

package config

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLoadRefusesANamedPipe: a config path that is a FIFO is refused at
// once, naming it; the file watcher, a reload and shutdown waited on it.
func TestLoadRefusesANamedPipe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Load(path)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "named pipe") || !strings.Contains(err.Error(), path) {
			t.Errorf("Load of a FIFO: %v, want it refused as a named pipe", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Load of a FIFO still waits after 5 s")
	}
}
