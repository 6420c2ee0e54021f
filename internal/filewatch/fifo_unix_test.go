//go:build unix

package filewatch

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
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

// TestReadFileRefusesWhatIsNotAFile: ReadFile refuses a named pipe, a
// device and a directory at once and by name, whether the path names them
// or a symlink to them does. A FIFO made it wait for a writer forever, and
// /dev/zero was read to the size bound before being refused (a review's
// finding: a tokenizer.json linked to /dev/zero).
func TestReadFileRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	tests := []struct {
		name   string
		target string // what the path links to
		want   error
	}{
		{"fifo", fifo, ErrNamedPipe},
		{"dev_zero", "/dev/zero", ErrNotRegular},
		{"dev_null", "/dev/null", ErrNotRegular},
		{"directory", dir, ErrNotRegular},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := os.Stat(tt.target); err != nil {
				t.Skip(err)
			}
			link := filepath.Join(t.TempDir(), "file")
			if err := os.Symlink(tt.target, link); err != nil {
				t.Fatal(err)
			}
			for _, path := range []string{tt.target, link} {
				done := make(chan error, 1)
				go func() {
					_, err := ReadFile(path, 1<<20)
					done <- err
				}()
				select {
				case err := <-done:
					if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), path) {
						t.Errorf("ReadFile(%s) = %v, want %v naming the path", path, err, tt.want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("ReadFile(%s) still waits after 10 s", path)
				}
			}
		})
	}
}
