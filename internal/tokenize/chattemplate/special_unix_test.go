//go:build unix

package chattemplate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/filewatch"
	"github.com/inferrail/inferrail/internal/tokenize/hf"
)

// TestTemplatePathNotAFile: a chat template path naming a named pipe, or a
// symlink to /dev/zero, is refused at once with an error naming it. The
// renderer used to wait forever for the pipe's writer and read /dev/zero
// until memory ran out, at the gateway's start (a review's finding).
func TestTemplatePathNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.jinja")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	zero := filepath.Join(dir, "zero.jinja")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
		want error
	}{
		{"fifo", fifo, filewatch.ErrNamedPipe},
		{"dev_zero", zero, filewatch.ErrNotRegular},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "dev_zero" {
				if _, err := os.Stat("/dev/zero"); err != nil {
					t.Skip(err)
				}
			}
			done := make(chan error, 1)
			go func() {
				_, err := newRenderer(nil, hf.ChatConfig{}, Options{Template: tt.path})
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.path) {
					t.Errorf("template %s: %v, want %v naming the path", tt.path, err, tt.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("template %s: still reading after 10 s", tt.path)
			}
		})
	}
}
