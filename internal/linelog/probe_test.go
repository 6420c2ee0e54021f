package linelog

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestWritable: Writable passes a file that can be appended to and a new
// file in a directory that takes one (or, when the writer makes them, in
// directories yet to be made), and refuses, naming the path, what cannot
// be written; it never waits on a named pipe, and leaves no file behind.
func TestWritable(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		path      string
		makesDirs bool
		wantErr   bool
	}{
		{name: "existing_file", path: file},
		{name: "new_file", path: filepath.Join(dir, "new")},
		{name: "missing_directory", path: filepath.Join(dir, "a", "b", "new"), wantErr: true},
		{name: "missing_directory_made_by_the_writer", path: filepath.Join(dir, "a", "b", "new"), makesDirs: true},
		{name: "directory", path: dir, wantErr: true},
		{name: "under_a_file", path: filepath.Join(file, "new"), makesDirs: true, wantErr: true},
		{name: "pipe_without_a_reader", path: fifo, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Writable(tc.path, tc.makesDirs)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Writable(%s, %v) = %v, want an error: %v", tc.path, tc.makesDirs, err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tc.path) {
				t.Errorf("the error does not name the path: %v", err)
			}
		})
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Errorf("the probes left %v, want only file and fifo", entries)
	}
	if b, _ := os.ReadFile(file); string(b) != "kept\n" {
		t.Errorf("the file holds %q after its probe", b)
	}
}
