package bench

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// WriteOutcomes writes a regular file and refuses anything else at once:
// a FIFO with no reader made its open wait forever.
func TestWriteOutcomesRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.jsonl")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	outs := []Outcome{{Index: 0, Status: 200, TTFT: time.Millisecond}}
	tests := []struct {
		name, path, want string
	}{
		{"regular", filepath.Join(dir, "o.jsonl"), ""},
		{"fifo", fifo, fifo + ": not a regular file (a named pipe)"},
		{"device", os.DevNull, os.DevNull + ": not a regular file (a device)"},
		{"directory", dir, "is a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- WriteOutcomes(tt.path, outs, 0) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatal("WriteOutcomes did not return within a minute")
			}
			if tt.want == "" {
				if b, rerr := os.ReadFile(tt.path); err != nil || rerr != nil || strings.Count(string(b), "\n") != 1 {
					t.Errorf("WriteOutcomes = %v; file %q, %v", err, b, rerr)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("WriteOutcomes(%s) = %v, want %q", tt.path, err, tt.want)
			}
		})
	}
}
